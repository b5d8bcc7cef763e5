"""The README's H200 tables are exactly what `python -m attnlab report --readme` prints from
the committed results/h200/ files: no figure in the README differs from them."""
from attnlab import report

README = report.RESULTS.parent / "README.md"


def test_the_readme_holds_the_kernel_table_printed_from_results():
    assert report.readme_tables() in README.read_text()


def test_the_readme_holds_the_fused_table_printed_from_results():
    assert report.fused_table() in README.read_text()


def test_the_table_is_not_empty():
    table = report.readme_tables()
    assert all(f"\n| {k} |" in table for k in range(1, 9)) and "| 9 (fused) |" in table
