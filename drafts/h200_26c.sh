# twenty-sixth session (the H200 only; nothing on another card): the one-run table with kernel 29 in it
# (about 80 s). Then land it as land_onerun.sh did (LADDER_METHODS, the README's table).
name=$(nvidia-smi --query-gpu=name --format=csv,noheader); echo "$name"; date -u
case "$name" in *H200*) ;; *) echo "not an H200: nothing run"; exit 3;; esac
source .gpu/install.sh >/dev/null 2>&1; export PYTHONPATH=$PWD:$PYTHONPATH PYTHONUNBUFFERED=1
timeout 115 python benchmarks/fused_vs_torch.py --json $OUT/fused_ladder_vs_torch.json > $OUT/fused_ladder_vs_torch.txt 2>&1
echo "rc $?" >> $OUT/fused_ladder_vs_torch.txt; grep "fused2[89] tf32\|rc \|total" $OUT/fused_ladder_vs_torch.txt | cut -c1-160 | tail -12
