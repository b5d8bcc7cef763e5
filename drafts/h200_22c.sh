# twenty-second session, the short call: notebook 23 executed and nbval'd on an H200 (nothing on another card)
name=$(nvidia-smi --query-gpu=name --format=csv,noheader); echo "$name"; date -u
case "$name" in *H200*) ;; *) echo "not an H200: nothing run"; exit 3;; esac
source .gpu/install.sh >/dev/null 2>&1; export PYTHONPATH=$PWD:$PYTHONPATH PYTHONUNBUFFERED=1
mkdir -p $OUT/nb; NB=23_fused_backward_float4_reductions.ipynb
(echo "$name"; cd drafts && timeout 120 python ../tools/execute_notebooks.py --out $OUT/nb $NB 2>&1 | tail -2 && cp $OUT/nb/$NB ../notebooks/ && cd ../notebooks && timeout 90 python -m pytest --nbval -p no:cacheprovider -q $NB 2>&1 | tail -2) | tee $OUT/nb23.txt
