# twenty-third session, call H (the H200 only; nothing on another card), for what device time is left:
# notebook 23 executed and nbval'd; then the one-run table (every method) if time is left
name=$(nvidia-smi --query-gpu=name --format=csv,noheader); echo "$name"; date -u
case "$name" in *H200*) ;; *) echo "not an H200: nothing run"; exit 3;; esac
source .gpu/install.sh >/dev/null 2>&1; export PYTHONPATH=$PWD:$PYTHONPATH PYTHONUNBUFFERED=1
step() { echo "== $1 $(date -u +%T) (${SECONDS}s)"; }
step nb23; mkdir -p $OUT/nb; NB=23_fused_backward_float4_reductions.ipynb
(echo "$name"; cd drafts && timeout 100 python ../tools/execute_notebooks.py --out $OUT/nb $NB 2>&1 | tail -2 && cp $OUT/nb/$NB ../notebooks/ && cd ../notebooks && timeout 60 python -m pytest --nbval -p no:cacheprovider -q $NB 2>&1 | tail -2) | tee $OUT/nb23.txt
rm -f notebooks/$NB
if [ $SECONDS -lt 90 ]; then step onerun; timeout 150 python benchmarks/fused_vs_torch.py --json $OUT/fused_ladder_vs_torch.json > $OUT/fused_ladder_vs_torch.txt 2>&1; echo "rc $?" >> $OUT/fused_ladder_vs_torch.txt; grep "#23 target\|rc \|total" $OUT/fused_ladder_vs_torch.txt | grep "fused2[2-5]\|rc \|total"; fi
step done
