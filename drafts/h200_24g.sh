# twenty-fourth session, call G: on an H200, drafts/h200_24e.sh (the ladder of kernels 23-27 and the one-run
# table); on an H100, the k27_dqinp experiment (kernel 27 adding dQ straight into dinp, no dq pass)
name=$(nvidia-smi --query-gpu=name --format=csv,noheader)
case "$name" in
  *H200*) bash drafts/h200_24e.sh;;
  *H100*) echo "$name"; date -u; source .gpu/install.sh >/dev/null 2>&1; export PYTHONPATH=$PWD:$PYTHONPATH PYTHONUNBUFFERED=1
          timeout 300 python results/h200/experiments/k27_dqinp_script.py.txt > $OUT/k27_dqinp.txt 2>&1; echo "rc $?" >> $OUT/k27_dqinp.txt
          grep -v "^T=.* ms (IQR" $OUT/k27_dqinp.txt | cut -c1-220; grep "^T=.* ms (IQR" $OUT/k27_dqinp.txt | cut -c1-130; date -u;;
  *) echo "$name: nothing run"; exit 3;;
esac
