"""The README's generated tables are exactly what the code prints: the H200 tables are what
`python -m attnlab report --readme` prints from the committed results/h200/ files (no figure in
the README differs from them), and the table of which GPU runs which kernel is
attnlab.support's, from archs.LIMITS and fused.unsupported_reason."""
from attnlab import report, support

README = report.RESULTS.parent / "README.md"


def test_the_readme_holds_the_kernel_table_printed_from_results():
    assert report.readme_tables() in README.read_text()


def test_the_readme_holds_the_fused_table_printed_from_results():
    assert report.fused_table() in README.read_text()


def test_the_readme_holds_the_ladder_table_printed_from_results():
    assert report.ladder_table() in README.read_text()


def test_the_readme_holds_the_table_of_which_gpu_runs_which_kernel():
    assert support.readme_table() in README.read_text()


def test_the_table_is_not_empty():
    table = report.readme_tables()
    assert all(f"\n| {k} |" in table for k in range(1, 9)) and "| 9 (fused) |" in table
