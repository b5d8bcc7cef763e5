# twenty-third session, call G (the H200 only; nothing on another card): notebook 23 executed and nbval'd;
# the one-run table (every method); kernels 23, 24, 25 side by side (the ladder, for notebook 24); the GPU tests of
# the fused path, the CLI and pdl (kernels 24 and 25 with them);
# kernels 25 and 24 under the sanitizer tools while time is left
name=$(nvidia-smi --query-gpu=name --format=csv,noheader); echo "$name"; date -u
case "$name" in *H200*) ;; *) echo "not an H200: nothing run"; exit 3;; esac
source .gpu/install.sh >/dev/null 2>&1; export PYTHONPATH=$PWD:$PYTHONPATH PYTHONUNBUFFERED=1
step() { echo "== $1 $(date -u +%T) (${SECONDS}s)"; }
step nb23; mkdir -p $OUT/nb; NB=23_fused_backward_float4_reductions.ipynb
(echo "$name"; cd drafts && timeout 150 python ../tools/execute_notebooks.py --out $OUT/nb $NB 2>&1 | tail -2 && cp $OUT/nb/$NB ../notebooks/ && cd ../notebooks && timeout 120 python -m pytest --nbval -p no:cacheprovider -q $NB 2>&1 | tail -2) | tee $OUT/nb23.txt
rm -f notebooks/$NB
step onerun; timeout 240 python benchmarks/fused_vs_torch.py --json $OUT/fused_ladder_vs_torch.json > $OUT/fused_ladder_vs_torch.txt 2>&1; echo "rc $?" >> $OUT/fused_ladder_vs_torch.txt; grep "#23 target\|rc \|total" $OUT/fused_ladder_vs_torch.txt | grep "fused2[2-5]\|rc \|total"
step ladder; timeout 150 python benchmarks/fused_ladder.py --methods "k23 tf32,k24 tf32,k25 tf32" --T 1024,2048,16384 --json $OUT/fused_ladder_25.json > $OUT/fused_ladder_25.txt 2>&1; echo "rc $?" >> $OUT/fused_ladder_25.txt; grep "  T=\|rc " $OUT/fused_ladder_25.txt | tail -10 | cut -c1-160
step gpu_tests; (echo "$name"; timeout 150 python -m pytest -m gpu tests/test_fused.py tests/test_cli.py tests/test_pdl.py -n 8 -q -p no:cacheprovider 2>&1) | tee $OUT/gpu_tests_fused.txt | tail -2
for k in 25 24; do for tool in memcheck racecheck synccheck initcheck; do [ $SECONDS -lt 420 ] || break; small=; [ $tool = racecheck ] && small=small; step "$k $tool $small"; timeout 40 compute-sanitizer --tool $tool python results/h200/experiments/k21_sanitize_script.py.txt $k $small > /tmp/san.txt 2>&1; echo "rc $?" >> /tmp/san.txt; grep -v "^=========\s*$" /tmp/san.txt | tail -3; done; done > $OUT/k25_k24_sanitize.txt 2>&1; grep -c "0 errors\|0 hazards" $OUT/k25_k24_sanitize.txt
step done
