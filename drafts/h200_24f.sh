# twenty-fourth session, call F (the H200 only): notebook 23 executed and nbval'd; the GPU tests of the fused
# path, the CLI, pdl, tma and cubin; kernels 27 and 26 under the four sanitizer tools while time is left.
# Then drafts/land_nb23.sh FILES_AT. NB23_ONLY=1: notebook 23 alone.
name=$(nvidia-smi --query-gpu=name --format=csv,noheader); echo "$name"; date -u
case "$name" in *H200*) ;; *) echo "not an H200: nothing run"; exit 3;; esac
source .gpu/install.sh >/dev/null 2>&1; export PYTHONPATH=$PWD:$PYTHONPATH PYTHONUNBUFFERED=1
pip install -q --no-index --no-deps --target /tmp/site .gpu/extra/*.whl 2>&1 | grep -v WARN | tail -1   # nbclient (execute_notebooks)
step() { echo "== $1 $(date -u +%T) (${SECONDS}s)"; }
step nb23; mkdir -p $OUT/nb; NB=23_fused_backward_float4_reductions.ipynb
(echo "$name"; cd drafts && timeout 150 python ../tools/execute_notebooks.py --out $OUT/nb $NB 2>&1 | tail -2 && cp $OUT/nb/$NB ../notebooks/ && cd ../notebooks && timeout 120 python -m pytest --nbval -p no:cacheprovider -q $NB 2>&1 | tail -2) | tee $OUT/nb23.txt
rm -f notebooks/$NB
[ -n "$NB23_ONLY" ] && { step done; exit 0; }
step gpu_tests; (echo "$name"; timeout 150 python -m pytest -m gpu tests/test_fused.py tests/test_cli.py tests/test_pdl.py tests/test_tma.py tests/test_cubin.py -n 8 -q -p no:cacheprovider 2>&1) | tee $OUT/gpu_tests_fused.txt | tail -2
for k in 27 26; do for tool in memcheck racecheck synccheck initcheck; do [ $SECONDS -lt 540 ] || break; small=; [ $tool = racecheck ] && small=small; step "$k $tool $small"; timeout 40 compute-sanitizer --tool $tool python results/h200/experiments/k21_sanitize_script.py.txt $k $small > /tmp/san.txt 2>&1; echo "rc $?" >> /tmp/san.txt; grep -v "^=========\s*$" /tmp/san.txt | tail -3; done; done > $OUT/k27_k26_sanitize.txt 2>&1; grep -c "0 errors\|0 hazards" $OUT/k27_k26_sanitize.txt
step done
