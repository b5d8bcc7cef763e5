# twenty-sixth session: kernel 29's checks (any Hopper card; its name is printed) and, on the H200, the
# one-run table with kernel 29 in it first. GPU tests of the fused path, the CLI, pdl, tma and cubin
# (every kernel: fused_launch and prep_of changed); kernel 29 under the sanitizer while time is left;
# backward 29 --tf32. Under 4 minutes on the H200, under 2 on an H100.
name=$(nvidia-smi --query-gpu=name --format=csv,noheader); echo "$name"; date -u
case "$name" in *H100*|*H200*) ;; *) echo "not a Hopper card: nothing run"; exit 3;; esac
source .gpu/install.sh >/dev/null 2>&1; export PYTHONPATH=$PWD:$PYTHONPATH PYTHONUNBUFFERED=1
step() { echo "== $1 $(date -u +%T) (${SECONDS}s)"; }
case "$name" in *H200*)
  step onerun; timeout 120 python benchmarks/fused_vs_torch.py --json $OUT/fused_ladder_vs_torch.json > $OUT/fused_ladder_vs_torch.txt 2>&1
  echo "rc $?" >> $OUT/fused_ladder_vs_torch.txt; grep "fused2[89] tf32\|rc \|total" $OUT/fused_ladder_vs_torch.txt | cut -c1-160 | tail -12;;
esac
step gpu_tests; (echo "$name"; timeout 120 python -m pytest -m gpu tests/test_fused.py tests/test_cli.py tests/test_pdl.py tests/test_tma.py tests/test_cubin.py -n 8 -q -p no:cacheprovider 2>&1) | tee $OUT/gpu_tests_fused_k29.txt | tail -2
grep "^FAILED\|Error" $OUT/gpu_tests_fused_k29.txt | head -5 | cut -c1-300
step "cli 29"; (python -m attnlab backward 29 --tf32; echo "cli rc $?") > $OUT/k29_cli.txt 2>&1; tail -2 $OUT/k29_cli.txt | cut -c1-200
for tool in memcheck racecheck synccheck initcheck; do [ $SECONDS -lt 200 ] || break; small=; [ $tool = racecheck ] && small=small; step "29 $tool $small"; timeout 45 compute-sanitizer --tool $tool python results/h200/experiments/k21_sanitize_script.py.txt 29 $small > /tmp/san.txt 2>&1; echo "rc $?" >> /tmp/san.txt; grep -v "^=========\s*$" /tmp/san.txt | tail -3; done > $OUT/k29_sanitize.txt 2>&1; cut -c1-200 $OUT/k29_sanitize.txt
step done
