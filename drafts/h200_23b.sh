# twenty-third session, call B (any Hopper card; its name is printed): the k24_sw128 experiment
name=$(nvidia-smi --query-gpu=name --format=csv,noheader); echo "$name"; date -u
case "$name" in *H100*|*H200*) ;; *) echo "not a Hopper card: nothing run"; exit 3;; esac
source .gpu/install.sh >/dev/null 2>&1; export PYTHONPATH=$PWD:$PYTHONPATH PYTHONUNBUFFERED=1
timeout 400 python results/h200/experiments/k24_sw128_script.py.txt > $OUT/k24_sw128.txt 2>&1; echo "rc $?" >> $OUT/k24_sw128.txt
grep -v "^T=.* ms (IQR" $OUT/k24_sw128.txt | cut -c1-220; date -u
