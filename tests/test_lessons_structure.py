"""The shape of every kernel notebook (03-27), issue #21: a main path a student reads in about
20 minutes (at most 2,000 words of markdown before the ``## Evidence`` heading), one idea per
markdown cell (none over 300 words), and at least two figures drawn by attnlab.plots in the
stored H200 outputs; and one verdict rule in the whole series (no ad-hoc percentage rule)."""
import re
from pathlib import Path

import pytest

nbformat = pytest.importorskip("nbformat", reason="reading the notebooks needs nbformat "
                                                  "(the [notebooks] extra)")

NOTEBOOKS = Path(__file__).resolve().parent.parent / "notebooks"
KERNEL_NOTEBOOKS = sorted(p for p in NOTEBOOKS.glob("[0-9][0-9]_*.ipynb") if 3 <= int(p.name[:2]) <= 27)
SERIES = sorted(NOTEBOOKS.glob("[0-9][0-9]_*.ipynb")) + sorted((NOTEBOOKS / "exercises").glob("*.ipynb"))
MAIN_PATH_WORDS = 2000
CELL_WORDS = 300
EVIDENCE = "## Evidence"


def words(text):
    """Words a reader reads: prose without code blocks, LaTeX or markup."""
    text = re.sub(r"```.*?```", " ", text, flags=re.S)
    text = re.sub(r"\$\$.*?\$\$", " ", text, flags=re.S)
    return len(re.findall(r"[A-Za-z0-9][\w'’.,×%/-]*", text))


def markdown(path):
    return [c.source for c in nbformat.read(path, as_version=4).cells if c.cell_type == "markdown"]


def test_the_kernel_notebooks_are_03_to_the_last():
    assert [p.name[:2] for p in KERNEL_NOTEBOOKS] == [f"{n:02d}" for n in range(3, 28)]


@pytest.mark.parametrize("path", KERNEL_NOTEBOOKS, ids=[p.name for p in KERNEL_NOTEBOOKS])
def test_main_path_is_short_and_ends_at_the_evidence_part(path):
    md = markdown(path)
    heads = [i for i, s in enumerate(md) if s.splitlines()[0].strip() == EVIDENCE]
    assert len(heads) == 1, f"{path.name}: {len(heads)} markdown cells start with {EVIDENCE!r}"
    main = sum(words(s) for s in md[:heads[0]])
    assert main <= MAIN_PATH_WORDS, f"{path.name}: the main path has {main} words"


@pytest.mark.parametrize("path", KERNEL_NOTEBOOKS, ids=[p.name for p in KERNEL_NOTEBOOKS])
def test_one_idea_per_markdown_cell(path):
    long = [(i, words(s), s.splitlines()[0][:60]) for i, s in enumerate(markdown(path))
            if words(s) > CELL_WORDS]
    assert not long, f"{path.name}: markdown cells over {CELL_WORDS} words: {long}"


@pytest.mark.parametrize("path", KERNEL_NOTEBOOKS, ids=[p.name for p in KERNEL_NOTEBOOKS])
def test_the_series_ladder_and_an_evidence_figure_from_attnlab_plots(path):
    """At least two figures drawn in the stored outputs: the series-wide ladder
    (plots.plot_ladder) and at least one more of the notebook's own, both by attnlab.plots."""
    nb = nbformat.read(path, as_version=4)
    drawn = [c.source for c in nb.cells if c.cell_type == "code" and "plots." in c.source
             and any("image/png" in o.get("data", {}) for o in c.get("outputs", []))]
    ladder = [s for s in drawn if "plot_ladder(" in s]
    assert ladder and len(drawn) >= 2, f"{path.name}: {len(ladder)} ladder and {len(drawn)} figures"


AD_HOC_RULE = re.compile(r"\b\d+ ?% (rule|threshold)|under \d+ ?%: no verdict|gain of (at least|over) \d+ ?%",
                         re.I)


@pytest.mark.parametrize("path", SERIES, ids=[p.name for p in SERIES])
def test_one_verdict_rule(path):
    """Notebook 00's rule (IQRs that overlap: not resolved) is the series' only one."""
    nb = nbformat.read(path, as_version=4)
    found = [(i, m.group(0)) for i, c in enumerate(nb.cells) for m in AD_HOC_RULE.finditer(c.source)]
    assert not found, f"{path.name}: another verdict rule: {found}"
