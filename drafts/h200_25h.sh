# twenty-fifth session, call H (the H200 only; nothing on another card): notebooks 24 and 25 executed and
# nbval'd (drafts/h200_24j.sh), then the ladder of kernels 23-28 (results/h200/fused_ladder_28). About 5 minutes.
name=$(nvidia-smi --query-gpu=name --format=csv,noheader); echo "$name"; date -u
case "$name" in *H200*) ;; *) echo "not an H200: nothing run"; exit 3;; esac
bash drafts/h200_24j.sh
source .gpu/install.sh >/dev/null 2>&1; export PYTHONPATH=$PWD:$PYTHONPATH PYTHONUNBUFFERED=1
echo "== ladder $(date -u +%T)"; timeout 260 python benchmarks/fused_ladder.py --methods "k23 tf32,k24 tf32,k25 tf32,k26 tf32,k27 tf32,k28 tf32" --T 1024,2048,16384 --json $OUT/fused_ladder_28.json > $OUT/fused_ladder_28.txt 2>&1; echo "rc $?" >> $OUT/fused_ladder_28.txt; grep "  T=\|rc " $OUT/fused_ladder_28.txt | tail -19 | cut -c1-160
date -u
