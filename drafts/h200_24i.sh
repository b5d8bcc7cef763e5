# twenty-fourth session, call I: on an H200, drafts/h200_24e.sh (the one-run table and the ladder); on an H100,
# kernel 27's call part by part (k27_parts)
name=$(nvidia-smi --query-gpu=name --format=csv,noheader)
case "$name" in
  *H200*) bash drafts/h200_24e.sh;;
  *H100*) echo "$name"; date -u; source .gpu/install.sh >/dev/null 2>&1; export PYTHONPATH=$PWD:$PYTHONPATH PYTHONUNBUFFERED=1
          timeout 200 python results/h200/experiments/k27_parts_script.py.txt > $OUT/k27_parts.txt 2>&1; echo "rc $?" >> $OUT/k27_parts.txt
          cut -c1-160 $OUT/k27_parts.txt; date -u;;
  *) echo "$name: nothing run"; exit 3;;
esac
