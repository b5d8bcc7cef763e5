#!/usr/bin/env bash
# The notebooks as on a small GPU, run on a big one: a ballast process takes all of the GPU's
# free memory but GIB GiB (default 15: what a 16 GB card such as a T4 leaves free) and holds it
# while `python -m pytest --nbval notebooks/` runs with the arguments given.
#
#   bash tools/small_gpu_check.sh [GIB] [pytest arguments ...]
set -uo pipefail
gib=${1:-15}
shift $(( $# > 0 ? 1 : 0 ))
ready=$(mktemp -u)
python3 - "$gib" "$ready" <<'EOF' &
import sys, time
import pycuda.autoprimaryctx                # the primary context: no more than one per process
import pycuda.driver as cuda
keep, ready = int(sys.argv[1]) * 2**30, sys.argv[2]
free, total = cuda.mem_get_info()
ballast = cuda.mem_alloc(free - keep) if free > keep else None
free, total = cuda.mem_get_info()
with open(ready, "w") as f:
    f.write(f"ballast: {free / 2**30:.2f} GiB of {total / 2**30:.1f} GiB left free\n")
time.sleep(3600)
EOF
ballast=$!
trap 'kill $ballast 2>/dev/null' EXIT
while [ ! -s "$ready" ]; do
  kill -0 $ballast 2>/dev/null || { echo "the ballast process failed"; exit 1; }
  sleep 1
done
cat "$ready"
python3 -m pytest --nbval notebooks/ "$@"
