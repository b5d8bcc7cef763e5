"""Shared pytest set-up: GPU tests are skipped, with the reason, where there is no GPU; the
fixtures ``forbid_gpu`` (any GPU use fails the test) and ``no_gpu`` (this process sees none)."""
import pytest

from attnlab import device, gemm, kernels
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


@pytest.fixture
def forbid_gpu(monkeypatch):
    """Any CUDA use fails the test: proof that an error came from the argument checks."""
    def touched(*a, **k):
        raise AssertionError("the GPU was used before the arguments were checked")
    monkeypatch.setattr(device, "gpu_status", touched)
    monkeypatch.setattr(gemm, "_handle", None)
    monkeypatch.setattr(gemm, "_cublas", None)
    monkeypatch.setattr(kernels, "load", touched)


@pytest.fixture
def no_gpu(monkeypatch):
    """This process sees no GPU (on a GPU host too)."""
    monkeypatch.setattr(device, "gpu_status", lambda: (False, "no GPU in this test"))
    monkeypatch.setattr(gemm, "_handle", None)
    monkeypatch.setattr(gemm, "_cublas", None)


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
