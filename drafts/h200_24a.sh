# twenty-fourth session, call A: on an H200, drafts/h200_23g.sh (what lands notebook 23 and the one-run table);
# on an H100, drafts/h200_23i.sh (the k24_sw128gc experiment, any Hopper card), so that an H100's start is not wasted
name=$(nvidia-smi --query-gpu=name --format=csv,noheader)
case "$name" in *H200*) bash drafts/h200_23g.sh;; *H100*) bash drafts/h200_23i.sh;; *) echo "$name: nothing run"; exit 3;; esac
