"""Known wrong answers of the exercises, computed from the CPU reference in float64: a wrong
result that matches one of them gets that mistake's hint (attnlab.exercises.diagnosis)."""
import functools

import numpy as np

ATT_JUNK = 0.5          # what the backward exercises put in att's upper triangle (t2 > t)


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
def softmax_candidates(shape):
    """Exercise 2's usual mistakes: [(att, hint)]."""
    p = problem(shape)
    scale = head_scale(shape)
    return [
        (softmax(p.preatt, 1.0), "your result is softmax(preatt), not softmax(scale * preatt): "
                                 "multiply the scores by scale before exp"),
        (softmax(p.preatt, 1.0 / scale), "you divided by scale instead of multiplying "
                                         "by it: scale is already 1/sqrt(HS)"),
        (softmax(p.preatt, scale, causal=False),
         "your softmax runs over the whole row (t2 = 0..T-1): the causal mask is missing; "
         "row t has only the columns t2 <= t (max, sum and output)"),
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
