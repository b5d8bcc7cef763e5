"""benchmarks/fused_vs_torch.py's fused methods without a GPU: each precision's backwards are
timed interleaved in one bench.interleaved call, after a forward in that precision; the
methods this GPU cannot run are listed as unsupported; the rows keep FUSED_METHODS' order."""
import importlib
import sys
from pathlib import Path

import numpy as np
import pytest

from attnlab import bench

BENCHMARKS = Path(__file__).resolve().parent.parent / "benchmarks"


@pytest.fixture
def fvt():
    sys.path.insert(0, str(BENCHMARKS))
    try:
        yield importlib.import_module("fused_vs_torch")
    finally:
        sys.path.remove(str(BENCHMARKS))


class FakeBuffers:
    def __init__(self, *shape):
        pass

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False

    def set(self, name, value):
        pass

    def get(self, name):
        return np.zeros(3)


def test_each_precision_s_backwards_are_interleaved_after_its_forward(fvt, monkeypatch):
    log = []
    f = fvt.fused
    monkeypatch.setattr(fvt, "free_memory", lambda: (10, 20))
    monkeypatch.setattr(f, "FusedBuffers", FakeBuffers)
    monkeypatch.setattr(f, "gpu_unsupported_reason", lambda tf32, k: "not here" if k == 12 else None)
    monkeypatch.setattr(f, "fused_forward", lambda buf, tf32: log.append(("forward", tf32)))
    monkeypatch.setattr(f, "fused_backward", lambda buf, tf32, k: log.append(("backward", tf32, k)))
    monkeypatch.setattr(fvt.bench, "benchmark", lambda fn, repeats, warmup: bench.Timing.of([0.5]))

    def interleaved(fns, repeats, warmup):
        log.append(("interleaved", tuple(fns)))
        for fn in fns.values():
            fn()
        return {n: bench.Timing.of([1.0 + i, 2.0 + i]) for i, n in enumerate(fns)}
    monkeypatch.setattr(fvt.bench, "interleaved", interleaved)
    res, dinps = fvt.run_fused(None, None, 4, 1024, 768, 12, repeats=3)
    runs = {n: m for n, m in fvt.FUSED_METHODS.items() if m[0] != 12}
    assert list(res) == list(fvt.FUSED_METHODS) and set(dinps) == set(runs)
    assert res["fused12 tf32"] == {"status": "unsupported", "reason": "not here"}
    groups = [(i, e[1]) for i, e in enumerate(log) if e[0] == "interleaved"]
    assert [g for _, g in groups] == [tuple(n for n, m in runs.items() if m[1] == tf32) for tf32 in (False, True)]
    for i, names in groups:                        # a forward in the group's precision just before
        assert log[i - 1] == ("forward", runs[names[0]][1])
        assert log[i + 1:i + 1 + len(names)] == [("backward", runs[n][1], runs[n][0]) for n in names]
    for name in runs:
        assert res[name]["status"] == "ok" and res[name]["forward_median_ms"] == 0.5
        assert res[name]["tflops"] == pytest.approx(4 * 12 * 5 * 1024 * 1024 * 64 / res[name]["median_ms"] / 1e9, rel=0.01)
