# twenty-fourth session, call E (the H200 only; nothing on another card): the one-run table (every method,
# kernels 24-27 with them) and the ladder of kernels 23-27 (fused_ladder_27.json). Then drafts/land_onerun.sh FILES_AT.
name=$(nvidia-smi --query-gpu=name --format=csv,noheader); echo "$name"; date -u
case "$name" in *H200*) ;; *) echo "not an H200: nothing run"; exit 3;; esac
source .gpu/install.sh >/dev/null 2>&1; export PYTHONPATH=$PWD:$PYTHONPATH PYTHONUNBUFFERED=1
step() { echo "== $1 $(date -u +%T) (${SECONDS}s)"; }
step ladder; timeout 230 python benchmarks/fused_ladder.py --methods "k23 tf32,k24 tf32,k25 tf32,k26 tf32,k27 tf32" --T 1024,2048,16384 --json $OUT/fused_ladder_27.json > $OUT/fused_ladder_27.txt 2>&1; echo "rc $?" >> $OUT/fused_ladder_27.txt; grep "  T=\|rc " $OUT/fused_ladder_27.txt | tail -16 | cut -c1-160
step onerun; timeout 330 python benchmarks/fused_vs_torch.py --json $OUT/fused_ladder_vs_torch.json > $OUT/fused_ladder_vs_torch.txt 2>&1; echo "rc $?" >> $OUT/fused_ladder_vs_torch.txt; grep "#23 target\|rc \|total" $OUT/fused_ladder_vs_torch.txt | grep "fused2[2-7]\|rc \|total"
step done
