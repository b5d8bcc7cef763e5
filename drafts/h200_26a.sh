# twenty-sixth session (the H200 only; nothing on another card): notebook 26 executed and nbval'd
# (drafts/h200_25m.sh), then nbval of notebooks 12-25 and the exercises in one run (drafts/h200_25l.sh).
# About 7 minutes. Then `bash drafts/land_nb.sh 26 FILES_AT`; notebooks 00-11: drafts/h200_21d.sh.
name=$(nvidia-smi --query-gpu=name --format=csv,noheader); echo "$name"; date -u
case "$name" in *H200*) ;; *) echo "not an H200: nothing run"; exit 3;; esac
bash drafts/h200_25m.sh && bash drafts/h200_25l.sh
