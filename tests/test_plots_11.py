"""Notebook 11's picture: each stage of the backward beside its floor (CPU, Agg backend)."""
import pytest

matplotlib = pytest.importorskip("matplotlib", reason="the plots need matplotlib (the [notebooks] extra)")
matplotlib.use("Agg")

from attnlab import bench, plots  # noqa: E402
from attnlab.errors import InputError  # noqa: E402

STAGES = ("permute", "GEMM", "softmax")
FP32 = {"permute": {"median_ms": 0.02, "q1_ms": 0.019, "q3_ms": 0.022},
        "GEMM": bench.Timing.of([0.18, 0.19, 0.2, 0.21, 0.22]),
        "softmax": {"median_ms": 0.08, "q1_ms": 0.079, "q3_ms": 0.081}}
TF32 = {"permute": {"median_ms": 0.02, "q1_ms": 0.019, "q3_ms": 0.022},
        "GEMM": {"median_ms": 0.06, "q1_ms": 0.055, "q3_ms": 0.065},
        "softmax": {"median_ms": 0.08, "q1_ms": 0.079, "q3_ms": 0.081}}
FLOORS = {"floor, fp32": {"permute": 0.01, "GEMM": 0.1, "softmax": 0.05},
          "floor, TF32": {"permute": 0.01, "GEMM": 0.05, "softmax": 0.05}}


def _figure():
    return plots.plot_stages_against_floors({"fp32 GEMMs": FP32, "TF32 GEMMs": TF32}, FLOORS,
                                            "where the time goes")


def test_bars_are_the_medians_with_iqr_in_stage_order():
    ax = _figure().axes[0]
    bars = [p for p in ax.patches if isinstance(p, matplotlib.patches.Rectangle)]
    assert [b.get_width() for b in bars] == pytest.approx([0.02, 0.2, 0.08, 0.02, 0.06, 0.08])
    assert [t.get_text() for t in ax.get_yticklabels()] == list(STAGES)
    # the first stage is on top: the y axis is inverted
    assert ax.yaxis_inverted()
    errors = [c for c in ax.containers if isinstance(c, matplotlib.container.ErrorbarContainer)]
    assert len(errors) == 2
    segments = errors[1].lines[2][0].get_segments()
    assert [tuple(s[:, 0]) for s in segments] == [pytest.approx((0.019, 0.022)),
                                                  pytest.approx((0.055, 0.065)),
                                                  pytest.approx((0.079, 0.081))]


def test_each_bar_carries_its_ratio_to_its_own_floor():
    ax = _figure().axes[0]
    texts = [t.get_text().strip() for t in ax.texts]
    assert "0.2 ms, 2.00x floor" in texts            # fp32 GEMM against its fp32 floor
    assert "0.06 ms, 1.20x floor" in texts           # TF32 GEMM against the TF32 floor
    assert "0.08 ms, 1.60x floor" in texts
    marks = [line for line in ax.lines if line.get_label().startswith("floor")]
    assert [list(m.get_xdata()) for m in marks] == [[0.01, 0.1, 0.05], [0.01, 0.05, 0.05]]


def test_labels_title_and_units():
    ax = _figure().axes[0]
    assert ax.get_title() == "where the time goes"
    assert "time (ms" in ax.get_xlabel() and ax.get_ylabel()
    labels = ax.get_legend_handles_labels()[1]
    assert sorted(labels) == ["TF32 GEMMs: median, IQR", "floor, TF32", "floor, fp32",
                              "fp32 GEMMs: median, IQR"]


def test_mismatched_inputs_are_refused():
    with pytest.raises(InputError, match="one floor per measured series"):
        plots.plot_stages_against_floors({"fp32": FP32}, FLOORS, "t")
    with pytest.raises(InputError, match="stages"):
        plots.plot_stages_against_floors({"fp32": FP32, "tf32": {"GEMM": TF32["GEMM"]}}, FLOORS, "t")
