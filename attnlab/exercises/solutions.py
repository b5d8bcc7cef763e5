"""The reference solutions, and the switch that checks them instead of the student's kernel.

Reference solutions live in ``notebooks/exercises/solutions/<exercise>.cu``. With the
environment variable ``ATTNLAB_EXERCISE_SOLUTIONS=1`` every checker checks the solution
instead of the source it is given and says so in one line: this is how nbval runs the
exercise notebooks (``notebooks/exercises/conftest.py`` sets it) so they cannot rot. A
check's ``use_solution=False`` checks the source given whatever the variable says (a
notebook's deliberately wrong kernel), ``use_solution=True`` the solution.
"""
import os
import re
from pathlib import Path

from .spec import FILENAME

ROOT = Path(__file__).resolve().parents[2]
SOLUTIONS_DIR = Path(os.environ.get("ATTNLAB_EXERCISE_SOLUTIONS_DIR",
                                    ROOT / "notebooks" / "exercises" / "solutions"))
SOLUTIONS_ENV = "ATTNLAB_EXERCISE_SOLUTIONS"


def solution_path(key):
    return SOLUTIONS_DIR / f"{key}.cu"


def solution_source(key):
    """The reference solution of an exercise (a string)."""
    return solution_path(key).read_text()


def solution_config(source):
    """The launch choices a solution states in a line ``// attnlab-exercise-config: a=1 b=2``."""
    m = re.search(r"attnlab-exercise-config:([^\n]*)", source)
    if not m:
        return {}
    return {k: int(v) for k, v in re.findall(r"(\w+)\s*=\s*(\d+)", m.group(1))}


def use_solutions():
    """True when ATTNLAB_EXERCISE_SOLUTIONS asks for the reference solutions."""
    return os.environ.get(SOLUTIONS_ENV, "").strip().lower() not in ("", "0", "false", "no", "off")


def resolve(ex, source, given, use_solution=None):
    """(source, config given, filename, substituted?) after the solutions switch.

    use_solution: None follows ATTNLAB_EXERCISE_SOLUTIONS; True or False decides here."""
    if use_solution is None:
        use_solution = use_solutions()
    if not use_solution:
        return source, given, FILENAME, False
    path = solution_path(ex.key)
    sol = path.read_text()
    given = dict(given, **solution_config(sol))
    try:
        shown = path.relative_to(ROOT)
    except ValueError:
        shown = path
    why = f"{SOLUTIONS_ENV} is set" if use_solutions() else "use_solution=True"
    print(f"{why}: checking the reference solution {shown}, not the kernel in this notebook.",
          flush=True)
    return sol, given, path.name, True
