"""Known wrong answers of the exercises, computed from the CPU reference in float64: a wrong
result that matches one of them gets that mistake's hint (attnlab.exercises.diagnosis)."""
import functools

import numpy as np

from .memory import above_diagonal, leave_alone_above_diagonal

ATT_JUNK = 0.5          # what the backward exercises put in att's upper triangle (t2 > t)
# Exercise 2's scores at the small shape, as large as real logits get: the series' preatt
# times LOGIT_STRETCH, plus ROW_OFFSET on even rows and minus it on odd ones (a row's softmax
# does not change when the row is shifted), and PREATT_JUNK above the diagonal. At HS = 64,
# scale * ROW_OFFSET = 125: expf overflows past 88.7, so exp without the row's maximum gives
# inf on the even rows, and underflows to 0 on the odd rows when the maximum starts at 0.
LOGIT_STRETCH = 4.0
ROW_OFFSET = 1000.0
PREATT_JUNK = 3000.0


def problem(shape):
    """The attnlab.problem.Problem (inputs and CPU reference) of a shape, from the cache."""
    from ..problem import make_problem
    return make_problem(**shape, progress=True)


def head_scale(shape):
    """1/sqrt(HS), rounded to float32 as the kernels compute it."""
    return float(np.float32(1.0 / np.sqrt(shape["C"] // shape["NH"])))


def softmax(preatt, s, causal=True):
    """Softmax of s*preatt over t2 <= t (or the whole row), in float64; 0 where masked."""
    x = preatt.astype(np.float64) * s
    T = x.shape[-1]
    if causal:
        mask = np.tril(np.ones((T, T), bool))
        x = np.where(mask, x, -np.inf)
    e = np.exp(x - x.max(axis=-1, keepdims=True))
    return (e / e.sum(axis=-1, keepdims=True)).astype(np.float32)


@functools.lru_cache(maxsize=2)
def realistic_preatt(shape):
    """Exercise 2's validation input: preatt with realistic logits and junk above the
    diagonal (see LOGIT_STRETCH, ROW_OFFSET, PREATT_JUNK), float32."""
    T = shape["T"]
    offset = np.where(np.arange(T) % 2 == 0, ROW_OFFSET, -ROW_OFFSET)
    x = (problem(shape).preatt.astype(np.float64) * LOGIT_STRETCH + offset[:, None]).astype(np.float32)
    x[..., above_diagonal(T)] = PREATT_JUNK
    return x


@functools.lru_cache(maxsize=2)
def realistic_att(shape):
    """The causal softmax of realistic_preatt (float64, then float32), the marker above the
    diagonal (the kernel must leave it alone)."""
    return leave_alone_above_diagonal(softmax(realistic_preatt(shape), head_scale(shape)))


@functools.lru_cache(maxsize=4)
def causal_expected(shape, name):
    """The CPU reference's ``name`` (att or dpreatt) with the marker above the diagonal."""
    return leave_alone_above_diagonal(getattr(problem(shape), name))


def _float32_softmax(x, s, start):
    """A causal softmax in float32 as a kernel computes it, with the row's maximum started at
    ``start`` (None: no maximum subtracted): inf and NaN where exp overflows or underflows."""
    T = x.shape[-1]
    lower = ~above_diagonal(T)
    with np.errstate(over="ignore", invalid="ignore", divide="ignore"):
        m = np.float32(0) if start is None else np.maximum(
            np.float32(start), np.where(lower, x, -np.inf).max(-1, keepdims=True))
        e = np.where(lower, np.exp(np.float32(s) * (x - m), dtype=np.float32), 0).astype(np.float32)
        return (e / e.sum(-1, keepdims=True, dtype=np.float32)).astype(np.float32)


@functools.lru_cache(maxsize=2)
def softmax_candidates(shape):
    """Exercise 2's usual mistakes on realistic_preatt: [(att, hint)]."""
    x = realistic_preatt(shape)
    scale = head_scale(shape)
    big = scale * ROW_OFFSET
    T = shape["T"]
    lower = ~above_diagonal(T)
    with np.errstate(over="ignore"):
        unnormalized = np.where(lower, np.exp(scale * (x.astype(np.float64) - np.where(
            lower, x, -np.inf).max(-1, keepdims=True))), 0).astype(np.float32)
    return [
        (softmax(x, 1.0), "your result is softmax(preatt), not softmax(scale * preatt): "
                          "multiply the scores by scale before exp"),
        (softmax(x, 1.0 / scale), "you divided by scale instead of multiplying "
                                  "by it: scale is already 1/sqrt(HS)"),
        (softmax(x, scale, causal=False),
         "your softmax runs over the whole row (t2 = 0..T-1): the causal mask is missing; "
         "row t has only the columns t2 <= t (max, sum and output)"),
        (_float32_softmax(x, scale, None),
         f"exp overflows: without the row's maximum m, exp(scale * x) is inf once scale * x "
         f"passes 88.7 (the checker's scores reach scale * x = +-{big:g}, as real logits do) "
         f"and 0 far below it; compute exp(scale * (x - m)), m = max over t2 <= t"),
        (_float32_softmax(x, scale, 0.0),
         "your maximum starts at 0: on a row whose scores are all far below 0, m stays 0 and "
         "every exp(scale * (x - m)) underflows to 0 (0 / 0 = NaN); start it at -FLT_MAX"),
        (unnormalized, "your result is the exponentials without the division by their sum "
                       "(pass 3): every row of att must add up to 1"),
    ]


@functools.lru_cache(maxsize=4)
def att_with_junk(shape):
    """att with ATT_JUNK above the diagonal: a kernel that reads or writes there shows."""
    att = problem(shape).att.copy()
    T = shape["T"]
    att[..., ~np.tril(np.ones((T, T), bool))] = ATT_JUNK
    return att


@functools.lru_cache(maxsize=2)
def backward_candidates(shape):
    """Known wrong formulas for dpreatt (exercises 3-5), each with what it tells the student."""
    p = problem(shape)
    scale = head_scale(shape)
    att = p.att.astype(np.float64)
    junk = att_with_junk(shape).astype(np.float64)
    datt = p.datt.astype(np.float64)
    T = shape["T"]
    lower = np.tril(np.ones((T, T), bool))
    S = (att * datt).sum(-1, keepdims=True)
    S_full = (junk * datt).sum(-1, keepdims=True)
    S_before = (np.where(np.tril(np.ones((T, T), bool), -1), att, 0) * datt).sum(-1, keepdims=True)

    def keep(x):
        return np.where(lower, x, 0).astype(np.float32)
    return [
        ((scale * junk * (datt - S_full)).astype(np.float32),
         "the causal mask is missing everywhere: S sums over the whole row and you write every "
         "column; row t has only the columns t2 <= t (the checker fills att above the diagonal "
         f"with {ATT_JUNK}, so reading or writing there shows)"),
        (keep(scale * att * (datt - S_full)),
         "your sum S = sum att[t2]*datt[t2] runs over the whole row: it must stop at t2 = t "
         "(the entries t2 > t are not part of the softmax; the checker fills att there with "
         f"{ATT_JUNK})"),
        (keep(scale * att * (datt - S_before)),
         "your sum S stops one short: it must include t2 = t (t2 <= t, not t2 < t)"),
        (keep(scale * (datt - S)),
         "the factor att[t3] is missing: dpreatt[t3] = scale * att[t3] * (datt[t3] - S)"),
        (keep(scale * att * datt),
         "the '- S' is missing: dpreatt[t3] = scale * att[t3] * (datt[t3] - S), "
         "S = sum_{t2 <= t} att[t2] * datt[t2]"),
        (keep(scale * att * (datt - att.sum(-1, keepdims=True))),
         "your S sums att[t2] alone: it is S = sum_{t2 <= t} att[t2] * datt[t2]"),
    ]
