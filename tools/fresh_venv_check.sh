#!/usr/bin/env bash
# A new user's install, checked on a GPU machine: a fresh virtual environment with no system
# packages, the README's GPU install in it (editable, and a plain non-editable one in a second
# venv), the environment check, the README's example, and the library's tests (GPU and CPU),
# each run from a directory outside the checkout.
#
#   bash tools/fresh_venv_check.sh [WHEEL_FOLDER ...]
#
# With wheel folders (a machine without a package index), pip installs from them alone.
# The notebooks' extra (jupyterlab, matplotlib, nbval) is left out: test the notebooks with
# `pytest --nbval notebooks/` in an environment that has it.
set -uo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
work=$(mktemp -d)
pip_from=()
for folder in "$@"; do pip_from+=(--find-links "$(cd "$folder" && pwd)"); done
[ $# -gt 0 ] && pip_from=(--no-index "${pip_from[@]}")
status=0
step() { echo; echo "== $*"; }

step "python3 -m venv $work/env (no system packages): $(python3 --version)"
python3 -m venv "$work/env" || exit 1
step "pip install -e \"$repo[gpu]\" pytest pytest-xdist"
"$work/env/bin/pip" install -q "${pip_from[@]}" -e "$repo[gpu]" pytest pytest-xdist || exit 1
"$work/env/bin/pip" list 2>/dev/null | grep -i -E "^(pycuda|scikit-cuda|setuptools|numpy) "

cd "$work" || exit 1
step "python -m attnlab env"
"$work/env/bin/python" -m attnlab env || status=1
step "python -m attnlab backward 8 (the README's example, default shape)"
"$work/env/bin/python" -m attnlab backward 8 --repeats 5 || status=1

step "a plain (non-editable) install in a second venv: pip install \"$repo[gpu]\""
python3 -m venv "$work/plain" || exit 1
"$work/plain/bin/pip" install -q "${pip_from[@]}" "$repo[gpu]" || exit 1
"$work/plain/bin/python" -c "import attnlab.kernels as k; print('kernel sources:', k.KERNEL_DIR)"
"$work/plain/bin/python" -m attnlab backward 8 --B 2 --T 260 --C 192 --NH 3 --repeats 2 || status=1
"$work/plain/bin/python" -m attnlab backward 9 --tf32 --B 2 --T 260 --C 192 --NH 3 --repeats 2 || status=1
if "$work/plain/bin/python" -c "import sys; from attnlab import fused; sys.exit(bool(fused.gpu_unsupported_reason(True, 13)))"; then
    # the wgmma kernels include headers (kernels/*.cuh; 13: two, 17 and 18 also copy_engine.cuh):
    # they must be in the wheel too (sm_90 only)
    for k in "13 --tf32" "17 --tf32" "18"; do
        "$work/plain/bin/python" -m attnlab backward $k --B 2 --T 260 --C 192 --NH 3 --repeats 2 || status=1
    done
fi

step "pytest $repo/tests (GPU and CPU tests), from $work"
"$work/env/bin/python" -m pytest -q -p no:cacheprovider "$repo/tests" -n 8 --dist loadfile || status=1
exit $status
