# twenty-second session, call A (an H200, or the H100 that an nvidia-h200 call may get): notebook 23 executed
# and nbval'd; the GPU tests of the fused path and the CLI (fused.py changed after the last H200 run); kernel 23's CLI
name=$(nvidia-smi --query-gpu=name --format=csv,noheader); echo "$name"; date -u
source .gpu/install.sh >/dev/null 2>&1; export PYTHONPATH=$PWD:$PYTHONPATH PYTHONUNBUFFERED=1
step() { echo "== $1 $(date -u +%T) (${SECONDS}s)"; }
step nb23; mkdir -p $OUT/nb; NB=23_fused_backward_float4_reductions.ipynb
(echo "$name"; cd drafts && timeout 150 python ../tools/execute_notebooks.py --out $OUT/nb $NB 2>&1 | tail -2 && cp $OUT/nb/$NB ../notebooks/ && cd ../notebooks && timeout 120 python -m pytest --nbval -p no:cacheprovider -q $NB 2>&1 | tail -2) | tee $OUT/nb23.txt
step gpu_tests
timeout 150 python -m pytest -m gpu tests/test_fused.py tests/test_cli.py -n 8 -q -p no:cacheprovider 2>&1 | tee $OUT/gpu_tests_fused.txt | tail -3
step k23_cli
(python -m attnlab backward 23 --tf32; echo "cli rc $?") > $OUT/k23_cli.txt 2>&1; tail -4 $OUT/k23_cli.txt
step done
