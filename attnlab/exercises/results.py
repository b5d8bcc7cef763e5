"""What a check says: a CheckResult, or ExerciseFailed (an AssertionError) that carries it."""
from dataclasses import dataclass

from ..errors import AttnlabError

VERDICTS = {"ok": "OK", "compile": "DOES NOT COMPILE", "signature": "WRONG DECLARATION",
            "crash": "CRASHED", "timeout": "DID NOT FINISH",
            "out_of_bounds": "WROTE OUT OF BOUNDS", "input_modified": "CHANGED ITS INPUT",
            "race": "RACE (results differ between runs)", "wrong": "WRONG RESULT"}
# when several things are wrong, the report is filed under the first of these
SEVERITY = ["out_of_bounds", "input_modified", "race", "wrong"]


class ExerciseFailed(AttnlabError, AssertionError):
    """The student's kernel does not compile, crashed, hung, or computed a wrong result.

    ``str(e)`` is the whole report; ``e.result`` the CheckResult. In a notebook the report
    is shown without a Python traceback (the traceback would be about the checker).
    """

    def __init__(self, message, result=None):
        super().__init__(message)
        self.result = result

    def _render_traceback_(self):           # IPython shows this instead of a traceback
        lines = str(self).splitlines() or [""]
        return [f"\x1b[1;31mExerciseFailed\x1b[0m: \x1b[1m{lines[0]}\x1b[0m"] + lines[1:]


@dataclass
class CheckResult:
    """What a checker found. ``kind`` is one of: ok, compile, signature, crash, timeout,
    out_of_bounds, input_modified, race, wrong."""
    exercise: str
    ok: bool
    kind: str
    message: str
    solution: bool = False               # the reference solution was checked instead
    timing: dict = None                  # yours_ms, reference_ms, ratio, verdict, IQRs, ...
    sanitizer: str = None                # compute-sanitizer's findings, when it ran

    def __str__(self):
        return self.message

    def __repr__(self):
        extra = ""
        if self.timing:
            extra = (f", {self.timing['yours_ms']:.4f} ms vs {self.timing['reference_ms']:.4f} ms"
                     f": {self.timing['verdict']}")
        return f"CheckResult({self.exercise}: {self.kind}{extra})"


def conclude(ex, kind, lines, *, solution=False, timing=None, sanitizer=None, quiet=False,
             raises=True):
    """The CheckResult of a check. A failure raises ExerciseFailed (or, with raises=False, is
    printed and returned); a success is printed (unless quiet) and returned."""
    ok = kind == "ok"
    message = "\n".join([f"{ex.title}: {VERDICTS[kind]}"] + lines)
    result = CheckResult(ex.key, ok, kind, message, solution, timing, sanitizer)
    if not ok and raises:
        raise ExerciseFailed(message, result)
    if not quiet:
        print(message, flush=True)
    return result
