"""compute-sanitizer on the student's kernel: to name the line of a crash or of a race (or
on request), in a job of its own at the small shape."""
import re
import shutil

from .jobs import job_directory, make_job, run_job
from .spec import FILENAME, SANITIZER_TIMEOUT

# compute-sanitizer's options per tool (no leak check: the subprocess exits without freeing)
TOOL_OPTIONS = {
    "memcheck": ("--show-backtrace", "device"),
    "racecheck": ("--racecheck-report", "analysis", "--show-backtrace", "device"),
}


def find_sanitizer():
    """compute-sanitizer's path (as attnlab.sanitize finds it), or None."""
    try:
        from ..sanitize import find_sanitizer as find
        return find()
    except Exception:
        return shutil.which("compute-sanitizer")


def sanitizer_options():
    """The options attnlab.sanitize gives every tool (found to work on the H200), if any."""
    try:
        from ..sanitize import COMMON_OPTIONS
        return list(COMMON_OPTIONS)
    except Exception:
        return ["--target-processes", "application-only", "--launch-timeout", "120"]


def map_lines(text, filename, offset):
    """'your_kernel.cu:17' -> 'your_kernel.cu:17 (cell line 20)' in sanitizer output."""
    if offset is None:
        return text
    return re.sub(rf"{re.escape(filename)}:(\d+)",
                  lambda m: f"{m.group(0)} (cell line {int(m.group(1)) + offset})", text)


def sanitizer_findings(log, filename=FILENAME, offset=None, limit=14):
    """The lines of a compute-sanitizer log that say what happened and where."""
    keep = []
    for ln in log.splitlines():
        if not ln.startswith("="):
            continue                           # not compute-sanitizer's
        s = re.sub(r"^=+\s?", "", ln).rstrip()
        if not s.strip():
            continue
        if re.search(r"Saved host backtrace|Host Frame|COMPUTE-SANITIZER", s):
            continue
        if re.search(r"Invalid|Race reported|Error|Warning|Hazard|hazard|Address|at .*0x|"
                     r"by thread|in block", s) and \
                not re.search(r"ERROR SUMMARY: 0 errors|RACECHECK SUMMARY: 0 hazards", s):
            keep.append("    " + s.strip())
        if len(keep) >= limit:
            break
    return map_lines("\n".join(keep), filename, offset)


def run_sanitizer(attempt, tool):
    """(text for the report, whether it found an error) of one compute-sanitizer tool on the
    attempt's kernel at the small shape, or (None, False) without compute-sanitizer."""
    path = find_sanitizer()
    if not path:
        return None, False
    job = make_job(attempt.exercise, attempt.source, attempt.filename, attempt.cases[:1],
                   attempt.variants[:1], runs=1, timing=False, guard=False, lineinfo=True)
    prefix = [path, "--tool", tool, *sanitizer_options(), *TOOL_OPTIONS[tool]]
    with job_directory() as jobdir:
        outcome = run_job(job, SANITIZER_TIMEOUT, jobdir, prefix=prefix)
    if outcome.timed_out:
        return f"  (compute-sanitizer --tool {tool} did not finish in {SANITIZER_TIMEOUT} s)", False
    log = "\n".join(ln for ln in (outcome.stdout + "\n" + outcome.stderr).splitlines()
                    if ln.startswith("====="))
    found = sanitizer_findings(log, attempt.filename, attempt.offset)
    if not found:
        return f"  compute-sanitizer --tool {tool} found nothing to report.", False
    error = re.search(r"Invalid|Race reported|Error", found) is not None
    return f"  compute-sanitizer --tool {tool} says:\n{found}", error
