"""What validate and compare report on results they accept or reject: the tolerance rule, the
count, the worst mismatches and their coordinates. What they do with bad arguments (shapes,
names, NaN on either side) is tests/test_errors.py, one test per row of docs/errors.md."""
import numpy as np
import pytest

from attnlab import ValidationError, compare, validate
from attnlab.validate import FLT_EPSILON


def test_exact_copy_passes_and_reports_every_element():
    ref = np.random.default_rng(0).uniform(-1, 1, (2, 3, 4, 4)).astype(np.float32)
    r = validate(ref.copy(), ref, "att", verbose=False)
    assert r.ok and r.checked == ref.size and r.mismatches == 0 and r.max_abs_err == 0


def test_rule_is_tol_plus_relative_epsilon():
    ref = np.array([1000.0, 1.0], np.float32)
    tol = 1e-3
    edge = tol + 1000.0 * FLT_EPSILON
    assert compare(ref + np.array([edge * 0.99, 0], np.float32), ref, "x", tol).ok
    assert not compare(ref + np.array([0, 2e-3], np.float32), ref, "x", tol).ok


def test_failure_names_count_worst_and_coordinates():
    ref = np.zeros((2, 3, 8, 8), np.float32)
    gpu = ref.copy()
    gpu[1, 2, 7, 3] = 0.5
    gpu[0, 1, 4, 4] = 0.01
    with pytest.raises(ValidationError) as e:
        validate(gpu, ref, "dpreatt")
    msg = str(e.value)
    assert "2 of 384" in msg
    assert "(b=1, h=2, t=7, t2=3): expected 0, got 0.5" in msg
    assert msg.index("t=7") < msg.index("t=4"), "worst mismatch listed first"
