"""Notebook 03's evidence figure: measured time against the line model over block sizes."""
import matplotlib
import pytest

matplotlib.use("Agg")

from attnlab import bench, plots  # noqa: E402


def test_plot_sweep_vs_model_draws_iqr_points_single_calls_and_model_lines():
    tiny = {bs: bench.Timing.of([ms, ms * 1.01, ms * 1.02, ms * 1.03])
            for bs, ms in {32: 28.5, 64: 28.0, 128: 47.0, 256: 69.4}.items()}
    default = {32: 1892.0, 64: 2059.0}                        # one call each: bare numbers
    model = {"TINY": {32: 12.7, 64: 25.0, 128: 46.8, 256: 68.2},
             "default": {32: 814.0, 64: 1626.0, 128: 3240.0}}
    fig = plots.plot_sweep_vs_model({"TINY": tiny, "default": default}, model, "k1 vs model")
    ax = fig.axes[0]
    labels = ax.get_legend_handles_labels()[1]
    assert sorted(labels) == ["TINY: measured (median, IQR)", "TINY: model",
                              "default: measured (one call each)", "default: model"]
    assert ax.get_xscale() == "log" and ax.get_yscale() == "log"
    assert ax.get_title() == "k1 vs model" and "block size" in ax.get_xlabel()
    assert "ms" in ax.get_ylabel()
    lines = {l.get_label(): l for l in ax.get_lines()}
    assert list(lines["default: model"].get_xdata()) == [32, 64, 128]
    assert list(lines["default: model"].get_ydata()) == pytest.approx([814.0, 1626.0, 3240.0])
    assert list(lines["default: measured (one call each)"].get_ydata()) == [1892.0, 2059.0]
    assert [t.get_text() for t in ax.get_xticklabels()] == ["32", "64", "128", "256"]
