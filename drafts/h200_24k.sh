# twenty-fourth session, call K, prepared for the next (any Hopper card; its name is printed): the two T=1024
# measurements prepared last: kernel 27's call part by part (k27_parts) and its dq pass run as tiles become
# ready (k27_dqready). About 3 minutes.
name=$(nvidia-smi --query-gpu=name --format=csv,noheader); echo "$name"; date -u
case "$name" in *H100*|*H200*) ;; *) echo "not a Hopper card: nothing run"; exit 3;; esac
source .gpu/install.sh >/dev/null 2>&1; export PYTHONPATH=$PWD:$PYTHONPATH PYTHONUNBUFFERED=1
for x in k27_parts k27_dqready; do
  timeout 240 python results/h200/experiments/${x}_script.py.txt > $OUT/$x.txt 2>&1; echo "rc $?" >> $OUT/$x.txt
  grep -v "^T=.* ms (IQR" $OUT/$x.txt | cut -c1-200; grep "^T=.* ms (IQR" $OUT/$x.txt | cut -c1-130
done; date -u
