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
    assert not any(label.startswith("target") for label in labels)


def test_plot_against_roof_draws_a_target_apart_from_the_floors():
    """A target (issue #23's 60 % of the wgmma rate) is not a floor the hardware sets: it is
    labelled and coloured as a target."""
    t = bench.Timing.of([1.0, 1.1, 1.2, 1.3, 1.4])
    fig = plots.plot_against_roof({"kernel 23": t}, {"wgmma rate": 0.5}, targets_ms={"60% of that rate": 0.8})
    ax = fig.axes[0]
    labels = ax.get_legend_handles_labels()[1]
    assert "floor: wgmma rate (0.5 ms)" in labels and "target: 60% of that rate (0.8 ms)" in labels
    colors = {line.get_label(): line.get_color() for line in ax.get_lines()}
    assert colors["target: 60% of that rate (0.8 ms)"] != colors["floor: wgmma rate (0.5 ms)"]


def test_log_time_axes_label_ticks_as_plain_numbers():
    """0.1 and 12 on a log time axis, not 10^-1 or 1.2 x 10^1 (a student's complaint)."""
    fig = plots.plot_against_roof({"a": bench.Timing.of([0.1, 0.11]), "b": bench.Timing.of([13.0, 14.0])},
                                  {"floor": 0.05})
    fig.canvas.draw()
    ax = fig.axes[0]
    labels = [t.get_text() for t in ax.get_xticklabels() + ax.get_xticklabels(minor=True) if t.get_text()]
    assert "0.1" in labels and "10" in labels
    assert not any("10^" in s or "times" in s or "e-0" in s for s in labels), labels
