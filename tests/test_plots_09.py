"""Notebook 09's picture: how the counts of kernels 6 and 7 grow with T (CPU, Agg)."""
import pytest

matplotlib = pytest.importorskip("matplotlib", reason="the plots need matplotlib (the [notebooks] extra)")
matplotlib.use("Agg")

from attnlab import bench, ceilings, counts, lessons, plots, report  # noqa: E402
from attnlab.errors import InputError  # noqa: E402


def test_growth_per_doubling_is_in_the_legend():
    fig = plots.plot_growth({"square": {256: 1.0, 512: 4.0, 1024: 16.0},
                             "cube": {256: 1.0, 512: 8.0, 1024: 64.0}}, title="growth")
    ax = fig.axes[0]
    labels = ax.get_legend_handles_labels()[1]
    assert labels == ["square: 4.0× per doubling", "cube: 8.0× per doubling"]
    assert ax.get_title() == "growth" and ax.get_xlabel() == "sequence length T"
    assert ax.get_xscale() == "log" and ax.get_yscale() == "log" and "ms" in ax.get_ylabel()
    assert [t.get_text() for t in ax.get_xticklabels()] == ["256", "512", "1024"]


def test_points_draw_median_with_iqr():
    t = bench.Timing.of([1.0, 1.1, 1.2, 1.3, 1.4])
    fig = plots.plot_growth({"line": {256: 1.0, 1024: 16.0}}, title="",
                            points={"measured": {1024: t, 256: {"median_ms": 2.0, "q1_ms": 1.9,
                                                                "q3_ms": 2.2}}})
    ax = fig.axes[0]
    bars = [c for c in ax.containers if isinstance(c, matplotlib.container.ErrorbarContainer)]
    ys = sorted(float(c.lines[0].get_ydata()[0]) for c in bars)
    assert ys == pytest.approx([1.2, 2.0])
    assert ax.get_legend_handles_labels()[1].count("measured") == 1


def test_bad_input_is_refused_with_its_value():
    with pytest.raises(InputError, match="at least one"):
        plots.plot_growth({}, title="")
    with pytest.raises(InputError, match="two points"):
        plots.plot_growth({"one": {256: 1.0}}, title="")
    with pytest.raises(InputError, match="positive"):
        plots.plot_growth({"zero": {256: 0.0, 512: 1.0}}, title="")


def test_the_notebook_cell_runs_on_the_committed_results():
    """The count picture of notebook 09 as its cell draws it, with the committed H200 ceilings
    and results in place of the GPU's: kernel 7's DRAM floor grows 4× per doubling of T, kernel
    6's loads floor towards 8×."""
    ceil = ceilings.load(report.results_dir() / "ceilings.json")
    k6, k7 = lessons.committed(6), lessons.committed(7)
    c = counts.count(7, 4, 1024, 12, 256)
    seqs = (128, 256, 512, 1024, 2048, 4096)
    f6 = {s: counts.floors(counts.count(6, c.B, s, c.NH, k6["block_size"]), ceil) for s in seqs}
    f7 = {s: counts.floors(counts.count(7, c.B, s, c.NH, k7["block_size"]), ceil) for s in seqs}
    lines = {"kernel 6: loads floor": {s: f["loads"] for s, f in f6.items()},
             "kernel 6: multiply-add floor": {s: f["multiply_adds"] for s, f in f6.items()},
             "kernels 6 and 7: DRAM floor": {s: f["dram"] for s, f in f7.items()},
             "kernel 7: multiply-add floor": {s: f["multiply_adds"] for s, f in f7.items()}}
    fig = plots.plot_growth(lines, title="t", points={"committed": {1024: k6["softmax"]},
                                                      "committed 7": {1024: k7["softmax"]}})
    labels = fig.axes[0].get_legend_handles_labels()[1]
    growth = {l.split(":")[0] + ":" + l.split(":")[1]: float(l.split(": ")[-1].split("×")[0])
              for l in labels if "per doubling" in l}
    assert growth["kernels 6 and 7: DRAM floor"] == pytest.approx(4.0, abs=0.05)
    assert 7.0 < growth["kernel 6: loads floor"] <= 8.0
