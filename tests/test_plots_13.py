"""Notebook 13's pictures draw what they are given (CPU, Agg backend)."""
import pytest

matplotlib = pytest.importorskip("matplotlib", reason="the plots need matplotlib (the [notebooks] extra)")
matplotlib.use("Agg")

from attnlab import plots, report  # noqa: E402


def test_fused_ladder_rows_are_the_committed_medians_and_instruction_roofs():
    ladder, wg = report.load("fused_ladder"), report.load("wgmma_rate")
    rows = plots.fused_ladder_rows(16384)
    assert [r["label"] for r in rows] == [
        "kernel 9 fp32", "kernel 9 TF32", "kernel 10 3xTF32", "kernel 10 TF32",
        "kernel 11 3xTF32", "kernel 11 TF32", "kernel 12 TF32", "kernel 13 TF32"]
    k13 = ladder["speed"]["16384"]["k13 tf32"]
    assert (rows[-1]["median_ms"], rows[-1]["q1_ms"], rows[-1]["q3_ms"]) == (
        k13["median_ms"], k13["q1_ms"], k13["q3_ms"])
    # kernel 13 on wgmma's measured rate, kernel 9 on mma.sync's; kernel 9 fp32: CUDA cores
    assert rows[-1]["roof"] == pytest.approx(k13["tflops"] / wg["wgmma_tflops"]["shared memory"]["median"])
    assert rows[1]["roof"] == pytest.approx(ladder["speed"]["16384"]["k9 tf32"]["fraction_of_mma_roof"])
    assert rows[0]["roof"] is None
    assert [r["label"] for r in plots.fused_ladder_rows(1024, kernels=(9,))] == ["kernel 9 fp32",
                                                                                  "kernel 9 TF32"]
    with pytest.raises(ValueError, match="T=2048"):
        plots.fused_ladder_rows(2048)


def _row(label, rate, roofs):
    return {"label": label, "rate": rate, "rate_lo": rate - 1, "rate_hi": rate + 2, "roofs": roofs}


def test_plot_rate_against_roofs_draws_bars_iqr_and_one_legend_entry_per_roof():
    rows = [_row("k9", 80, {"mma.sync": 218, "shared": 126}),
            _row("k12", 117, {"wgmma": 442, "shared": 300})]
    fig = plots.plot_rate_against_roofs(rows, "roofs")
    ax = fig.axes[0]
    assert [p.get_height() for p in ax.patches] == [80, 117]
    labels = ax.get_legend_handles_labels()[1]
    assert sorted(labels) == sorted(["measured (TFLOP/s; bars: IQR)", "mma.sync", "shared", "wgmma"])
    marks = sorted(seg[0][1] for c in ax.collections for seg in c.get_segments()
                   if seg[0][1] == seg[1][1] and seg[1][0] - seg[0][0] == pytest.approx(0.84))
    assert marks == [126, 218, 300, 442]
    assert ax.get_ylabel() == "TFLOP/s" and ax.get_title() == "roofs"
    assert [t.get_text() for t in ax.get_xticklabels()] == ["k9", "k12"]
    with pytest.raises(ValueError, match="k9"):
        plots.plot_rate_against_roofs([dict(rows[0], rate_lo=90)], "bad")


def test_plot_waterfall_floats_each_step_from_the_running_total():
    fig = plots.plot_waterfall(("kernel 12", 35.0), [("no stores", -5.0), ("added", 1.0)],
                               ("kernel 13", 31.0), "waterfall")
    ax = fig.axes[0]
    bars = [(p.get_y(), p.get_height()) for p in ax.patches]
    assert bars == [(0, 35.0), (35.0, -5.0), (30.0, 1.0), (0, 31.0)]
    assert ax.patches[1].get_facecolor() != ax.patches[2].get_facecolor()
    assert [t.get_text() for t in ax.get_xticklabels()] == ["kernel 12", "no stores", "added", "kernel 13"]
    assert "ms" in ax.get_ylabel() and ax.get_title() == "waterfall"
    with pytest.raises(ValueError, match="remainder"):
        plots.plot_waterfall(("a", 10.0), [("b", -1.0)], ("c", 8.0), "bad")
