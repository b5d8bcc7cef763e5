"""Run a command in a subprocess with a time limit: the one helper the sanitizer and the
exercise checker both use."""
import contextlib
import os
import signal
import subprocess
import time
from dataclasses import dataclass


@dataclass
class Finished:
    """How a command ended: its exit status (negative: the signal that ended it), its output
    (stderr inside stdout when merged), the seconds it took and whether the limit ended it."""
    returncode: int
    stdout: str
    stderr: str
    seconds: float
    timed_out: bool


def run(cmd, timeout, *, env=None, cwd=None, merge_stderr=False):
    """Run ``cmd`` (a list) in its own process group and capture its output as text. After
    ``timeout`` seconds the whole group is ended, its children too (SIGTERM, then SIGKILL)."""
    t0 = time.perf_counter()
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT if merge_stderr else subprocess.PIPE,
                            text=True, errors="replace", env=env, cwd=cwd,
                            start_new_session=True)
    try:
        out, err = proc.communicate(timeout=timeout)
        timed_out = False
    except subprocess.TimeoutExpired:
        out, err = _end_group(proc)
        timed_out = True
    return Finished(proc.returncode, out or "", err or "", time.perf_counter() - t0, timed_out)


def _end_group(proc):
    """End the process group of ``proc``; (stdout, stderr) of what it wrote."""
    for sig in (signal.SIGTERM, signal.SIGKILL):
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, sig)
        try:
            return proc.communicate(timeout=10)
        except subprocess.TimeoutExpired:
            continue
    return "", ""
