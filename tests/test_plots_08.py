"""Notebook 08's picture: the instruction model stacked beside the measured time (CPU, Agg)."""
import pytest

matplotlib = pytest.importorskip("matplotlib", reason="the plots need matplotlib (the [notebooks] extra)")
matplotlib.use("Agg")

from attnlab import bench, plots  # noqa: E402
from attnlab.errors import InputError  # noqa: E402

STACKS = {64: {"plain tiles": 6e8, "diagonal tiles": 3e8, "tile steps": 1e8},
          128: {"plain tiles": 5e8, "diagonal tiles": 6e8, "tile steps": 5e7}}
ISSUE = 1e12      # warp instructions per second: 1e9 instructions take 1 ms


def test_bars_are_the_parts_at_the_issue_ceiling_stacked():
    fig = plots.plot_instruction_model(STACKS, ISSUE, title="k6")
    ax = fig.axes[0]
    bars = ax.patches
    assert len(bars) == 6                       # 3 parts x 2 block sizes
    heights = [b.get_height() for b in bars]
    assert heights == pytest.approx([0.6, 0.5, 0.3, 0.6, 0.1, 0.05])
    # each part sits on the ones before it
    assert bars[2].get_y() == pytest.approx(0.6) and bars[4].get_y() == pytest.approx(0.9)
    assert [t.get_text() for t in ax.get_xticklabels()] == ["64", "128"]
    assert "1.00 G" in [t.get_text() for t in ax.texts]
    assert ax.get_title() == "k6" and "ms" in ax.get_ylabel()


def test_measured_iqr_and_lines_are_drawn():
    t = bench.Timing.of([1.0, 1.1, 1.2, 1.3, 1.4])
    fig = plots.plot_instruction_model(
        STACKS, ISSUE, measured={128: t, 64: {"median_ms": 2.0, "q1_ms": 1.9, "q3_ms": 2.2}},
        lines={"loads floor": {64: 2.3, 128: 2.4}, "ncu": {128: 1.2}})
    ax = fig.axes[0]
    labels = ax.get_legend_handles_labels()[1]
    assert "measured (median, IQR)" in labels and "loads floor" in labels and "ncu" in labels
    assert "model: tile steps" in labels
    measured = [c for c in ax.containers if isinstance(c, matplotlib.container.ErrorbarContainer)]
    x, y = measured[0].lines[0].get_data()
    assert list(y) == pytest.approx([2.0, 1.2])          # in the stacks' order: 64, 128
    ncu_line = [l for l in ax.get_lines() if l.get_label() == "ncu"][0]
    assert list(ncu_line.get_xdata()) == [1] and list(ncu_line.get_ydata()) == [1.2]


def test_bad_input_is_refused_with_its_value():
    with pytest.raises(InputError, match="issue_per_s"):
        plots.plot_instruction_model(STACKS, 0)
    with pytest.raises(InputError, match="same parts"):
        plots.plot_instruction_model({64: {"a": 1}, 128: {"b": 1}}, ISSUE)
