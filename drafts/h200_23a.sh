# twenty-third session, call A (asks for the H200; an nvidia-h200 call may get an H100).
# H200: notebook 23 executed and nbval'd; the GPU tests of the fused path, the CLI and pdl; the one-run
# table (every method, kernel 24 with them); kernel 24 under the sanitizer tools while time is left.
# Another card: nothing (the k24_sw128 experiment and the GPU tests ran on an H100 at 05:13).
name=$(nvidia-smi --query-gpu=name --format=csv,noheader); echo "$name"; date -u
source .gpu/install.sh >/dev/null 2>&1; export PYTHONPATH=$PWD:$PYTHONPATH PYTHONUNBUFFERED=1
step() { echo "== $1 $(date -u +%T) (${SECONDS}s)"; }
tests() { step gpu_tests; (echo "$name"; timeout 150 python -m pytest -m gpu tests/test_fused.py tests/test_cli.py tests/test_pdl.py -n 8 -q -p no:cacheprovider 2>&1) | tee $OUT/gpu_tests_fused.txt | tail -3; }
case "$name" in *H200*) ;; *) echo "not an H200: nothing run"; exit 3;; esac
step nb23; mkdir -p $OUT/nb; NB=23_fused_backward_float4_reductions.ipynb
(echo "$name"; cd drafts && timeout 150 python ../tools/execute_notebooks.py --out $OUT/nb $NB 2>&1 | tail -2 && cp $OUT/nb/$NB ../notebooks/ && cd ../notebooks && timeout 120 python -m pytest --nbval -p no:cacheprovider -q $NB 2>&1 | tail -2) | tee $OUT/nb23.txt
rm -f notebooks/$NB
tests
step onerun; timeout 240 python benchmarks/fused_vs_torch.py --json $OUT/fused_ladder_vs_torch.json > $OUT/fused_ladder_vs_torch.txt 2>&1; echo "rc $?" >> $OUT/fused_ladder_vs_torch.txt; grep "#23 target\|rc " $OUT/fused_ladder_vs_torch.txt | grep "fused2[2-4]\|rc "
for tool in memcheck racecheck synccheck initcheck; do [ $SECONDS -lt 500 ] || break; small=; [ $tool = racecheck ] && small=small; step "24 $tool $small"; timeout 40 compute-sanitizer --tool $tool python results/h200/experiments/k21_sanitize_script.py.txt 24 $small > /tmp/san.txt 2>&1; echo "rc $?" >> /tmp/san.txt; grep -v "^=========\s*$" /tmp/san.txt | tail -4; done > $OUT/k24_sanitize.txt 2>&1; grep -c "0 errors\|0 hazards" $OUT/k24_sanitize.txt
step done
