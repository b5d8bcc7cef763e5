# For the thirty-third session, on whichever Hopper card comes (labelled by its name): notebook 27 nbval'd
# serially. On an H200 its claim cell runs in that nbval, and notebooks 00-11 follow in NBVAL_S s (default 400).
# On another card conftest skips the claim cell, so the notebook is then also executed whole with
# tools/execute_notebooks.py, which runs that cell too (it reads only committed files) and prints its output.
ANY_CARD=1 source drafts/on_h200.sh
cd notebooks
(echo "$name"; timeout 90 python -m pytest --nbval -p no:cacheprovider -q 27_*.ipynb 2>&1 | tail -3
 echo "nbval 27 rc ${PIPESTATUS[0]}") | tee $OUT/nbval_27_33rd.txt
case "$name" in
*H200*)
 (echo "$name"; echo "nbval of: 0[0-9]_*.ipynb 1[01]_*.ipynb"
  timeout ${NBVAL_S:-400} python -m pytest --nbval -p no:cacheprovider -q 0[0-9]_*.ipynb 1[01]_*.ipynb 2>&1 | tail -4
  echo "nbval rc ${PIPESTATUS[0]}") | tee $OUT/nbval_00_11_33rd.txt ;;
*)
 python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site ../.gpu/extra/*.whl
 (echo "$name"; timeout 150 python ../tools/execute_notebooks.py --out /tmp/ex 27_*.ipynb 2>&1 | tail -3
  echo "execute rc ${PIPESTATUS[0]}"
  python -c "
import glob, nbformat
nb = nbformat.read(glob.glob('/tmp/ex/27_*.ipynb')[0], as_version=4)
i, cell = next((i, c) for i, c in enumerate(nb.cells) if 'attnlab-h200-claims' in c.metadata.get('tags', []))
print('claim cell', i, 'outputs:'); print(''.join(o.get('text', '') or str(o.get('evalue', '')) for o in cell.outputs))
") | tee $OUT/exec_27_33rd.txt ;;
esac
date -u
