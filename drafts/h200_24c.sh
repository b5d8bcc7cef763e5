# twenty-fourth session, call C (any Hopper card; its name is printed): the k26_qdo experiment
name=$(nvidia-smi --query-gpu=name --format=csv,noheader); echo "$name"; date -u
case "$name" in *H100*|*H200*) ;; *) echo "not a Hopper card: nothing run"; exit 3;; esac
source .gpu/install.sh >/dev/null 2>&1; export PYTHONPATH=$PWD:$PYTHONPATH PYTHONUNBUFFERED=1
timeout 300 python results/h200/experiments/k26_qdo_script.py.txt > $OUT/k26_qdo.txt 2>&1; echo "rc $?" >> $OUT/k26_qdo.txt
grep -v "^T=.* ms (IQR" $OUT/k26_qdo.txt | cut -c1-200; grep "^T=.* ms (IQR" $OUT/k26_qdo.txt | cut -c1-130; date -u
