# twenty-fourth session, call H: on an H200, drafts/h200_24e.sh (the one-run table and the ladder); on an H100,
# the whole GPU suite after kernels 26 and 27 (every test marked gpu)
name=$(nvidia-smi --query-gpu=name --format=csv,noheader)
case "$name" in
  *H200*) bash drafts/h200_24e.sh;;
  *H100*) echo "$name"; date -u; source .gpu/install.sh >/dev/null 2>&1; export PYTHONPATH=$PWD:$PYTHONPATH PYTHONUNBUFFERED=1
          (echo "$name"; timeout 400 python -m pytest -m gpu tests -n 8 -q -p no:cacheprovider 2>&1) > $OUT/gpu_suite_24th.txt
          tail -3 $OUT/gpu_suite_24th.txt; grep "^FAILED\|^ERROR" $OUT/gpu_suite_24th.txt | head -10 | cut -c1-250; date -u;;
  *) echo "$name: nothing run"; exit 3;;
esac
