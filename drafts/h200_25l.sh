# twenty-fifth session, prepared for the next (the H200 only): nbval of notebooks 12-25 and the exercises, serially,
# in one run (notebooks 24 and 25 have passed only alone). About 5 minutes. Notebooks 00-11: drafts/h200_21d.sh.
name=$(nvidia-smi --query-gpu=name --format=csv,noheader); echo "$name"; date -u
case "$name" in *H200*) ;; *) echo "not an H200: nothing run"; exit 3;; esac
source .gpu/install.sh >/dev/null 2>&1; export PYTHONPATH=$PWD:$PYTHONPATH PYTHONUNBUFFERED=1
cd notebooks && (echo "$name"; timeout 570 python -m pytest --nbval -p no:cacheprovider -q 1[2-9]_*.ipynb 2[0-9]_*.ipynb exercises/*.ipynb 2>&1 | tail -6; echo "nbval rc ${PIPESTATUS[0]}") | tee $OUT/nbval_12_25.txt
date -u
