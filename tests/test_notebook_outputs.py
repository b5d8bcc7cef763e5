"""No output that nbval compares may depend on the GPU model (CPU test, no GPU needed).

``pytest --nbval notebooks/`` re-runs every notebook and compares each code cell's fresh outputs
with the committed ones (which come from a run on an NVIDIA H200). A student on a T4, an RTX 4090
or an A100 must not get failures merely because the GPU differs, so every cell whose compared
output depends on the GPU (its name, SMs, memory, L2, clocks, compute capability, driver/CUDA
versions, any time, bandwidth or FLOP rate, TF32 error magnitudes...) must be tagged
``nbval-ignore-output``.

What nbval 0.11 compares (nbval/plugin.py), mirrored by ``compared_outputs`` below:

- only code cells; nbval numbers them "Cell 0, 1, ..." counting code cells only
  (``IPyNbFile.collect``);
- per cell, the options come from ``metadata.tags`` (``find_metadata_tags``: nbval-ignore-output,
  nbval-check-output, nbval-skip, nbval-raises-exception, raises-exception,
  pytest-validate-ignore-output) and from comment lines such as ``# NBVAL_IGNORE_OUTPUT``
  (``find_comment_markers``), the comments winning; nothing at the notebook level counts
  (``nb.metadata`` is only read for the kernelspec);
- a skipped cell, a cell marked ignore-output, and a cell never run (``execution_count`` None)
  are not compared (``IPyNbCell.runtest``);
- the stored outputs are compared after ``coalesce_streams`` (all stdout text as one string,
  all stderr text as another), key by key (``compare_outputs``): every key of an output except
  ``skip_compare`` = metadata, traceback, prompt_number, output_type, name, execution_count,
  application/vnd.jupyter.widget-view+json, and, unless --nbdime, image/png and image/jpeg
  (``IPyNbFile.__init__``); the mime types under ``data`` are flattened into keys. So stream
  text, an error's ename and evalue, and every other mime type (text/plain, text/html,
  text/markdown, text/latex, image/svg+xml, application/json...) are compared.
"""
import json
import re
from collections import defaultdict
from pathlib import Path

import pytest

nbformat = pytest.importorskip("nbformat")

NOTEBOOKS = Path(__file__).resolve().parent.parent / "notebooks"

# ------------------------------------------------------------------------------------------------
# nbval's rules (nbval 0.11, plugin.py)

COMMENT_MARKERS = {                       # plugin.py: comment_markers
    "PYTEST_VALIDATE_IGNORE_OUTPUT": ("check", False),
    "NBVAL_IGNORE_OUTPUT": ("check", False),
    "NBVAL_CHECK_OUTPUT": ("check", True),
    "NBVAL_RAISES_EXCEPTION": ("check_exception", True),
    "NBVAL_SKIP": ("skip", True),
}
METADATA_TAGS = {k.lower().replace("_", "-"): v for k, v in COMMENT_MARKERS.items()}
METADATA_TAGS["raises-exception"] = ("check_exception", True)
SKIP_COMPARE = frozenset((                # plugin.py: IPyNbFile.skip_compare (without --nbdime)
    "metadata", "traceback", "prompt_number", "output_type", "name", "execution_count",
    "application/vnd.jupyter.widget-view+json", "image/png", "image/jpeg"))


def cell_options(cell):
    """nbval's options for a code cell: metadata tags, then comment markers (which win)."""
    options = {}
    tags = cell.get("metadata", {}).get("tags")
    if isinstance(tags, list):
        for tag in tags:
            if tag in METADATA_TAGS:
                key, value = METADATA_TAGS[tag]
                options[key] = value
    for line in cell.source.splitlines():
        line = line.strip()
        if line.startswith("#"):
            marker = line.lstrip("#").strip()
            if marker in COMMENT_MARKERS:
                key, value = COMMENT_MARKERS[marker]
                options[key] = value
    return options


def _text(value):
    if isinstance(value, str):
        return value
    if isinstance(value, list):             # a multi-line string not yet joined
        return "".join(map(str, value))
    return json.dumps(value, sort_keys=True)


def compared_outputs(nb):
    """Yield (nbval cell number, cell, [(key, text), ...]) for every code cell whose stored
    outputs ``pytest --nbval`` compares with a fresh run, with the texts it compares."""
    number = -1
    for cell in nb.cells:
        if cell.cell_type != "code":
            continue
        number += 1
        options = cell_options(cell)
        if options.get("skip") or not options.get("check", True):
            continue
        if cell.get("execution_count") is None:         # never run: nbval does not compare
            continue
        streams = defaultdict(str)                      # coalesce_streams
        texts = []
        for output in cell.get("outputs", []):
            if output.get("output_type") == "stream":
                streams[output.get("name", "stdout")] += _text(output.get("text", ""))
                continue
            for key, value in output.items():
                if key in SKIP_COMPARE:
                    continue
                if key == "data":
                    texts += [(mime, _text(v)) for mime, v in value.items() if mime not in SKIP_COMPARE]
                else:
                    texts.append((key, _text(value)))
        texts = [(name, text) for name, text in streams.items()] + texts
        yield number, cell, texts


# ------------------------------------------------------------------------------------------------
# What depends on the GPU model

_NUM = r"\d[\d,]*(?:\.\d+)?"
OUTPUT_PATTERNS = {
    "GPU name": r"\bNVIDIA\b|\bTesla\b|\bGeForce\b|\bQuadro\b|\bTITAN\b|\bJetson\b|\bRTX\b"
                r"|\b(?:GH200|GB200|H100|H200|H800|H20|A100|A800|A10G?|A30|A40|L4|L40S?|V100|P100|P40|K80|T4"
                r"|B100|B200)\b|\b(?:Hopper|Ampere|Turing|Volta|Pascal|Blackwell|Ada Lovelace)\b",
    "SM count": rf"\b{_NUM}\s*SMs?\b|streaming multiprocessors?",
    "compute capability / arch": r"\bsm_\d{2,3}[a-z]?\b|compute capability",
    "device memory size": rf"\b{_NUM}\s*[GMT]i?B\s+(?:free|total|of (?:device|GPU|HBM) memory|HBM)"
                          rf"|\b(?:free|total)(?: device| GPU)?(?: memory)?\s*[:=]?\s*{_NUM}\s*[GMT]i?B\b",
    "L2 cache": r"\bL2\b",
    "occupancy / per SM": r"\bper SM\b|\bper multiprocessor\b|\boccupancy\b|\bresident\b",
    "clock": rf"\b{_NUM}\s*[MG]Hz\b",
    "time": rf"\b{_NUM}\s*(?:ms|µs|μs|us|ns|s|sec|secs|seconds?|minutes?)\b(?!/)"
            r"|\((?:ms|µs|μs|us|ns|s|seconds)\)|(?<![\w.])(?:ms|µs|μs)\b",
    "bandwidth / FLOP rate": r"\b[KMGTP]i?B/s\b|\bFLOP/s\b|\bFLOPS\b|\b[GT]FLOPS?\b|\bTFLOP\b|\bGFLOP\b",
    "speed-up": rf"\b{_NUM}\s*[x×]\s+(?:faster|slower|speed-?up|quicker)|\bspeed-?up (?:of )?{_NUM}"
                r"|% of (?:the )?(?:peak|roofline|datasheet|bandwidth)",
    "driver / CUDA version": r"\bCUDA\s+\d+\.\d|\bdriver(?: API| version)?\s+\d+\.\d|\+cu\d{2,3}\b"
                             r"|\bcuBLAS\s+\d|\bnvcc\b.*\brelease\s+\d",
    "error magnitude": r"\bmax(?:imum)?\s*\|[^|\n]+\||\b(?:max(?:imum)?|largest|worst)\b[^\n]{0,30}"
                       r"\b(?:abs(?:olute)?\s+)?(?:err(?:or)?s?|diff(?:erence)?s?)\s*[:=]?\s*\d"
                       r"|\bulps?\b|\b\d\.\d+e[-+]\d{2}\b",
}
OUTPUT_PATTERNS = {name: re.compile(p) for name, p in OUTPUT_PATTERNS.items()}

# calls that read the device or the clock (in attnlab or PyCUDA), in a cell's source
SOURCE_PATTERNS = {
    "reads the device": r"\bdevice_info\s*\(|\bget_attribute\s*\(|\bDevice\s*\(|\bmem_get_info\s*\("
                        r"|\bfree_memory\s*\(|\bcompute_capability\s*\(|\btotal_memory\s*\("
                        r"|\barch\s*\(\s*\)|\bpeak_bandwidth_gbs\s*\(|\bpeak_fp32_tflops\s*\("
                        r"|\binfo\s*\[|\btorch\.cuda\.(?:get_device|mem|max_memory)|nvidia-smi",
    "reads the clock": r"\bbenchmark\s*\(|\bsweep\w*\s*\(|\btime_since\s*\(|\btime_till\s*\(|\bEvent\s*\("
                       r"|\bperf_counter\w*\s*\(|\btime\.time\s*\(|\bmonotonic\s*\(|\btimeit\b|%%?time\b"
                       r"|\boccupancy\w*\s*\(|\btime_one\s*\(|\bone_call\s*\(|\btime_variant\s*\("
                       r"|\bcompare_kernels\s*\(|\bbreakdown\s*\(|\bkernel1_time\s*\(|\brecorded\s*\("
                       r"|\bbest_block_size\s*\(|\bbest\s*\(|\bL2Flusher\b|\btimed\s*=\s*True"
                       r"|\b(?:median|min|max|mean)_ms\b",
    "reads an error magnitude": r"\bmax_(?:abs|rel)_err\b|\.worst\b",
    "reads recorded GPU results": r"\bresults\b[^\n]*\.json",
}
SOURCE_PATTERNS = {name: re.compile(p) for name, p in SOURCE_PATTERNS.items()}

# Compared cells that match a pattern above but whose compared output is the same on every GPU:
# (notebook, a snippet of the cell's source) -> (the findings allowed, why).
ALLOWED = {
    ("00_gpu_and_pycuda_basics.ipynb", 'busy_grid, busy_block = (info["sms"] * 8, 1)'): (
        {"occupancy / per SM", "reads the device"},
        "the grid reads the SM count, but the print is a constant of the lesson: 8 blocks of 256 "
        "threads per SM and the iteration count"),
    ("03_backward_kernel1_naive.ipynb",
     "t1 = lessons.validate_backward(buf, problem, KERNEL, block_size=32, timed=True)"): (
        {"reads the clock"},
        "the Timing is only assigned to t1; what is printed is the constant validation lines"),
    ("12_fused_attention_backward.ipynb", 'ceil = attnlab.report.load("ceilings")'): (
        {"GPU name", "time", "bandwidth / FLOP rate", "L2 cache"},
        "counts computed from the shape, and floors from the H200's committed ceilings "
        "(results/h200/ceilings.json) and the datasheet's TF32 rate: nothing is read from the "
        "device, the output is the same on any GPU"),
    ("10_backward_kernel8_streaming.ipynb", "c = lessons.count(KERNEL, 256)"): (
        {"time"},
        "counts from the shape and the launch table: 'row(s) per block' and 'barrier(s) per "
        "row' are plurals, not seconds; nothing is read from the device or the clock"),
    ("10_backward_kernel8_streaming.ipynb", "lessons.show_kernel(KERNEL)"): (
        {"GPU name"},
        "the kernel's source file as it is, the same on any GPU: its header names the H200 its "
        "measured numbers came from"),
    ("13_fused_backward_ladder.ipynb", "T_BIG = 16384"): (
        {"bandwidth / FLOP rate"},
        "the one FLOP count (counts.fused_flops) and what kernels execute on top of it "
        "(counts.fused_executed_flops), from the shape alone: TFLOP, not TFLOP/s"),
    ("12_fused_attention_backward.ipynb", "from attnlab.archs import LIMITS"): (
        {"occupancy / per SM", "compute capability / arch"},
        "'blocks per SM' per architecture, from attnlab.archs.LIMITS (the programming guide's "
        "table) and the kernels' shared-memory bytes: constants, not a device query"),
}


def first_line(source):
    return next((line for line in source.splitlines() if line.strip()), "")


def _allowed(path, cell):
    rel = path.relative_to(NOTEBOOKS).as_posix() if path.is_absolute() else str(path)
    for (nb_name, snippet), (kinds, _) in ALLOWED.items():
        if nb_name == rel and snippet in cell.source:
            return kinds
    return set()


def gpu_dependent_findings(nb, path=Path("<memory>"), allowed=True):
    """[(notebook, nbval cell number, first source line, where, kind, offending text)] for
    every line of a compared output that looks GPU-dependent, and for every compared cell that
    reads the device or the clock and has output. ``where`` is "output [<key>]" or "source"."""
    found = []
    for number, cell, texts in compared_outputs(nb):
        ok = _allowed(path, cell) if allowed else set()
        head = first_line(cell.source)
        for key, text in texts:
            for line in text.splitlines():
                for kind, pattern in OUTPUT_PATTERNS.items():
                    if kind not in ok and pattern.search(line):
                        found.append((path.name, number, head, f"output [{key}]", kind, line.strip()))
        prints = any(text.strip() for _, text in texts) or re.search(r"\b(?:print|display)\s*\(", cell.source)
        if prints:
            for kind, pattern in SOURCE_PATTERNS.items():
                if kind in ok:
                    continue
                line = next((line for line in cell.source.splitlines() if pattern.search(line)), None)
                if line is not None:
                    found.append((path.name, number, head, "source", kind, line.strip()))
    return found


def notebook_paths():
    return sorted(p for p in NOTEBOOKS.rglob("*.ipynb")
                  if not any(part.startswith(".") for part in p.relative_to(NOTEBOOKS).parts))


def _format(findings):
    return "\n".join(f"{nb} Cell {n} ({head!r}): {where}: {kind}: {text!r}"
                     for nb, n, head, where, kind, text in findings)


# ------------------------------------------------------------------------------------------------
# Tests

def test_notebooks_found():
    names = [p.relative_to(NOTEBOOKS).as_posix() for p in notebook_paths()]
    assert "00_gpu_and_pycuda_basics.ipynb" in names and "12_fused_attention_backward.ipynb" in names
    assert any(name.startswith("exercises/") for name in names)


@pytest.mark.parametrize("path", notebook_paths(), ids=lambda p: p.relative_to(NOTEBOOKS).as_posix())
def test_compared_outputs_do_not_depend_on_the_gpu(path):
    nb = nbformat.read(str(path), as_version=4)
    findings = gpu_dependent_findings(nb, path)
    assert not findings, ("outputs nbval compares that depend on the GPU model (tag the cell "
                          "nbval-ignore-output, or allow-list it in ALLOWED with a reason):\n"
                          + _format(findings))


def test_allow_list_entries_are_used():
    """Every ALLOWED entry names exactly one compared cell, and is needed there."""
    paths = {p.relative_to(NOTEBOOKS).as_posix(): p for p in notebook_paths()}
    for (nb_name, snippet), (kinds, reason) in ALLOWED.items():
        assert reason and kinds
        assert nb_name in paths, f"ALLOWED names a notebook that does not exist: {nb_name}"
        nb = nbformat.read(str(paths[nb_name]), as_version=4)
        cells = [cell for _, cell, _ in compared_outputs(nb) if snippet in cell.source]
        assert len(cells) == 1, f"{nb_name}: {snippet!r} should be in exactly one compared cell, " \
                                f"found {len(cells)}"
        single = nbformat.v4.new_notebook(cells=cells)
        unfiltered = {kind for *_, kind, _ in gpu_dependent_findings(single, allowed=False)}
        assert kinds <= unfiltered, f"{nb_name}: {snippet!r}: allowed {kinds - unfiltered} not needed"


def _tiny_notebook(tags=None, source='print("NVIDIA H200 (132 SMs): 0.42 ms")', **output):
    cell = nbformat.v4.new_code_cell(source, execution_count=1)
    cell.outputs = [nbformat.v4.new_output("stream", name="stdout", text="NVIDIA H200 (132 SMs): 0.42 ms\n")
                    if not output else nbformat.v4.new_output(**output)]
    if tags:
        cell.metadata["tags"] = tags
    return nbformat.v4.new_notebook(cells=[nbformat.v4.new_markdown_cell("# title"), cell])


def test_detector_finds_gpu_dependent_output():
    findings = gpu_dependent_findings(_tiny_notebook())
    assert {(where, kind) for *_, where, kind, _ in findings} >= {
        ("output [stdout]", "GPU name"), ("output [stdout]", "SM count"), ("output [stdout]", "time")}
    nb, number, head, _, _, text = findings[0]
    assert (number, head, text) == (0, 'print("NVIDIA H200 (132 SMs): 0.42 ms")', "NVIDIA H200 (132 SMs): 0.42 ms")
    assert gpu_dependent_findings(_tiny_notebook(["nbval-ignore-output"])) == []


@pytest.mark.parametrize("tags,source", [
    (["nbval-ignore-output"], 'print("NVIDIA H200 (132 SMs): 0.42 ms")'),
    (["nbval-skip"], 'print("NVIDIA H200 (132 SMs): 0.42 ms")'),
    (None, '# NBVAL_IGNORE_OUTPUT\nprint("NVIDIA H200 (132 SMs): 0.42 ms")'),
    (None, '# NBVAL_SKIP\nprint("NVIDIA H200 (132 SMs): 0.42 ms")'),
])
def test_detector_respects_nbval_markers(tags, source):
    assert gpu_dependent_findings(_tiny_notebook(tags, source)) == []


def test_detector_follows_nbval_rules():
    # a comment marker wins over a tag, as in nbval
    nb = _tiny_notebook(["nbval-ignore-output"], '# NBVAL_CHECK_OUTPUT\nprint("NVIDIA H200 (132 SMs): 0.42 ms")')
    assert gpu_dependent_findings(nb)
    # text/html is compared, image/png is not
    html = _tiny_notebook(output_type="display_data", data={"text/html": "<b>0.42 ms</b>", "image/png": "iVBOR"})
    assert [f[3:5] for f in gpu_dependent_findings(html)] == [("output [text/html]", "time")]
    png = _tiny_notebook(source="plot()", output_type="display_data", data={"image/png": "NVIDIA H200 0.42 ms"})
    assert gpu_dependent_findings(png) == []
    # an error's evalue is compared
    err = _tiny_notebook(source="f()", output_type="error", ename="RuntimeError", evalue="NVIDIA T4: too slow",
                         traceback=[])
    assert [f[3:5] for f in gpu_dependent_findings(err)] == [("output [evalue]", "GPU name")]
    # a cell never run is not compared
    unrun = _tiny_notebook()
    unrun.cells[1].execution_count = None
    assert gpu_dependent_findings(unrun) == []
    # the source check: reads the device and prints, whatever the text looks like
    src = _tiny_notebook(source='print(attnlab.device_info()["sms"] > 0)', output_type="stream",
                         name="stdout", text="True\n")
    assert [f[3:5] for f in gpu_dependent_findings(src)] == [("source", "reads the device")]


@pytest.mark.parametrize("text", [
    "B=4 T=1024 C=768 NH=12 HS=64",
    "preatt: OK - all 50331648 elements within 0.005 + |ref|*FLT_EPSILON",
    "    att: (4, 12, 1024, 1024)      192.0 MiB",
    "0.47 GiB of device buffers",
    "GPUArray (10,) float32 (40 bytes of device memory)",
    "grid (4, 3) x block (256, 1, 1) = 3072 threads for 3000 elements: 24 threads per row had nothing to do",
    "kernel 6: grid (1024, 48, 1)    block (256, 1, 1): 12,582,912 threads =  393,216 warps",
    "3 buffers x 4*12 matrices x 1024*1025/2 elements x 4 bytes = 302,284,800 bytes = 302.3 MB",
    "kernel 4 at B=2 T=260 NH=3, block size 256:",
    "  1024       16         256       136                 16       120      46.9%",
    "fused fp32: dinp of 3 runs bit-identical: True",
    "fp32: out 0.001, dinp 0.001  (|gpu - ref| <= tol + |ref|*FLT_EPSILON)",
    "nvcc options: -O3 --use_fast_math plus -arch for this GPU",
    "  in all 272 tile steps per (b, h) = 2 x 136 visited pairs",
])
def test_constant_outputs_are_not_flagged(text):
    nb = _tiny_notebook(source="print(x)", output_type="stream", name="stdout", text=text + "\n")
    assert gpu_dependent_findings(nb) == []


@pytest.mark.parametrize("text", [
    "NVIDIA GeForce RTX 4090", "Tesla T4", "A100-SXM4-80GB", "132 SMs", "compute capability 9.0 (sm_90)",
    "139.8 GiB of device memory, 139.3 GiB free now", "L2 cache 60 MiB", "3 blocks per SM fit",
    "clock up to 1980 MHz", "kernel 7: 0.497 ms", "took 12.5 us", "2.3 s", "3,512 GB/s", "51.2 TFLOP/s",
    "fused tf32 is 3.22x faster than k8 fp32", "driver API 13.0", "CUDA 13.0.0", "torch 2.11.0+cu130",
    "max |fused dinp - torch dinp|: 6.4e-04", "max abs error 6.4e-04", "backward time (ms)",
])
def test_gpu_dependent_outputs_are_flagged(text):
    nb = _tiny_notebook(source="print(x)", output_type="stream", name="stdout", text=text + "\n")
    assert gpu_dependent_findings(nb), text


def test_rules_match_installed_nbval():
    """The marker tables above are nbval's own (where nbval is installed)."""
    plugin = pytest.importorskip("nbval.plugin")
    norm = {k: v if isinstance(v, tuple) else (v, True) for k, v in plugin.comment_markers.items()}
    assert norm == COMMENT_MARKERS
    norm = {k: v if isinstance(v, tuple) else (v, True) for k, v in plugin.metadata_tags.items()}
    assert norm == METADATA_TAGS
