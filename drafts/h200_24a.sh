# twenty-fourth session, call A: on an H200, drafts/h200_24e.sh (the one-run table and the ladder; drafts/h200_23g.sh at first, since removed);
# on an H100, the k25_maps experiment (kernel 25 with Q, dO, then K and V too, by tensor maps passed as parameters)
name=$(nvidia-smi --query-gpu=name --format=csv,noheader)
case "$name" in
  *H200*) bash drafts/h200_24e.sh;;
  *H100*) echo "$name"; date -u; source .gpu/install.sh >/dev/null 2>&1; export PYTHONPATH=$PWD:$PYTHONPATH PYTHONUNBUFFERED=1
          timeout 300 python results/h200/experiments/k25_maps_script.py.txt > $OUT/k25_maps.txt 2>&1; echo "rc $?" >> $OUT/k25_maps.txt
          grep -v "^T=.* ms (IQR" $OUT/k25_maps.txt | cut -c1-200; grep "^T=.* ms (IQR" $OUT/k25_maps.txt | cut -c1-130; date -u;;
  *) echo "$name: nothing run"; exit 3;;
esac
