# twenty-first session, the last call (device time nearly spent): notebook 23 on an H200; tma_wgmma_check; k23_pdl (T=1024 first)
name=$(nvidia-smi --query-gpu=name --format=csv,noheader); echo "$name"; date -u
source .gpu/install.sh >/dev/null 2>&1; export PYTHONPATH=$PWD:$PYTHONPATH PYTHONUNBUFFERED=1
E=results/h200/experiments
step() { echo "== $1 $(date -u +%T) (${SECONDS}s)"; }
case "$name" in *H200*)
  step nb23; mkdir -p $OUT/nb; NB=23_fused_backward_float4_reductions.ipynb
  (cd drafts && timeout 60 python ../tools/execute_notebooks.py --out $OUT/nb $NB 2>&1 | tail -2 && cp $OUT/nb/$NB ../notebooks/ && cd ../notebooks && timeout 60 python -m pytest --nbval -p no:cacheprovider -q $NB 2>&1 | tail -2) | tee $OUT/nb23.txt ;;
esac
step tma_wgmma_check
timeout 40 python $E/tma_wgmma_check_script.py.txt > $OUT/tma_wgmma_check.txt 2>&1; echo "rc $?" >> $OUT/tma_wgmma_check.txt; cut -c1-200 $OUT/tma_wgmma_check.txt
step k23_pdl
timeout 150 python $E/k23_pdl_script.py.txt > $OUT/k23_pdl.txt 2>&1; echo "rc $?" >> $OUT/k23_pdl.txt; cut -c1-180 $OUT/k23_pdl.txt | grep -v "^T=.*repeats)$"
step done
