"""compute-sanitizer (memcheck, racecheck, initcheck, synccheck) over every kernel in kernels/.

    python -m attnlab sanitize                 # 4 tools x 2 shapes (default and small)
    python -m attnlab sanitize --quick         # the small shape only
    python -m attnlab sanitize --tools memcheck,racecheck --kernels 4,8 --extra none --json
    python -m attnlab sanitize --self-test     # plant one bug per tool: is each caught?
    python -m attnlab sanitize --shapes default --tools racecheck --split --jobs 14

Each (tool, shape) is one subprocess, ``compute-sanitizer --tool TOOL ... python -m
attnlab.sanitize --target ...``: the softmax pipeline forward once (permute, two cuBLAS SGEMMs,
softmax_forward_kernel5, unpermute), backward once per chosen kernel (unpermute_backward, four
SGEMMs, the kernel, permute_backward; kernels 6-8 also at the extra block sizes), then the
named targets of --extra: fused (kernels/flash_attention*.cu) and ceilings (kernels/ceilings.cu,
l2_flush.cu). --split makes each (kernel, block size) and each named target a run of its own.
The target first runs once natively (compiling every kernel). Kernel 1 is skipped at shapes as
large as the default unless --include-slow, and racecheck there leaves cuBLAS's GEMMs
uninstrumented unless --racecheck-gemms; both are checked at the small shape. A kernels/*.cu
source that no run executed is listed as NOT run, with the reason.

Exit status: 0 when every run reported 0 errors (--self-test: every planted bug was caught),
1 otherwise, 2 for bad arguments, no GPU or no compute-sanitizer.
"""
import argparse
import json
import os
import re
import shlex
import shutil
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from pathlib import Path

from .checks import (KERNELS, check_block_size, check_int, check_kernel, check_shape,
                     parse_block_sizes, parse_list)
from .errors import AttnlabError, InputError, NoGPUError
from .fused import BACKWARD_SOURCES
from .launch import compiled_per_block_size
from .problem import DEFAULT, Shape
from .processes import run as run_process

TOOLS = ("memcheck", "racecheck", "initcheck", "synccheck")
# T = 516: a multiple of 4 but not of 8 (kernels 4 and 5 handle 8 columns per warp, kernel 8
# 4 rows per block) nor of any block size (the last tile of kernels 6-8 is partial).
SHAPES = {"default": DEFAULT, "small": Shape(B=1, T=516, C=192, NH=3)}
BLOCK_SIZE, EXTRA_BLOCK_SIZES = 256, (32, 1024)
# Kernel 1 runs B*NH*T^3/3 iterations on T threads: 7 s natively at the default shape, 10-100x
# that under a tool. Skipped, unless asked, above this B*NH*T^3 (the small shape: 4.1e8), where
# racecheck also leaves cuBLAS's GEMMs (kernel names containing "gemm") uninstrumented.
SLOW_KERNEL1_WORK = 2e9
RACECHECK_EXCLUDE_AT_LARGE = ("gemm",)
SANITIZER, SANITIZER_DIRS = "compute-sanitizer", ("/usr/local/cuda/bin",)
NOT_FOUND = f"{SANITIZER} not found on PATH (it ships with the CUDA toolkit: /usr/local/cuda/bin)"
BASE_PORT, PORT_STRIDE = 49152, 20   # parallel runs each get --max-connections (10) ports
TARGET_PREFIX = "@@attnlab-sanitize "   # machine-readable lines the target prints
FIRST_LINES = 40                        # error lines kept from each run
PIPELINE_SOURCES = ("permute", "softmax_forward")   # what forward + backward always run
COMMON_OPTIONS = (
    "--error-exitcode", "99",                  # any error -> exit status 99
    "--target-processes", "application-only",  # not the nvcc that PyCUDA may spawn
    "--destroy-on-device-error", "kernel",     # keep going: report every failing kernel
    "--ignore-getprocaddress-notfound",        # the CUDA runtime probing optional driver calls
    "--launch-timeout", "120",                 # Python starts slowly when runs overlap
)
TOOL_OPTIONS = {
    # out-of-bounds accesses, and device memory still allocated at exit (who allocated it)
    "memcheck": ("--leak-check", "full", "--show-backtrace", "yes", "--num-callers-host", "12"),
    # shared-memory hazards, one analysed report per race, warnings included
    "racecheck": ("--racecheck-report", "analysis", "--racecheck-detect-level", "warn",
                  "--show-backtrace", "device"),
    # reads of device memory never written, by kernels and by memcpy
    "initcheck": ("--check-api-memory-access", "yes", "--show-backtrace", "device"),
    # barriers and warp syncs that not every thread they name reaches
    "synccheck": ("--show-backtrace", "device"),
}


def _fused(B, T, C, NH):
    from .fused import sanitize_steps      # head size 64 only: both sanitize shapes have it
    return sanitize_steps(B, T, C, NH)


def _ceilings(B, T, C, NH):
    from .ceilings import sanitize_steps   # the shape does not matter to them
    return sanitize_steps(B, T, C, NH)


# The named targets (--extra): name -> (a function that runs each of its kernels once at a
# shape, untimed, and returns the kernels/*.cu sources it ran; the sources it covers).
TARGETS = {"fused": (_fused, tuple(sorted(set(BACKWARD_SOURCES.values())))),
           "ceilings": (_ceilings, ("ceilings", "l2_flush", "wgmma_check"))}


class SanitizerNotFoundError(AttnlabError, RuntimeError):
    """compute-sanitizer is neither on PATH nor in /usr/local/cuda/bin."""


# ---------------------------------------------------------------- what to run

def find_sanitizer(path=None, dirs=None):
    """The path of compute-sanitizer: on PATH, in $CUDA_HOME/bin, or in /usr/local/cuda/bin."""
    if dirs is None:
        dirs = [os.path.join(os.environ[v], "bin") for v in ("CUDA_HOME", "CUDA_PATH")
                if os.environ.get(v)] + list(SANITIZER_DIRS)
    for search in (path, *dirs):           # path None: $PATH
        if found := shutil.which(SANITIZER, path=search):
            return found
    raise SanitizerNotFoundError(NOT_FOUND)


def parse_shape(text):
    """'default', 'small' or 'BxTxCxNH' (e.g. 2x260x192x3) -> (name, Shape)."""
    text = str(text).strip()
    if text in SHAPES:
        return text, SHAPES[text]
    parts = text.lower().split("x")
    if len(parts) != 4 or not all(p.isdecimal() for p in parts):
        raise InputError(f"--shapes: each shape must be one of {sorted(SHAPES)} or BxTxCxNH "
                         f"(e.g. 2x260x192x3), got {text!r}")
    try:
        return text, Shape(*check_shape(*map(int, parts)))
    except InputError as e:
        raise InputError(f"--shapes {text!r}: {e}") from None


def parse_extra(text):
    """'fused,ceilings' -> ('fused', 'ceilings'); 'none' -> ()."""
    none = str(text).strip().lower() in ("", "none")
    return () if none else tuple(parse_list(text, "--extra", tuple(TARGETS)))


def kernel1_is_slow(shape):
    return shape.B * shape.NH * shape.T ** 3 > SLOW_KERNEL1_WORK


def plan(shape, kernels=KERNELS, block_sizes=(BLOCK_SIZE,), extra_block_sizes=EXTRA_BLOCK_SIZES,
         include_slow=False):
    """([(kernel, block_size), ...] to run, [why each skipped kernel was skipped])."""
    runs, skipped = [], []
    for k in map(check_kernel, kernels):
        if k == 1 and kernel1_is_slow(shape) and not include_slow:
            skipped.append(f"kernel 1 skipped at {shape.label}: about 7 s natively at the "
                           f"default shape and 10-100x that under a sanitizer; it is checked at "
                           f"the small shape (pass --include-slow to run it here)")
            continue
        extra = [bs for bs in extra_block_sizes if bs not in block_sizes]
        runs += [(k, check_block_size(bs))
                 for bs in [*block_sizes, *(extra if compiled_per_block_size(k) else ())]]
    return runs, skipped


def target_args(plans, plant=None, extra=tuple(TARGETS)):
    """The arguments of ``python -m attnlab.sanitize --target`` for [(shape, runs), ...]."""
    args = ["--target"]
    for shape, runs in plans:
        args += ["--shape", "x".join(map(str, shape.astuple())),
                 "--runs", ",".join(f"{k}:{bs}" for k, bs in runs)]
    return args + (["--plant", plant] if plant else ["--extra", ",".join(extra) or "none"])


def split_parts(runs, extra):
    """--split: [(part, runs, extra)], each (kernel, block size) and each named target on its
    own (each part also runs the forward)."""
    parts = [(f"k{k}-bs{bs}", [(k, bs)], ()) for k, bs in runs]
    return parts + [(name, [], (name,)) for name in extra] or [("", [], ())]


def sanitizer_command(exe, tool, args, port=None, exclude=()):
    """compute-sanitizer, its options for ``tool``, then the target. ``exclude``: substrings
    of the names of kernels the tool leaves uninstrumented (they still run)."""
    if tool not in TOOLS:
        raise InputError(f"tool must be one of {list(TOOLS)}, got {tool!r}")
    cmd = [exe, "--tool", tool, *COMMON_OPTIONS, *TOOL_OPTIONS[tool]]
    for name in exclude:
        cmd += ["--kernel-name-exclude", f"kns={name}"]
    if port is not None:
        cmd += ["--port", str(port)]
    return cmd + [sys.executable, "-m", "attnlab.sanitize", *args]


def excluded_kernels(tool, shape, racecheck_gemms=False):
    """Substrings of kernel names ``tool`` leaves uninstrumented at ``shape``."""
    slow = tool == "racecheck" and kernel1_is_slow(shape) and not racecheck_gemms
    return RACECHECK_EXCLUDE_AT_LARGE if slow else ()


# ---------------------------------------------------------------- what a run said

_SUMMARY = re.compile(r"ERROR SUMMARY:\s*(\d+)\s+errors?")
_RACE = re.compile(r"RACECHECK SUMMARY:\s*\d+\s+hazards?\s+displayed\s*"
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


def parse_report(text, first=FIRST_LINES):
    """Read compute-sanitizer's output: summaries, kernels named in errors, first error lines."""
    r = Report()
    for m in _SUMMARY.finditer(text):
        r.errors = int(m.group(1))        # the last one, if a run printed several
    if m := _RACE.search(text):
        r.race_errors, r.race_warnings = int(m.group(1)), int(m.group(2))
        if r.errors is None:              # racecheck 2025.3 prints no ERROR SUMMARY
            r.errors = r.race_errors
    if m := _LEAK.search(text):
        r.leaked_bytes, r.leaked_allocations = int(m.group(1)), int(m.group(2))
    body = [ln[9:].rstrip() for ln in text.splitlines()    # its lines start with =========
            if ln.startswith("=" * 9) and ln[9:].strip() and not _QUIET.search(ln)]
    r.lines = body[:first]
    r.kernels = list(dict.fromkeys(n.strip() for ln in body for n in _AT.findall(ln)))
    return r


def target_records(text):
    """The target's machine-readable lines: one dict per step it ran."""
    out = []
    for ln in text.splitlines():
        if ln.startswith(TARGET_PREFIX):
            try:
                out.append(json.loads(ln[len(TARGET_PREFIX):]))
            except ValueError:
                pass                      # a line another process's output cut into
    return out


@dataclass
class Result:
    """One sanitizer run: a (tool, shape), or with --split a part of one."""
    tool: str
    shape_name: str
    shape: Shape
    runs: list
    command: list
    returncode: int = None
    seconds: float = 0.0
    timed_out: bool = False
    report: Report = None
    steps: list = field(default_factory=list)
    tail: str = ""                   # the last lines of output when the run did not finish
    extra: tuple = ()                # the named targets it ran after the softmax pipeline
    part: str = ""                   # with --split: which part of the (tool, shape) it is

    @property
    def status(self):
        """'clean', 'ERRORS', 'TIMEOUT' or 'FAILED' (no summary, or the target failed)."""
        r = self.report
        if self.timed_out:
            return "TIMEOUT"
        if r is None or r.errors is None:
            return "FAILED"
        if r.errors or r.race_errors or r.race_warnings or r.leaked_bytes:
            return "ERRORS"
        if self.returncode != 0 or not any(s.get("step") == "done" for s in self.steps):
            return "FAILED"          # the target did not finish (its own error, see the tail)
        return "clean"

    def as_dict(self):
        return {**asdict(self), "shape": list(self.shape.astuple()), "status": self.status}


def classify(result, expect_errors=False):
    """Did this run pass? For a planted bug (self-test), passing means it was caught."""
    if expect_errors:
        return not result.timed_out and bool(result.report and result.report.errors)
    return result.status == "clean"


def uncovered_sources(results, all_sources=None):
    """{each kernels/*.cu source that no run executed: why}."""
    if all_sources is None:
        from .kernels import KERNEL_DIR
        all_sources = sorted(p.stem for p in KERNEL_DIR.glob("*.cu"))
    ran, chosen = set(PIPELINE_SOURCES), {name for r in results for name in r.extra}
    for r in results:
        ran.update(f"softmax_backward{k}" for k, _ in r.runs)
        ran.update(src for s in r.steps if s.get("step") == "extra" for src in s["sources"])
    out = {}
    for src in (s for s in all_sources if s not in ran):
        owner = next((n for n, (_, sources) in TARGETS.items() if src in sources), None)
        if src.startswith("softmax_backward"):
            out[src] = "not selected (--kernels)"
        elif owner is None:
            out[src] = "no target runs it (add one to TARGETS in attnlab/sanitize.py)"
        elif owner not in chosen:
            out[src] = f"its target {owner!r} was not selected (--extra)"
        else:
            out[src] = f"its target {owner!r} did not run it at these shapes on this GPU"
    return out


def _runs_text(runs, extra=()):
    """'2-8@256 6-8@32 + fused,ceilings': the (kernel, block size) pairs and named targets."""
    by_bs = {}
    for k, bs in runs:
        by_bs.setdefault(bs, []).append(k)
    text = []
    for bs, ks in sorted(by_bs.items(), key=lambda item: (-len(item[1]), item[0])):
        span = len(ks) > 2 and ks == list(range(ks[0], ks[-1] + 1))
        text.append(f"{ks[0]}-{ks[-1]}@{bs}" if span else f"{','.join(map(str, ks))}@{bs}")
    return " ".join(text + (["+ " + ",".join(extra)] if extra else [])) or "forward only"


def format_table(results, ours=frozenset(), expect_errors=False):
    """The result table, then the first error lines of every run that did not pass."""
    head = (f"{'tool':<10} {'shape':<31} {'kernel@block size':<40} {'errors':>6} "
            f"{'races':>5} {'leaked':>8} {'time':>7}  result")
    lines, details = [head, "-" * len(head)], []
    for r in results:
        rep, passed = r.report or Report(), classify(r, expect_errors)
        verdict = ("caught" if passed else "MISSED") if expect_errors else r.status
        races = "-" if rep.race_errors is None else rep.race_errors + rep.race_warnings
        leaked = "-" if rep.leaked_bytes is None else f"{rep.leaked_bytes} B"
        if r.shape_name == "self-test":
            shape, what, where = "-", "planted: " + PLANTED[r.tool][0], "a planted bug"
        else:
            shape, what = f"{r.shape_name} {r.shape.label}", _runs_text(r.runs, r.extra)
            where = f"{r.shape_name} ({r.shape.label})"
        lines.append(f"{r.tool:<10} {shape:<31} {what:<40} "
                     f"{'?' if rep.errors is None else rep.errors:>6} {races:>5} {leaked:>8} "
                     f"{r.seconds:6.0f}s  {verdict}")
        if not passed or expect_errors:
            details += ["", f"--- {r.tool} at {where}: {verdict}, exit status {r.returncode}"]
            details += _details(r, rep, ours, passed)
    return "\n".join(lines + details)


def _details(r, rep, ours, passed):
    """The kernels a run's errors name, its first error lines, how to rerun it."""
    out = []
    if rep.kernels:
        base = (re.split(r"[<(\s]", k.replace("void ", "").strip())[0] for k in rep.kernels)
        out.append("kernels named in the reports: " + "; ".join(
            f"{k} ({'ours' if b in ours else 'not ours: cuBLAS or PyCUDA'})"
            for k, b in zip(rep.kernels, base)))
    if shown := rep.lines[:4] if passed else rep.lines:
        out += [f"first {len(shown)} lines of the sanitizer's report:"] + ["  " + ln for ln in shown]
    if not passed:
        if r.tail:
            out += ["last lines of output:"] + ["  " + ln for ln in r.tail.splitlines()]
        out.append("rerun it alone with: " + shlex.join(r.command))
    return out


def our_kernel_names():
    """The extern "C" kernels of kernels/*.cu (to tell ours from cuBLAS's in error reports)."""
    from .kernels import KERNEL_DIR, kernel_names
    return {n for p in KERNEL_DIR.glob("*.cu") for n in kernel_names(p.read_text())}


# ---------------------------------------------------------------- running

def _run(cmd, timeout):
    """run_process, importing this very attnlab wherever the command was started."""
    root, path = str(Path(__file__).resolve().parent.parent), os.environ.get("PYTHONPATH")
    env = {**os.environ, "PYTHONPATH": root + (os.pathsep + path if path else "")}
    return run_process(cmd, timeout, env=env, merge_stderr=True)


def sanitizer_version(exe):
    try:
        m = re.search(r"Version\s+(\S+)", run_process([exe, "--version"], 60).stdout)
    except OSError:
        m = None
    return m.group(1) if m else "unknown version"


def execute(r, timeout, log_dir=None):
    """Run ``r.command`` and fill in the Result ``r`` from what it printed."""
    f = _run(r.command, timeout)
    r.returncode, r.seconds, r.timed_out = f.returncode, f.seconds, f.timed_out
    r.report, r.steps = parse_report(f.stdout), target_records(f.stdout)
    if r.status in ("FAILED", "TIMEOUT"):
        r.tail = "\n".join(f.stdout.strip().splitlines()[-15:])
    if log_dir:
        Path(log_dir).mkdir(parents=True, exist_ok=True)
        name = "-".join(filter(None, (r.tool, r.shape_name, r.part)))
        (Path(log_dir) / f"{name}.log").write_text(shlex.join(r.command) + "\n\n" + f.stdout)
    return r


def _jobs(o, exe, plans):
    """The sanitizer runs to do (Results, not run yet), each with its own ports, and lines
    saying which kernels are left uninstrumented where."""
    jobs, notes = [], []

    def add(tool, name, shape, args, runs=(), extra=(), part="", exclude=()):
        cmd = sanitizer_command(exe, tool, args, BASE_PORT + PORT_STRIDE * len(jobs), exclude)
        jobs.append(Result(tool, name, shape, list(runs), cmd, extra=extra, part=part))

    if o.self_test:           # the target runs only the planted kernel
        for tool in o.tools:
            add(tool, "self-test", SHAPES["small"], target_args([], plant=tool))
        return jobs, notes
    for tool in o.tools:
        for name, (shape, runs) in plans.items():
            if exclude := excluded_kernels(tool, shape, o.racecheck_gemms):
                notes.append(f"{tool} at {shape.label}: kernels named *{'*, *'.join(exclude)}* "
                             f"(cuBLAS's GEMMs) run uninstrumented: tens of minutes under {tool} "
                             f"at this shape; they are checked at the small shape (pass "
                             f"--racecheck-gemms to check them here)")
            for part, part_runs, extra in (split_parts(runs, o.extra) if o.split
                                           else [("", runs, o.extra)]):
                add(tool, name, shape, target_args([(shape, part_runs)], extra=extra),
                    part_runs, extra, part, exclude)
    return jobs, notes


def _execute_all(o, jobs):
    """Run the jobs, --jobs at a time, saying on stderr when each starts and ends."""
    def one(r):
        label = " ".join(filter(None, (r.tool, r.shape_name, r.part)))
        _progress(f"  {label}: started")
        execute(r, min(o.timeout, 300) if o.self_test else o.timeout, o.log_dir)
        verdict = ("caught" if classify(r, True) else "MISSED") if o.self_test else r.status
        _progress(f"  {label}: {verdict} ({r.seconds:.0f} s)")
        return r
    with ThreadPoolExecutor(max_workers=min(o.jobs, len(jobs))) as pool:
        return list(pool.map(one, jobs))


def run(args):
    """``python -m attnlab sanitize``: the exit status (0 clean, 1 errors, 2 cannot run)."""
    try:
        o = _options(args)
    except InputError as e:
        print(f"attnlab: {e}", file=sys.stderr)
        return 2
    exe, missing = _sanitizer_and_gpu()
    if missing:
        print(f"attnlab: {'; and '.join(missing)}", file=sys.stderr)
        return 2
    version, plans, skipped = sanitizer_version(exe), {}, []
    for name, shape in () if o.self_test else o.shapes:
        runs, why = plan(shape, o.kernels, o.block_sizes, o.extra_block_sizes, o.include_slow)
        plans[name], skipped = (shape, runs), skipped + why
    if plans:       # natively first: compiles every kernel once, and shows the target works
        _progress(f"running the target natively first (compiles the kernels; "
                  f"{len(plans)} shape(s))...")
        f = _run([sys.executable, "-m", "attnlab.sanitize",
                  *target_args(plans.values(), extra=o.extra)], o.timeout)
        if f.returncode or f.timed_out:
            print(f"attnlab: the target failed without a sanitizer (exit status {f.returncode}"
                  f"{', timed out' if f.timed_out else ''}):\n{f.stdout.strip()[-4000:]}",
                  file=sys.stderr)
            return 2 if f.returncode == 2 else 1
        _progress(f"  native run: {f.seconds:.1f} s")
    jobs, notes = _jobs(o, exe, plans)
    for line in skipped + notes:
        _progress(line)
    _progress(f"{SANITIZER} {version}: {len(jobs)} run(s), {min(o.jobs, len(jobs))} at a time")
    t0 = time.perf_counter()
    results = _execute_all(o, jobs)
    out = {"sanitizer": exe, "version": version, "self_test": o.self_test,
           "ok": all(classify(r, o.self_test) for r in results),
           "seconds": time.perf_counter() - t0, "skipped": skipped + notes,
           "runs": [r.as_dict() for r in results]}
    if plans:
        out.update(native_steps=target_records(f.stdout), not_run=uncovered_sources(results))
    print(json.dumps(out, indent=2) if o.json else _summary(out, results))
    return 0 if out["ok"] else 1


def _sanitizer_and_gpu():
    """(compute-sanitizer's path or None, [what is missing: the GPU, the sanitizer])."""
    from .device import gpu_status
    ok, why = gpu_status()
    missing = [] if ok else [f"python -m attnlab sanitize needs a CUDA GPU: {why}"]
    try:
        return find_sanitizer(), missing
    except SanitizerNotFoundError as e:
        return None, missing + [str(e)]


def _summary(out, results):
    """What ``run`` prints without --json: the table, what was left out, the verdict."""
    test = out["self_test"]
    what = "planted bugs (each tool must report its own)" if test else "forward + backward kernels"
    ours = our_kernel_names() | {name for name, _ in PLANTED.values()}
    lines = [f"{SANITIZER} {out['version']} ({out['sanitizer']}); target: {what}",
             format_table(results, ours, test), *out["skipped"]]
    lines += [f"kernels/{src}.cu was NOT run under the sanitizer: {why}"
              for src, why in out.get("not_run", {}).items()]
    if test:
        lines.append(f"{'every planted bug was caught' if out['ok'] else 'a planted bug was MISSED'}"
                     f" ({out['seconds']:.0f} s)")
    else:
        lines.append(f"{'all clean: 0 errors in every run' if out['ok'] else 'NOT clean'} "
                     f"({len(results)} runs, {out['seconds']:.0f} s"
                     f"{'; see above for the sources not run' if out['not_run'] else ''})")
    return "\n".join(lines)


def _progress(msg):
    print(msg, file=sys.stderr, flush=True)


def add_arguments(p):
    """The options of ``python -m attnlab sanitize`` (also used by ``-m attnlab.sanitize``)."""
    a, flag = p.add_argument, lambda name, text: p.add_argument(name, action="store_true", help=text)
    a("--tools", default=",".join(TOOLS), help=f"from {','.join(TOOLS)} (default: all four)")
    a("--shapes", default="default,small", help=f"default ({SHAPES['default'].label}), small "
      f"({SHAPES['small'].label}) or BxTxCxNH, comma-separated (default: default,small)")
    flag("--quick", "the small shape only (same as --shapes small)")
    a("--kernels", default=",".join(map(str, KERNELS)), help="softmax-backward kernels "
      "(default: 1,...,8); the forward's kernels always run")
    a("--block-sizes", default=str(BLOCK_SIZE), help=f"for every kernel (default: {BLOCK_SIZE})")
    a("--extra-block-sizes", default=",".join(map(str, EXTRA_BLOCK_SIZES)), help="more block "
      "sizes for kernels 6-8, compiled per block size (default: 32,1024; 'none' for none)")
    a("--extra", default=",".join(TARGETS), help="named targets run after the softmax pipeline: "
      "fused (kernels/flash_attention*.cu), ceilings (kernels/ceilings.cu, l2_flush.cu) "
      "(default: both; 'none': the softmax pipeline only)")
    flag("--include-slow", "also run kernel 1 at the default shape (minutes under a sanitizer)")
    flag("--racecheck-gemms", "let racecheck instrument cuBLAS's GEMMs at the default shape "
         "too (tens of minutes; by default they are racechecked at the small shape)")
    flag("--split", "one sanitizer run per (kernel, block size) and per named target, not per "
         "(tool, shape): a run that times out names its kernel (each also runs the forward)")
    a("--jobs", type=int, default=8, help="sanitizer runs at once (default 8; each needs about "
      "1 GiB of the GPU)")
    a("--timeout", type=int, default=1800, help="seconds per run (default 1800)")
    a("--log-dir", help="write each run's output to DIR/TOOL-SHAPE[-PART].log")
    flag("--self-test", "instead, plant one bug per tool in a tiny kernel and check that the "
         "tool reports it (exit 0 when every planted bug is caught)")
    flag("--json", "print one JSON object on stdout")


def _options(args):
    """Every option checked before anything runs, and parsed."""
    o = argparse.Namespace(**vars(args))
    o.tools = parse_list(args.tools, "--tools", TOOLS)
    o.shapes = [parse_shape(s) for s in parse_list("small" if args.quick else args.shapes,
                                                   "--shapes")]
    o.kernels = parse_list(args.kernels, "--kernels", None,
                           lambda v: check_kernel(_int(v), name="--kernels"))
    o.block_sizes = parse_block_sizes(args.block_sizes, "--block-sizes")
    none = str(args.extra_block_sizes).strip().lower() in ("", "none")
    o.extra_block_sizes = [] if none else parse_block_sizes(args.extra_block_sizes,
                                                          "--extra-block-sizes")
    o.extra = parse_extra(args.extra)
    o.jobs, o.timeout = check_int("--jobs", args.jobs), check_int("--timeout", args.timeout)
    return o


def _int(text):
    try:
        return int(text)
    except ValueError:
        return text            # the check that follows names the option and the value


# ---------------------------------------------------------------- the target process

PLANTED = {   # one bug per tool, in a tiny kernel of its own: a clean report is not vacuous
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
    __syncwarp(0x0000ffffu);          // bug: lanes 16..31 call it with a mask without them
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
    module = compile_source(source, f"planted_{tool}.cu")   # held until the kernel has finished:
    buf = cuda.mem_alloc(4 * 64)                             # unloading it under a running kernel
    if tool != "initcheck":                                  # crashed racecheck's run (H200)
        cuda.memset_d32(buf, 0, 64)
    module.get_function(name)(buf, np.int32(64), grid=(1, 1, 1), block=(64, 1, 1))
    cuda.Context.synchronize()
    buf.free()
    _record(step="planted", tool=tool, kernel=name)


def _pipeline(shape, runs):
    """The forward once, then the backward once per (kernel, block size): 0, or 3 when one
    of them wrote a value that is not finite."""
    import numpy as np
    from . import attention
    from .problem import make_inputs
    inp, dout = make_inputs(*shape.astuple(), seed=0)
    with attention.AttentionBuffers(*shape.astuple()) as buf:
        buf.set("inp", inp)
        buf.set("dout", dout)
        for kernel, bs in [(None, BLOCK_SIZE), *runs]:
            t0 = time.perf_counter()
            if kernel is None:
                attention.forward(buf, bs)
                what, name, step = "the forward", "out", dict(step="forward")
            else:
                attention.backward(buf, kernel, bs)
                what, name = f"backward kernel {kernel} (block size {bs})", "dinp"
                step = dict(step="backward", kernel=kernel, block_size=bs)
            finite = np.isfinite(buf.get(name)).all()
            _record(**step, shape=shape.astuple(), seconds=time.perf_counter() - t0)
            if not finite:
                print(f"attnlab.sanitize: {what} wrote NaN/Inf into {name} at {shape.label}",
                      file=sys.stderr)
                return 3
    return 0


def target(shapes, plant=None, extra=tuple(TARGETS)):
    """At each (shape, runs): the softmax pipeline, then each named target of ``extra``.
    With ``plant``, only that tool's planted bug."""
    if plant:
        _plant(plant)
        shapes = ()
    for shape, runs in shapes:
        if status := _pipeline(shape, runs):
            return status
        for name in extra:
            t0 = time.perf_counter()
            sources = list(TARGETS[name][0](*shape.astuple()) or [])
            _record(step="extra", target=name, shape=shape.astuple(), sources=sources,
                    seconds=time.perf_counter() - t0)
    _record(step="done")
    return 0


def _parse_runs(text):
    """'4:256,8:32' -> [(4, 256), (8, 32)]."""
    pairs = (item.partition(":") for item in text.split(",") if item.strip())
    return [(check_kernel(_int(k)), check_block_size(_int(bs or str(BLOCK_SIZE))))
            for k, _, bs in pairs]


def target_main(argv):
    p = argparse.ArgumentParser(prog="python -m attnlab.sanitize --target")
    p.add_argument("--target", action="store_true")
    p.add_argument("--shape", action="append", default=[], help="BxTxCxNH (repeatable)")
    p.add_argument("--runs", action="append", default=[],
                   help="kernel:block_size,... for the --shape before it (repeatable)")
    p.add_argument("--plant", choices=TOOLS)
    p.add_argument("--extra", default=",".join(TARGETS), help="named targets, or none")
    args = p.parse_args(argv)
    try:
        if len(args.runs) != len(args.shape):
            raise InputError(f"give one --runs per --shape, got {len(args.shape)} --shape and "
                             f"{len(args.runs)} --runs")
        shapes = [(parse_shape(s)[1], _parse_runs(r)) for s, r in zip(args.shape, args.runs)]
        return target(shapes, args.plant, parse_extra(args.extra))
    except (InputError, NoGPUError) as e:
        print(f"attnlab: {e}", file=sys.stderr)
        return 2
    except AttnlabError as e:
        print(f"attnlab: {type(e).__name__}: {e}", file=sys.stderr)
        return 1


def main(argv=None):
    """``python -m attnlab.sanitize``: the target with --target, else ``attnlab sanitize``."""
    argv = sys.argv[1:] if argv is None else list(argv)
    if "--target" in argv:
        return target_main(argv)
    p = argparse.ArgumentParser(prog="python -m attnlab.sanitize",
                                description=__doc__.split("\n")[0])
    add_arguments(p)
    return run(p.parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())
