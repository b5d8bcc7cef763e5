"""Notebook 10's picture: the knock-outs, each variant's median and IQR beside kernel 8 and
kernel 7, read by notebook 00's rule (CPU, Agg)."""
import pytest

matplotlib = pytest.importorskip("matplotlib", reason="the plots need matplotlib (the [notebooks] extra)")
matplotlib.use("Agg")

from attnlab import bench, plots  # noqa: E402
from attnlab.errors import InputError  # noqa: E402


def row(median, q1, q3):
    return {"median_ms": median, "q1_ms": q1, "q3_ms": q3}


# the shape of notebook 10's stored knock-out output (ms): kernel 7, kernel 8, three variants
TIMES = {"kernel 7": row(0.0812, 0.0810, 0.0818),
         "kernel 8": row(0.0830, 0.0823, 0.0835),
         "8, one row per block": row(0.0782, 0.0769, 0.0783),
         "8, shortest first": row(0.0837, 0.0833, 0.0840),
         "8, plain loads and stores": row(0.0854, 0.0851, 0.0857)}


def _points(ax):
    bars = [c for c in ax.containers if isinstance(c, matplotlib.container.ErrorbarContainer)]
    return [(b.lines[0].get_data()[0][0], b.lines[0].get_data()[1][0]) for b in bars]


def test_one_point_per_row_with_its_iqr_in_order():
    fig = plots.plot_knockouts(TIMES, "kernel 8", title="knock-outs")
    ax = fig.axes[0]
    assert [t.get_text() for t in ax.get_yticklabels()] == list(TIMES)
    points = _points(ax)
    assert [p[0] for p in points] == pytest.approx([r["median_ms"] for r in TIMES.values()])
    assert [p[1] for p in points] == [0, 1, 2, 3, 4]
    # the IQR bar of "8, plain loads and stores" spans its quartiles
    bar = [c for c in ax.containers if isinstance(c, matplotlib.container.ErrorbarContainer)][4]
    segment = bar.lines[2][0].get_segments()[0]
    assert [segment[0][0], segment[1][0]] == pytest.approx([0.0851, 0.0857])
    assert ax.get_title() == "knock-outs"
    assert "ms" in ax.get_xlabel() and "IQR" in ax.get_xlabel()


def test_verdicts_follow_notebook_00s_rule():
    ax = plots.plot_knockouts(TIMES, "kernel 8").axes[0]
    texts = [t.get_text() for t in ax.texts]
    assert texts[1].endswith("the reference")
    assert "1.02x faster (range 1.01-1.03x)" in texts[0]               # kernel 7, IQRs apart
    assert "1.06x faster (range 1.05-1.09x)" in texts[2]               # one row per block
    assert "not resolved" in texts[3] and "faster" not in texts[3]     # shortest first
    assert "1.03x slower (range 1.02-1.04x)" in texts[4]               # plain loads and stores
    labels = ax.get_legend_handles_labels()[1]
    assert labels[0] == "kernel 8: IQR"
    assert {"kernel 8", "not resolved (IQRs overlap)", "resolved: faster than kernel 8",
            "resolved: slower than kernel 8"} <= set(labels)


def test_the_same_verdicts_as_bench_for_timings():
    a = bench.Timing.of([1.00, 1.01, 1.02, 1.03, 1.04])
    b = bench.Timing.of([1.10, 1.11, 1.12, 1.13, 1.14])
    c = bench.Timing.of([1.02, 1.03, 1.04, 1.05, 1.06])
    ax = plots.plot_knockouts({"a": a, "b": b, "c": c}, "a").axes[0]
    texts = [t.get_text() for t in ax.texts]
    said = bench.describe_speedup(a, b, ("a", "b"))          # "b is 1.10x slower than a (range ...)"
    assert said.startswith("b is 1.10x slower than a (range 1.08-1.12x)")
    assert "1.10x slower (range 1.08-1.12x)" in texts[1]
    assert bench.overlap(a, c) and "not resolved" in texts[2]


def test_bad_input_is_refused_with_its_value():
    with pytest.raises(InputError, match="kernel 9"):
        plots.plot_knockouts(TIMES, "kernel 9")
    with pytest.raises(InputError, match="at least one variant"):
        plots.plot_knockouts({"kernel 8": TIMES["kernel 8"]}, "kernel 8")
    with pytest.raises(InputError, match="not within its IQR"):
        plots.plot_knockouts({"kernel 8": TIMES["kernel 8"], "bad": row(0.09, 0.08, 0.085)},
                             "kernel 8")
    with pytest.raises(ValueError):                  # InputError is a ValueError
        plots.plot_knockouts(TIMES, "kernel 9")
