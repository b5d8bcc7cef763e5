# For the twenty-seventh session, call B (the H200 only): the whole GPU suite after kernel 29, then nbval of
# notebooks 12-26 and the exercises in one run. About 6 minutes. drafts/h200_27c.sh with the whole glob.
NBVAL="1[2-9]_*.ipynb 2[0-9]_*.ipynb exercises/*.ipynb" NBVAL_S=370 bash drafts/h200_27c.sh
