# twenty-fifth session, call A (either card; its name decides): on an H200, notebooks 24 and 25 (drafts/h200_24j.sh)
# then the whole GPU suite; on an H100, the two prepared T=1024 measurements (drafts/h200_24k.sh). Under 8 minutes.
name=$(nvidia-smi --query-gpu=name --format=csv,noheader)
case "$name" in
  *H200*) bash drafts/h200_24j.sh
          source .gpu/install.sh >/dev/null 2>&1; export PYTHONPATH=$PWD:$PYTHONPATH
          echo "== gpu suite $(date -u +%T)"; (echo "$name"; timeout 300 python -m pytest -m gpu tests -n 8 -q -p no:cacheprovider 2>&1 | tail -4) | tee $OUT/gpu_suite.txt ;;
  *) bash drafts/h200_24k.sh ;;
esac
