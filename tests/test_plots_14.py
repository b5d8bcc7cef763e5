"""Notebook 14's count: where each kernel issues its query-tile copies (CPU, Agg backend)."""
import pytest

matplotlib = pytest.importorskip("matplotlib", reason="the plots need matplotlib (the [notebooks] extra)")
matplotlib.use("Agg")

from attnlab import plots  # noqa: E402
from attnlab.errors import InputError  # noqa: E402

PHASES = [("S, dP", 0.0, 0.3), ("softmax, dS", 0.3, 0.55), ("dV, dK, dQ", 0.55, 0.85),
          ("atomics", 0.85, 1.0)]
ROWS = [{"label": "kernel 13", "phases": PHASES, "note": "4,096 cp.async",
         "copies": [("Q^T, dO^T", 0.0, 0.55), ("next Q, dO", 0.55, 1.0)]},
        {"label": "kernel 14", "phases": PHASES, "note": "2 cp.async.bulk",
         "copies": [("Q^T, dO^T", 0.0, 0.55), ("next Q, dO", 0.0, 1.0)]}]


def test_each_row_draws_its_phases_and_one_arrow_per_copy_from_issue_to_need():
    ax = plots.plot_copy_schedule(ROWS, "copies").axes[0]
    bars = [p for p in ax.patches if isinstance(p, matplotlib.patches.Rectangle)]
    # 4 phases and the dotted "next step" box per row
    assert len(bars) == 2 * (len(PHASES) + 1)
    assert [b.get_width() for b in bars[:4]] == pytest.approx([0.3, 0.25, 0.3, 0.15])
    arrows = [a for a in ax.texts if isinstance(a, matplotlib.text.Annotation)]
    assert [(a.xyann[0], a.xy[0]) for a in arrows] == [(0.0, 0.55), (0.55, 1.0), (0.0, 0.55), (0.0, 1.0)]
    texts = [t.get_text() for t in ax.texts]
    assert "4,096 cp.async" in texts and "2 cp.async.bulk" in texts
    assert [t.get_text() for t in ax.get_yticklabels()] == ["kernel 13", "kernel 14"]
    assert ax.yaxis_inverted()


def test_a_copy_needed_before_it_is_issued_is_refused():
    bad = [{**ROWS[0], "copies": [("next Q, dO", 0.8, 0.5)]}]
    with pytest.raises(InputError, match="'next Q, dO' is needed at 0.5, not after it is issued at 0.8"):
        plots.plot_copy_schedule(bad, "copies")


def test_another_span_of_work_says_what_its_axis_is_and_what_follows():
    """Notebook 22 draws one turn at the tensor cores with the same function: its own axis
    label and what follows the span, instead of the copy schedule's."""
    turn = [{"label": "kernel 21", "phases": [("dK", 0.0, 0.4), ("idle", 0.4, 0.5), ("S^T", 0.5, 1.0)],
             "note": "1 wait_group 0", "copies": [("s free", 0.4, 0.5)]}]
    ax = plots.plot_copy_schedule(turn, "a turn", xlabel="one turn (schematic)", after="other turn").axes[0]
    assert ax.get_xlabel() == "one turn (schematic)"
    texts = [t.get_text() for t in ax.texts]
    assert "other turn" in texts and "next step" not in texts
    default = plots.plot_copy_schedule(ROWS, "copies").axes[0]
    assert default.get_xlabel().startswith("one tile step") and "next step" in [t.get_text() for t in default.texts]
