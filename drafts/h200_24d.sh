# twenty-fourth session, call D (any Hopper card; its name is printed): kernel 27's checks. The GPU tests of the
# fused path, the CLI, pdl, tma and cubin (kernel 27 with every other kernel); kernels 25, 26 and 27 side by side (the
# ladder); backward 27 --tf32; kernel 27 under the four sanitizer tools while time is left
name=$(nvidia-smi --query-gpu=name --format=csv,noheader); echo "$name"; date -u
case "$name" in *H100*|*H200*) ;; *) echo "not a Hopper card: nothing run"; exit 3;; esac
source .gpu/install.sh >/dev/null 2>&1; export PYTHONPATH=$PWD:$PYTHONPATH PYTHONUNBUFFERED=1
step() { echo "== $1 $(date -u +%T) (${SECONDS}s)"; }
step gpu_tests; (echo "$name"; timeout 170 python -m pytest -m gpu tests/test_fused.py tests/test_cli.py tests/test_pdl.py tests/test_tma.py tests/test_cubin.py -n 8 -q -p no:cacheprovider 2>&1) | tee $OUT/gpu_tests_fused.txt | tail -2
grep "^FAILED\|Error" $OUT/gpu_tests_fused.txt | head -5 | cut -c1-300
step ladder; timeout 200 python benchmarks/fused_ladder.py --methods "k25 tf32,k26 tf32,k27 tf32" --T 1024,2048,16384 --json $OUT/fused_ladder_27.json > $OUT/fused_ladder_27.txt 2>&1; echo "rc $?" >> $OUT/fused_ladder_27.txt; grep "  T=\|rc \|  k2. tf32  " $OUT/fused_ladder_27.txt | tail -12 | cut -c1-160
step "cli 27"; (python -m attnlab backward 27 --tf32; echo "cli rc $?") > $OUT/k27_cli.txt 2>&1; tail -2 $OUT/k27_cli.txt | cut -c1-200
for tool in memcheck racecheck synccheck initcheck; do [ $SECONDS -lt 520 ] || break; small=; [ $tool = racecheck ] && small=small; step "27 $tool $small"; timeout 45 compute-sanitizer --tool $tool python results/h200/experiments/k21_sanitize_script.py.txt 27 $small > /tmp/san.txt 2>&1; echo "rc $?" >> /tmp/san.txt; grep -v "^=========\s*$" /tmp/san.txt | tail -3; done > $OUT/k27_sanitize.txt 2>&1; cat $OUT/k27_sanitize.txt | cut -c1-200
step done
