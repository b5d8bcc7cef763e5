"""The whole notebook series in one process leaves GPU memory where it started.

All the numbered notebooks (notebooks/NN_*.ipynb, 00-27) run, in order, in ONE Jupyter kernel, as a student
who never restarts the kernel would run them. Before the first and after each notebook the
kernel clears its namespace (%reset -f), collects garbage and reads the device's free memory.

- start: the kernel's CUDA context and cuBLAS handle exist (costs a process pays once);
- after each notebook, namespace cleared: the notebook's buffers must be gone; what may
  stay is attnlab's cache of compiled modules (reported, and bounded);
- then, with that cache released too: free memory is back to start, to the page.
The next notebook reloads what it needs from PyCUDA's on-disk cache of compiled code.

The exercise notebooks are not part of this run: their checkers run each student kernel in
a subprocess of their own (tests/test_exercises.py covers them).

About 4 minutes on an H200 (the notebooks time every kernel), so it runs only when asked:

    python -m pytest tests/test_series_memory.py --series
"""
import re
from pathlib import Path

import pytest

NOTEBOOKS = sorted((Path(__file__).resolve().parent.parent / "notebooks").glob("[0-9][0-9]_*.ipynb"))
# cuMemGetInfo counts in the driver's 2 MiB pages. The smallest device buffer the series
# allocates (dout at B=2 T=260 C=192: 0.4 MB) is below that, so a page is the resolution.
# On the H200 one page stayed from notebook 02 on, the same after every later notebook:
# cuBLAS's workspace, allocated at the first GEMM.
PAGE = 2 << 20
MAX_MODULE_CACHE = 64 << 20     # compiled modules (code, constants): ~25 of them, small each

PROBE = """\
%reset -f
import gc
gc.collect()
from attnlab.device import free_memory
print("@@free", free_memory()[0])
"""
SETUP = """\
from attnlab import gemm
gemm.handle()
""" + PROBE
RELEASE_MODULES = """\
from attnlab import fused, kernels
fused._function.cache_clear()
kernels._module.cache_clear()
""" + PROBE


def test_the_notebooks_are_00_to_the_last():
    assert [p.name[:2] for p in NOTEBOOKS] == [f"{i:02d}" for i in range(28)]


@pytest.mark.gpu
@pytest.mark.series
def test_series_in_one_kernel_leaves_gpu_memory_where_it_started():
    nbformat = pytest.importorskip("nbformat")
    nbclient = pytest.importorskip("nbclient")
    from jupyter_client.manager import KernelManager

    km = KernelManager(kernel_name="python3")
    km.start_kernel(cwd=str(NOTEBOOKS[0].parent))

    def run(code_or_nb):
        nb = code_or_nb if not isinstance(code_or_nb, str) else nbformat.v4.new_notebook(
            cells=[nbformat.v4.new_code_cell(code_or_nb)])
        nbclient.NotebookClient(nb, km=km, timeout=600, allow_errors=False).execute()
        return nb

    def free(code):
        out = run(code).cells[-1].outputs
        text = "".join(o.get("text", "") for o in out if o.get("output_type") == "stream")
        return int(re.search(r"@@free (\d+)", text).group(1))

    try:
        start = free(SETUP)
        rows = []
        for path in NOTEBOOKS:
            run(nbformat.read(path, as_version=4))
            rows.append((path.name, start - free(PROBE), start - free(RELEASE_MODULES)))
    finally:
        km.shutdown_kernel(now=True)

    mib = lambda b: f"{b / 2**20:+.1f} MiB"
    print("\nGPU memory in use beyond start, after each notebook:")
    print(f"  {'notebook':<45} {'namespace cleared':>17} {'modules released':>17}")
    for name, cleared, released in rows:
        print(f"  {name:<45} {mib(cleared):>17} {mib(released):>17}")

    for name, cleared, released in rows:
        assert abs(released) <= PAGE, \
            f"after {name}, namespace cleared and modules released, {mib(released)} is still in use"
        assert cleared - released <= MAX_MODULE_CACHE, \
            f"after {name}, attnlab's module cache holds {mib(cleared - released)}"
