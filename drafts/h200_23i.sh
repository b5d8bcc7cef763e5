# twenty-third session, prepared for the next (any Hopper card; its name is printed): the k24_sw128gc experiment
name=$(nvidia-smi --query-gpu=name --format=csv,noheader); echo "$name"; date -u
case "$name" in *H100*|*H200*) ;; *) echo "not a Hopper card: nothing run"; exit 3;; esac
source .gpu/install.sh >/dev/null 2>&1; export PYTHONPATH=$PWD:$PYTHONPATH PYTHONUNBUFFERED=1
timeout 300 python results/h200/experiments/k24_sw128gc_script.py.txt > $OUT/k24_sw128gc.txt 2>&1; echo "rc $?" >> $OUT/k24_sw128gc.txt
grep -v "^T=.* ms (IQR" $OUT/k24_sw128gc.txt | cut -c1-220; grep "^T=.* ms (IQR" $OUT/k24_sw128gc.txt | cut -c1-130; date -u
