# For the thirtieth session on, everything owed on the H200 in one call (the H200 only; exit 3 elsewhere):
# h200_27a.sh (the one-run table with kernel 29, the ladder of 28 and 29, the CLI, the sanitizer); that
# run's table and ladder put where notebook 27 reads them (results/h200/, in the device's copy only);
# draft notebook 27 executed and nbval'd (h200_nb.sh); then h200_27c.sh: the whole GPU suite and nbval of
# notebooks 12-26 and the exercises in what is left of TOTAL s (default 580). Then, here:
#   bash drafts/land_onerun.sh FILES_AT 29      and, once its prose is written from nb/: land_nb.sh 27 FILES_AT
# Ran once (thirtieth session): its $OUT held 10 files, more than the device tool returns; nb/ and
# nbval_27th.txt stayed behind, so notebook 27 ran again alone (h200_nb.sh).
bash drafts/h200_27a.sh || exit $?
cp $OUT/fused_ladder_29.json $OUT/fused_ladder_vs_torch.json results/h200/
bash drafts/h200_nb.sh 27_fused_backward_dq_warpgroup.ipynb
left=$((${TOTAL:-580} - 200 - SECONDS))      # 200: h200_27c.sh's timeout for the GPU suite
[ $left -gt 30 ] || left=30
NBVAL="1[2-9]_*.ipynb 2[0-9]_*.ipynb exercises/*.ipynb" NBVAL_S=$left bash drafts/h200_27c.sh
