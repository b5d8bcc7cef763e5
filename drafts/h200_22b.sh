# twenty-second session, call B (any Hopper card; its name is printed), after notebook 23 landed:
# nbval of notebooks 12-23 and the exercises, serially
name=$(nvidia-smi --query-gpu=name --format=csv,noheader); echo "$name"; date -u
case "$name" in *H100*|*H200*) ;; *) echo "not a Hopper card: nothing run"; exit 3;; esac
source .gpu/install.sh >/dev/null 2>&1; export PYTHONPATH=$PWD:$PYTHONPATH PYTHONUNBUFFERED=1
echo "$name" > $OUT/nbval_12_23.txt; cd notebooks && timeout 540 python -m pytest --nbval -p no:cacheprovider -q 1[2-9]_*.ipynb 2[0-3]_*.ipynb exercises/ 2>&1 | tee -a $OUT/nbval_12_23.txt | tail -8; echo "nbval rc ${PIPESTATUS[0]}" | tee -a $OUT/nbval_12_23.txt
date -u
