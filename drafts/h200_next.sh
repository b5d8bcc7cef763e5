# The second H200 call (twentieth session; run from the repository root with .gpu/ carried, after h200_run.sh; check the
# reply names an H200): toward #23's T=1024 target, k23_t1024 (kernel 23's call part by part, and the bounds of three
# designs) and k23_dqwrite (kernel 23 writing its own dQ, and also clearing it: checked against kernel 23, under racecheck and memcheck at the
# small shapes, then timed). About 5 minutes. Each script's docstring holds its prediction, committed before any run.
# Afterwards: copy $OUT/*.{json,txt} to results/h200/experiments/ and write what they printed into docs/fused-speed.md.
source .gpu/install.sh >/dev/null 2>&1
export PYTHONPATH=$PWD:$PYTHONPATH PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,clocks.sm,power.draw,power.limit --format=csv,noheader; date -u
step() { echo "== $1 $(date -u +%T) (${SECONDS}s)"; }
E=results/h200/experiments
step k23_t1024; timeout 120 python $E/k23_t1024_script.py.txt > $OUT/k23_t1024.txt 2>&1; echo "rc $?" >> $OUT/k23_t1024.txt; grep "less\|whole\|first\|rc" $OUT/k23_t1024.txt | cut -c1-140
for tool in racecheck memcheck; do step "k23_dqwrite $tool"; SAN=1 timeout 120 compute-sanitizer --tool $tool python $E/k23_dqwrite_script.py.txt > /tmp/san.txt 2>&1; echo "rc $?" >> /tmp/san.txt; grep -v "^=========\s*$" /tmp/san.txt | tail -4; done > $OUT/k23_dqwrite_sanitize.txt 2>&1; cat $OUT/k23_dqwrite_sanitize.txt
step k23_dqwrite; timeout 200 python $E/k23_dqwrite_script.py.txt > $OUT/k23_dqwrite.txt 2>&1; echo "rc $?" >> $OUT/k23_dqwrite.txt; tail -14 $OUT/k23_dqwrite.txt | cut -c1-160
step done
