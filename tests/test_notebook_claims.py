"""The claim cells: every cell that checks a notebook's prose against its run's numbers
(a ``CLAIMS = {...}`` dict of stated ranges) carries the ``attnlab-h200-claims`` tag, so that
nbval skips it on a GPU other than the H200 the prose was written from (notebooks/conftest.py)
and the series still passes there; and it is tagged nbval-ignore-output (its numbers vary)."""
from pathlib import Path

import pytest

nbformat = pytest.importorskip("nbformat", reason="reading the notebooks needs nbformat "
                                                  "(the [notebooks] extra)")

NOTEBOOKS = Path(__file__).resolve().parent.parent / "notebooks"
TAG = "attnlab-h200-claims"
PATHS = sorted(NOTEBOOKS.glob("[0-9][0-9]_*.ipynb"))


def claim_cells(path):
    nb = nbformat.read(path, as_version=4)
    return [(i, c) for i, c in enumerate(nb.cells) if c.cell_type == "code" and "CLAIMS = {" in c.source]


@pytest.mark.parametrize("path", PATHS, ids=[p.name for p in PATHS])
def test_claim_cells_are_tagged(path):
    for i, cell in claim_cells(path):
        tags = cell.metadata.get("tags", [])
        assert TAG in tags and "nbval-ignore-output" in tags, f"{path.name} cell {i}: {tags}"


def test_the_kernel_notebooks_have_claim_cells():
    names = {p.name[:2] for p in PATHS if claim_cells(p)}
    assert {"00", "03", "04", "05", "06", "07", "08", "09", "10", "11"} <= names
