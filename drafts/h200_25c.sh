# twenty-fifth session, call C (either card; its name decides): on an H200 first notebooks 24 and 25
# (drafts/h200_24j.sh); on any Hopper card then k27_three (three small edits of kernel 27, and a fence). Under 7 minutes.
name=$(nvidia-smi --query-gpu=name --format=csv,noheader); echo "$name"; date -u
case "$name" in *H200*) bash drafts/h200_24j.sh ;; esac
source .gpu/install.sh >/dev/null 2>&1; export PYTHONPATH=$PWD:$PYTHONPATH PYTHONUNBUFFERED=1
timeout 330 python results/h200/experiments/k27_three_script.py.txt > $OUT/k27_three.txt 2>&1; echo "rc $?" >> $OUT/k27_three.txt
grep -v "^T=.* ms (IQR" $OUT/k27_three.txt | cut -c1-220; grep "^T=.* ms (IQR" $OUT/k27_three.txt | cut -c1-130; date -u
