"""nbval runs the exercise notebooks with their reference solutions filled in.

With ATTNLAB_EXERCISE_SOLUTIONS set, every ``attnlab.exercises.check_*`` call checks
``solutions/<exercise>.cu`` instead of the kernel in the notebook's cell, and says so in one
line; the one call of each notebook given ``use_solution=False`` (its last cell, a kernel
that is wrong on purpose, checked with ``raises=False``) checks its own kernel.

nbval starts one Jupyter kernel per notebook, while it sets up the notebook's first cell,
and the kernel inherits this process's environment at that moment: so the variable is
set around the set-up of the items of this directory only, and other tests running in the
same pytest process (tests/test_exercises.py, say) never see it.

A value that is already set is kept: ``ATTNLAB_EXERCISE_SOLUTIONS=0 python -m pytest --nbval
notebooks/exercises`` checks the kernels written in the notebooks themselves.
"""
import os
from pathlib import Path

import pytest

VAR = "ATTNLAB_EXERCISE_SOLUTIONS"
HERE = Path(__file__).resolve().parent


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_setup(item):
    ours = VAR not in os.environ and Path(str(item.path)).resolve().parent == HERE
    if ours:
        os.environ[VAR] = "1"
    try:
        yield
    finally:
        if ours:
            os.environ.pop(VAR, None)
