# For the twenty-seventh session, call A (the H200 only; nothing on another card): kernel 29 timed on the
# H200. The one-run table (every method, kernel 29 in it), the ladder of kernels 28 and 29 with spread,
# backward 29 --tf32, kernel 29 under the four sanitizer tools. About 4 minutes. Then:
#   bash drafts/land_onerun.sh FILES_AT 29     (the table and fused_ladder_29.* into results/h200/, the README's table)
source drafts/on_h200.sh      # the card's name; exit 3 unless an H200 (or ANY_CARD=1); wheels, PYTHONPATH
step() { echo "== $1 $(date -u +%T) (${SECONDS}s)"; }
step onerun; timeout 120 python benchmarks/fused_vs_torch.py --json $OUT/fused_ladder_vs_torch.json > $OUT/fused_ladder_vs_torch.txt 2>&1
echo "rc $?" >> $OUT/fused_ladder_vs_torch.txt; grep "fused2[89] tf32\|rc \|total" $OUT/fused_ladder_vs_torch.txt | cut -c1-160 | tail -12
step ladder; timeout 150 python benchmarks/fused_ladder.py --methods "k28 tf32,k29 tf32" --T 1024,2048,16384 --json $OUT/fused_ladder_29.json > $OUT/fused_ladder_29.txt 2>&1
echo "rc $?" >> $OUT/fused_ladder_29.txt; grep "  T=\|rc \|  k2. tf32  " $OUT/fused_ladder_29.txt | tail -10 | cut -c1-160
step "cli 29"; (echo "$name"; python -m attnlab backward 29 --tf32; echo "cli rc $?") > $OUT/k29_cli.txt 2>&1; tail -2 $OUT/k29_cli.txt | cut -c1-200
echo "$name" > $OUT/k29_sanitize.txt; for tool in memcheck racecheck synccheck initcheck; do small=; [ $tool = racecheck ] && small=small; step "29 $tool $small"; timeout 45 compute-sanitizer --tool $tool python results/h200/experiments/k21_sanitize_script.py.txt 29 $small > /tmp/san.txt 2>&1; echo "rc $?" >> /tmp/san.txt; grep -v "^=========\s*$" /tmp/san.txt | tail -3; done >> $OUT/k29_sanitize.txt 2>&1; cut -c1-200 $OUT/k29_sanitize.txt
step done
