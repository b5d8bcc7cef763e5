# The H200 call owed since the eighteenth session (run from the repository root with .gpu/ carried; check the reply names an H200):
# notebook 22 moved in, executed and checked by nbval; the one-run table (now with kernel 23 and the heads_at_once fix);
# kernel 22 against kernel 23 (the ladder, single calls and back to back); kernels 22 and 23 under the four sanitizer
# tools; test_fused's GPU tests of the wgmma kernels; kernel 23's CLI. About 7 minutes. Afterwards: copy $OUT's
# fused_ladder_vs_torch.{json,txt} to results/h200/ (notebook 22 reads the eighteenth session's table, kept as
# fused_ladder_vs_torch_22.*) and run `python -m attnlab report --readme` into the README; commit notebooks/22_*.ipynb with these
# outputs, raise tests/test_lessons_structure.py to 3..22 and tests/test_series_memory.py to 23 notebooks, name
# notebook 22 in the README.
source .gpu/install.sh >/dev/null 2>&1
export PYTHONPATH=$PWD:$PYTHONPATH:/tmp/site PYTHONUNBUFFERED=1
pip install -q --no-index --no-deps --target /tmp/site .gpu/extra/*.whl 2>&1 | grep -v WARN | tail -1
nvidia-smi --query-gpu=name,clocks.sm,power.draw,power.limit --format=csv,noheader; date -u
step() { echo "== $1 $(date -u +%T) (${SECONDS}s)"; }
step nb22; [ -f notebooks/22_fused_backward_no_drain.ipynb ] || mv drafts/22_fused_backward_no_drain.ipynb notebooks/   # here: git mv
mkdir -p $OUT/nb; (cd notebooks && timeout 150 python ../tools/execute_notebooks.py --out $OUT/nb 22_fused_backward_no_drain.ipynb 2>&1 | tail -2 && cp $OUT/nb/22_*.ipynb . && timeout 120 python -m pytest --nbval -p no:cacheprovider -q 22_fused_backward_no_drain.ipynb 2>&1 | tail -2) | tee $OUT/nb22.txt
step onerun; timeout 240 python benchmarks/fused_vs_torch.py --json $OUT/fused_ladder_vs_torch.json > $OUT/fused_ladder_vs_torch.txt 2>&1; grep "#23 target" $OUT/fused_ladder_vs_torch.txt | grep "fused2[0-3]"
step ladder; timeout 150 python benchmarks/fused_ladder.py --methods "k22 tf32,k23 tf32" --T 1024,4096,16384 --sustained 4 --json $OUT/fused_ladder_23.json > $OUT/fused_ladder_23.txt 2>&1; grep "T=" $OUT/fused_ladder_23.txt | tail -12 | cut -c1-150
for k in 22 23; do for tool in memcheck synccheck initcheck racecheck; do small=; [ $tool = racecheck ] && small=small; step "$k $tool $small"; timeout 60 compute-sanitizer --tool $tool python results/h200/experiments/k21_sanitize_script.py.txt $k $small > /tmp/san.txt 2>&1; echo "rc $?" >> /tmp/san.txt; grep -v "^=========\s*$" /tmp/san.txt | tail -4; done; done > $OUT/k22_k23_sanitize.txt 2>&1; grep -c "0 errors\|0 hazards" $OUT/k22_k23_sanitize.txt
step tests; timeout 120 python -m pytest -m gpu -q -p no:cacheprovider tests/test_fused.py -k "23 or 22 or every or wgmma or one_before" > $OUT/gpu_tests_fused.txt 2>&1; tail -2 $OUT/gpu_tests_fused.txt
step cli; (python -m attnlab backward 23 --tf32; echo "cli rc $?") 2>&1 | grep -i "dinp\|rc" | tail -2
step done
