"""Every number in the series' prose is printed by a stored output, in a cited results file, or
declared with its reason (issue 21, item 1). CPU only; reads the .ipynb files as JSON.

    python -m attnlab.prose [PATH ...]

PATH: notebooks (.ipynb) or Markdown files (.md); by default every notebook of the series
(notebooks/NN_*.ipynb), the exercises (notebooks/exercises/*.ipynb) and README.md. Each number
that is neither backed nor declared is printed as
``notebook | cell N | "the sentence" | 1.27× not printed ...``; exit status 1 if there is
any, else 0 and a one-line summary.

WHICH NUMBERS ARE CHECKED. In every markdown cell (and printed kernel header, and README):
- every number with a unit right after it (one space, a no-break or thin space, or for word
  units a hyphen, may sit between): × or an x after a digit (not "3 x 1000", "3xTF32"), %,
  ns µs us ms s seconds minutes hours, B KB KiB MB MiB GB GiB TB bytes (and "-byte"),
  B/s-rates (GB/s, TB/s ...), FLOP, GFLOP, TFLOP, FLOPs, FLOP/s, GFLOP/s, TFLOP/s, TFLOPS,
  MHz GHz, and the counts registers, regs, warps, blocks, threads, cycles, instructions, SMs
  (singular too: "256-thread block");
- every number written with a decimal point or in scientific notation (1.27, 2.24e-6);
- a range "1.1–1.3×" or "5–16 µs" is two numbers, the first taking the second's unit.
Not checked: plain integers without a unit (kernel 3, notebook 08, list items, "32 lanes",
T=1024, 2^31); numbers inside identifiers (sm_90, H200, fp32, float4, 3xTF32); version
strings (0.5.3) and dates (2026-12-03); expressions that start with a name (T-1-4x, t3+7);
anything in code: fenced blocks, indented blocks
after a blank line, inline `code` spans, link targets and bare URLs, HTML tags and comments.
Inside LaTeX ($...$, $$...$$), a derivation, only numbers with a decimal point or an
exponent are checked.

WHAT BACKS A NUMBER. A number printed by a stored output of any code cell of the same notebook
(stream text, text/plain, text/markdown, text/html, an error's value), or a numeric leaf of
a results file (results/h200/*.json) / a number in a results text file (.txt) that the
notebook's markdown cites by that path. Outputs that print a kernel's source are prose, not
evidence, and back nothing. The value must match at the precision the prose gives: prose
1.27 is backed by a printed 1.27, 1.2734 or 1.265 (|printed - 1.27| <= 0.005, half a unit of
the prose's last digit), prose 27 % by 27% or 27.1% but not by 0.27 or 1.27x, prose 1.270 by
1.27. Thousands separators (3,992) and e-notation (2.24e-6 = 2.24e-06) are normalised. A
prose sign (−5 %, -5 %, +5 %) must be the printed sign; a number without one matches either
("5 % slower" for a printed -5%). Units: a prose number with a unit is backed only by a
printed number with the same unit (x = ×, us = µs, bytes = B) or with none. A printed
number's unit is the one printed right after it; one followed by another word ("20 calls")
has none that matches; a bare one takes the unit of the last number before it on its line
("median 18.8 us (IQR 18.8-18.9, max 19.9)": all µs), so table cells, whose units sit in the
header, stay bare. A JSON leaf's unit comes from its key (median_ms: ms, registers,
tflops: TFLOP/s, ...); a leaf whose key names no unit backs only prose numbers without one.

DECLARED NUMBERS. Constants of the problem and numbers the text derives are declared once per
notebook, with the reason, in its metadata: ``metadata["attnlab"]["declared_numbers"] =
{"1024": "T of the default shape", "1.3×": "derived: 14.3 / 11.0 from the table above"}``.
A key is one number as the prose writes it, with or without its unit; without a unit it
declares the value in any unit. Facts used everywhere are in ``SERIES_CONSTANTS``; the
numbers of the kernel headers that notebooks print in ``KERNEL_HEADER_DECLARED`` (keyed by
file); README's in ``README_DECLARED``. A declaration no checked number uses is reported as
stale (``SERIES_CONSTANTS`` only when the whole default set is checked).

KERNEL HEADERS. A code cell that names a kernel file (``lessons.show_kernel(N)`` or
``show_kernel(NAME)`` with ``NAME = N`` in the notebook: kernels/softmax_backwardN.cu;
``kernel_source("name")``: kernels/name.cu) and whose stored output holds a line of that
file's header prints the header: the file's leading comment block, as it is now, is then
checked like markdown, against the notebook's outputs (printed sources excluded), the
results files the header cites, ``SERIES_CONSTANTS`` and ``KERNEL_HEADER_DECLARED[file]``.

README (any .md): checked against every committed results file (results/h200/*.json, *.txt)
and the tables ``python -m attnlab report --readme`` prints from them, plus
``README_DECLARED``.
"""
import bisect
import json
import re
import sys
from dataclasses import dataclass, field
from decimal import Decimal, InvalidOperation
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "results" / "h200"

# Facts of the problem and of the hardware, used everywhere: number as written -> why.
SERIES_CONSTANTS = {
    "32 threads": "a warp: 32 threads (CUDA's warp size)",
    "1024 threads": "the most threads a block may have (CUDA's limit)",
    "2048 threads": "the most threads resident on one SM of the H200 (sm_90; printed in notebook 00)",
    "16 bytes": "a float4: 4 floats of 4 bytes (one vector load or store)",
    "128 bytes": "32 consecutive floats: what a warp's coalesced load of one float per lane reads",
    "32 bytes": "a sector, the unit in which L1/L2 and DRAM move data",
    "60 MiB": "the H200's L2 cache (device_info(), printed in notebook 00)",
    "228 KB": "shared memory per SM on sm_90, the H100/H200 (CUDA programming guide)",
    "201 MB": "one B·NH·T·T float tensor at the default shape: 4·12·1024²·4 bytes",
}

# Numbers of the kernel headers that notebooks print: kernel file -> {number: why}.
_FOUR_WARPS = "the launch (attnlab/fused.py): 4 warps of 32 threads per block"
_TWO_WARPGROUPS = "the launch (attnlab/fused.py): 2 warpgroups of 4 warps of 32 threads"
_SMEM_197 = "derived: 197,120 bytes of dynamic shared memory (printed by notebook 13) in kB"
KERNEL_HEADER_DECLARED = {
    "flash_attention10.cu": {
        "64 registers": "derived: a warp's dQ accumulator, 32 rows x 64 head dims, over 32 lanes",
        "16 registers": "derived: a warp's P^T (or dS^T) slice, 32 keys x 16 queries, over 32 lanes",
        "128 threads": _FOUR_WARPS},
    "flash_attention11.cu": {"128 threads": _FOUR_WARPS},
    "flash_attention12.cu": {"256 threads": _TWO_WARPGROUPS, "197 KB": _SMEM_197},
    "flash_attention13.cu": {
        "256 threads": _TWO_WARPGROUPS, "197 KB": _SMEM_197,
        "64 KiB": "derived: one 64-query tile in 4 layouts, 4 x 64 x 64 floats of 4 bytes",
        "32 registers": "kernel 12's header: the next tile's Q and dO rows, 32 per thread"},
    "flash_attention14.cu": {
        "256 threads": _TWO_WARPGROUPS,
        "2.8 ms": "docs/fused-speed.md: the structure knock-outs of 2026-12-04 (copies of a variant of kernel 13)",
        "32 KiB": "derived: half a query tile, 2 x 64 x 64 floats of 4 bytes"},
    "flash_attention15.cu": {
        "256 bytes": "derived: one query's row of dQ, 64 floats of 4 bytes"},
    "flash_attention20.cu": {
        "256 threads": _TWO_WARPGROUPS,
        "132 blocks": "one block per SM (kernel 19's launch bounds), on the H200's 132 SMs (device_info(), notebook 00)",
        "1.45 GB": "Nsight Compute, dram__bytes_read.sum of kernel 20's flash_backward, one call at B=4 T=16384 "
                   "(results/h200/experiments/k20_dram.txt)",
        "36.54": "Nsight Compute, dram__bytes_read.sum of kernel 19's flash_backward in GB, one call at B=4 T=16384 "
                 "(results/h200/experiments/k20_dram.txt)"},
    "flash_attention22.cu": {
        "13.0": "the CUDA toolkit that compiled the counted SASS (nvcc 13.0; results/h200/experiments/k22_sass.txt)",
        "6.3 %": "derived: 102,251 of 1,623,219 stall samples on kernel 21's WARPGROUP.DEPBAR.LE gsb0, 0x0 at T=16384 "
                 "(results/h200/experiments/k21_ncu_details.txt; docs/fused-speed.md, fourteenth session)",
        "3.5 %": "the prediction's upper end, committed before the run in results/h200/experiments/k21_nodrain_script.py.txt"},
    "flash_attention21.cu": {
        "13.0": "the CUDA toolkit that compiled the counted SASS (nvcc 13.0; results/h200/experiments/k20_energy_sass.txt)",
        "2.3 %": "derived: 1 - kernel 21 / kernel 20 at T=4096 in single calls, 1 - 1.136 / 1.163 ms (results/h200/fused_ladder_20.json)",
        "1.005 times": "derived: kernel 20 / kernel 21, flash_backward alone in bursts at T=16384, 15.6417 / 15.5612 ms "
                       "(results/h200/experiments/k20_energy.json)"},
    "flash_attention19.cu": {
        "256 threads": _TWO_WARPGROUPS,
        "32 KiB": "derived: kernel 17's K^T tile, 128 keys x 64 floats of 4 bytes"},
    "flash_attention18.cu": {
        "128 KiB": "derived: one query tile in 8 layouts, 8 x 64 x 64 floats of 4 bytes",
        "96 KiB": "derived: K, V and K^T, hi and lo, 6 x 64 x 64 floats of 4 bytes",
        "32 KiB": "derived: Q hi and lo, 2 x 64 x 64 floats of 4 bytes",
        "128 threads": "derived: one warpgroup, 4 warps of 32 threads"},
}

# README's numbers that are not in the results files: number -> why.
README_DECLARED = {
    "3.10": "pyproject.toml's requires-python: Python 3.10 or newer",
    "3.12": "Python 3.12's virtual environments ship without setuptools (pkg_resources)",
    "7.5": "the oldest compute capability the kernels are built for (sm_75, tests/test_archs.py)",
    "16 GB": "a card size given as an example (tools/small_gpu_check.sh leaves 15 GiB free)",
}

# ------------------------------------------------------------------------------------ numbers

_SPACE = "[ \u00a0\u202f\u2009]"
_SYMBOL_UNITS = (r"%|[kKMGTP]?i?B/s|[kMGTP]?FLOP/s|[GT]FLOPS|[kMGTP]?FLOPs?|[kKMGT]i?B|B"
                 r"|[MG]Hz|ns|µs|μs|us|ms|s")
_WORD_UNITS = (r"registers?|regs|warps?|blocks?|threads?|cycles?|instructions?|SMs?|bytes?"
               r"|seconds?|minutes?|hours?")
UNIT = re.compile(
    rf"(?P<ratio>{_SPACE}?[×x])(?![0-9A-Za-z_])(?!\s*(?:[0-9]|\((?!IQR\b|range\b)|[A-Za-z](?![A-Za-z])))"
    rf"|(?P<symbol>{_SPACE}?(?:{_SYMBOL_UNITS}))(?![0-9A-Za-z_/·=*])"
    rf"|(?P<word>(?:{_SPACE}|-)?(?:{_WORD_UNITS}))(?![0-9A-Za-z_])")
NUMBER = re.compile(
    r"(?<![0-9A-Za-z_.\\])(?:(?<![0-9A-Za-z_)\]])(?P<sign>[-−+]))?"
    r"(?P<digits>[0-9]{1,3}(?:,[0-9]{3})+(?![0-9])|[0-9]+)(?P<frac>\.[0-9]+)?"
    r"(?P<exp>[eE][-−+]?[0-9]+)?")
RANGE_DASH = re.compile(rf"{_SPACE}?[–—-]{_SPACE}?")
_CANONICAL = {"x": "×", "us": "µs", "μs": "µs", "regs": "register", "bytes": "B", "byte": "B",
              "SMs": "SM", "sec": "s", "seconds": "s", "second": "s"}


def canonical_unit(text):
    """The unit as compared: × for x, µs for us, B for bytes, singular for the other words."""
    unit = text.strip(" \u00a0\u202f\u2009-")
    if unit in _CANONICAL:
        return _CANONICAL[unit]
    if re.fullmatch(_WORD_UNITS, unit) and unit.endswith("s"):
        return unit[:-1]
    return unit


def to_decimal(digits, frac="", exp="", sign=""):
    text = (("-" if sign in ("-", "−") else "") + digits.replace(",", "") + (frac or "")
            + (exp or "").replace("−", "-"))
    return Decimal(text)


@dataclass
class Number:
    """One number of the prose: as written (``shown``), its value, unit and sign."""
    start: int
    end: int
    shown: str
    value: Decimal           # signed
    unit: str                # canonical, "" for none
    sign: str                # "-", "+" or "" (as written)
    decimal: bool            # written with a point or an exponent
    latex: bool = False

    @property
    def checked(self):
        return self.decimal if self.latex else bool(self.unit) or self.decimal


# regions that hold no prose numbers: (pattern, flags, the group to blank out)
_CODE_REGIONS = [
    (r"^[ \t]*(```|~~~).*?^[ \t]*\1[^\n]*$", re.M | re.S, 0),   # fenced code
    (r"(?:\A|\n)[ \t]*\n((?:(?: {4}|\t)[^\n]*(?:\n|\Z))+)", 0, 1),  # indented code after a blank line
    (r"<!--.*?-->", re.S, 0),
    (r"(`+)[^`]+?\1", 0, 0),                                    # inline code spans
    (r"\]\([^)\s]*\)", 0, 0),                                    # link targets
    (r"https?://\S+", 0, 0),
    (r"</?[A-Za-z][^>\n]*>", 0, 0),                              # HTML tags
    (r"(?<![0-9.])[0-9]+(?:\.[0-9]+){2,}(?![0-9])", 0, 0),      # versions 0.5.3
    (r"(?<![0-9])[0-9]{4}-[0-9]{2}-[0-9]{2}(?![0-9])", 0, 0),   # dates
    (r"(?<![A-Za-z0-9_.])[A-Za-z_]\w*(?:[-+*/^][A-Za-z_]\w*)*[-+*/^][0-9][\w.]*(?:[-+*/^][\w.]+)*",
     0, 0),                                                     # expressions: T-1-4x, t3+7
]
_CODE_REGIONS = [(re.compile(p, f), g) for p, f, g in _CODE_REGIONS]
_LATEX = re.compile(r"\$\$.+?\$\$|(?<![\\$])\$[^$\n]+?\$", re.S)


def _mask(text):
    """The text with code, URLs, tags, versions and dates blanked out (same length), and the
    LaTeX spans."""
    chars = list(text)
    for pattern, group in _CODE_REGIONS:
        for m in pattern.finditer(text):
            for i in range(*m.span(group)):
                if chars[i] != "\n":
                    chars[i] = " "
    masked = "".join(chars)
    return masked, [m.span() for m in _LATEX.finditer(masked)]


def prose_numbers(text):
    """Every number of a piece of prose (Markdown or comment text), checked or not, in order."""
    masked, latex = _mask(text)
    found = []
    for m in NUMBER.finditer(masked):
        end = m.end()
        unit_m = UNIT.match(masked, end)
        unit = ""
        if unit_m:
            unit, end = canonical_unit(unit_m.group()), unit_m.end()
        elif end < len(masked) and (masked[end].isalpha() or masked[end] == "_"):
            continue                                        # 3xTF32, 2D, 1st: an identifier
        if end < len(masked) - 1 and masked[end] == "." and masked[end + 1].isdigit():
            continue
        try:
            value = to_decimal(m["digits"], m["frac"], m["exp"], m["sign"] or "")
        except InvalidOperation:
            continue
        in_latex = any(lo <= m.start() < hi for lo, hi in latex)
        sign = {"−": "-"}.get(m["sign"], m["sign"] or "")
        found.append(Number(m.start(), end, text[m.start():end], value, unit, sign,
                            bool(m["frac"] or m["exp"]), in_latex))
    for a, b in zip(found, found[1:]):                     # 1.1–1.3×, 5–16 µs
        if not a.unit and b.unit and RANGE_DASH.fullmatch(masked[a.end:b.start]):
            a.unit = b.unit
            a.shown = f"{a.shown} (of {text[a.start:b.end]})"
    return found


WORD = "word"   # the tag of a printed number followed by a word that is not a unit: "20 calls"
_WORD_AFTER = re.compile(rf"{_SPACE}?[A-Za-z]")


def printed_numbers(text):
    """Every number printed in an output's text: (value, tag), the tag the unit printed after
    it (canonical), WORD for another word ("20 calls", "3 x 1000"), or else the unit of the
    last number before it on its line ("median 18.8 us (IQR 18.8-18.9, max 19.9)": all µs),
    "" if none."""
    values = []
    for line in text.splitlines():
        last = ""
        for m in NUMBER.finditer(line):
            try:
                value = to_decimal(m["digits"], m["frac"], m["exp"], m["sign"] or "")
            except InvalidOperation:
                continue
            unit = UNIT.match(line, m.end())
            if unit:
                tag = last = canonical_unit(unit.group())
            else:
                tag = WORD if _WORD_AFTER.match(line, m.end()) else last
            values.append((value, tag))
    return values


# the unit of a JSON leaf, from its key; a leaf whose key names none backs only unitless prose
_JSON_UNITS = [(re.compile(p, re.I), unit) for p, unit in (
    (r"(^|_)ms$", "ms"), (r"(^|_)us$", "µs"), (r"(^|_)s$|seconds", "s"), (r"tflops", "TFLOP/s"),
    (r"bytes", "B"), (r"registers", "register"), (r"(^|_)blocks", "block"), (r"warps", "warp"),
    (r"instructions", "instruction"), (r"threads", "thread"), (r"cycles", "cycle"),
    (r"^sms$", "SM"), (r"pct", "%"), (r"mhz", "MHz"))]


def json_numbers(data, key=""):
    """The numeric leaves of a JSON document, as (value, tag) like printed_numbers: the tag is
    the unit its key names (median_ms: ms, registers: register ...), else WORD."""
    if isinstance(data, bool) or data is None or isinstance(data, str):
        return []
    if isinstance(data, (int, float)):
        if data != data or abs(data) == float("inf"):
            return []
        tag = next((unit for pattern, unit in _JSON_UNITS if pattern.search(str(key))), WORD)
        return [(Decimal(repr(data)), tag)]
    pairs = data.items() if isinstance(data, dict) else ((key, item) for item in data)
    return [v for k, item in pairs for v in json_numbers(item, k)]


class Evidence:
    """The printed numbers a prose number may match, sorted by magnitude for quick look-up."""

    def __init__(self, values=()):
        self._rows = []
        self.add(values)

    def add(self, values):
        self._rows = sorted(self._rows + [(abs(v), v < 0, tag) for v, tag in values])
        self._abs = [a for a, _, _ in self._rows]
        return self

    def backs(self, number):
        """True when a printed number equals ``number`` at the precision the prose gives, with
        the prose's sign if it has one, and the prose's unit or none printed after it."""
        tolerance = Decimal(5).scaleb(number.value.as_tuple().exponent - 1)
        target = abs(number.value)
        lo = bisect.bisect_left(self._abs, target - tolerance)
        hi = bisect.bisect_right(self._abs, target + tolerance)
        return any((not number.sign or negative == (number.sign == "-"))
                   and (not number.unit or tag in ("", number.unit))
                   for _, negative, tag in self._rows[lo:hi])


def parse_declaration(key):
    """The one number of a declaration key such as "1.3×" or "1024"."""
    numbers = prose_numbers(key)
    if len(numbers) != 1:
        raise ValueError(f"declared number {key!r}: expected exactly one number (with or "
                         f"without its unit), found {len(numbers)}")
    return numbers[0]


def declares(declared, number):
    return (declared.value == number.value if declared.sign else abs(declared.value) == abs(number.value)) \
        and (not declared.unit or declared.unit == number.unit)


# ------------------------------------------------------------------------------------ sentences

_BOUNDARY = re.compile(r"\n[ \t]*\n|\n(?=[ \t]*(?:[-*+] |[0-9]+\. |\||#))"
                       r"|(?<=[.!?])[)\"”*]*\s+(?=[A-Z*_(\[`\"“])")


def sentence_at(text, pos):
    """The sentence (or list item, or table row) of ``text`` around position ``pos``."""
    start, end = 0, len(text)
    for m in _BOUNDARY.finditer(text):
        if m.end() <= pos:
            start = m.end()
        elif m.start() >= pos:
            end = m.start()
            break
    return " ".join(text[start:end].split())


# ------------------------------------------------------------------------------------ findings

@dataclass
class Finding:
    document: str
    place: str
    sentence: str
    problem: str

    def __str__(self):
        return f'{self.document} | {self.place} | "{self.sentence}" | {self.problem}'


@dataclass
class Result:
    findings: list = field(default_factory=list)
    checked: int = 0


class Declarations:
    """Declared numbers, which of them the prose uses, and where they were declared."""

    def __init__(self, table, where):
        self.where = where
        self.items = []
        self.bad = []
        if not isinstance(table, dict):
            self.bad.append(f"{where}: expected a dict {{number: reason}}, got {type(table).__name__}")
            table = {}
        for key, reason in table.items():
            if not isinstance(reason, str) or not reason.strip():
                self.bad.append(f"{where}[{key!r}]: no reason given (a non-empty string is expected)")
            try:
                self.items.append((key, parse_declaration(key)))
            except ValueError as e:
                self.bad.append(f"{where}: {e}")
        self.used = set()

    def match(self, number):
        hit = False
        for key, declared in self.items:
            if declares(declared, number):
                self.used.add(key)
                hit = True
        return hit

    def stale(self):
        return [key for key, _ in self.items if key not in self.used]


def check_text(text, evidence, declarations, document, place, result, line_offset=None):
    """Check every number of one piece of prose; add a Finding per unbacked, undeclared one."""
    for number in prose_numbers(text):
        if not number.checked:
            continue
        result.checked += 1
        declared = [d.match(number) for d in declarations]      # every list marks its use
        if any(declared) or evidence.backs(number):
            continue
        where = place
        if line_offset is not None:
            where = f"{place} line {line_offset + text.count(chr(10), 0, number.start)}".strip()
        result.findings.append(Finding(document, where, sentence_at(text, number.start),
                                       f"{number.shown} not printed by any output, "
                                       f"nor in a cited results file, nor declared"))


_CITED = re.compile(r"results/h200/(?:experiments/)?[A-Za-z0-9_.-]+?\.(?:json|txt)\b")


def results_numbers(path):
    """The numbers of one results file: JSON numeric leaves, or every number of a text file."""
    text = path.read_text()
    return json_numbers(json.loads(text)) if path.suffix == ".json" else printed_numbers(text)


def cited_evidence(texts, document, place, result):
    """The numbers of the results files these texts cite; a missing file is a finding."""
    values = []
    for name in sorted({m.group() for text in texts for m in _CITED.finditer(text)}):
        path = ROOT / name
        if path.is_file():
            values += results_numbers(path)
        else:
            result.findings.append(Finding(document, place, name, "cites a results file that "
                                           "does not exist"))
    return values


# ------------------------------------------------------------------------------------ notebooks

def _text(value):
    return "".join(value) if isinstance(value, list) else str(value)


def output_texts(cell):
    """The texts of a code cell's stored outputs that can print numbers."""
    texts = []
    for out in cell.get("outputs", []):
        if out.get("output_type") == "stream":
            texts.append(_text(out.get("text", "")))
        elif out.get("output_type") == "error":
            texts.append(_text(out.get("evalue", "")))
        for mime in ("text/plain", "text/markdown", "text/html", "text/latex"):
            if mime in out.get("data", {}):
                text = _text(out["data"][mime])
                texts.append(re.sub(r"<[^>]*>", " ", text) if mime == "text/html" else text)
    return texts


def header_lines(source):
    """The leading comment block of a kernel source, without the // markers."""
    lines = []
    for line in source.splitlines():
        if line.startswith("//"):
            lines.append(line[2:].removeprefix(" "))
        elif not line.strip():
            lines.append("")
        else:
            break
    return lines


_SHOW = re.compile(r"show_kernel\(\s*(\w+)\s*\)|kernel_source\(\s*[\"'](\w+)[\"']\s*\)")


def printed_headers(cells, kernel_dir):
    """{code cell index: kernel file} for the cells whose stored output prints that file's header."""
    code = "\n".join(_text(c.get("source", "")) for c in cells if c.get("cell_type") == "code")
    found = {}
    for i, cell in enumerate(cells):
        if cell.get("cell_type") != "code":
            continue
        printed = "\n".join(output_texts(cell))
        for m in _SHOW.finditer(_text(cell.get("source", ""))):
            name = m.group(2)
            if m.group(1):
                arg = m.group(1)
                if not arg.isdigit():
                    assigned = re.search(rf"^{re.escape(arg)}\s*=\s*(\d+)\b", code, re.M)
                    if not assigned:
                        continue
                    arg = assigned.group(1)
                name = f"softmax_backward{arg}"
            path = kernel_dir / f"{name}.cu"
            if not path.is_file():
                continue
            lines = [line.strip() for line in header_lines(path.read_text()) if len(line.strip()) >= 25]
            if any(line in printed for line in lines):
                found[i] = path
    return found


def series_declarations():
    return Declarations(SERIES_CONSTANTS, "attnlab.prose.SERIES_CONSTANTS")


def check_notebook(nb, document, kernel_dir=ROOT / "kernels", series=None):
    """Check one notebook (its JSON as a dict); ``document`` names it in the findings.
    ``series``: the Declarations of SERIES_CONSTANTS that record their use (default: new)."""
    series = series or series_declarations()
    result = Result()
    cells = nb.get("cells", [])
    meta = nb.get("metadata", {}).get("attnlab", {}).get("declared_numbers", {})
    own = Declarations(meta, 'metadata["attnlab"]["declared_numbers"]')
    result.findings += [Finding(document, "metadata", "", bad) for bad in own.bad]
    headers = printed_headers(cells, kernel_dir)
    outputs = [v for i, c in enumerate(cells) if c.get("cell_type") == "code" and i not in headers
               for text in output_texts(c) for v in printed_numbers(text)]
    markdown = [(i, _text(c.get("source", ""))) for i, c in enumerate(cells) if c.get("cell_type") == "markdown"]
    evidence = Evidence(outputs).add(cited_evidence([t for _, t in markdown], document, "markdown", result))
    for i, text in markdown:
        check_text(text, evidence, [own, series], document, f"cell {i}", result)
    for key in own.stale():
        result.findings.append(Finding(document, "metadata", f"declared_numbers[{key!r}]",
                                       "stale: no checked number of the prose uses it"))
    for i, path in sorted(headers.items()):
        header = "\n".join(header_lines(path.read_text()))
        place = f"kernels/{path.name} header (printed by cell {i})"
        decl = Declarations(KERNEL_HEADER_DECLARED.get(path.name, {}),
                            f"attnlab.prose.KERNEL_HEADER_DECLARED[{path.name!r}]")
        result.findings += [Finding(document, place, "", bad) for bad in decl.bad]
        ev = Evidence(outputs).add(cited_evidence([header], document, place, result))
        check_text(header, ev, [decl, series], document, place, result, line_offset=1)
        for key in decl.stale():
            result.findings.append(Finding(document, place, f"KERNEL_HEADER_DECLARED[{path.name!r}][{key!r}]",
                                           "stale: no checked number of the header uses it"))
    return result


def readme_evidence():
    """The numbers of every committed results file and of the README tables made from them."""
    values = []
    for path in sorted(RESULTS.glob("*.json")) + sorted(RESULTS.glob("*.txt")):
        values += results_numbers(path)
    from . import report
    values += printed_numbers(report.readme_tables()) + printed_numbers(report.fused_table())
    return values


def check_markdown(text, document, series=None):
    """Check a Markdown file such as README.md against the committed results."""
    series = series or series_declarations()
    result = Result()
    decl = Declarations(README_DECLARED, "attnlab.prose.README_DECLARED")
    result.findings += [Finding(document, "README_DECLARED", "", bad) for bad in decl.bad]
    check_text(text, Evidence(readme_evidence()), [decl, series], document, "", result, line_offset=1)
    for key in decl.stale():
        result.findings.append(Finding(document, "README_DECLARED", repr(key),
                                       "stale: no checked number of the file uses it"))
    return result


def default_paths():
    nbs = ROOT / "notebooks"
    return sorted(nbs.glob("[0-9][0-9]_*.ipynb")) + sorted((nbs / "exercises").glob("*.ipynb")) \
        + [ROOT / "README.md"]


def display_name(path):
    path = Path(path).resolve()
    return path.relative_to(ROOT).as_posix() if ROOT in path.parents else str(path)


def check_path(path, series=None):
    """Check one notebook or Markdown file, by its path."""
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"path {str(path)!r}: no such file (expected a notebook .ipynb "
                                f"or a Markdown .md file)")
    if path.suffix == ".ipynb":
        return check_notebook(json.loads(path.read_text()), display_name(path), series=series)
    if path.suffix == ".md":
        return check_markdown(path.read_text(), display_name(path), series=series)
    raise ValueError(f"path {str(path)!r}: expected a notebook (.ipynb) or a Markdown file (.md)")


def check_series(paths=None):
    """Check these files (default: the whole series, exercises and README); one Result."""
    whole = paths is None
    total = Result()
    series = series_declarations()
    for path in default_paths() if whole else paths:
        r = check_path(path, series)
        total.findings += r.findings
        total.checked += r.checked
    if whole:
        for key in series.stale():
            total.findings.append(Finding("attnlab/prose.py", "SERIES_CONSTANTS", repr(key),
                                          "stale: no checked number of the series uses it"))
    return total


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    if any(a in ("-h", "--help") for a in argv):
        print(__doc__)
        return 0
    paths = [Path(a) for a in argv] or None
    try:
        result = check_series(paths)
    except (FileNotFoundError, ValueError) as e:
        print(f"attnlab.prose: {e}", file=sys.stderr)
        return 2
    for finding in result.findings:
        print(finding)
    n = len(paths) if paths else len(default_paths())
    if result.findings:
        print(f"prose numbers: {len(result.findings)} problem(s) among {result.checked} checked "
              f"numbers in {n} file(s)")
        return 1
    print(f"prose numbers: all {result.checked} checked numbers in {n} file(s) are printed, "
          f"cited or declared")
    return 0


if __name__ == "__main__":
    sys.exit(main())
