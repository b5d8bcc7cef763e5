"""How the benchmarks time, without a GPU (the kernels and buffers replaced by fakes):
benchmarks/fused_ladder.py's back-to-back mode (what speed() writes for each method: the keys
notebook 20 reads; the refusal of a --sustained that is not a positive number of seconds), and
benchmarks/fused_vs_torch.py's fused methods (each precision's backwards timed interleaved in
one bench.interleaved call, after a forward in that precision; the rows in FUSED_METHODS'
order)."""
import importlib
import sys
from pathlib import Path

import pytest

from attnlab import bench, counts

BENCHMARKS = Path(__file__).resolve().parent.parent / "benchmarks"


def load(name):
    """benchmarks/<name>.py as a module."""
    sys.path.insert(0, str(BENCHMARKS))
    try:
        return importlib.import_module(name)
    finally:
        sys.path.remove(str(BENCHMARKS))


def test_speed_with_sustained_writes_what_notebook_20_reads(monkeypatch, fake_fused_buffers):
    ladder = load("fused_ladder")
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
def test_sustained_must_be_a_positive_number_of_seconds(capsys, seconds):
    ladder = load("fused_ladder")
    with pytest.raises(SystemExit):
        ladder.main(["--sustained", seconds])
    assert f"--sustained must be a number of seconds > 0, got {float(seconds)}" in capsys.readouterr().err


def test_each_precision_s_backwards_are_interleaved_after_its_forward(monkeypatch, fake_fused_buffers):
    fvt = load("fused_vs_torch")
    log = []
    f = fvt.fused
    monkeypatch.setattr(fvt, "free_memory", lambda: (10, 20))
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
