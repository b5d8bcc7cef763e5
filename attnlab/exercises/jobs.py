"""The checking process's side of the isolated runner: a job (json and .npy files) for the
child process (attnlab.exercises.runner), the child run with a time limit
(``attnlab.processes.run``: its whole process group ends on timeout), and what it reported."""
import contextlib
import hashlib
import json
import os
import shlex
import shutil
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from .. import processes
from .solutions import ROOT, SOLUTIONS_ENV
from .spec import REPEATS, RUNS

INPUTS_PREFIX = "attnlab-exercise-inputs-"
KEEP_ENV = "ATTNLAB_EXERCISE_KEEP"       # keep each job's directory (to rerun the child by hand)
_inputs = None                           # this process's TemporaryDirectory of input arrays
_saved = {}                              # arrays already written: (id, shape, dtype) -> (a, path)


def _alive(pid):
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:
        return True                     # someone else's process: alive
    return True


def shared_dir():
    """A directory for the input files of this process's checks, named by its PID.

    Removed at exit (a TemporaryDirectory); and since a Jupyter kernel is often killed
    rather than exited, each process also removes the directories of processes that are gone.
    """
    global _inputs
    if _inputs is None or not Path(_inputs.name).is_dir():
        tmp = Path(tempfile.gettempdir())
        for old in tmp.glob(INPUTS_PREFIX + "*"):
            pid = old.name[len(INPUTS_PREFIX):].split("-")[0]
            if pid.isdigit() and int(pid) != os.getpid() and not _alive(int(pid)):
                shutil.rmtree(old, ignore_errors=True)
        _inputs = tempfile.TemporaryDirectory(prefix=f"{INPUTS_PREFIX}{os.getpid()}-", dir=tmp)
        _saved.clear()
    return Path(_inputs.name)


def save_array(a):
    """Write a to the shared directory once (keyed by the array) and return its path."""
    key = (id(a), a.shape, a.dtype.str)
    hit = _saved.get(key)
    if hit and hit[0] is a and Path(hit[1]).is_file():
        return hit[1]
    digest = hashlib.sha1(np.ascontiguousarray(a[..., :64]).tobytes()).hexdigest()[:12]
    path = str(shared_dir() / f"{digest}-{'x'.join(map(str, a.shape))}-{len(_saved)}.npy")
    np.save(path, np.ascontiguousarray(a))
    _saved[key] = (a, path)
    return path


def make_job(ex, source, filename, cases, variants, *, runs=RUNS, timing=True, guard=True,
             lineinfo=False, stop_on_failure=True, repeats=REPEATS):
    """The job the child reads (json; the arrays as .npy files in the shared directory)."""
    jcases = []
    for i, c in enumerate(cases):
        jcases.append(dict(
            label=c.label, shape=dict(c.shape),
            runs=runs if i == 0 else 1,
            guard=guard,
            save_outputs=i == 0,
            check_inputs=i == 0,
            inputs={n: save_array(a) for n, a in c.inputs.items()},
            outputs={n: dict(shape=list(s), init=init) for n, (s, init) in c.outputs.items()},
            expected={n: save_array(a) for n, a in c.expected.items()},
            tol=ex.tol,
            scalars={n: list(v) for n, v in c.scalars.items()},
            args=c.args,
            launch=[dict(grid=list(v["grids"][i]), block=list(v["blocks"][i])) for v in variants],
            time=timing and i == len(cases) - 1 and i > 0,
            reference=c.reference,
        ))
    return dict(source=source, filename=filename, function=ex.function, lineinfo=lineinfo,
                variants=[dict(label=v["label"], defines=v["defines"]) for v in variants],
                cases=jcases, stop_on_failure=stop_on_failure, repeats=repeats)


def child_env():
    env = dict(os.environ)
    env["PYTHONPATH"] = str(ROOT) + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    env.pop(SOLUTIONS_ENV, None)
    return env


def child_command(jobdir):
    return [sys.executable, "-m", "attnlab.exercises", "run", str(jobdir)]


@dataclass
class ChildOutcome:
    result: dict              # what the child wrote (result.json), possibly partial
    timed_out: bool
    returncode: int
    stdout: str
    stderr: str
    seconds: float
    jobdir: Path
    command: list             # what ran (the child, maybe under compute-sanitizer)


@contextlib.contextmanager
def job_directory():
    """A fresh directory for one job, removed afterwards unless ATTNLAB_EXERCISE_KEEP is set
    (then its path, and the command that reruns the child, go to stderr)."""
    if os.environ.get(KEEP_ENV):
        path = Path(tempfile.mkdtemp(prefix="attnlab-exercise-"))
        print(f"{KEEP_ENV} is set: the job stays in {path}; rerun it with "
              f"{shlex.join(child_command(path))}", file=sys.stderr, flush=True)
        yield path
        return
    with tempfile.TemporaryDirectory(prefix="attnlab-exercise-") as path:
        yield Path(path)


def run_job(job, timeout, jobdir, prefix=()):
    """Run one job in ``jobdir`` in a fresh subprocess (under ``prefix``, e.g. compute-sanitizer);
    after ``timeout`` seconds its whole process group is ended."""
    jobdir = Path(jobdir)
    (jobdir / "job.json").write_text(json.dumps(job))
    cmd = [*prefix, *child_command(jobdir)]
    done = processes.run(cmd, timeout, env=child_env(), cwd=str(jobdir))
    try:
        result = json.loads((jobdir / "result.json").read_text())
    except (OSError, ValueError):
        result = {}
    return ChildOutcome(result, done.timed_out, done.returncode, done.stdout, done.stderr,
                        done.seconds, jobdir, cmd)
