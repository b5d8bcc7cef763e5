"""The CPU reference: causal self-attention forward and backward in vectorized numpy.

Conventions (those of llm.c's dev/cuda/attention_backward.cu, so CPU and GPU buffers
compare element by element):

- ``inp`` is (B, T, 3C): for each position the query, key and value vectors, each C wide,
  split into NH heads of HS = C / NH.
- ``preatt`` is Q·Kᵀ *without* the 1/sqrt(HS) scale, materialized over the full T×T
  (upper triangle included), as the dense GEMM on the GPU computes it.
- The scale sits inside the causal softmax: att = softmax(scale · preatt) over t2 <= t,
  and the masked entries (t2 > t) of ``att`` are exactly 0.
- ``out`` is att·V with the heads put side by side again: (B, T, C).

The arithmetic runs in the dtype of ``inp`` (float32, or float64 for gradient checks).
"""
import numpy as np

from .checks import check_array, check_qkv
from .errors import InputError

FLOAT_TYPES = (np.float32, np.float64)


def split_heads(inp, n_head):
    """(B, T, 3C) -> q, k, v, each (B, NH, T, HS): what the GPU's permute kernel does."""
    B, T, C3 = inp.shape
    C = C3 // 3
    qkv = inp.reshape(B, T, 3, n_head, C // n_head)
    return [np.ascontiguousarray(qkv[:, :, i].transpose(0, 2, 1, 3)) for i in range(3)]


def merge_heads(x):
    """(B, NH, T, HS) -> (B, T, C): what the unpermute kernel does."""
    B, NH, T, HS = x.shape
    return np.ascontiguousarray(x.transpose(0, 2, 1, 3)).reshape(B, T, NH * HS)


def causal_mask(T):
    """Boolean (T, T), True where t2 <= t (the entries a row may attend to)."""
    return np.tril(np.ones((T, T), dtype=bool))


def attention_forward(inp, n_head):
    """Return (out, preatt, att) for inp (B, T, 3C)."""
    B, T, C, NH = check_qkv(inp, n_head, FLOAT_TYPES, gpu=False)
    dt = inp.dtype.type
    scale = dt(1.0 / np.sqrt(C // NH))
    q, k, v = split_heads(inp, NH)
    preatt = q @ k.transpose(0, 1, 3, 2)                         # (B, NH, T, T), unscaled
    mask = causal_mask(T)
    masked = np.where(mask, preatt, -np.inf)
    with np.errstate(invalid="ignore", over="ignore"):   # overflow is reported below
        att = np.exp(scale * (masked - masked.max(axis=-1, keepdims=True)))  # exp(-inf) = 0
        att /= att.sum(axis=-1, keepdims=True)
    out = merge_heads(att @ v)
    _check_finite_result("attention_forward", out, inp)
    return out, preatt, att


def _check_finite_result(what, result, inp):
    """Finite inputs can still overflow (|inp| ~ 1e20 makes q·k inf): say so, not NaN."""
    if not np.isfinite(result).all():
        raise InputError(f"{what}: inp is finite but too large for {inp.dtype} arithmetic: "
                         f"the result overflowed to NaN/Inf (largest |inp| = "
                         f"{float(np.abs(inp).max()):.3g}); expected values of order 1")


def attention_backward(dout, inp, att, n_head):
    """Return (dinp, dpreatt, datt) given dout (B, T, C), inp and the forward's att.

    Backwards through the forward's three steps, in reverse:
      out = att·V             ->  datt = dout·Vᵀ (all of T×T), dV = attᵀ·dout
      att = softmax(s·preatt) ->  dpreatt = s · att ∘ (datt − rowsum(att ∘ datt))
      preatt = Q·Kᵀ           ->  dQ = dpreatt·K, dK = dpreattᵀ·Q
    """
    B, T, C, NH = check_qkv(inp, n_head, FLOAT_TYPES, gpu=False)
    check_array("dout", dout, (B, T, C), (inp.dtype,))
    check_array("att", att, (B, NH, T, T), (inp.dtype,))
    dt = inp.dtype.type
    scale = dt(1.0 / np.sqrt(C // NH))
    q, k, v = split_heads(inp, NH)
    dvaccum = np.ascontiguousarray(dout.reshape(B, T, NH, C // NH).transpose(0, 2, 1, 3))
    datt = dvaccum @ v.transpose(0, 1, 3, 2)
    dv = att.transpose(0, 1, 3, 2) @ dvaccum
    # softmax Jacobian: d preatt_t3 = s · Σ_t2 att_t2 (δ_t2,t3 − att_t3) datt_t2
    dpreatt = scale * att * (datt - (att * datt).sum(axis=-1, keepdims=True))
    dq = dpreatt @ k
    dk = dpreatt.transpose(0, 1, 3, 2) @ q
    dinp = np.concatenate([merge_heads(g) for g in (dq, dk, dv)], axis=-1)
    _check_finite_result("attention_backward", dinp, inp)
    return dinp, dpreatt, datt


def dinp_float64(dout, inp, n_head):
    """dinp of the backward computed in float64 (forward and backward on upcast inputs): the
    yardstick the fp32-accurate kernels' errors are measured against."""
    inp64 = inp.astype(np.float64)
    _, _, att = attention_forward(inp64, n_head)
    return attention_backward(dout.astype(np.float64), inp64, att, n_head)[0]
