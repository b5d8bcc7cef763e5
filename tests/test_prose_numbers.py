"""Every number in the prose is printed by a stored output, in a cited results file, or declared
(attnlab.prose; issue 21, item 1). CPU only: reads the committed notebooks and results."""
import copy
import json
from decimal import Decimal

import pytest

from attnlab import prose

PATHS = prose.default_paths()


def _ids(path):
    return prose.display_name(path)


@pytest.mark.parametrize("path", PATHS, ids=[_ids(p) for p in PATHS])
def test_every_prose_number_is_printed_cited_or_declared(path):
    result = prose.check_path(path)
    assert result.checked > 0, f"{_ids(path)}: no checked number found: is the extraction broken?"
    if result.findings:
        pytest.fail("numbers in the prose that no output prints, no cited results file holds and "
                    "no declaration explains (notebook | cell | sentence | number):\n"
                    + "\n".join(map(str, result.findings)), pytrace=False)


def test_series_constants_are_used():
    stale = [f for f in prose.check_series().findings if f.place == "SERIES_CONSTANTS"]
    assert not stale, "\n".join(map(str, stale))


def test_every_declaration_has_a_reason():
    tables = [prose.SERIES_CONSTANTS, prose.README_DECLARED, *prose.KERNEL_HEADER_DECLARED.values()]
    for path in PATHS:
        if path.suffix == ".ipynb":
            tables.append(json.loads(path.read_text())["metadata"].get("attnlab", {})
                          .get("declared_numbers", {}))
    for table in tables:
        for key, reason in table.items():
            assert isinstance(reason, str) and reason.strip(), key
            prose.parse_declaration(key)          # exactly one number


# ------------------------------------------------------------------------------ extraction

def _checked(text):
    return [(n.shown, n.value, n.unit, n.sign) for n in prose.prose_numbers(text) if n.checked]


def test_units_make_integers_checked():
    assert _checked("it ran 1.27× slower, 27 % (or 27%) and 3 µs, 4 us, 5 ms, 2 s, 48 MiB, "
                    "3,992 GB/s, 305 TFLOP/s, 40 registers, 8 blocks, 2 warps, 132 SMs, "
                    "a 256-thread block, a 128-byte load") == [
        ("1.27×", Decimal("1.27"), "×", ""), ("27 %", 27, "%", ""), ("27%", 27, "%", ""),
        ("3 µs", 3, "µs", ""), ("4 us", 4, "µs", ""), ("5 ms", 5, "ms", ""), ("2 s", 2, "s", ""),
        ("48 MiB", 48, "MiB", ""), ("3,992 GB/s", 3992, "GB/s", ""),
        ("305 TFLOP/s", 305, "TFLOP/s", ""), ("40 registers", 40, "register", ""),
        ("8 blocks", 8, "block", ""), ("2 warps", 2, "warp", ""), ("132 SMs", 132, "SM", ""),
        ("256-thread", 256, "thread", ""), ("128-byte", 128, "B", "")]


def test_plain_integers_identifiers_versions_and_dates_are_not_checked():
    assert _checked("kernel 3 of notebook 08, 32 lanes, T=1024, 2^31, sm_90 on an H200 in fp32 "
                    "with float4 and 3xTF32, scikit-cuda 0.5.3, on 2026-12-03, a 3 x 1000 matrix, "
                    "64 × 64 tiles, 2 × T, 7 × n(n+1)/2, kernel 8's time, rows T-1-4x, t3+7") == []


def test_decimals_and_scientific_notation_are_checked():
    assert _checked("Python 3.10, about 0.33, 2.24e-6 and 1e-4") == [
        ("3.10", Decimal("3.10"), "", ""), ("0.33", Decimal("0.33"), "", ""),
        ("2.24e-6", Decimal("2.24e-6"), "", ""), ("1e-4", Decimal("1e-4"), "", "")]


def test_x_after_a_digit_is_a_ratio():
    assert [s for s, *_ in _checked("2x faster, 4.8 x the L2, 1.9× in this run")] == [
        "2x", "4.8 x", "1.9×"]


def test_x_before_its_spread_is_a_ratio_but_not_before_a_product():
    assert [s for s, *_ in _checked("6->7 24.4x (IQR 24.1-24.6x) and 3.1× (range 3.0-3.2×)")][:1] == ["24.4x"]
    assert "3.1×" in [s for s, *_ in _checked("3.1× (range 3.0-3.2×)")]
    assert [s for s, *_ in _checked("2 x (a+b)")] == []


def test_a_range_is_two_numbers_with_the_unit_of_the_second():
    got = _checked("checked 1.1–1.3×, 5–16 µs and 249-442 s; 74–115 has no unit")
    assert [(v, u) for _, v, u, _ in got] == [(Decimal("1.1"), "×"), (Decimal("1.3"), "×"),
                                              (5, "µs"), (16, "µs"), (249, "s"), (442, "s")]
    assert got[0][0] == "1.1 (of 1.1–1.3×)"


def test_signs():
    assert [(v, s) for _, v, _, s in _checked("−5 %, -5 %, +5 % and 5 %")] == [
        (-5, "-"), (-5, "-"), (5, "+"), (5, "")]


def test_code_links_and_html_are_skipped():
    text = ("`1.27x` in code, ``2.5 ms`` too, [a link](https://x.org/v1.5/3.2) <img width=\"1.5\">\n"
            "<!-- 9.9 ms -->\n\n```python\nprint(1.5)\n```\n\n    indented 3.5 ms\n\nbut 4.5 ms")
    assert [s for s, *_ in _checked(text)] == ["4.5 ms"]


def test_latex_checks_only_decimals():
    assert [s for s, *_ in _checked(r"$\sqrt{64/9} \approx 2.7$ and $4 \cdot 12$ MB, $$s = 0.125$$")] \
        == ["2.7", "0.125"]


def test_sentence_is_the_sentence_around_the_number():
    text = "First sentence, 1.5 ms. Second one has 2.5 ms, e.g. here.\n- a list item, 3.5 ms\n| 4.5 | row |"
    got = {n.shown: prose.sentence_at(text, n.start) for n in prose.prose_numbers(text)}
    assert got == {"1.5 ms": "First sentence, 1.5 ms.", "2.5 ms": "Second one has 2.5 ms, e.g. here.",
                   "3.5 ms": "- a list item, 3.5 ms", "4.5": "| 4.5 | row |"}


# ------------------------------------------------------------------------------ matching

def _backed(prose_text, printed):
    number, = [n for n in prose.prose_numbers(prose_text) if n.checked]
    return prose.Evidence(prose.printed_numbers(printed)).backs(number)


@pytest.mark.parametrize("prose_text,printed,expected", [
    ("1.27×", "1.2734x slower", True),             # printed rounded to the prose's decimals
    ("1.27×", "1.265", True),                      # half a unit either way
    ("1.27×", "1.2749", True),
    ("1.27×", "1.2751x", False),
    ("1.27×", "1.37x", False),
    ("1.270×", "1.27", True),                      # trailing zeros in the prose
    ("27 %", "27%", True),
    ("27 %", "27.1%", True),
    ("27 %", "0.27", False),                       # derived numbers are not printed ones
    ("27 %", "1.27x", False),
    ("3,992 GB/s", "3992 GB/s", True),             # separators
    ("3992 GB/s", "3,992 GB/s", True),
    ("2.24e-6", "2.24e-06", True),                 # e-notation
    ("2.24e-6", "2.2e-06", False),
    ("−5 %", "-5%", True),                          # signs
    ("−5 %", "5%", False),
    ("5 % slower", "-5%", True),
    ("20 %", "20 calls", False),                   # units: another word is another unit
    ("20 %", "20 ms", False),
    ("20 %", "| 20 | 30 |", True),                 # a bare table cell
    ("19.9 µs", "median 18.8 us (IQR 18.8-18.9, max 19.9)", True),
    ("20 %", "median 18.8 us (IQR 18.8-18.9, max 19.9)", False),   # 19.9 is in µs
    ("10 µs", "10.08 us", True),
    ("1.3", "scale / launch: 1.87 x, claimed 1.3-4.0: ok", True),
])
def test_backed_at_the_prose_precision(prose_text, printed, expected):
    assert _backed(prose_text, printed) is expected


def test_json_leaves_take_their_unit_from_the_key():
    values = prose.json_numbers({"median_ms": 0.08034, "repeats": 20, "registers": [40],
                                 "flag": True, "name": "NVIDIA H200"})
    assert sorted(values) == [(Decimal("0.08034"), "ms"), (Decimal("20"), prose.WORD),
                              (Decimal("40"), "register")]
    ev = prose.Evidence(values)
    number = lambda text: prose.prose_numbers(text)[0]          # noqa: E731
    assert ev.backs(number("0.0803 ms")) and ev.backs(number("40 registers"))
    assert not ev.backs(number("20 %")) and not ev.backs(number("40 warps"))


def test_declarations():
    assert prose.parse_declaration("1.3×").unit == "×"
    with pytest.raises(ValueError, match="exactly one number"):
        prose.parse_declaration("1.3× or 1.4×")
    unit_free = prose.parse_declaration("1024")
    with_unit = prose.parse_declaration("2 warps")
    n = prose.prose_numbers
    assert prose.declares(unit_free, n("1,024 threads")[0])
    assert prose.declares(with_unit, n("2 warps")[0]) and not prose.declares(with_unit, n("2 ms")[0])
    assert prose.declares(prose.parse_declaration("1.30×"), n("1.3×")[0])


# ------------------------------------------------------------------------------ notebooks

def _notebook(markdown, printed, declared=None, code="print(x)"):
    cells = [{"cell_type": "markdown", "metadata": {}, "source": markdown},
             {"cell_type": "code", "metadata": {}, "source": code, "execution_count": 1,
              "outputs": [{"output_type": "stream", "name": "stdout", "text": printed}]}]
    meta = {"attnlab": {"declared_numbers": declared}} if declared is not None else {}
    return {"cells": cells, "metadata": meta, "nbformat": 4, "nbformat_minor": 5}


def test_a_notebook_finding_names_notebook_cell_sentence_and_number():
    nb = _notebook("It is fast. It ran 1.37× faster than before.", "1.27x faster\n")
    result = prose.check_notebook(nb, "nb.ipynb")
    assert [str(f) for f in result.findings] == [
        'nb.ipynb | cell 0 | "It ran 1.37× faster than before." | 1.37× not printed by any output, '
        'nor in a cited results file, nor declared']
    assert result.checked == 1


def test_declared_numbers_pass_and_unused_ones_are_stale():
    nb = _notebook("It ran 1.37× faster.", "nothing\n",
                   {"1.37×": "derived: 4.11 / 3.0", "9.99 ms": "no longer used", "5": ""})
    problems = [(f.place, f.sentence, f.problem.split(":")[0]) for f in prose.check_notebook(nb, "nb").findings]
    assert problems == [("metadata", "", "metadata[\"attnlab\"][\"declared_numbers\"]['5']"),
                        ("metadata", "declared_numbers['9.99 ms']", "stale"),
                        ("metadata", "declared_numbers['5']", "stale")]


def test_cited_results_files_back_numbers(tmp_path):
    name = next(p.name for p in sorted(prose.RESULTS.glob("*.json")))
    value, tag = next((v, t) for v, t in prose.results_numbers(prose.RESULTS / name) if t != prose.WORD)
    text = f"{value} {tag}" if tag else str(value)
    if "." not in text and not tag:
        pytest.skip("no decimal leaf to cite")
    assert prose.check_notebook(_notebook(f"It took {text}.", "0\n"), "nb").findings
    cited = _notebook(f"It took {text} (`results/h200/{name}`).", "0\n")
    assert not prose.check_notebook(cited, "nb").findings
    missing = _notebook("See `results/h200/no_such_file.json`.", "0\n")
    assert [f.problem for f in prose.check_notebook(missing, "nb").findings] == [
        "cites a results file that does not exist"]


def test_results_files_of_experiments_can_be_cited():
    """results/h200/experiments/*.json back numbers too (notebook 18 cites k18_clock.json)."""
    text = "Alone, it took 52.62 ms at a median 1825 MHz."
    assert prose.check_notebook(_notebook(text, "0\n"), "nb").findings
    cited = _notebook(text + " (`results/h200/experiments/k18_clock.json`)", "0\n")
    assert not prose.check_notebook(cited, "nb").findings


def test_printed_kernel_headers_are_prose(tmp_path):
    (tmp_path / "softmax_backward3.cu").write_text(
        "// softmax_backward3.cu: a test kernel whose header makes claims.\n"
        "// It runs at 2.5 TB/s, measured at 1.1 ms here.\n\n__global__ void k() {}\n")
    printed = "```cuda\n// softmax_backward3.cu: a test kernel whose header makes claims.\n// It runs at 2.5 TB/s\n```"
    nb = _notebook("Kernel 3 takes 1.1 ms.", "", code="KERNEL = 3")
    nb["cells"].append({"cell_type": "code", "metadata": {}, "source": "lessons.show_kernel(KERNEL)",
                        "execution_count": 2, "outputs": [{"output_type": "execute_result", "metadata": {},
                                                           "execution_count": 2,
                                                           "data": {"text/markdown": printed}}]})
    nb["cells"][1]["outputs"][0]["text"] = "time: 1.1 ms\n"
    found = prose.check_notebook(nb, "nb", kernel_dir=tmp_path).findings
    assert [(f.place, f.problem.split(" not")[0]) for f in found] == [
        ("kernels/softmax_backward3.cu header (printed by cell 2) line 2", "2.5 TB/s")]
    # the printed source backs nothing: without the timing cell, 1.1 ms is unbacked in both
    nb["cells"][1]["outputs"][0]["text"] = "\n"
    assert len(prose.check_notebook(nb, "nb", kernel_dir=tmp_path).findings) == 3


# ------------------------------------------------------------------------------ planted

NOTEBOOK_00 = prose.ROOT / "notebooks" / "00_gpu_and_pycuda_basics.ipynb"


def _findings(nb):
    return {str(f) for f in prose.check_notebook(nb, "00").findings}


def test_a_planted_wrong_number_is_reported_with_its_sentence():
    nb = json.loads(NOTEBOOK_00.read_text())
    before = _findings(nb)
    planted = copy.deepcopy(nb)
    i, cell = next((i, c) for i, c in enumerate(planted["cells"])
                   if c["cell_type"] == "markdown" and "1.39×" in "".join(c["source"]))
    cell["source"] = "".join(cell["source"]).replace("1.39×", "1.49×", 1)
    added = _findings(planted) - before
    assert len(added) == 1, added
    finding, = added
    assert finding.startswith(f"00 | cell {i} | \"") and "1.49× in this run" in finding
    assert finding.endswith("| 1.49× not printed by any output, nor in a cited results file, nor declared")
    assert before - _findings(planted) == set()


def test_a_planted_stale_declaration_is_reported():
    nb = json.loads(NOTEBOOK_00.read_text())
    before = _findings(nb)
    nb["metadata"].setdefault("attnlab", {}).setdefault("declared_numbers", {})["7.77 ms"] = "planted"
    assert _findings(nb) - before == {"00 | metadata | \"declared_numbers['7.77 ms']\" | stale: no "
                                      "checked number of the prose uses it"}


def test_cli(tmp_path, capsys):
    bad = tmp_path / "bad.ipynb"
    bad.write_text(json.dumps(_notebook("It ran 1.37× faster.", "1.27x\n")))
    good = tmp_path / "good.ipynb"
    good.write_text(json.dumps(_notebook("It ran 1.27× faster.", "1.27x\n")))
    assert prose.main([str(bad)]) == 1
    out = capsys.readouterr().out.splitlines()
    assert out[0].endswith('| cell 0 | "It ran 1.37× faster." | 1.37× not printed by any output, '
                           'nor in a cited results file, nor declared')
    assert prose.main([str(good)]) == 0
    assert capsys.readouterr().out.startswith("prose numbers: all 1 checked numbers in 1 file(s)")
    assert prose.main([str(tmp_path / "missing.ipynb")]) == 2
    assert "no such file" in capsys.readouterr().err
    (tmp_path / "notes.txt").write_text("1.5 ms")
    assert prose.main([str(tmp_path / "notes.txt")]) == 2
    assert "expected a notebook (.ipynb) or a Markdown file (.md)" in capsys.readouterr().err
