"""``python -m attnlab.exercises``: check a .cu file from a shell, or (internal) run a job
directory as the isolated runner."""
import argparse
from pathlib import Path

from .checkers import check
from .results import ExerciseFailed
from .spec import DEFAULT_TIMEOUT, EXERCISES


def main(argv=None):
    p = argparse.ArgumentParser(prog="python -m attnlab.exercises",
                                description="check an exercise kernel from a file")
    sub = p.add_subparsers(dest="command", required=True)
    r = sub.add_parser("run", help="(internal) run a job directory")
    r.add_argument("jobdir")
    c = sub.add_parser("check", help="check a .cu file for an exercise")
    c.add_argument("exercise", choices=sorted(EXERCISES))
    c.add_argument("file")
    c.add_argument("--block-size", type=int)
    c.add_argument("--t-per-block", type=int)
    c.add_argument("--beat", type=int)
    c.add_argument("--timeout", type=float, default=DEFAULT_TIMEOUT)
    args = p.parse_args(argv)
    if args.command == "run":
        from .runner import main as run
        run(args.jobdir)                       # exits the process
        return 0
    ex = EXERCISES[args.exercise]
    cfg = {k: getattr(args, k) for k, _ in ex.config if getattr(args, k, None) is not None}
    try:
        check(args.exercise, Path(args.file).read_text(), timeout=args.timeout, **cfg)
    except ExerciseFailed as e:
        print(e)
        return 1
    return 0
