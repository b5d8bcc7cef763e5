# twenty-first session, call B (H200): notebook 23 executed and nbval'd; tma_wgmma_check and (if it passed) k23_tma;
# k23_pdl; kernel 23's CLI
name=$(nvidia-smi --query-gpu=name --format=csv,noheader); echo "$name"; date -u
source .gpu/install.sh >/dev/null 2>&1; export PYTHONPATH=$PWD:$PYTHONPATH PYTHONUNBUFFERED=1
E=results/h200/experiments
step() { echo "== $1 $(date -u +%T) (${SECONDS}s)"; }
case "$name" in *H200*) H200=1;; *) H200=0;; esac
if [ $H200 = 1 ]; then
  step nb23; mkdir -p $OUT/nb
  NB=23_fused_backward_float4_reductions.ipynb
  (cd drafts && timeout 150 python ../tools/execute_notebooks.py --out $OUT/nb $NB 2>&1 | tail -2 && cp $OUT/nb/$NB ../notebooks/ && cd ../notebooks && timeout 120 python -m pytest --nbval -p no:cacheprovider -q $NB 2>&1 | tail -2) | tee $OUT/nb23.txt
fi
step tma_wgmma_check
timeout 60 python $E/tma_wgmma_check_script.py.txt > $OUT/tma_wgmma_check.txt 2>&1; echo "rc $?" >> $OUT/tma_wgmma_check.txt; cut -c1-230 $OUT/tma_wgmma_check.txt
step k23_pdl
timeout 200 python $E/k23_pdl_script.py.txt > $OUT/k23_pdl.txt 2>&1; echo "rc $?" >> $OUT/k23_pdl.txt; cut -c1-200 $OUT/k23_pdl.txt | grep -v "^T=.*repeats)$"
if grep -q "failed: \[\]" $OUT/tma_wgmma_check.txt && [ $SECONDS -lt 380 ]; then
  step k23_tma
  timeout 200 python $E/k23_tma_script.py.txt > $OUT/k23_tma.txt 2>&1; echo "rc $?" >> $OUT/k23_tma.txt; cut -c1-200 $OUT/k23_tma.txt | grep -v "^T=.*repeats)$"
fi
[ $H200 = 1 ] || { echo "not an H200: nothing else"; exit 0; }
step k23_cli
(python -m attnlab backward 23 --tf32; echo "cli rc $?") > $OUT/k23_cli.txt 2>&1; tail -3 $OUT/k23_cli.txt
step done
