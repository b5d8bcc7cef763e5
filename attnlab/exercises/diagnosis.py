"""Reading a wrong result: what is wrong and where, and the usual mistakes it points to.
Plain numpy, no GPU (tested on synthetic arrays)."""
import itertools

import numpy as np

from ..validate import within_tolerance
from .memory import POISON_BITS, UNTOUCHED_BITS


def _bits(a):
    return np.ascontiguousarray(a, dtype=np.float32).view(np.uint32)


def left_alone(expected):
    """True where the expected value is the marker: the kernel must not have written there."""
    return _bits(expected) == UNTOUCHED_BITS


def mismatch_mask(got, expected, tol):
    """llm.c's rule, elementwise: True where got is wrong (a NaN is always wrong) and the
    expected value is finite; where it is the marker (memory.UNTOUCHED_BITS), True where got
    is not that marker bit for bit (the kernel wrote where it must not)."""
    keep = left_alone(expected)
    wrong = ~within_tolerance(got, expected, tol) & np.isfinite(expected)
    return np.where(keep, _bits(got) != UNTOUCHED_BITS, wrong)


def close(a, b, tol):
    """Elementwise a ≈ b by the same rule, for arrays of any values (NaN == NaN)."""
    return within_tolerance(a, b, tol) | (np.isnan(a) & np.isnan(b))


def first_true(mask, k):
    """Flat indices of the first k True elements, without materializing all of them."""
    flat = mask.reshape(-1)
    out, step = [], 1 << 20
    for s in range(0, flat.size, step):
        idx = np.flatnonzero(flat[s:s + step])
        out.extend((idx[:k - len(out)] + s).tolist())
        if len(out) >= k:
            break
    return out


def coords(shape, flat, axes):
    return ", ".join(f"{a}={int(i)}" for a, i in zip(axes, np.unravel_index(flat, shape)))


def fmt(v):
    return "NaN" if np.isnan(v) else f"{v:.6g}"


def ranges(mask, axes):
    """Where the True elements of mask lie, per axis: '0..259 (all)' or a sub-range."""
    parts = []
    for d, a in enumerate(axes):
        hit = mask.any(axis=tuple(i for i in range(mask.ndim) if i != d))
        idx = np.flatnonzero(hit)
        n = mask.shape[d]
        if idx.size == n:
            parts.append(f"{a} all of 0..{n - 1}")
        elif idx.size == 1:
            parts.append(f"{a}={idx[0]} only (of 0..{n - 1})")
        elif idx[-1] - idx[0] + 1 == idx.size:
            parts.append(f"{a} {idx[0]}..{idx[-1]} (of 0..{n - 1})")
        else:
            shown = ", ".join(str(i) for i in idx[:6]) + (", ..." if idx.size > 6 else "")
            parts.append(f"{a} in {{{shown}}} ({idx.size} of {n})")
    return "; ".join(parts)


def _list(values, limit=8):
    values = [int(v) for v in values]
    if len(values) > 2 and values == list(range(values[0], values[-1] + 1)):
        return f"{values[0]}..{values[-1]}"
    s = ", ".join(str(v) for v in values[:limit])
    return s + (", ..." if len(values) > limit else "")


def describe_mismatch(name, got, expected, axes, tol, *, causal=False, scale=None,
                      candidates=(), poisoned=None, layouts=True, first=5):
    """(number wrong, report lines, hints) for one output tensor.

    poisoned: True where the checker put the NaN poison before the run (default: all
    elements, or the lower triangle when causal). candidates: [(array, hint)] of known
    wrong answers; layouts: also try every other order of the axes (wrong index).
    """
    got = np.asarray(got, np.float32)
    expected = np.asarray(expected, np.float32)
    if not mismatch_mask(got, expected, tol).any():
        return 0, [], []
    if poisoned is None:
        T = got.shape[-1]
        poisoned = (np.broadcast_to(np.tril(np.ones((T, T), bool)), got.shape) if causal
                    else np.ones(got.shape, bool))
    bad = mismatch_mask(got, expected, tol)
    unwritten = (_bits(got) == POISON_BITS) & poisoned
    lines = _mismatch_lines(name, got, expected, axes, tol, bad, unwritten, first)
    hints = _written_hints(name, got, expected, axes, bad, unwritten, poisoned, causal)
    hints += _value_hints(name, got, expected, axes, tol, bad, unwritten, scale, layouts)
    untouched = left_alone(expected) & ~bad          # left alone, as it must be
    for cand, text in candidates:                    # known mistakes of this exercise
        # it explains the result where either differs from the expected values
        sel = (bad | mismatch_mask(cand, expected, tol)) & ~unwritten & ~untouched
        if sel.sum() and close(got[sel], cand[sel], tol).mean() >= 0.99:
            hints.append(text)
    return int(bad.sum()), lines, hints


def _mismatch_lines(name, got, expected, axes, tol, bad, unwritten, first):
    """The count of wrong elements, the first ones, the largest error, and where they lie."""
    rule = "must be exact" if tol == 0 else f"allowed error {tol:g} + |expected|*FLT_EPSILON"
    with np.errstate(invalid="ignore"):
        err = np.where(bad & np.isfinite(got) & np.isfinite(expected),
                       np.abs(got.astype(np.float64) - expected), -1.0)
    worst = int(np.argmax(err))
    largest = f", largest error {err.flat[worst]:.3g}" if err.flat[worst] >= 0 else ""
    lines = [f"{name}: {int(bad.sum())} of {got.size} elements wrong ({rule}){largest}",
             "  first wrong elements, in memory order:"]
    shown = first_true(bad, first)
    for i in shown:
        what = "never written" if unwritten.flat[i] else fmt(got.flat[i])
        want = "left alone" if left_alone(expected.flat[i]) else fmt(expected.flat[i])
        lines.append(f"    ({coords(got.shape, i, axes)}): expected {want}, got {what}")
    if largest and worst not in shown:
        lines.append(f"  largest error at ({coords(got.shape, worst, axes)}): expected "
                     f"{fmt(expected.flat[worst])}, got {fmt(got.flat[worst])}")
    lines.append(f"  the wrong elements lie at: {ranges(bad, axes)}")
    return lines


def _written_hints(name, got, expected, axes, bad, unwritten, poisoned, causal):
    """Hints about what the kernel wrote: elements never written, NaN or inf it computed,
    values above the diagonal or only the diagonal wrong (causal outputs)."""
    hints = []
    n_unwritten = int(unwritten.sum())
    if n_unwritten and n_unwritten == int(poisoned.sum()):
        hints.append(f"nothing of {name} was written (every element still holds the NaN the "
                     f"checker filled it with): did the kernel do anything? Check the guard "
                     f"that lets threads through (if (idx < n)) and the pointer you write to")
    elif n_unwritten:
        hints.append(_unwritten_hint(name, unwritten, poisoned, axes, causal))
    nan_made = np.isnan(got) & ~unwritten & np.isfinite(expected)
    if nan_made.any():
        hints.append(f"{int(nan_made.sum())} elements of {name} are NaN that your kernel "
                     f"computed (first at ({coords(got.shape, first_true(nan_made, 1)[0], axes)})): "
                     f"from 0/0, inf - inf, exp of a huge number, or a read outside an input "
                     f"(the checker surrounds every input with NaN)")
    inf_made = np.isinf(got) & np.isfinite(expected)
    if inf_made.any():
        hints.append(f"{int(inf_made.sum())} elements are +-inf: a division by 0 or an exp that "
                     f"overflowed (subtract the row's maximum before exp)")
    if causal:
        hints += _causal_hints(name, bad, n_unwritten)
    return hints


def _causal_hints(name, bad, n_unwritten):
    """Writes above the diagonal (the mask is missing), or only the diagonal wrong."""
    hints = []
    T = bad.shape[-1]
    lower = np.tril(np.ones((T, T), bool))
    upper_bad = bad & ~lower
    if upper_bad.any():
        only = "all the wrong elements are" if not (bad & lower).any() else \
            f"{int(upper_bad.sum())} of the wrong elements are"
        hints.append(f"{only} above the diagonal (t2 > t), which your kernel must leave "
                     f"alone (in the series {name} holds 0 there; the checker puts a marker "
                     f"there and it was overwritten): your kernel wrote there. The causal mask "
                     f"is missing: row t has only the columns t2 <= t")
    diag = np.eye(T, dtype=bool)
    if (bad & lower).any() and not (bad & lower & ~diag).any() and not n_unwritten:
        hints.append("only the diagonal (t2 == t) is wrong: an off-by-one in a loop bound "
                     "(t2 < t where it should be t2 <= t)?")
    return hints


def _value_hints(name, got, expected, axes, tol, bad, unwritten, scale, layouts):
    """Hints about the values: whole rows of zeros, a constant factor, a wrong layout."""
    hints = []
    if got.ndim >= 2:
        zero_rows = (got == 0).all(-1) & (np.abs(expected) > tol).any(-1)
        if zero_rows.any():
            first = coords(got.shape[:-1], first_true(zero_rows, 1)[0], axes[:-1])
            hints.append(f"{int(zero_rows.sum())} whole rows of {name} are 0 where they should "
                         f"not be (first: {first})")
    hint = _factor_hint(got, expected, bad, tol, scale)
    if hint:
        hints.append(hint)
    if layouts and bad.any() and got.ndim > 1:
        hint = _layout_hint(name, got, expected, unwritten, axes, tol)
        if hint:
            hints.append(hint)
    return hints


def _unwritten_hint(name, unwritten, poisoned, axes, causal):
    n = int(unwritten.sum())
    rows_all = (unwritten | ~poisoned).all(-1) & poisoned.any(-1)     # whole rows missing
    text = f"{n} elements of {name} were never written (they still hold the checker's NaN)"
    if rows_all.any() and int(unwritten[rows_all].sum()) == n:
        lead = rows_all.reshape(-1, rows_all.shape[-1]) if rows_all.ndim > 1 else rows_all[None]
        if rows_all.ndim > 1 and (lead == lead[0]).all():
            ts = np.flatnonzero(lead[0])
            return text + (f": whole rows, the same in every ({', '.join(axes[:-2])}): "
                           f"{axes[-2]} = {_list(ts)}. Does every row get a block (or warp, or "
                           f"thread)? Check the grid arithmetic and the loop over rows")
        first = first_true(rows_all, 1)[0]
        return text + (f": {int(rows_all.sum())} whole rows, first "
                       f"({coords(rows_all.shape, first, axes[:-1])})")
    if causal:
        diag = np.eye(unwritten.shape[-1], dtype=bool)
        if not (unwritten & ~diag).any():
            return text + (": only the diagonal t2 == t: a loop that stops at t2 < t instead "
                           "of t2 <= t?")
        cols = np.flatnonzero(unwritten.any(axis=tuple(range(unwritten.ndim - 1))))
        if cols.size and cols[0] > 0 and (unwritten.sum(axis=-1) > 0).mean() > 0.5:
            return text + (f": at the end of the rows (columns from {cols[0]} on): does a loop "
                           "stop before t2 = t, or cover only one blockDim.x-wide tile of the row?")
    return text + f"; they lie at: {ranges(unwritten, axes)}"


def _factor_hint(got, expected, bad, tol, scale):
    sel = bad & np.isfinite(got)             # wrong by more than tol: c*expected must explain it
    if sel.sum() < max(3, 0.5 * bad.sum()):
        return None
    g = got[sel].astype(np.float64)
    e = expected[sel].astype(np.float64)
    factors = [(-1.0, "every wrong value has the wrong sign: a subtraction the wrong way round?")]
    if scale:
        hs = round(1 / scale ** 2)
        factors += [
            (1 / scale, f"every wrong value is 1/scale = sqrt(HS) = {1 / scale:g} times too large: "
                        f"the scale is missing (multiply by scale = 1/sqrt(HS) = {scale:g}, HS = {hs})"),
            (scale, f"every wrong value is scale = {scale:g} times too small: the scale is applied "
                    f"twice?"),
            (-1 / scale, "every wrong value is -sqrt(HS) times the expected one: scale missing and "
                         "sign flipped"),
        ]
    for c, text in factors:
        if close(g, c * e, tol).mean() >= 0.99:
            return text
    big = np.abs(e) > 10 * tol + 1e-6
    if big.sum() < 3:
        return None
    r = g[big] / e[big]
    med = float(np.median(r))
    if med not in (0.0, 1.0) and np.isfinite(med) and \
            (np.abs(r - med) <= 1e-3 * abs(med)).mean() >= 0.99:
        return f"every wrong value is {med:.4g} times the expected one: a missing or extra factor"
    return None


def _layout_hint(name, got, expected, unwritten, axes, tol):
    written = ~unwritten
    if written.sum() < 0.25 * got.size:
        return None
    g = got.reshape(-1)
    w = written.reshape(-1)
    for perm in itertools.permutations(range(got.ndim)):
        if perm == tuple(range(got.ndim)):
            continue
        cand = np.ascontiguousarray(expected.transpose(perm)).reshape(-1)
        if close(g[w], cand[w], tol).all():
            order = ", ".join(axes[p] for p in perm)
            want = ", ".join(axes)
            extra = ""
            if perm[:-2] == tuple(range(got.ndim - 2)) and perm[-2:] == (got.ndim - 1, got.ndim - 2):
                extra = f" (transposed: row and column swapped, you wrote [{axes[-1]}][{axes[-2]}])"
            return (f"your {name} holds the right values in the wrong places: they are laid out "
                    f"in the order ({order}) instead of ({want}){extra}. Check the index "
                    f"arithmetic of the element you write (or read)")
    return None


def describe_runs(name, runs, axes, tol):
    """Lines that say whether repeated runs with the same inputs gave different results."""
    first = np.asarray(runs[0], np.float32)
    for k, other in enumerate(runs[1:], start=2):
        other = np.asarray(other, np.float32)
        differ = ~close(other, first, tol)
        if differ.any():
            i = first_true(differ, 1)[0]
            return [f"{name}: results differ between run 1 and run {k} with the same inputs in "
                    f"{int(differ.sum())} elements (first at ({coords(first.shape, i, axes)}): "
                    f"{fmt(first.flat[i])} then {fmt(other.flat[i])}); they lie at: "
                    f"{ranges(differ, axes)}",
                    "hint: a race: some threads read memory (shared memory, most often) before "
                    "other threads have finished writing it, or write what others still read. "
                    "A missing __syncthreads() (block.sync())?"]
    return []
