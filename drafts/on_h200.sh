# Sourced by the H200 scripts (h200_27a.sh, h200_27c.sh, h200_nb.sh): names the card, stops with status 3
# on any card but an H200 unless ANY_CARD=1 (then the run is labelled by the card), installs the
# project's wheels (.gpu/install.sh) and puts this checkout on PYTHONPATH.
name=$(nvidia-smi --query-gpu=name --format=csv,noheader); echo "$name"; date -u
case "$name" in *H200*) ;; *) [ -n "$ANY_CARD" ] || { echo "not an H200: nothing run"; exit 3; };; esac
source .gpu/install.sh >/dev/null 2>&1; export PYTHONPATH=$PWD:$PYTHONPATH PYTHONUNBUFFERED=1
