# Any Hopper card: run experiments by name, `bash drafts/experiment.sh k28_skip [more ...]`, each
# results/h200/experiments/<name>_script.py.txt into $OUT/<name>.{txt,json}. On an H200, first the
# steps named in $H200_FIRST (scripts in drafts/, e.g. H200_FIRST="h200_25m.sh"). Replaces the
# per-call wrappers drafts/h200_25b.sh ... 25k.sh, which stay as the records of what ran.
name=$(nvidia-smi --query-gpu=name --format=csv,noheader); echo "$name"; date -u
case "$name" in *H200*) for s in $H200_FIRST; do bash drafts/$s; done ;; esac
source .gpu/install.sh >/dev/null 2>&1; export PYTHONPATH=$PWD:$PYTHONPATH PYTHONUNBUFFERED=1
for x in "$@"; do
  timeout ${EXPERIMENT_TIMEOUT:-240} python results/h200/experiments/${x}_script.py.txt > $OUT/$x.txt 2>&1; echo "rc $?" >> $OUT/$x.txt
  grep -v "^T=.* ms (IQR" $OUT/$x.txt | cut -c1-200; grep "^T=.* ms (IQR" $OUT/$x.txt | cut -c1-110
done; date -u
