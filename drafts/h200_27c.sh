# For the twenty-seventh session on, call B (the H200 only): the whole GPU suite after kernel 29 (about 2
# minutes), then nbval, serially, of the notebooks NBVAL names (default 24-26: for when the device time
# left is short) in NBVAL_S seconds. drafts/h200_27b.sh calls it for 12-26 and the exercises.
source drafts/on_h200.sh      # the card's name; exit 3 unless an H200 (or ANY_CARD=1); wheels, PYTHONPATH
(echo "$name"; timeout 200 python -m pytest -m gpu tests -n 8 -q -p no:cacheprovider 2>&1 | tail -3; echo "tests rc ${PIPESTATUS[0]}") | tee $OUT/gpu_suite_27th.txt
cd notebooks && (echo "$name"; echo "nbval of: ${NBVAL:=24_*.ipynb 25_*.ipynb 26_*.ipynb}"
  timeout ${NBVAL_S:-150} python -m pytest --nbval -p no:cacheprovider -q $NBVAL 2>&1 | tail -6; echo "nbval rc ${PIPESTATUS[0]}") | tee $OUT/nbval_27th.txt
date -u
