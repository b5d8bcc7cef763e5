# twenty-fifth session, call B (either card; its name decides): on an H200 first notebooks 24 and 25
# (drafts/h200_24j.sh); on any Hopper card then k27_lastdq (the dq pass folded into flash_backward's
# last block per query tile). Under 6 minutes.
name=$(nvidia-smi --query-gpu=name --format=csv,noheader); echo "$name"; date -u
case "$name" in *H200*) bash drafts/h200_24j.sh ;; esac
source .gpu/install.sh >/dev/null 2>&1; export PYTHONPATH=$PWD:$PYTHONPATH PYTHONUNBUFFERED=1
timeout 300 python results/h200/experiments/k27_lastdq_script.py.txt > $OUT/k27_lastdq.txt 2>&1; echo "rc $?" >> $OUT/k27_lastdq.txt
grep -v "^T=.* ms (IQR" $OUT/k27_lastdq.txt | cut -c1-220; grep "^T=.* ms (IQR" $OUT/k27_lastdq.txt | cut -c1-130; date -u
