# For the twenty-seventh session, call B (the H200 only): the whole GPU suite after kernel 29, then nbval of
# notebooks 12-26 and the exercises in one run (drafts/h200_25l.sh). About 6 minutes.
name=$(nvidia-smi --query-gpu=name --format=csv,noheader); echo "$name"; date -u
case "$name" in *H200*) ;; *) echo "not an H200: nothing run"; exit 3;; esac
source .gpu/install.sh >/dev/null 2>&1; export PYTHONPATH=$PWD:$PYTHONPATH PYTHONUNBUFFERED=1
(echo "$name"; timeout 200 python -m pytest -m gpu tests -n 8 -q -p no:cacheprovider 2>&1 | tail -3) | tee $OUT/gpu_suite_27th.txt
bash drafts/h200_25l.sh
