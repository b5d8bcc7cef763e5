# The H200 call owed since the seventeenth session (run from the repository root with .gpu/ carried; check the reply names an H200): k21_nodrain, k22_pfirst, the ladder with kernel 22 and the one-run table into $OUT, notebook 21 with nbval, the GPU tests, kernel 22's CLI and sanitizer. Copy $OUT's files to results/h200/ (the JSONs to their names there) afterwards.
source .gpu/install.sh >/dev/null 2>&1
export PYTHONPATH=$PWD:$PYTHONPATH:/tmp/site PYTHONUNBUFFERED=1
pip install -q --no-index --no-deps --target /tmp/site .gpu/extra/*.whl 2>&1 | tail -1
nvidia-smi --query-gpu=name,clocks.sm,power.draw,power.limit --format=csv,noheader; date -u
step() { echo "== $1 $(date -u +%T)"; }
step nodrain; timeout 120 python results/h200/experiments/k21_nodrain_script.py.txt > $OUT/k21_nodrain.txt 2>&1; tail -19 $OUT/k21_nodrain.txt
step pfirst; timeout 100 python results/h200/experiments/k22_pfirst_script.py.txt > $OUT/k22_pfirst.txt 2>&1; tail -16 $OUT/k22_pfirst.txt
step ladder; timeout 170 python benchmarks/fused_ladder.py --methods "k19 tf32,k21 tf32,k22 tf32" --T 1024,4096,16384 --sustained 4 --json $OUT/fused_ladder_22.json > $OUT/fused_ladder_22.txt 2>&1; tail -25 $OUT/fused_ladder_22.txt
step onerun; timeout 120 python benchmarks/fused_vs_torch.py --json $OUT/fused_ladder_vs_torch.json > $OUT/fused_ladder_vs_torch.txt 2>&1; grep -A7 "^backward time" $OUT/fused_ladder_vs_torch.txt | cut -c1-60; grep "fused2[12]" $OUT/fused_ladder_vs_torch.txt | tail -4
step nb21; (cd notebooks && timeout 150 python ../tools/execute_notebooks.py --out $OUT/nb 21_fused_backward_fewer_instructions.ipynb 2>&1 | tail -2 && cp $OUT/nb/21_*.ipynb . && timeout 150 python -m pytest --nbval -p no:cacheprovider -q 21_fused_backward_fewer_instructions.ipynb 2>&1 | tail -2) | tee $OUT/nb21.txt
step gputests; timeout 170 python -m pytest -m gpu -q -p no:cacheprovider tests > $OUT/gpu_tests.txt 2>&1; tail -3 $OUT/gpu_tests.txt
step cli; (python -m attnlab backward 22 --tf32; echo "cli rc $?") > $OUT/k22_cli.txt 2>&1; tail -4 $OUT/k22_cli.txt
for tool in memcheck synccheck initcheck racecheck; do small=; [ $tool = racecheck ] && small=small; step "$tool $small"; timeout 60 compute-sanitizer --tool $tool python results/h200/experiments/k21_sanitize_script.py.txt 22 $small > /tmp/san.txt 2>&1; echo "rc $?" >> /tmp/san.txt; grep -v "^=========\s*$" /tmp/san.txt | tail -5; done > $OUT/k22_sanitize.txt 2>&1; grep -c "0 errors\|0 hazards" $OUT/k22_sanitize.txt
step done
