# twenty-fifth session, call F (any Hopper card; its name is printed): kernel 28's checks. The GPU tests of the
# fused path, the CLI, pdl, tma and cubin (kernel 28 with every other kernel); kernels 26, 27 and 28 side by side (the
# ladder, into results/<card>/fused_ladder_28); backward 28 --tf32; k28_blocktime; kernel 28 under the four
# sanitizer tools while time is left. About 7 minutes.
name=$(nvidia-smi --query-gpu=name --format=csv,noheader); echo "$name"; date -u
case "$name" in *H100*|*H200*) ;; *) echo "not a Hopper card: nothing run"; exit 3;; esac
source .gpu/install.sh >/dev/null 2>&1; export PYTHONPATH=$PWD:$PYTHONPATH PYTHONUNBUFFERED=1
step() { echo "== $1 $(date -u +%T) (${SECONDS}s)"; }
step gpu_tests; (echo "$name"; timeout 170 python -m pytest -m gpu tests/test_fused.py tests/test_cli.py tests/test_pdl.py tests/test_tma.py tests/test_cubin.py -n 8 -q -p no:cacheprovider 2>&1) | tee $OUT/gpu_tests_fused.txt | tail -2
grep "^FAILED\|Error" $OUT/gpu_tests_fused.txt | head -5 | cut -c1-300
step ladder; timeout 200 python benchmarks/fused_ladder.py --methods "k26 tf32,k27 tf32,k28 tf32" --T 1024,2048,16384 --json $OUT/fused_ladder_28.json > $OUT/fused_ladder_28.txt 2>&1; echo "rc $?" >> $OUT/fused_ladder_28.txt; grep "  T=\|rc \|  k2. tf32  " $OUT/fused_ladder_28.txt | tail -12 | cut -c1-160
step "cli 28"; (python -m attnlab backward 28 --tf32; echo "cli rc $?") > $OUT/k28_cli.txt 2>&1; tail -2 $OUT/k28_cli.txt | cut -c1-200
step blocktime; timeout 90 python results/h200/experiments/k28_blocktime_script.py.txt > $OUT/k28_blocktime.txt 2>&1; echo "rc $?" >> $OUT/k28_blocktime.txt; cut -c1-600 $OUT/k28_blocktime.txt
for tool in memcheck racecheck synccheck initcheck; do [ $SECONDS -lt 520 ] || break; small=; [ $tool = racecheck ] && small=small; step "28 $tool $small"; timeout 45 compute-sanitizer --tool $tool python results/h200/experiments/k21_sanitize_script.py.txt 28 $small > /tmp/san.txt 2>&1; echo "rc $?" >> /tmp/san.txt; grep -v "^=========\s*$" /tmp/san.txt | tail -3; done > $OUT/k28_sanitize.txt 2>&1; cat $OUT/k28_sanitize.txt | cut -c1-200
step done
