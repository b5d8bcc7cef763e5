# twenty-fifth session, call K (either card; its name decides): on an H200 first drafts/h200_25h.sh (notebooks 24
# and 25, the ladder of kernels 23-28); on any Hopper card then k28_persist. Under 8 minutes.
name=$(nvidia-smi --query-gpu=name --format=csv,noheader); echo "$name"; date -u
case "$name" in *H200*) bash drafts/h200_25h.sh ;; esac
source .gpu/install.sh >/dev/null 2>&1; export PYTHONPATH=$PWD:$PYTHONPATH PYTHONUNBUFFERED=1
for x in k28_persist; do
  timeout 200 python results/h200/experiments/${x}_script.py.txt > $OUT/$x.txt 2>&1; echo "rc $?" >> $OUT/$x.txt
  grep -v "^T=.* ms (IQR" $OUT/$x.txt | cut -c1-200; grep "^T=.* ms (IQR" $OUT/$x.txt | cut -c1-110
done; date -u
