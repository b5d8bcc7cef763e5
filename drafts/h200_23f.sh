# twenty-third session, call F, from branch k25-zero (asks for the H200; an nvidia-h200 call may get an H100).
# H200: notebook 23 executed and nbval'd (first); the GPU tests of the fused path, the CLI and pdl (kernel 25 with
# them); kernels 24 and 25 side by side (the ladder); the one-run table (every method); kernels 25 and 24 under
# the sanitizer tools while time is left. Another card: the same without notebook 23 and the one-run table.
name=$(nvidia-smi --query-gpu=name --format=csv,noheader); echo "$name"; date -u
source .gpu/install.sh >/dev/null 2>&1; export PYTHONPATH=$PWD:$PYTHONPATH PYTHONUNBUFFERED=1
step() { echo "== $1 $(date -u +%T) (${SECONDS}s)"; }
h200=; case "$name" in *H200*) h200=1;; esac
if [ -n "$h200" ]; then
  step nb23; mkdir -p $OUT/nb; NB=23_fused_backward_float4_reductions.ipynb
  (echo "$name"; cd drafts && timeout 150 python ../tools/execute_notebooks.py --out $OUT/nb $NB 2>&1 | tail -2 && cp $OUT/nb/$NB ../notebooks/ && cd ../notebooks && timeout 120 python -m pytest --nbval -p no:cacheprovider -q $NB 2>&1 | tail -2) | tee $OUT/nb23.txt
  rm -f notebooks/$NB
fi
step gpu_tests; (echo "$name"; timeout 150 python -m pytest -m gpu tests/test_fused.py tests/test_cli.py tests/test_pdl.py -n 8 -q -p no:cacheprovider 2>&1) | tee $OUT/gpu_tests_fused.txt | tail -2
grep "^FAILED" $OUT/gpu_tests_fused.txt | head -5 | cut -c1-200
step ladder; timeout 120 python benchmarks/fused_ladder.py --methods "k24 tf32,k25 tf32" --T 1024,2048,16384 --json $OUT/fused_ladder_25.json > $OUT/fused_ladder_25.txt 2>&1; echo "rc $?" >> $OUT/fused_ladder_25.txt; grep "  T=\|rc \|  k2. tf32  " $OUT/fused_ladder_25.txt | tail -12 | cut -c1-160
step "cli 25"; (python -m attnlab backward 25 --tf32; echo "cli rc $?") > $OUT/k25_cli.txt 2>&1; tail -2 $OUT/k25_cli.txt | cut -c1-200
if [ -n "$h200" ]; then
  step onerun; timeout 240 python benchmarks/fused_vs_torch.py --json $OUT/fused_ladder_vs_torch.json > $OUT/fused_ladder_vs_torch.txt 2>&1; echo "rc $?" >> $OUT/fused_ladder_vs_torch.txt; grep "#23 target\|rc " $OUT/fused_ladder_vs_torch.txt | grep "fused2[2-5]\|rc "
fi
for k in 25 24; do for tool in memcheck racecheck synccheck initcheck; do [ $SECONDS -lt 540 ] || break; small=; [ $tool = racecheck ] && small=small; step "$k $tool $small"; timeout 40 compute-sanitizer --tool $tool python results/h200/experiments/k21_sanitize_script.py.txt $k $small > /tmp/san.txt 2>&1; echo "rc $?" >> /tmp/san.txt; grep -v "^=========\s*$" /tmp/san.txt | tail -3; done; done > $OUT/k25_k24_sanitize.txt 2>&1; grep -c "0 errors\|0 hazards" $OUT/k25_k24_sanitize.txt
step done
