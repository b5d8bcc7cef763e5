"""The lessons' shared pictures draw what they are given (CPU, Agg backend)."""
import pytest

matplotlib = pytest.importorskip("matplotlib", reason="the plots need matplotlib (the [notebooks] extra)")
matplotlib.use("Agg")

from attnlab import bench, plots, report  # noqa: E402


def test_ladder_rows_are_the_committed_medians_and_roofs():
    rows = plots.ladder_rows(8)
    k = report.load("kernels")["kernels"]
    assert [r["label"] for r in rows] == [f"kernel {i}" for i in range(1, 9)]
    for i, r in enumerate(rows, 1):
        s = k[str(i)]["softmax"]
        assert (r["median_ms"], r["q1_ms"], r["q3_ms"]) == (s["median_ms"], s["q1_ms"], s["q3_ms"])
        assert r["roof"] == pytest.approx(max(k[str(i)]["floors_ms"].values()) / s["median_ms"])
        assert 0 < r["roof"] < 1.5


def test_plot_ladder_draws_one_bar_per_kernel_on_each_panel():
    rows = plots.ladder_rows(3)
    fig = plots.plot_ladder(rows, "ladder", highlight="kernel 3")
    left, right = fig.axes
    assert len(left.patches) == 3 and len(right.patches) == 3
    assert left.get_xscale() == "log" and "ms" in left.get_xlabel() and "%" in right.get_xlabel()
    assert right.patches[2].get_width() == pytest.approx(100 * rows[2]["roof"])
    assert fig._suptitle.get_text() == "ladder"


def test_plot_against_roof_shows_floors_band_and_iqr():
    t = bench.Timing.of([1.0, 1.1, 1.2, 1.3, 1.4])
    fig = plots.plot_against_roof({"kernel 3": t}, {"loads": 0.5, "dram": 0.1},
                                  predicted_ms=(0.8, 1.6), title="k3")
    ax = fig.axes[0]
    labels = ax.get_legend_handles_labels()[1]
    assert "prediction" in labels and "floor: loads (0.5 ms)" in labels
    assert "floor: dram (0.1 ms)" in labels and ax.get_title() == "k3"
    assert [t.get_text() for t in ax.get_yticklabels()] == ["kernel 3"]
