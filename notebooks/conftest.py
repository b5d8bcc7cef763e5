"""nbval runs the notebooks as tests. Without a GPU the notebooks that need one are skipped, with
the reason; a notebook whose metadata says ``"attnlab": {"needs_gpu": false}`` (notebook 01, the
CPU reference) runs everywhere, CI included. On a GPU
that cannot run the fused kernels (notebook 12: too little shared memory per block, or no TF32
tensor cores), the cells tagged ``attnlab-needs-fused`` (those that run the fused kernels or use
their results) are skipped, with the reason; so are notebook 13's cells tagged
``attnlab-needs-kernel-10`` on a GPU that cannot run fused kernels 10 and 11 (sm_80 or newer
with 110 KB of shared memory per block), and those tagged ``attnlab-needs-wgmma`` on a GPU that
cannot run the wgmma kernels (fused.WGMMA_KERNELS: compute capability 9.0). On a GPU other than the one the prose was written
from (results/h200: an NVIDIA H200), the claim cells tagged ``attnlab-h200-claims``, which
check the prose's numbers against the run, are skipped, with the reason."""
import json

import pytest

from attnlab.device import gpu_status

NEEDS_FUSED = "attnlab-needs-fused"
NEEDS_KERNEL_10 = "attnlab-needs-kernel-10"   # cells that run fused kernels 10 and 11 (notebook 13)
NEEDS_WGMMA = "attnlab-needs-wgmma"           # cells that run fused kernels 12-18 (notebooks 13-18)
H200_CLAIMS = "attnlab-h200-claims"   # cells that check the prose against the H200's numbers


def _fused_unsupported(kernels=(9,)):
    """Why this GPU cannot run both variants (fp32 and TF32) of these fused kernels, or None."""
    from attnlab import fused
    reasons = [r for r in (fused.gpu_unsupported_reason(tf32, k) for k in kernels
                           for tf32 in (False, True)) if r]
    return "; ".join(dict.fromkeys(reasons)) or None


def needs_gpu(path, _seen={}):
    """False only for a notebook whose metadata says ``"attnlab": {"needs_gpu": false}``."""
    if path not in _seen:
        with open(path) as f:
            _seen[path] = json.load(f).get("metadata", {}).get("attnlab", {}).get("needs_gpu", True)
    return _seen[path]


def pytest_collection_modifyitems(config, items):
    ok, why = gpu_status()
    if not ok:
        skip = pytest.mark.skip(reason=f"notebook needs a CUDA GPU, and there is none here: {why}")
        for item in items:
            if str(item.path).endswith(".ipynb") and needs_gpu(str(item.path)):
                item.add_marker(skip)
        return
    from attnlab.fused import WGMMA_KERNELS
    for tag, kernels in ((NEEDS_FUSED, (9,)), (NEEDS_KERNEL_10, (10, 11)), (NEEDS_WGMMA, WGMMA_KERNELS)):
        tagged = [item for item in items if tag in _tags(item)]
        why = _fused_unsupported(kernels) if tagged else None
        for item in tagged if why else ():
            item.add_marker(pytest.mark.skip(reason=f"this GPU cannot run fused kernels "
                                                    f"{'-'.join(map(str, kernels))}: {why}"))
    claims = [item for item in items if H200_CLAIMS in _tags(item)]
    other = _other_gpu() if claims else None
    for item in claims if other else ():
        item.add_marker(pytest.mark.skip(reason=other))


def _tags(item):
    return getattr(getattr(item, "cell", None), "metadata", {}).get("tags", [])


def _other_gpu():
    """Why the H200 claim cells are not checked here (another GPU model), or None on an H200."""
    from attnlab import report
    from attnlab.device import device_info
    written_on = report.load("kernels")["device"]["name"]
    here = device_info()["name"]
    if here == written_on:
        return None
    return (f"the prose states the numbers of an {written_on} run; this GPU is {here}, whose "
            f"numbers are printed in the cells above: the claims are not checked here")
