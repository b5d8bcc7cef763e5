# Draft notebooks executed and nbval'd on the H200 (nothing on another card), as h200_25m.sh did for 26:
#   bash drafts/h200_nb.sh 27_fused_backward_dq_warpgroup.ipynb       then: bash drafts/land_nb.sh 27 FILES_AT
# Needs .gpu/extra/nbclient-*.whl (execute_notebooks.py's nbclient; `pip download nbclient` here). About 1 minute.
name=$(nvidia-smi --query-gpu=name --format=csv,noheader); echo "$name"; date -u
case "$name" in *H200*) ;; *) echo "not an H200: nothing run"; exit 3;; esac
source .gpu/install.sh >/dev/null 2>&1; export PYTHONPATH=$PWD:$PYTHONPATH PYTHONUNBUFFERED=1
pip install -q --no-index --no-deps --target /tmp/site .gpu/extra/*.whl 2>&1 | grep -v WARN | tail -1
mkdir -p $OUT/nb
for NB in "$@"; do
  n=${NB:0:2}; echo "== nb$n $(date -u +%T) (${SECONDS}s)"
  (echo "$name"; cd drafts && timeout 150 python ../tools/execute_notebooks.py --out $OUT/nb $NB 2>&1 | tail -2 && cp $OUT/nb/$NB ../notebooks/ && cd ../notebooks && timeout 120 python -m pytest --nbval -p no:cacheprovider -q $NB 2>&1 | tail -2) | tee $OUT/nb$n.txt
  rm -f notebooks/$NB
done
date -u
