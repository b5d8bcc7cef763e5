"""Shared pytest set-up: GPU tests are skipped, with the reason, where there is no GPU; the
fixtures ``forbid_gpu`` (any GPU use fails the test), ``no_gpu`` (this process sees none) and
``fake_fused_buffers`` (FusedBuffers that hold nothing, for tests that replace the kernels too);
under pytest-xdist, a test that measures the GPU's free memory runs while no other worker runs
a GPU test."""
import contextlib
import fcntl
import os
import sys
import tempfile

import numpy as np
import pytest

from attnlab import bench, device, gemm, kernels
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
    monkeypatch.setattr(bench, "context", touched)
    monkeypatch.setattr(gemm, "_handle", None)
    monkeypatch.setattr(gemm, "_cublas", None)
    monkeypatch.setattr(kernels, "load", touched)


class FakeFusedBuffers:
    """fused.FusedBuffers without a GPU, for tests that replace the kernels too: holds nothing,
    gives zeros."""
    def __init__(self, *shape):
        pass

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False

    def set(self, name, value):
        pass

    def get(self, name):
        return np.zeros(4, np.float32)


@pytest.fixture
def fake_fused_buffers(monkeypatch):
    """fused.FusedBuffers replaced by FakeFusedBuffers."""
    from attnlab import fused
    monkeypatch.setattr(fused, "FusedBuffers", FakeFusedBuffers)


@pytest.fixture
def no_gpu(monkeypatch):
    """This process sees no GPU (on a GPU host too)."""
    monkeypatch.setattr(device, "gpu_status", lambda: (False, "no GPU in this test"))
    monkeypatch.setattr(gemm, "_handle", None)
    monkeypatch.setattr(gemm, "_cublas", None)


def pytest_addoption(parser):
    parser.addoption("--series", action="store_true",
                     help="also run the 15 notebooks in one kernel and check GPU memory "
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


@contextlib.contextmanager
def _flock(path, mode):
    with open(path, "a") as f:
        fcntl.flock(f, mode)
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


@pytest.fixture(autouse=True)
def close_figures():
    """The figures a test draws are closed after it: pyplot keeps every figure open until it is
    closed, and more than 20 in one process draw a RuntimeWarning."""
    yield
    plt = sys.modules.get("matplotlib.pyplot")
    if plt is not None:
        plt.close("all")


@pytest.fixture(autouse=True)
def gpu_memory_lock(request):
    """GPU tests hold a shared lock on the GPU's memory, tests marked ``gpu_memory`` (they
    compare free memory before and after) an exclusive one, across the pytest-xdist workers
    of this machine: while one measures, no other worker allocates or frees. A turnstile lock
    lets a waiting measurement in before later shared holders (no starvation)."""
    if "gpu" not in request.keywords and "gpu_memory" not in request.keywords:
        yield
        return
    base = os.path.join(tempfile.gettempdir(), f"attnlab-gpu-memory-{os.getuid()}")
    exclusive = "gpu_memory" in request.keywords
    with contextlib.ExitStack() as stack:
        with _flock(base + ".turnstile", fcntl.LOCK_EX):
            stack.enter_context(_flock(base + ".lock", fcntl.LOCK_EX if exclusive else fcntl.LOCK_SH))
        yield
