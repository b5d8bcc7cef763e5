# Draft notebooks executed and nbval'd on the H200 (another card only with ANY_CARD=1), as h200_25m.sh did for 26:
#   bash drafts/h200_nb.sh 27_fused_backward_dq_warpgroup.ipynb       then: bash drafts/land_nb.sh 27 FILES_AT
# Needs .gpu/extra/nbclient-*.whl (execute_notebooks.py's nbclient; `pip download nbclient` here). About 1 minute.
source drafts/on_h200.sh      # the card's name; exit 3 unless an H200 (or ANY_CARD=1); wheels, PYTHONPATH
pip install -q --no-index --no-deps --target /tmp/site .gpu/extra/*.whl 2>&1 | grep -v WARN | tail -1
mkdir -p $OUT/nb
for NB in "$@"; do
  n=${NB:0:2}; echo "== nb$n $(date -u +%T) (${SECONDS}s)"
  (echo "$name"; cd drafts && timeout 150 python ../tools/execute_notebooks.py --out $OUT/nb $NB 2>&1 | tail -2 && cp $OUT/nb/$NB ../notebooks/ && cd ../notebooks && timeout 120 python -m pytest --nbval -p no:cacheprovider -q $NB 2>&1 | tail -2) | tee $OUT/nb$n.txt
  rm -f notebooks/$NB
done
date -u
