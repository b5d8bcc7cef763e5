"""nbval runs the notebooks as tests; without a GPU they are skipped, with the reason."""
import pytest

from attnlab.device import gpu_status


def pytest_collection_modifyitems(config, items):
    ok, why = gpu_status()
    if ok:
        return
    skip = pytest.mark.skip(reason=f"notebook needs a CUDA GPU, and there is none here: {why}")
    for item in items:
        if str(item.path).endswith(".ipynb"):
            item.add_marker(skip)
