# twenty-second session, call A (an H200, or the H100 that an nvidia-h200 call may get), from branch k24-pdl:
# notebook 23 executed and nbval'd (on an H200 only); the GPU tests of the fused path (kernel 24 with them) and the CLI; kernels 23
# and 24 by the CLI; kernel 23 against kernel 24 (the ladder); kernel 24 under the four sanitizer tools
name=$(nvidia-smi --query-gpu=name --format=csv,noheader); echo "$name"; date -u
source .gpu/install.sh >/dev/null 2>&1; export PYTHONPATH=$PWD:$PYTHONPATH PYTHONUNBUFFERED=1
step() { echo "== $1 $(date -u +%T) (${SECONDS}s)"; }
case "$name" in *H200*)    # notebook 23 lands only with an H200's outputs
step nb23; mkdir -p $OUT/nb; NB=23_fused_backward_float4_reductions.ipynb
(echo "$name"; cd drafts && timeout 150 python ../tools/execute_notebooks.py --out $OUT/nb $NB 2>&1 | tail -2 && cp $OUT/nb/$NB ../notebooks/ && cd ../notebooks && timeout 120 python -m pytest --nbval -p no:cacheprovider -q $NB 2>&1 | tail -2) | tee $OUT/nb23.txt
rm -f notebooks/$NB ;;
esac
step gpu_tests
timeout 180 python -m pytest -m gpu tests/test_fused.py tests/test_cli.py -n 8 -q -p no:cacheprovider 2>&1 | tee $OUT/gpu_tests_fused.txt | tail -3
for k in 24 23; do [ $SECONDS -lt 200 ] || break; step "cli $k"; (python -m attnlab backward $k --tf32; echo "cli rc $?") > $OUT/k${k}_cli.txt 2>&1; tail -2 $OUT/k${k}_cli.txt | cut -c1-200; done
step ladder; timeout 150 python benchmarks/fused_ladder.py --methods "k23 tf32,k24 tf32" --T 1024,2048,16384 --json $OUT/fused_ladder_24.json > $OUT/fused_ladder_24.txt 2>&1; echo "rc $?" >> $OUT/fused_ladder_24.txt; grep "T=\|rc " $OUT/fused_ladder_24.txt | tail -10 | cut -c1-170
for tool in memcheck racecheck synccheck initcheck; do [ $SECONDS -lt 240 ] || break; small=; [ $tool = racecheck ] && small=small; step "24 $tool $small"; timeout 45 compute-sanitizer --tool $tool python results/h200/experiments/k21_sanitize_script.py.txt 24 $small > /tmp/san.txt 2>&1; echo "rc $?" >> /tmp/san.txt; grep -v "^=========\s*$" /tmp/san.txt | tail -4; done > $OUT/k24_sanitize.txt 2>&1; grep -c "0 errors\|0 hazards" $OUT/k24_sanitize.txt
step done
