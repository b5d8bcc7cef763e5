# twenty-fifth session, prepared for the next (the H200 only; nothing on another card): notebook 26 (draft)
# executed and nbval'd on the H200; then `bash drafts/land_nb.sh 26 FILES_AT`. About 1 minute.
name=$(nvidia-smi --query-gpu=name --format=csv,noheader); echo "$name"; date -u
case "$name" in *H200*) ;; *) echo "not an H200: nothing run"; exit 3;; esac
source .gpu/install.sh >/dev/null 2>&1; export PYTHONPATH=$PWD:$PYTHONPATH PYTHONUNBUFFERED=1
pip install -q --no-index --no-deps --target /tmp/site .gpu/extra/*.whl 2>&1 | grep -v WARN | tail -1   # nbclient (execute_notebooks)
step() { echo "== $1 $(date -u +%T) (${SECONDS}s)"; }
mkdir -p $OUT/nb
for NB in 26_fused_backward_rows.ipynb; do
  n=${NB:0:2}; step "nb$n"
  (echo "$name"; cd drafts && timeout 150 python ../tools/execute_notebooks.py --out $OUT/nb $NB 2>&1 | tail -2 && cp $OUT/nb/$NB ../notebooks/ && cd ../notebooks && timeout 120 python -m pytest --nbval -p no:cacheprovider -q $NB 2>&1 | tail -2) | tee $OUT/nb$n.txt
  rm -f notebooks/$NB
done
step done
