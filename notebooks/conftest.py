"""nbval runs the notebooks as tests. Without a GPU the notebooks that need one are skipped, with
the reason; a notebook whose metadata says ``"attnlab": {"needs_gpu": false}`` (notebook 01, the
CPU reference) runs everywhere, CI included. On a GPU
that cannot run the fused kernels (notebook 12: too little shared memory per block, or no TF32
tensor cores), the cells tagged ``attnlab-needs-fused`` (those that run the fused kernels or use
their results) are skipped, with the reason."""
import json

import pytest

from attnlab.device import gpu_status

NEEDS_FUSED = "attnlab-needs-fused"


def _fused_unsupported():
    """Why this GPU cannot run both fused variants (fp32 and TF32), or None."""
    from attnlab import fused
    reasons = [r for r in (fused.gpu_unsupported_reason(tf32) for tf32 in (False, True)) if r]
    return "; ".join(reasons) or None


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
    tagged = [item for item in items
              if NEEDS_FUSED in getattr(getattr(item, "cell", None), "metadata", {}).get("tags", [])]
    why = _fused_unsupported() if tagged else None
    for item in tagged if why else ():
        item.add_marker(pytest.mark.skip(reason=f"this GPU cannot run the fused kernels: {why}"))
