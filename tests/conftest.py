"""Shared pytest set-up: GPU tests are skipped, with the reason, where there is no GPU."""
import pytest

from attnlab.device import gpu_status
from attnlab.problem import DEFAULT, SMALL  # noqa: F401 (tests import them from here)


@pytest.fixture(scope="session")
def small():
    """Inputs and CPU reference at SMALL (cached on disk by make_problem)."""
    from attnlab import make_problem
    return make_problem(**SMALL)


@pytest.fixture(scope="session")
def default():
    """Inputs and CPU reference at DEFAULT."""
    from attnlab import make_problem
    return make_problem(**DEFAULT)


def pytest_addoption(parser):
    parser.addoption("--series", action="store_true",
                     help="also run the 13 notebooks in one kernel and check GPU memory "
                          "(tests/test_series_memory.py, about 4 minutes on an H200)")


def pytest_collection_modifyitems(config, items):
    if not config.getoption("--series"):
        skip_series = pytest.mark.skip(reason="runs the whole notebook series in one kernel "
                                              "(about 4 minutes on an H200): pass --series")
        for item in items:
            if "series" in item.keywords:
                item.add_marker(skip_series)
    ok, why = gpu_status()
    if ok:
        return
    skip = pytest.mark.skip(reason=f"needs a CUDA GPU, and there is none here: {why}")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)
