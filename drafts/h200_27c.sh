# For the twenty-seventh session, call B short (the H200 only), when the device time left cannot hold
# drafts/h200_27b.sh: the whole GPU suite after kernel 29 (about 2 minutes), then nbval of the fused
# notebooks whose kernels share kernel 29's library change (24-26), serially, in what time is left.
name=$(nvidia-smi --query-gpu=name --format=csv,noheader); echo "$name"; date -u
case "$name" in *H200*) ;; *) echo "not an H200: nothing run"; exit 3;; esac
source .gpu/install.sh >/dev/null 2>&1; export PYTHONPATH=$PWD:$PYTHONPATH PYTHONUNBUFFERED=1
(echo "$name"; timeout 200 python -m pytest -m gpu tests -n 8 -q -p no:cacheprovider 2>&1 | tail -3; echo "tests rc ${PIPESTATUS[0]}") | tee $OUT/gpu_suite_27th.txt
cd notebooks && (echo "$name"; timeout ${NBVAL_S:-150} python -m pytest --nbval -p no:cacheprovider -q 24_*.ipynb 25_*.ipynb 26_*.ipynb 2>&1 | tail -4; echo "nbval rc ${PIPESTATUS[0]}") | tee $OUT/nbval_24_26_27th.txt
date -u
