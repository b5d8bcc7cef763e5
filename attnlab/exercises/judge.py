"""The verdict of a check, from what the child process reported: one Attempt in, one
CheckResult out (or ExerciseFailed raised)."""
import shlex
from dataclasses import dataclass, field

import numpy as np

from ..errors import AttnlabError, NoGPUError
from .compile_errors import format_compile_error
from .declaration import strip_comments
from .diagnosis import describe_mismatch, describe_runs
from .faults import cuda_error_words, describe_guards
from .jobs import ChildOutcome
from .results import SEVERITY, conclude
from .sanitizer import run_sanitizer
from .spec import DEFAULT_TIMEOUT, FILENAME, RUNS, Exercise
from .timing import describe_time, timing_summary, timings

CONTEXT_NOTE = ("  (the kernel ran in a separate process: your notebook's own GPU context is "
                "unharmed; fix the kernel and check again)")


@dataclass
class Attempt:
    """One check of one source: what is checked and how, and (once run) what the child
    process reported."""
    exercise: Exercise
    source: str
    filename: str = FILENAME
    offset: int = None                # lines of the notebook cell before the source, if known
    substituted: bool = False         # the reference solution is checked instead
    cases: list = field(default_factory=list)       # attnlab.exercises.cases.Case
    variants: list = field(default_factory=list)    # {label, defines, grids, blocks}
    timeout: float = DEFAULT_TIMEOUT
    sanitize: bool = None             # None: compute-sanitizer only to explain a crash or race
    quiet: bool = False
    raises: bool = True               # False: a failure is returned (and printed), not raised
    outcome: ChildOutcome = None

    def finish(self, kind, lines, *, timing=None, sanitizer=None):
        """The CheckResult (results.conclude): raised, printed or returned as asked."""
        return conclude(self.exercise, kind, lines, solution=self.substituted, timing=timing,
                        sanitizer=sanitizer, quiet=self.quiet, raises=self.raises)

    def printed(self):
        """What the kernel printed (printf), its last 15 lines."""
        text = self.outcome.stdout.strip()
        if not text:
            return []
        n = len(text.splitlines())
        more = f" (last 15 of {n} lines)" if n > 15 else ""
        return [f"  your kernel printed{more}:", tail(text)]


def tail(text, n=15):
    lines = [ln for ln in text.splitlines() if ln.strip()]
    return "\n".join("    " + ln for ln in lines[-n:])


def indent(text):
    return ["  " + ln for ln in text.splitlines()]


def and_(names):
    names = list(names)
    return names[0] if len(names) == 1 else ", ".join(names[:-1]) + " and " + names[-1]


def judge(attempt):
    """The CheckResult of an attempt the child process has run."""
    failed = _child_failure(attempt)
    if failed is not None:
        return failed
    v = attempt.outcome.result["variants"][0]
    kinds, lines, outs = _small_case(attempt, v["cases"][0])
    results_right = not kinds
    sanitizer = _sanitize(attempt, kinds)
    if kinds:
        if results_right:
            lines.append(f"  the results were right in {RUNS} runs, but compute-sanitizer found "
                         f"a problem that may show another time:")
        if sanitizer:
            lines.append(sanitizer)
        return attempt.finish(min(kinds, key=SEVERITY.index), lines + attempt.printed(),
                              sanitizer=sanitizer)
    c0, ex = attempt.cases[0], attempt.exercise
    n_runs = len(next(iter(outs.values()))) if outs else 0
    rule = "exactly equal" if ex.tol == 0 else f"within {ex.tol:g} + |expected|*FLT_EPSILON"
    lines.append(f"  {and_(c0.expected)}: right at {c0.label}: every element {rule}, the same "
                 f"in {n_runs} runs, nothing written outside the outputs")
    return _timing_case(attempt, v, lines, sanitizer)


def _child_failure(attempt):
    """The result when the child did not get through (timeout, crash, an error it reported),
    else None."""
    o = attempt.outcome
    res = o.result
    if not res.get("phase") and not o.timed_out and o.returncode != 0:
        raise AttnlabError(f"the checker's subprocess failed to start (exit status "
                           f"{o.returncode}; it ran {shlex.join(o.command)}):\n{tail(o.stderr)}")
    if o.timed_out:
        return attempt.finish("timeout", _timeout_lines(attempt) + [CONTEXT_NOTE] +
                              attempt.printed())
    err = res.get("error")
    if err:
        return _child_error(attempt, err)
    if o.returncode != 0 or not res.get("variants"):
        sig = -o.returncode if o.returncode < 0 else None
        how = f"was killed by signal {sig}" if sig else f"exited with status {o.returncode}"
        lines = [f"  the process running your kernel {how} while {res.get('phase', 'starting')}.",
                 tail(o.stderr), CONTEXT_NOTE]
        return attempt.finish("crash", lines + attempt.printed())
    return None


def _timeout_lines(attempt):
    phase = attempt.outcome.result.get("phase", "starting")
    if phase.startswith(("running your kernel", "timing your kernel")):
        return [f"  your kernel did not finish in {attempt.timeout:g} s (while {phase}): an "
                f"infinite loop (a loop variable that never advances?), or threads "
                f"waiting at a __syncthreads() that other threads never reach? The "
                f"checker stopped it."]
    after = phase.startswith(("finding", "preparing the reference"))
    when = "after your kernel ran, in the checker's own work" if after else "before your kernel ran"
    return [f"  the check did not finish in {attempt.timeout:g} s, while {phase} ({when}): is "
            f"the machine busy? Try again with a longer timeout=."]


def _child_error(attempt, err):
    """The result of an error the child reported (compile, symbol, CUDA), or raise."""
    ex, kind = attempt.exercise, err["kind"]
    if kind == "nogpu":
        raise NoGPUError(err["message"])
    if kind == "compile":
        return attempt.finish("compile", indent(format_compile_error(
            err["message"], attempt.source, attempt.filename, attempt.offset)))
    if kind == "symbol":
        return attempt.finish("signature", [f"  the compiled module has no kernel named "
                                            f"{ex.function}: declare it as\n    {ex.call}"])
    if kind == "cuda":
        lines = [f"  {cuda_error_words(err['message'])}.",
                 f"  It happened while {err.get('phase', '?')}; CUDA said: {err['message']}",
                 CONTEXT_NOTE]
        found = None
        if attempt.sanitize is not False:
            found, _ = run_sanitizer(attempt, "memcheck")
            if found:
                lines.append(found)
        return attempt.finish("crash", lines + attempt.printed(), sanitizer=found)
    raise AttnlabError(f"the checker's subprocess failed while {err.get('phase')}: "
                       f"{err['message']}")


def _small_case(attempt, r0):
    """(kinds of problems, report lines, {output: [run arrays]}) at the small shape: guard
    zones, inputs changed, runs that differ, wrong results."""
    ex, c0 = attempt.exercise, attempt.cases[0]
    kinds, lines = [], []
    groups = {}                  # outputs with the same overrun are named together
    for name, info in r0.get("guards", {}).items():
        groups.setdefault(tuple(sorted(info.items())), []).append(name)
    for info, names in groups.items():
        text = describe_guards(and_(names), dict(info))
        if text:
            kinds.append("out_of_bounds")
            lines += ["  " + t for t in text]
    for name, n in r0.get("inputs_changed", {}).items():
        kinds.append("input_modified")
        lines.append(f"  your kernel changed {n} elements of its input {name}, which it may "
                     f"only read: is the argument order right ({ex.call})?")
    outs = {name: [np.load(p) for p in files] for name, files in r0.get("outputs", {}).items()}
    for name, runs in outs.items():
        text = describe_runs(name, runs, c0.axes[name], ex.tol)
        if text:
            kinds.append("race")
            lines += ["  " + t for t in text]
    # the result itself: every detail for the first wrong output, the count and hints for others
    wrong = False
    for name, runs in outs.items():
        n_bad, text, hints = describe_mismatch(
            name, runs[0], c0.expected[name], c0.axes[name], ex.tol,
            causal=c0.outputs[name][1] == "causal", scale=c0.scale,
            candidates=c0.candidates.get(name, ()))
        if n_bad:
            lines += ([f"  at {c0.label}:"] + ["  " + t for t in text]) if not wrong \
                else ["  " + text[0]]
            lines += [f"  hint: {h}" for h in hints]
            wrong = True
    if wrong:
        kinds.append("wrong")
    return kinds, lines, outs


def _sanitize(attempt, kinds):
    """compute-sanitizer: racecheck to explain a race (automatic, for a kernel with shared
    memory), or racecheck and memcheck on request; its text (kinds may grow), or None."""
    found = []
    uses_shared = "__shared__" in strip_comments(attempt.source)
    if uses_shared and (attempt.sanitize is True or (attempt.sanitize is None and "race" in kinds)):
        text, error = run_sanitizer(attempt, "racecheck")
        found.append(text)
        if error:
            kinds.append("race")
    if attempt.sanitize is True:
        text, error = run_sanitizer(attempt, "memcheck")
        found.append(text)
        if error:
            kinds.append("out_of_bounds")
    return "\n".join(t for t in found if t) or None


def _timing_case(attempt, v, lines, sanitizer):
    """The verdict once the small shape is right: the timing shape checked and timed."""
    cases = attempt.cases
    timing = None
    if len(cases) > 1:
        c1, r1 = cases[1], v["cases"][1] if len(v["cases"]) > 1 else {}
        for name, info in r1.get("guards", {}).items():
            text = describe_guards(name, info)
            if text:
                lines += [f"  at {c1.label}:"] + ["  " + t for t in text]
                return attempt.finish("out_of_bounds", lines)
        bad_big = [n for n, m in r1.get("mismatches", {}).items() if m]
        if bad_big:
            return attempt.finish("wrong", lines + _wrong_at_timing_shape(attempt, r1, bad_big))
        if "times" in r1:
            lines.append(f"  right at {c1.label} too")
            t = timings(r1["times"])
            if "reference" in t:
                who = "the solution" if attempt.substituted else "your kernel"
                label = r1["reference_label"]
                lines.append("  " + describe_time(who, t["yours"], t["reference"], label,
                                                  c1.label))
                timing = timing_summary(t["yours"], t["reference"], label, c1.label)
    if sanitizer:
        lines.append(sanitizer)
    return attempt.finish("ok", lines + attempt.printed(), timing=timing, sanitizer=sanitizer)


def _wrong_at_timing_shape(attempt, r1, names):
    """Report lines for outputs right at the small shape but wrong at the timing shape."""
    c1, ex = attempt.cases[1], attempt.exercise
    lines = [f"  but at {c1.label}:"]
    for name in names:
        got = np.load(r1["outputs"][name][0])
        _, text, hints = describe_mismatch(name, got, c1.expected[name], c1.axes[name], ex.tol,
                                           causal=c1.outputs[name][1] == "causal",
                                           scale=c1.scale, layouts=False)
        lines += ["  " + t for t in text] + [f"  hint: {h}" for h in hints]
    lines.append("  hint: right at the small shape but wrong at this one: a size written "
                 "into the kernel (use T, C, NH, blockDim), an int index that overflows, "
                 "or a loop that covers only part of a longer row?")
    return lines + attempt.printed()
