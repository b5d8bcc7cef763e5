"""compute-sanitizer over every kernel in kernels/: memcheck, racecheck, initcheck, synccheck.

    python -m attnlab sanitize                    # 4 tools x 2 shapes (default and small)
    python -m attnlab sanitize --quick            # the small shape only
    python -m attnlab sanitize --tools memcheck,racecheck --shapes small --kernels 4,8 --json
    python -m attnlab sanitize --self-test        # plant one bug per tool: is it caught?
    python -m attnlab sanitize --shapes default --tools racecheck --split --jobs 14
                                                  # one run per kernel, 14 side by side

For each (tool, shape) this runs, in a subprocess,

    compute-sanitizer --tool TOOL --error-exitcode 99 [...] python -m attnlab.sanitize --target ...

The target runs the forward pass once (permute_kernel, two cuBLAS SGEMMs,
softmax_forward_kernel5, unpermute_kernel) and then the backward pass once with each chosen
softmax-backward kernel (unpermute_backward_kernel, four cuBLAS SGEMMs, the kernel,
permute_backward_kernel): every kernel of the materialized pipeline, no timing. Kernels 6-8 are compiled
once per block size (-DBLOCK_SIZE), so they also run at the extra block sizes (32 and
1024 by default). This process reads the sanitizer's summary lines, prints a table and
the first error lines of any run that is not clean, and exits 0 only when every run
reported zero errors (1 otherwise; 2 for bad arguments, no GPU or no compute-sanitizer).

Kernel 1 at the default shape takes about 7 s natively, and 10-100x that under a
sanitizer: it is skipped at shapes that large unless --include-slow is given, and said so
(the small shape checks it). cuBLAS's own kernels run under the sanitizer too: an error
inside one of them is reported with the kernel's name, marked as not ours.

Kernels of other modules: the target also calls ``sanitize_steps(B, T, C, NH)`` of each
module in EXTRA_STEP_MODULES that defines it (attnlab.fused, for kernels/flash_attention.cu;
attnlab.ceilings, for the measurement kernels);
a source in kernels/ that no run executed is listed as NOT run, never passed over silently.

Before the sanitizer runs, the target runs once natively over the same selection: that
compiles every module into PyCUDA's cache (so parallel runs only read it), checks that the
target works at all, and gives the native time to compare with.
"""
import argparse
import importlib
import importlib.util
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from pathlib import Path

from .checks import KERNELS, check_block_size, check_int, check_kernel, check_shape, parse_list
from .errors import AttnlabError, InputError, NoGPUError

TOOLS = ("memcheck", "racecheck", "initcheck", "synccheck")
SHAPES = {"default": (4, 1024, 768, 12), "small": (1, 516, 192, 3)}
# T = 516: a multiple of 4 but not of 8 (kernels 4 and 5 handle 8 columns per warp, kernel 8
# 4 rows per block) nor of any block size (the last tile of kernels 6-8 is partial).
BLOCK_SIZE = 256
EXTRA_BLOCK_SIZES = (32, 1024)
# Kernel 1 runs B*NH*T^3/3 iterations on only T threads: 7 s natively at the default shape.
# Skip it, unless asked, where B*NH*T^3 is above this (the small shape is 4.1e8).
SLOW_KERNEL1_WORK = 2e9
# cuBLAS's GEMMs at the default shape take tens of minutes under racecheck (it instruments
# every shared-memory access of 48 batched 1024x1024x64 products, 14 times over): at shapes
# where kernel 1 is slow, racecheck leaves kernels whose names contain these out (they run,
# uninstrumented); it checks them at the small shape. --racecheck-gemms keeps them in.
RACECHECK_EXCLUDE_AT_LARGE = ("gemm",)
# The option that names kernels a tool leaves uninstrumented: 2025.3's name first, then an
# older name, tried when the first is not in --help.
EXCLUDE_OPTIONS = ("--kernel-name-exclude", "--kernel-regex-exclude")
SANITIZER = "compute-sanitizer"
SANITIZER_DIRS = ("/usr/local/cuda/bin",)
NOT_FOUND = (f"{SANITIZER} not found on PATH (it ships with the CUDA toolkit: "
             f"/usr/local/cuda/bin)")
ERROR_EXITCODE = 99
BASE_PORT = 49152          # compute-sanitizer's default; parallel runs get their own ranges
PORT_STRIDE = 20           # each run may use --max-connections (10) ports from its base
TARGET_PREFIX = "@@attnlab-sanitize "   # machine-readable lines the target prints
FIRST_LINES = 40           # error lines shown for a run that is not clean
# Modules whose kernels the target also runs: each may define
#     sanitize_steps(B, T, C, NH) -> [names of the kernels/*.cu sources it ran]
# which runs each of its kernels once at that shape (no timing): attnlab.fused does, for
# kernels/flash_attention.cu (head size 64 only: both sanitize shapes have it); attnlab.ceilings
# does, for the measurement kernels (kernels/ceilings.cu and kernels/l2_flush.cu).
EXTRA_STEP_MODULES = ("attnlab.fused", "attnlab.ceilings")
LIBRARY_SOURCES = ("permute", "softmax_forward")   # what forward + backward always run

# Flags every tool gets, and why:
COMMON_OPTIONS = (
    "--error-exitcode", str(ERROR_EXITCODE),  # any error -> exit status 99
    "--target-processes", "application-only",  # not the nvcc that PyCUDA may spawn
    "--destroy-on-device-error", "kernel",    # keep going: report every failing kernel in one run
    "--ignore-getprocaddress-notfound",       # the CUDA runtime probing for optional driver calls
    "--launch-timeout", "120",                # Python and PyCUDA start slowly when runs overlap
)
TOOL_OPTIONS = {
    # out-of-bounds and misaligned accesses, and device memory still allocated at exit
    # (buffers, cuBLAS's workspace: attnlab frees its buffers, destroys its cuBLAS handle and
    # releases its context at exit); host backtraces kept, a few frames deep: they say who
    # allocated a leaked buffer
    "memcheck": ("--leak-check", "full", "--show-backtrace", "yes", "--num-callers-host", "12"),
    # shared-memory hazards; one analysed report per race, warnings included
    "racecheck": ("--racecheck-report", "analysis", "--racecheck-detect-level", "warn",
                  "--show-backtrace", "device"),
    # reads of device memory never written, by kernels and by memcpy
    "initcheck": ("--check-api-memory-access", "yes", "--show-backtrace", "device"),
    # barriers and warp syncs that not every thread they name reaches
    "synccheck": ("--show-backtrace", "device"),
}


class SanitizerNotFoundError(AttnlabError, RuntimeError):
    """compute-sanitizer is neither on PATH nor in /usr/local/cuda/bin."""


# ---------------------------------------------------------------- pure functions (tested on CPU)

def find_sanitizer(path=None, dirs=None):
    """The path of compute-sanitizer: on PATH, in $CUDA_HOME/bin, or in /usr/local/cuda/bin."""
    found = shutil.which(SANITIZER, path=path)
    if found:
        return found
    if dirs is None:
        dirs = [os.path.join(os.environ[v], "bin") for v in ("CUDA_HOME", "CUDA_PATH")
                if os.environ.get(v)] + list(SANITIZER_DIRS)
    for d in dirs:
        candidate = os.path.join(d, SANITIZER)
        if os.path.isfile(candidate) and os.access(candidate, os.X_OK):
            return candidate
    raise SanitizerNotFoundError(NOT_FOUND)


def parse_shape(text):
    """'default', 'small' or 'BxTxCxNH' (e.g. 2x260x192x3) -> (name, (B, T, C, NH))."""
    text = str(text).strip()
    if text in SHAPES:
        return text, SHAPES[text]
    parts = text.lower().split("x")
    try:
        values = tuple(int(p) for p in parts)
    except ValueError:
        values = ()
    if len(values) != 4:
        raise InputError(f"--shapes: each shape must be one of {sorted(SHAPES)} or BxTxCxNH "
                         f"(e.g. 2x260x192x3), got {text!r}")
    try:
        return text, check_shape(*values)
    except InputError as e:
        raise InputError(f"--shapes {text!r}: {e}") from None


def shape_label(shape):
    B, T, C, NH = shape
    return f"B={B} T={T} C={C} NH={NH}"


def compiled_per_block_size(kernel):
    """Kernels compiled once per block size (-DBLOCK_SIZE): 6, 7 and 8."""
    from .launch import softmax_backward_launch
    return bool(softmax_backward_launch(kernel, 1, 4, 1, 32)[2])


def kernel1_is_slow(shape):
    B, T, C, NH = shape
    return B * NH * T ** 3 > SLOW_KERNEL1_WORK


def plan(shape, kernels=KERNELS, block_sizes=(BLOCK_SIZE,), extra_block_sizes=EXTRA_BLOCK_SIZES,
         include_slow=False):
    """([(kernel, block_size), ...] to run, [why each skipped kernel was skipped])."""
    runs, skipped = [], []
    for k in kernels:
        k = check_kernel(k)
        if k == 1 and kernel1_is_slow(shape) and not include_slow:
            skipped.append(f"kernel 1 skipped at {shape_label(shape)}: about 7 s natively at the "
                           f"default shape and 10-100x that under a sanitizer; it is checked at "
                           f"the small shape (pass --include-slow to run it here)")
            continue
        sizes = list(block_sizes)
        if compiled_per_block_size(k):
            sizes += [bs for bs in extra_block_sizes if bs not in sizes]
        runs += [(k, check_block_size(bs)) for bs in sizes]
    return runs, skipped


def target_args(shape, runs, plant=None, extra=True):
    """The arguments of ``python -m attnlab.sanitize --target`` for one shape.

    ``extra=False``: leave out the sanitize_steps of EXTRA_STEP_MODULES (the fused kernels)."""
    B, T, C, NH = shape
    args = ["--target", "--shape", f"{B}x{T}x{C}x{NH}",
            "--runs", ",".join(f"{k}:{bs}" for k, bs in runs)]
    if plant:
        args += ["--plant", plant]
    if not extra:
        args += ["--no-extra"]
    return args


def split_parts(runs):
    """--split: one (part label, runs, extra) per sanitizer run of a (tool, shape): each
    (kernel, block size) on its own, then the extra steps (the fused kernels) on their own.
    Every part also runs the forward, which the backward needs."""
    parts = [(f"k{k}-bs{bs}", [(k, bs)], False) for k, bs in runs]
    return parts + [("extra", [], True)]


def python_command(args):
    return [sys.executable, "-m", "attnlab.sanitize", *args]


def sanitizer_command(exe, tool, args, port=None, exclude=(), exclude_with=EXCLUDE_OPTIONS[0]):
    """The full command line: compute-sanitizer, its options for ``tool``, then the target.

    ``exclude``: substrings of kernel names the tool does not instrument (they still run).
    """
    if tool not in TOOLS:
        raise InputError(f"tool must be one of {list(TOOLS)}, got {tool!r}")
    cmd = [exe, "--tool", tool, *COMMON_OPTIONS, *TOOL_OPTIONS[tool]]
    for name in exclude:
        cmd += [exclude_with, f"kns={name}"]
    if port is not None:
        cmd += ["--port", str(port)]
    return cmd + python_command(args)


_SUMMARY = re.compile(r"ERROR SUMMARY:\s*(\d+)\s+errors?")
_RACE = re.compile(r"RACECHECK SUMMARY:\s*(\d+)\s+hazards?\s+displayed\s*"
                   r"\((\d+)\s+errors?,\s*(\d+)\s+warnings?\)")
_LEAK = re.compile(r"LEAK SUMMARY:\s*(\d+)\s+bytes?\s+leaked\s+in\s+(\d+)\s+allocations?")
_AT = re.compile(r"\bat\s+(?:void\s+)?([A-Za-z_][\w:<>,\s]*?)(?:\(|\+0x)")
_QUIET = re.compile(r"COMPUTE-SANITIZER|(ERROR|RACECHECK|LEAK) SUMMARY")


@dataclass
class Report:
    """What one sanitizer run said."""
    errors: int = None               # ERROR SUMMARY: N errors (None: no summary line)
    race_errors: int = None          # RACECHECK SUMMARY (racecheck only)
    race_warnings: int = None
    leaked_bytes: int = None         # LEAK SUMMARY (memcheck --leak-check full only)
    leaked_allocations: int = None
    kernels: list = field(default_factory=list)   # kernels named in error reports
    lines: list = field(default_factory=list)     # the first error lines


def sanitizer_lines(text, prefix="========="):
    """The lines compute-sanitizer wrote (they start with its prefix), prefix removed."""
    return [ln[len(prefix):].rstrip() for ln in text.splitlines() if ln.startswith(prefix)]


def parse_report(text, first=FIRST_LINES):
    """Read compute-sanitizer's output: summaries, kernels named in errors, first error lines."""
    r = Report()
    for m in _SUMMARY.finditer(text):
        r.errors = int(m.group(1))        # the last one, if a run printed several
    m = _RACE.search(text)
    if m:
        r.race_errors, r.race_warnings = int(m.group(2)), int(m.group(3))
        if r.errors is None:          # racecheck 2025.3 prints no ERROR SUMMARY of its own
            r.errors = r.race_errors
    m = _LEAK.search(text)
    if m:
        r.leaked_bytes, r.leaked_allocations = int(m.group(1)), int(m.group(2))
    body = [ln for ln in sanitizer_lines(text) if ln.strip() and not _QUIET.search(ln)]
    r.lines = body[:first]
    for ln in body:
        for name in _AT.findall(ln):
            name = name.strip()
            if name and name not in r.kernels:
                r.kernels.append(name)
    return r


def our_kernel_names():
    """The extern "C" kernels of kernels/*.cu (to tell ours from cuBLAS's in error reports)."""
    from .kernels import KERNEL_DIR, kernel_names
    names = set()
    for p in KERNEL_DIR.glob("*.cu"):
        names.update(kernel_names(p.read_text()))
    return names


def target_records(text):
    """The target's machine-readable lines: one dict per step it ran."""
    out = []
    for ln in text.splitlines():
        if ln.startswith(TARGET_PREFIX):
            try:
                out.append(json.loads(ln[len(TARGET_PREFIX):]))
            except ValueError:
                pass
    return out


def uncovered_sources(results, all_sources=None):
    """kernels/*.cu sources that no run executed, each with the reason."""
    if all_sources is None:
        from .kernels import KERNEL_DIR
        all_sources = sorted(p.stem for p in KERNEL_DIR.glob("*.cu"))
    ran = set(LIBRARY_SOURCES)
    extra_modules = set()
    for r in results:
        ran.update(f"softmax_backward{k}" for k, _ in r.runs)
        for step in r.steps:
            if step.get("step") == "extra":
                ran.update(step.get("sources", []))
                extra_modules.add(step.get("module"))
    out = {}
    for src in all_sources:
        if src in ran:
            continue
        m = re.fullmatch(r"softmax_backward(\d+)", src)
        if m:
            out[src] = "not selected (--kernels)"
        elif extra_modules:
            out[src] = (f"the sanitize_steps of {sorted(extra_modules)} did not run it at "
                        f"these shapes")
        else:
            out[src] = (f"no run reported it: none of {list(EXTRA_STEP_MODULES)} defines "
                        f"sanitize_steps(B, T, C, NH) running it")
    return out


@dataclass
class Result:
    """One (tool, shape) run."""
    tool: str
    shape_name: str
    shape: tuple
    runs: list
    command: list
    returncode: int = None
    seconds: float = 0.0
    timed_out: bool = False
    report: Report = None
    steps: list = field(default_factory=list)
    tail: str = ""                   # the last lines of output when the run did not finish
    extra: bool = True               # the target also ran EXTRA_STEP_MODULES' sanitize_steps
    part: str = ""                   # with --split: which part of the (tool, shape) this is

    @property
    def status(self):
        """'clean', 'ERRORS', 'TIMEOUT' or 'FAILED' (no summary, or the target failed)."""
        if self.timed_out:
            return "TIMEOUT"
        r = self.report
        if r is None or r.errors is None:
            return "FAILED"
        if r.errors or (r.race_errors or 0) or (r.race_warnings or 0) or (r.leaked_bytes or 0):
            return "ERRORS"
        if self.returncode != 0 or not any(s.get("step") == "done" for s in self.steps):
            return "FAILED"          # the target did not finish (its own error, see the tail)
        return "clean"

    def as_dict(self):
        d = asdict(self)
        d["status"] = self.status
        return d


def classify(result, expect_errors=False):
    """Did this run pass? For a planted bug (self-test), passing means it was caught."""
    if expect_errors:
        return (not result.timed_out and result.report is not None
                and bool(result.report.errors))
    return result.status == "clean"


def _runs_text(runs, extra=False):
    """'2-8@256 6,7,8@32' style summary of (kernel, block size) pairs; '+ extra' when the
    run also did the extra steps (the fused kernels)."""
    by_bs = {}
    for k, bs in runs:
        by_bs.setdefault(bs, []).append(k)
    parts = []
    for bs in sorted(by_bs, key=lambda b: (-len(by_bs[b]), b)):
        ks = by_bs[bs]
        ks_text = (f"{ks[0]}-{ks[-1]}" if len(ks) > 2 and ks == list(range(ks[0], ks[-1] + 1))
                   else ",".join(map(str, ks)))
        parts.append(f"{ks_text}@{bs}")
    if extra:
        parts.append("+ extra")
    return " ".join(parts) if parts else "forward only"


def format_table(results, ours=None, expect_errors=False):
    """The result table, then the first error lines of every run that did not pass."""
    ours = ours if ours is not None else set()
    head = (f"{'tool':<10} {'shape':<31} {'kernel@block size':<38} {'errors':>6} "
            f"{'races':>5} {'leaked':>8} {'time':>7}  result")
    lines = [head, "-" * len(head)]
    for r in results:
        rep = r.report or Report()
        races = "-" if rep.race_errors is None else str(rep.race_errors + rep.race_warnings)
        leaked = "-" if rep.leaked_bytes is None else f"{rep.leaked_bytes} B"
        errors = "?" if rep.errors is None else str(rep.errors)
        if expect_errors:
            verdict = "caught" if classify(r, True) else "MISSED"
        else:
            verdict = r.status
        if r.shape_name == "self-test":
            shape_text, runs_text = "-", "planted: " + PLANTED[r.tool][0]
        else:
            shape_text = r.shape_name + " " + shape_label(r.shape)
            runs_text = _runs_text(r.runs, r.extra)
        lines.append(f"{r.tool:<10} {shape_text:<31} "
                     f"{runs_text:<38} {errors:>6} {races:>5} {leaked:>8} "
                     f"{r.seconds:6.0f}s  {verdict}")
    for r in results:
        passed = classify(r, expect_errors)
        rep = r.report or Report()
        if passed and not expect_errors:
            continue
        lines.append("")
        where = ("a planted bug" if r.shape_name == "self-test"
                 else f"{r.shape_name} ({shape_label(r.shape)})")
        lines.append(f"--- {r.tool} at {where}: "
                     f"{('caught' if passed else 'MISSED') if expect_errors else r.status}, "
                     f"exit status {r.returncode}")
        if rep.kernels:
            named = [f"{k} ({'ours' if _base_name(k) in ours else 'not ours: cuBLAS or PyCUDA'})"
                     for k in rep.kernels]
            lines.append("kernels named in the reports: " + "; ".join(named))
        shown = rep.lines[:4] if passed else rep.lines
        if shown:
            lines.append(f"first {len(shown)} lines of the sanitizer's report:")
            lines += ["  " + ln for ln in shown]
        if r.tail and not passed:
            lines.append("last lines of output:")
            lines += ["  " + ln for ln in r.tail.splitlines()]
        if not passed:
            lines.append("rerun it alone with: " + " ".join(_quote(a) for a in r.command))
    return "\n".join(lines)


def _base_name(name):
    return re.split(r"[<(\s]", name.replace("void ", "").strip())[0]


def _quote(arg):
    return arg if re.fullmatch(r"[\w@%+=:,./-]+", arg) else "'" + arg.replace("'", "'\\''") + "'"


# ---------------------------------------------------------------- running

def _env():
    """The target must import this very attnlab, wherever the command was started."""
    env = dict(os.environ)
    root = str(Path(__file__).resolve().parent.parent)
    env["PYTHONPATH"] = root + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    return env


def run_command(cmd, timeout):
    """(returncode, output, seconds, timed_out); on timeout the whole process group is ended."""
    t0 = time.perf_counter()
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            env=_env(), start_new_session=True)
    try:
        out, _ = proc.communicate(timeout=timeout)
        timed_out = False
    except subprocess.TimeoutExpired:
        timed_out = True
        for sig in (signal.SIGTERM, signal.SIGKILL):
            try:
                os.killpg(proc.pid, sig)
            except ProcessLookupError:
                break
            try:
                out, _ = proc.communicate(timeout=10)
                break
            except subprocess.TimeoutExpired:
                continue
        else:
            out = ""
    return proc.returncode, out or "", time.perf_counter() - t0, timed_out


def exclude_option(exe):
    """The first of EXCLUDE_OPTIONS this compute-sanitizer lists in --help; None if neither."""
    try:
        text = subprocess.run([exe, "--help"], capture_output=True, text=True, timeout=60).stdout
    except (OSError, subprocess.TimeoutExpired):
        return None
    for option in EXCLUDE_OPTIONS:
        if option in text:
            return option
    return None


def sanitizer_version(exe):
    try:
        out = subprocess.run([exe, "--version"], capture_output=True, text=True, timeout=60).stdout
    except (OSError, subprocess.TimeoutExpired):
        return "unknown version"
    m = re.search(r"Version\s+(\S+)", out)
    return m.group(1) if m else "unknown version"


def excluded_kernels(tool, shape, racecheck_gemms=False):
    """Substrings of kernel names ``tool`` leaves uninstrumented at ``shape`` (see
    RACECHECK_EXCLUDE_AT_LARGE)."""
    if tool == "racecheck" and kernel1_is_slow(shape) and not racecheck_gemms:
        return RACECHECK_EXCLUDE_AT_LARGE
    return ()


def run_one(exe, tool, shape_name, shape, runs, timeout, port=None, plant=None, log_dir=None,
            exclude=(), exclude_with=EXCLUDE_OPTIONS[0], extra=True, part=""):
    cmd = sanitizer_command(exe, tool, target_args(shape, runs, plant, extra), port, exclude,
                            exclude_with)
    rc, out, seconds, timed_out = run_command(cmd, timeout)
    result = Result(tool, shape_name, shape, runs, cmd, rc, seconds, timed_out,
                    parse_report(out), target_records(out), extra=extra, part=part)
    if result.status in ("FAILED", "TIMEOUT"):
        result.tail = "\n".join(out.strip().splitlines()[-15:])
    if log_dir:
        Path(log_dir).mkdir(parents=True, exist_ok=True)
        name = "-".join(filter(None, (tool, shape_name, part)))
        (Path(log_dir) / f"{name}.log").write_text(" ".join(cmd) + "\n\n" + out)
    return result


def _progress(msg):
    print(msg, file=sys.stderr, flush=True)


def add_arguments(p):
    """The options of ``python -m attnlab sanitize`` (also used by ``-m attnlab.sanitize``)."""
    p.add_argument("--tools", default=",".join(TOOLS),
                   help=f"comma-separated, from {','.join(TOOLS)} (default: all four)")
    p.add_argument("--shapes", default="default,small",
                   help="comma-separated: default (B=4 T=1024 C=768 NH=12), small (B=1 T=516 "
                        "C=192 NH=3) or BxTxCxNH (default: default,small)")
    p.add_argument("--quick", action="store_true", help="the small shape only (same as --shapes small)")
    p.add_argument("--kernels", default=",".join(map(str, KERNELS)),
                   help="softmax-backward kernels to run, comma-separated (default: 1,...,8); "
                        "the forward's kernels always run")
    p.add_argument("--block-sizes", default=str(BLOCK_SIZE),
                   help=f"block sizes for every kernel (default: {BLOCK_SIZE})")
    p.add_argument("--extra-block-sizes", default=",".join(map(str, EXTRA_BLOCK_SIZES)),
                   help="more block sizes for kernels 6-8, which are compiled per block size "
                        "(default: 32,1024; 'none' for none)")
    p.add_argument("--include-slow", action="store_true",
                   help="also run kernel 1 at the default shape (minutes under a sanitizer)")
    p.add_argument("--racecheck-gemms", action="store_true",
                   help="let racecheck instrument cuBLAS's GEMMs at the default shape too "
                        "(tens of minutes; by default they are racechecked at the small shape)")
    p.add_argument("--split", action="store_true",
                   help="one sanitizer run per (kernel, block size), and one for the fused "
                        "kernels, instead of one per (tool, shape): --jobs of them run side by "
                        "side, and a run that times out names the kernel (each also runs the "
                        "forward)")
    p.add_argument("--jobs", type=int, default=8,
                   help="sanitizer runs at once (default 8: all of the default selection; "
                        "they share the GPU, each needs about 1 GiB of it)")
    p.add_argument("--timeout", type=int, default=1800, help="seconds per run (default 1800)")
    p.add_argument("--log-dir", default=None,
                   help="write each run's full output to DIR/TOOL-SHAPE.log "
                        "(DIR/TOOL-SHAPE-PART.log with --split)")
    p.add_argument("--self-test", action="store_true",
                   help="instead, plant one bug per tool in a tiny kernel and check that the "
                        "tool reports it (exit 0 when every planted bug is caught)")
    p.add_argument("--json", action="store_true", help="print one JSON object on stdout")


def _options(args):
    """Check every option before anything runs; returns what the run needs."""
    tools = parse_list(args.tools, "--tools", TOOLS)
    shapes = [parse_shape(s) for s in parse_list("small" if args.quick else args.shapes, "--shapes")]
    kernels = parse_list(args.kernels, "--kernels", None, lambda v: check_kernel(_int(v), name="--kernels"))
    block_sizes = parse_list(args.block_sizes, "--block-sizes", None,
                             lambda v: check_block_size(_int(v), "--block-sizes"))
    extra = [] if str(args.extra_block_sizes).strip().lower() in ("", "none") else parse_list(
        args.extra_block_sizes, "--extra-block-sizes", None,
        lambda v: check_block_size(_int(v), "--extra-block-sizes"))
    jobs = check_int("--jobs", args.jobs)
    timeout = check_int("--timeout", args.timeout)
    return tools, shapes, kernels, block_sizes, extra, jobs, timeout


def _int(text):
    try:
        return int(text)
    except ValueError:
        return text            # the check that follows names the option and the value


def run(args):
    """``python -m attnlab sanitize``: returns the exit status (0 clean, 1 errors, 2 cannot run)."""
    try:
        tools, shapes, kernels, block_sizes, extra, jobs, timeout = _options(args)
        exe = find_sanitizer()
        from .device import gpu_status
        ok, why = gpu_status()
        if not ok:
            raise NoGPUError(f"python -m attnlab sanitize needs a CUDA GPU: {why}")
    except (InputError, NoGPUError, SanitizerNotFoundError) as e:
        print(f"attnlab: {e}", file=sys.stderr)
        return 2
    version = sanitizer_version(exe)

    if args.self_test:
        # a planted bug's target runs only the planted kernel: no extra steps
        jobs_list = [dict(tool=tool, shape_name="self-test", shape=SHAPES["small"], runs=[],
                          plant=tool, extra=False) for tool in tools]
        skipped = []
        exclude_with = None
    else:
        jobs_list, skipped = [], []
        exclude_with = exclude_option(exe)   # how to leave kernels uninstrumented, if it can
        plans = {}
        for name, shape in shapes:
            runs, why = plan(shape, kernels, block_sizes, extra, args.include_slow)
            plans[name] = (shape, runs)
            skipped += why
        # natively first: compiles every module into PyCUDA's cache, and checks the target works
        native_args = []
        for name, (shape, runs) in plans.items():
            native_args += target_args(shape, runs)[1:]
        _progress(f"running the target natively first (compiles the kernels; "
                  f"{len(plans)} shape(s))...")
        rc, out, seconds, timed_out = run_command(python_command(["--target", *native_args]),
                                                  timeout)
        if rc != 0 or timed_out:
            print(f"attnlab: the target failed without a sanitizer (exit status {rc}"
                  f"{', timed out' if timed_out else ''}):\n{out.strip()[-4000:]}", file=sys.stderr)
            return 2 if rc == 2 else 1
        native = target_records(out)
        _progress(f"  native run: {seconds:.1f} s")
        for tool in tools:
            for name, (shape, runs) in plans.items():
                exclude = excluded_kernels(tool, shape, args.racecheck_gemms)
                if exclude and exclude_with is None:
                    exclude = ()
                    skipped.append(f"{tool} at {shape_label(shape)}: this compute-sanitizer cannot "
                                   f"leave kernels out (no --kernel-name-exclude): cuBLAS's GEMMs "
                                   f"are instrumented too, which takes tens of minutes")
                elif exclude:
                    skipped.append(f"{tool} at {shape_label(shape)}: kernels named *{'*, *'.join(exclude)}* "
                                   f"(cuBLAS's GEMMs) run uninstrumented: tens of minutes under "
                                   f"{tool} at this shape; they are checked at the small shape "
                                   f"(pass --racecheck-gemms to check them here)")
                parts = split_parts(runs) if args.split else [("", runs, True)]
                jobs_list += [dict(tool=tool, shape_name=name, shape=shape, runs=part_runs,
                                   exclude=exclude, extra=extra, part=part)
                              for part, part_runs, extra in parts]
    for line in skipped:
        _progress(line)

    _progress(f"{SANITIZER} {version}: {len(jobs_list)} run(s), {min(jobs, len(jobs_list))} at a time")

    def one(i_job):
        i, job = i_job
        plant = job.get("plant")
        label = " ".join(filter(None, (job["tool"], job["shape_name"], job.get("part"))))
        _progress(f"  {label}: started")
        limit = min(timeout, 300) if plant else timeout     # a planted bug runs in seconds
        r = run_one(exe, timeout=limit, port=BASE_PORT + PORT_STRIDE * i, log_dir=args.log_dir,
                    exclude_with=exclude_with, **job)
        verdict = ("caught" if classify(r, True) else "MISSED") if plant else r.status
        _progress(f"  {label}: {verdict} ({r.seconds:.0f} s)")
        return r

    t0 = time.perf_counter()
    with ThreadPoolExecutor(max_workers=min(jobs, len(jobs_list))) as pool:
        results = list(pool.map(one, enumerate(jobs_list)))
    total = time.perf_counter() - t0
    passed = all(classify(r, args.self_test) for r in results)
    uncovered = {} if args.self_test else uncovered_sources(results)

    if args.json:
        out = {"sanitizer": exe, "version": version, "self_test": args.self_test,
               "ok": passed, "seconds": total, "skipped": skipped,
               "runs": [r.as_dict() for r in results]}
        if not args.self_test:
            out["native_steps"] = native
            out["not_run"] = uncovered
        print(json.dumps(out, indent=2))
    else:
        what = ("planted bugs (each tool must report its own)" if args.self_test
                else "forward + backward kernels")
        print(f"{SANITIZER} {version} ({exe}); target: {what}")
        ours = our_kernel_names() | {name for name, _ in PLANTED.values()}
        print(format_table(results, ours, args.self_test))
        for line in skipped:
            print(line)
        for src, why in uncovered.items():
            print(f"kernels/{src}.cu was NOT run under the sanitizer: {why}")
        if args.self_test:
            print(f"{'every planted bug was caught' if passed else 'a planted bug was MISSED'} "
                  f"({total:.0f} s)")
        else:
            print(f"{'all clean: 0 errors in every run' if passed else 'NOT clean'} "
                  f"({len(results)} runs, {total:.0f} s"
                  f"{'; see above for the sources not run' if uncovered else ''})")
    return 0 if passed else 1


# ---------------------------------------------------------------- the target process

PLANTED = {
    # one bug per tool, in a tiny kernel of its own: proof that a clean report is not vacuous
    "memcheck": ("write_one_past_the_end", """
extern "C" __global__ void write_one_past_the_end(float* x, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) x[i + 1] = 1.0f;       // bug: off by one, the last thread writes x[n]
}"""),
    "racecheck": ("read_without_barrier", """
extern "C" __global__ void read_without_barrier(float* x, int n) {
    __shared__ float s[64];
    s[threadIdx.x] = (float)threadIdx.x;
    // bug: no __syncthreads() between the write above and this read of another warp's slot
    x[threadIdx.x] = s[63 - threadIdx.x];
}"""),
    "initcheck": ("read_uninitialized", """
extern "C" __global__ void read_uninitialized(float* x, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) x[i] = x[i] + 1.0f;    // bug: x was allocated but never written
}"""),
    "synccheck": ("bad_warp_sync_mask", """
extern "C" __global__ void bad_warp_sync_mask(float* x, int n) {
    // bug: lanes 16..31 call __syncwarp with a mask that leaves them out
    __syncwarp(0x0000ffffu);
    x[threadIdx.x] = 1.0f;
}"""),
}


def _record(**kw):
    print(TARGET_PREFIX + json.dumps(kw), flush=True)


def _plant(tool):
    """Run the planted bug for ``tool`` (64 threads on a 64-float buffer)."""
    import numpy as np
    from .device import context
    from .kernels import compile_source
    context()
    import pycuda.driver as cuda
    name, source = PLANTED[tool]
    fn = compile_source(source, f"planted_{tool}.cu").get_function(name)
    n = 64
    buf = cuda.mem_alloc(4 * n)
    if tool != "initcheck":
        cuda.memset_d32(buf, 0, n)
    fn(buf, np.int32(n), grid=(1, 1, 1), block=(64, 1, 1))
    cuda.Context.synchronize()
    buf.free()
    _record(step="planted", tool=tool, kernel=name)


def target(shapes, plant=None, extra=True):
    """Run the forward once and the backward once per (kernel, block size), at each shape;
    then, if ``extra``, the sanitize_steps of EXTRA_STEP_MODULES."""
    import numpy as np
    from . import attention
    from .problem import make_inputs
    if plant:
        _plant(plant)
        _record(step="done")
        return 0
    for shape, runs in shapes:
        B, T, C, NH = shape
        inp, dout = make_inputs(B, T, C, NH, seed=0)
        with attention.AttentionBuffers(B, T, C, NH) as buf:
            buf.set("inp", inp)
            buf.set("dout", dout)
            t0 = time.perf_counter()
            attention.forward(buf, BLOCK_SIZE)
            out = buf.get("out")
            _record(step="forward", shape=shape, seconds=time.perf_counter() - t0)
            if not np.isfinite(out).all():
                print(f"attnlab.sanitize: the forward wrote NaN/Inf into out at {shape_label(shape)}",
                      file=sys.stderr)
                return 3
            for kernel, bs in runs:
                t0 = time.perf_counter()
                attention.backward(buf, kernel, bs)
                dinp = buf.get("dinp")
                _record(step="backward", shape=shape, kernel=kernel, block_size=bs,
                        seconds=time.perf_counter() - t0)
                if not np.isfinite(dinp).all():
                    print(f"attnlab.sanitize: backward kernel {kernel} (block size {bs}) wrote "
                          f"NaN/Inf into dinp at {shape_label(shape)}", file=sys.stderr)
                    return 3
        for name in EXTRA_STEP_MODULES if extra else ():
            if importlib.util.find_spec(name) is None:
                continue
            steps = getattr(importlib.import_module(name), "sanitize_steps", None)
            if steps is None:
                continue
            t0 = time.perf_counter()
            sources = list(steps(B, T, C, NH) or [])
            _record(step="extra", module=name, shape=shape, sources=sources,
                    seconds=time.perf_counter() - t0)
    _record(step="done")
    return 0


def _parse_runs(text):
    runs = []
    for item in (t for t in text.split(",") if t.strip()):
        k, _, bs = item.partition(":")
        runs.append((check_kernel(_int(k)), check_block_size(_int(bs or str(BLOCK_SIZE)))))
    return runs


def target_main(argv):
    p = argparse.ArgumentParser(prog="python -m attnlab.sanitize --target")
    p.add_argument("--target", action="store_true")
    p.add_argument("--shape", action="append", default=[], help="BxTxCxNH (repeatable)")
    p.add_argument("--runs", action="append", default=[],
                   help="kernel:block_size,... for the --shape before it (repeatable)")
    p.add_argument("--plant", choices=TOOLS, default=None)
    p.add_argument("--no-extra", action="store_true",
                   help="leave out the sanitize_steps of EXTRA_STEP_MODULES")
    args = p.parse_args(argv)
    try:
        if args.plant:
            return target([], args.plant)
        if len(args.runs) != len(args.shape):
            raise InputError(f"give one --runs per --shape, got {len(args.shape)} --shape and "
                             f"{len(args.runs)} --runs")
        shapes = [(parse_shape(s)[1], _parse_runs(r)) for s, r in zip(args.shape, args.runs)]
        return target(shapes, extra=not args.no_extra)
    except (InputError, NoGPUError) as e:
        print(f"attnlab: {e}", file=sys.stderr)
        return 2
    except AttnlabError as e:
        print(f"attnlab: {type(e).__name__}: {e}", file=sys.stderr)
        return 1


def main(argv=None):
    """``python -m attnlab.sanitize``: the target with --target, else the same as ``attnlab sanitize``."""
    argv = sys.argv[1:] if argv is None else list(argv)
    if "--target" in argv:
        return target_main(argv)
    p = argparse.ArgumentParser(prog="python -m attnlab.sanitize", description=__doc__.split("\n")[0])
    add_arguments(p)
    return run(p.parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())
