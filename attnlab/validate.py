"""Compare a GPU result with the CPU reference over the whole tensor.

The rule is llm.c's: an element passes when |gpu − ref| <= tol + |ref|·FLT_EPSILON.
Unlike llm.c, every element is checked (llm.c checks only a prefix of preatt and att),
a NaN or Inf on either side always fails (llm.c skips non-finite reference values), and
a failure says where: the count of mismatches and the worst ones with their coordinates.
"""
from dataclasses import dataclass

import numpy as np

from .errors import InputError, ValidationError

FLT_EPSILON = float(np.finfo(np.float32).eps)

# The seed's tolerances (fp32 GEMMs).
TOLERANCES = {"preatt": 5e-3, "att": 1e-3, "out": 1e-3,
              "datt": 5e-3, "dpreatt": 1e-3, "dinp": 1e-3}

# TF32 GEMMs round their inputs to 10 mantissa bits (relative error ~5e-4 per product).
# Measured on an H200 at B=4 T=1024 C=768 NH=12, seed 0, max |gpu - ref| with TF32 was
# preatt 4.3e-3, att 8.2e-5, out 4.3e-4, datt 4.3e-3, dpreatt 7.5e-5, dinp 7.5e-4
# (with fp32 GEMMs: at most 4.3e-6). These tolerances leave about 4x room above that.
TF32_TOLERANCES = {"preatt": 2e-2, "att": 1e-3, "out": 2e-3,
                   "datt": 2e-2, "dpreatt": 1e-3, "dinp": 5e-3}

# Coordinate names by the layout each tensor has.
AXES = {4: ("b", "h", "t", "t2"), 3: ("b", "t", "c")}


def within_tolerance(got, expected, tol):
    """llm.c's rule, elementwise: |got - expected| <= tol + |expected|·FLT_EPSILON, in float64.
    False wherever either side is NaN or infinite."""
    expected = np.asarray(expected, dtype=np.float64)
    with np.errstate(invalid="ignore"):
        err = np.abs(np.asarray(got, dtype=np.float64) - expected)
        return err <= tol + np.abs(expected) * FLT_EPSILON


@dataclass
class Report:
    """What `validate` found: ok, the count checked and mismatched, the worst errors."""
    name: str
    ok: bool
    checked: int
    mismatches: int
    max_abs_err: float
    tol: float
    worst: list          # [(coords dict, ref, gpu, |err|)], worst first

    def __str__(self):
        """One stable line when OK (no error size: that can vary with the GPU and library)."""
        if self.ok:
            return (f"{self.name}: OK - all {self.checked} elements within "
                    f"{self.tol:g} + |ref|*FLT_EPSILON")
        return self.detail()

    def detail(self):
        """The verdict with the largest error, and the worst mismatches on failure."""
        head = (f"{self.name}: {'OK' if self.ok else 'FAILED'} - {self.mismatches} of "
                f"{self.checked} elements outside tol {self.tol:g} + |ref|*FLT_EPSILON, "
                f"max |gpu-ref| = {self.max_abs_err:.3g}")
        if self.ok:
            return head
        lines = [head, "  worst mismatches:"]
        for coords, ref, got, err in self.worst:
            where = ", ".join(f"{k}={v}" for k, v in coords.items())
            lines.append(f"    ({where}): expected {ref:.6g}, got {got:.6g} (|err| {err:.3g})")
        return "\n".join(lines)


def compare(gpu, ref, name, tol=None, worst=5):
    """Return a `Report` of gpu vs ref over every element (no exception)."""
    tol = TOLERANCES.get(name) if tol is None else tol
    if tol is None:
        raise InputError(f"tol must be given for {name!r} (known names: {sorted(TOLERANCES)})")
    if isinstance(tol, bool) or not isinstance(tol, (int, float, np.floating, np.integer)) or tol < 0:
        raise InputError(f"tol must be a number >= 0, got {type(tol).__name__} {tol!r}")
    gpu = np.asarray(gpu)
    ref = np.asarray(ref)
    for what, a in (("gpu", gpu), ("ref", ref)):
        if not (np.issubdtype(a.dtype, np.floating) or np.issubdtype(a.dtype, np.integer)):
            raise InputError(f"{name}: {what} must be a numeric array, got dtype {a.dtype}")
    if gpu.shape != ref.shape:
        raise InputError(f"{name}: gpu result has shape {gpu.shape}, reference {ref.shape}")
    ref64 = ref.astype(np.float64)
    err = np.abs(gpu.astype(np.float64) - ref64)
    # unlike llm.c, which skips them, a reference value that is not finite is a mismatch
    # (the inputs are checked to be finite, so it means the reference itself went wrong)
    bad = ~within_tolerance(gpu, ref64, tol) | ~np.isfinite(ref64) | ~np.isfinite(err)
    n_bad = int(np.count_nonzero(bad))
    finite_err = np.where(np.isfinite(err), err, np.inf)
    max_err = float(finite_err.max()) if err.size else 0.0
    rows = []
    if n_bad:
        flat_bad = np.flatnonzero(bad)
        order = np.argsort(-finite_err.ravel()[flat_bad], kind="stable")[:worst]
        axes = AXES.get(gpu.ndim, tuple(f"i{d}" for d in range(gpu.ndim)))
        for i in flat_bad[order]:
            idx = np.unravel_index(i, gpu.shape)
            coords = {a: int(j) for a, j in zip(axes, idx)}
            rows.append((coords, float(ref.flat[i]), float(gpu.flat[i]), float(err.flat[i])))
    return Report(name, n_bad == 0, int(ref.size), n_bad, max_err, tol, rows)


def validate(gpu, ref, name, tol=None, worst=5, verbose=True):
    """Check gpu against ref; print one line and return the Report, or raise ValidationError."""
    report = compare(gpu, ref, name, tol, worst)
    if not report.ok:
        raise ValidationError(str(report))
    if verbose:
        print(report)
    return report
