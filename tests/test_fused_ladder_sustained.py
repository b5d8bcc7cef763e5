"""benchmarks/fused_ladder.py's back-to-back mode without a GPU: what speed() writes for each
method (the keys notebook 20 reads) from what bench.interleaved and bench.sustained return, and
the refusal of a --sustained that is not a positive number of seconds."""
import importlib
import sys
from pathlib import Path

import pytest

from attnlab import bench, counts

BENCHMARKS = Path(__file__).resolve().parent.parent / "benchmarks"


@pytest.fixture
def ladder():
    sys.path.insert(0, str(BENCHMARKS))
    try:
        yield importlib.import_module("fused_ladder")
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


def test_speed_with_sustained_writes_what_notebook_20_reads(ladder, monkeypatch):
    monkeypatch.setattr(ladder.fused, "FusedBuffers", FakeBuffers)
    monkeypatch.setattr(ladder.fused, "fused_forward", lambda buf, tf32: None)
    monkeypatch.setattr(ladder.bench, "interleaved",
                        lambda fns, repeats, warmup: {n: bench.Timing.of([1.0, 2.0, 3.0]) for n in fns})
    seen = {}

    def sustained(fns, seconds, rounds, window):
        seen.update(seconds=seconds, rounds=rounds, window=window)
        return {n: bench.Sustained([2.0, 4.0], 20, 1.5, 1800.0, 690.0, 1.0) for n in fns}
    monkeypatch.setattr(ladder.bench, "sustained", sustained)
    methods = [m for m in ladder.METHODS if m[0] in ("k19 tf32", "k20 tf32")]
    rows = ladder.speed(1024, 3, 1e14, methods, seconds=4)
    assert seen == {"seconds": 4, "rounds": 2, "window": 25}     # 50 ms over the slowest median, 2 ms
    s = rows["k20 tf32"]["sustained"]
    assert set(s) == {"median_ms", "q1_ms", "q3_ms", "tflops", "calls", "joules_per_call", "sm_mhz",
                      "power_w", "power_capped", "seconds_per_block"}
    assert (s["median_ms"], s["q1_ms"], s["q3_ms"], s["calls"], s["seconds_per_block"]) == (3.0, 2.5, 3.5, 20, 4)
    assert (s["joules_per_call"], s["sm_mhz"], s["power_w"], s["power_capped"]) == (1.5, 1800.0, 690.0, 1.0)
    assert s["tflops"] == pytest.approx(counts.fused_flops(4, 1024, 12, 64) / 3e-3 / 1e12)
    assert "sustained" not in ladder.speed(1024, 3, 1e14, methods)["k19 tf32"]    # without --sustained


@pytest.mark.parametrize("seconds", ["0", "-1", "nan"])
def test_sustained_must_be_a_positive_number_of_seconds(ladder, capsys, seconds):
    with pytest.raises(SystemExit):
        ladder.main(["--sustained", seconds])
    assert f"--sustained must be a number of seconds > 0, got {float(seconds)}" in capsys.readouterr().err
