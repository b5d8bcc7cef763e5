# twenty-first session, call D (H200): nbval of notebooks 00-11, serially
name=$(nvidia-smi --query-gpu=name --format=csv,noheader); echo "$name"; date -u
case "$name" in *H200*) ;; *) echo "not an H200: nothing run"; exit 3;; esac
source .gpu/install.sh >/dev/null 2>&1; export PYTHONPATH=$PWD:$PYTHONPATH PYTHONUNBUFFERED=1
cd notebooks && timeout 570 python -m pytest --nbval -p no:cacheprovider -q 0*.ipynb 10_*.ipynb 11_*.ipynb 2>&1 | tee $OUT/nbval_00_11.txt | tail -8; echo "nbval rc ${PIPESTATUS[0]}" | tee -a $OUT/nbval_00_11.txt
date -u
