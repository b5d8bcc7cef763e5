# For the thirty-first session (the H200 only; exit 3 elsewhere): notebook 27 as it landed, nbval'd serially
# (its claim cell gained section 4b's checks after its H200 run, and ran only on a CPU since), then
# notebooks 00-11 (last nbval'd on the H200 in the twenty-sixth session) in NBVAL_S s (default 400).
# About 7 minutes; 2 files come back. If notebook 27 passes on the H200: issues resolved 23.
source drafts/on_h200.sh      # the card's name; exit 3 unless an H200 (or ANY_CARD=1); wheels, PYTHONPATH
cd notebooks
(echo "$name"; timeout 90 python -m pytest --nbval -p no:cacheprovider -q 27_*.ipynb 2>&1 | tail -3
 echo "nbval 27 rc ${PIPESTATUS[0]}") | tee $OUT/nbval_27_31st.txt
(echo "$name"; echo "nbval of: 0[0-9]_*.ipynb 1[01]_*.ipynb"
 timeout ${NBVAL_S:-400} python -m pytest --nbval -p no:cacheprovider -q 0[0-9]_*.ipynb 1[01]_*.ipynb 2>&1 | tail -4
 echo "nbval rc ${PIPESTATUS[0]}") | tee $OUT/nbval_00_11_31st.txt
date -u
