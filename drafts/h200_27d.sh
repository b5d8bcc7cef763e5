# Calls A and a short B in one call (the H200 only), for when the device time left cannot hold both
# calls: h200_27a.sh (the one-run table, the ladder of 28 and 29, the CLI, the sanitizer), then
# h200_27c.sh (the whole GPU suite, then nbval of notebooks 24-26 in what is left of TOTAL s, default 570).
bash drafts/h200_27a.sh || exit $?
left=$((${TOTAL:-570} - 200 - SECONDS))      # 200: h200_27c.sh's timeout for the GPU suite
[ $left -gt 30 ] || left=30
NBVAL_S=$left bash drafts/h200_27c.sh
