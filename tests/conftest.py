"""Shared pytest set-up: GPU tests are skipped, with the reason, where there is no GPU."""
import pytest

from attnlab.device import gpu_status


def pytest_collection_modifyitems(config, items):
    ok, why = gpu_status()
    if ok:
        return
    skip = pytest.mark.skip(reason=f"needs a CUDA GPU, and there is none here: {why}")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)
