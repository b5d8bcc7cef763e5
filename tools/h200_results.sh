#!/usr/bin/env bash
# Regenerate results/h200/: `backward N --json` for N = 1..9, with TF32 GEMMs (as llm.c
# times them) and with exact fp32 GEMMs, at the default shape B=4 T=1024 C=768 NH=12.
# Kernel 1 takes seconds per call: it is timed with one call per block size, no warm-up.
set -euo pipefail
out=${1:-results/h200}
mkdir -p "$out"
for n in 1 2 3 4 5 6 7 8 9; do
  for math in tf32 fp32; do
    flag=""; [ "$math" = tf32 ] && flag="--tf32"
    extra=""
    [ "$n" = 1 ] && extra="--repeats 1 --warmup 0 --block-sizes 32,64,256"
    [ "$n" = 2 ] && extra="--repeats 5"
    python3 -m attnlab backward "$n" $flag $extra --json > "$out/backward$n-$math.json"
  done
done
python3 - "$out" <<'PY'
import json, sys
out = sys.argv[1]
print("whole attention backward, B=4 T=1024 C=768 NH=12, best block size, median ms")
print("kernel | TF32 GEMMs | fp32 GEMMs | valid")
for n in range(1, 10):
    r = {m: json.load(open(f"{out}/backward{n}-{m}.json")) for m in ("tf32", "fp32")}
    t = {m: r[m]["best"]["median_ms"] for m in r}
    print(f"{n:>6} | {t['tf32']:10.3f} | {t['fp32']:10.3f} | {all(x['valid'] for x in r.values())}")
PY
