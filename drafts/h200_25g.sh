# twenty-fifth session, call G (either card; its name decides): on an H200 first notebooks 24 and 25
# (drafts/h200_24j.sh); on any Hopper card then k28_ready (flash_backward starting on each query tile once
# the prep has flagged it). Under 5 minutes.
name=$(nvidia-smi --query-gpu=name --format=csv,noheader); echo "$name"; date -u
case "$name" in *H200*) bash drafts/h200_24j.sh ;; esac
source .gpu/install.sh >/dev/null 2>&1; export PYTHONPATH=$PWD:$PYTHONPATH PYTHONUNBUFFERED=1
for x in k28_ready; do
  timeout 200 python results/h200/experiments/${x}_script.py.txt > $OUT/$x.txt 2>&1; echo "rc $?" >> $OUT/$x.txt
  grep -v "^T=.* ms (IQR" $OUT/$x.txt | cut -c1-200; grep "^T=.* ms (IQR" $OUT/$x.txt | cut -c1-110
done; date -u
