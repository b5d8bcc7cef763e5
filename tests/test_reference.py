"""The CPU reference against independent checks: a loop-by-loop port of llm.c's CPU code,
and central finite differences in float64."""
import numpy as np
import pytest

from attnlab import InputError, reference


def loops_forward(inp, NH):
    """llm.c's attention_forward_cpu, loop for loop (tiny shapes only)."""
    B, T, C3 = inp.shape
    C = C3 // 3
    hs = C // NH
    scale = 1.0 / np.sqrt(hs)
    out = np.zeros((B, T, C)); preatt = np.zeros((B, NH, T, T)); att = np.zeros((B, NH, T, T))
    for b in range(B):
        for t in range(T):
            for h in range(NH):
                q = inp[b, t, h * hs:(h + 1) * hs]
                for t2 in range(T):
                    preatt[b, h, t, t2] = q @ inp[b, t2, C + h * hs:C + (h + 1) * hs]
                m = preatt[b, h, t].max()
                e = [np.exp(scale * (preatt[b, h, t, t2] - m)) for t2 in range(t + 1)]
                for t2 in range(t + 1):
                    att[b, h, t, t2] = e[t2] / sum(e)
                for t2 in range(t + 1):
                    out[b, t, h * hs:(h + 1) * hs] += att[b, h, t, t2] * inp[b, t2, 2 * C + h * hs:2 * C + (h + 1) * hs]
    return out, preatt, att


def loops_backward(dout, inp, att, NH):
    """llm.c's attention_backward_cpu, loop for loop (tiny shapes only)."""
    B, T, C3 = inp.shape
    C = C3 // 3
    hs = C // NH
    scale = 1.0 / np.sqrt(hs)
    dinp = np.zeros_like(inp); dpreatt = np.zeros_like(att); datt = np.zeros_like(att)
    for b in range(B):
        for t in range(T):
            for h in range(NH):
                sl = lambda part: slice(part * C + h * hs, part * C + (h + 1) * hs)
                do = dout[b, t, h * hs:(h + 1) * hs]
                for t2 in range(T):
                    datt[b, h, t, t2] += inp[b, t2, sl(2)] @ do
                    dinp[b, t2, sl(2)] += att[b, h, t, t2] * do
                for t2 in range(t + 1):
                    for t3 in range(t + 1):
                        ind = 1.0 if t2 == t3 else 0.0
                        dpreatt[b, h, t, t3] += scale * att[b, h, t, t2] * (ind - att[b, h, t, t3]) * datt[b, h, t, t2]
                for t2 in range(t + 1):
                    dinp[b, t, sl(0)] += inp[b, t2, sl(1)] * dpreatt[b, h, t, t2]
                    dinp[b, t2, sl(1)] += inp[b, t, sl(0)] * dpreatt[b, h, t, t2]
    return dinp, dpreatt, datt


def small(B=2, T=5, C=6, NH=2, seed=1, dtype=np.float64):
    rng = np.random.default_rng(seed)
    return (rng.uniform(-1, 1, (B, T, 3 * C)).astype(dtype),
            rng.uniform(-1, 1, (B, T, C)).astype(dtype), NH)


def test_forward_matches_llmc_loops():
    inp, _, NH = small()
    for got, want in zip(reference.attention_forward(inp, NH), loops_forward(inp, NH)):
        np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-12)


def test_backward_matches_llmc_loops():
    inp, dout, NH = small()
    att = reference.attention_forward(inp, NH)[2]
    for got, want in zip(reference.attention_backward(dout, inp, att, NH),
                         loops_backward(dout, inp, att, NH)):
        np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-12)


def test_conventions():
    inp, _, NH = small(T=7)
    out, preatt, att = reference.attention_forward(inp, NH)
    T = inp.shape[1]
    upper = ~np.tril(np.ones((T, T), bool))
    assert (att[..., upper] == 0).all(), "masked entries of att must be exactly 0"
    np.testing.assert_allclose(att.sum(-1), 1.0, rtol=1e-12)
    assert (preatt[..., upper] != 0).all(), "preatt is the full, unmasked Q·Kᵀ"
    # preatt has no scale: recompute one entry by hand
    C = inp.shape[2] // 3
    hs = C // NH
    assert preatt[1, 1, 5, 6] == pytest.approx(inp[1, 5, hs:2 * hs] @ inp[1, 6, C + hs:C + 2 * hs])


def numeric_grad(f, x, eps=1e-6):
    g = np.zeros_like(x)
    for i in np.ndindex(x.shape):
        old = x[i]
        x[i] = old + eps; up = f(x)
        x[i] = old - eps; down = f(x)
        x[i] = old
        g[i] = (up - down) / (2 * eps)
    return g


@pytest.mark.parametrize("B,T,C,NH", [(1, 4, 4, 1), (2, 5, 6, 2), (1, 8, 12, 3)])
def test_gradients_by_finite_differences(B, T, C, NH):
    inp, dout, NH = small(B, T, C, NH, seed=B * 100 + T)
    scale = 1.0 / np.sqrt(C // NH)
    _, preatt, att = reference.attention_forward(inp, NH)
    dinp, dpreatt, datt = reference.attention_backward(dout, inp, att, NH)
    v = reference.split_heads(inp, NH)[2]
    mask = reference.causal_mask(T)

    def loss_of_inp(x):                    # L = Σ out ∘ dout, as a function of inp
        return float((reference.attention_forward(x, NH)[0] * dout).sum())

    def loss_of_att(a):                    # out = att · V, att as a free variable
        return float((reference.merge_heads(a @ v) * dout).sum())

    def loss_of_preatt(p):                 # att = causal softmax(scale · preatt)
        z = np.where(mask, scale * p, -np.inf)
        e = np.exp(z - z.max(-1, keepdims=True))
        return loss_of_att(e / e.sum(-1, keepdims=True))

    np.testing.assert_allclose(dinp, numeric_grad(loss_of_inp, inp.copy()), atol=1e-7, rtol=1e-6)
    np.testing.assert_allclose(datt, numeric_grad(loss_of_att, att.copy()), atol=1e-7, rtol=1e-6)
    np.testing.assert_allclose(dpreatt, numeric_grad(loss_of_preatt, preatt.copy()), atol=1e-7, rtol=1e-6)


def test_float32_close_to_float64():
    inp, dout, NH = small(2, 16, 24, 3, dtype=np.float64)
    out64, _, att64 = reference.attention_forward(inp, NH)
    out32, _, att32 = reference.attention_forward(inp.astype(np.float32), NH)
    assert out32.dtype == np.float32
    np.testing.assert_allclose(out32, out64, atol=1e-5)
    d64 = reference.attention_backward(dout, inp, att64, NH)
    d32 = reference.attention_backward(dout.astype(np.float32), inp.astype(np.float32), att32, NH)
    for a, b in zip(d32, d64):
        np.testing.assert_allclose(a, b, atol=1e-4)


def test_dinp_float64_is_the_backward_on_upcast_inputs():
    inp, dout, NH = small(2, 16, 24, 3, dtype=np.float64)
    inp32, dout32 = inp.astype(np.float32), dout.astype(np.float32)
    got = reference.dinp_float64(dout32, inp32, NH)
    assert got.dtype == np.float64
    i64 = inp32.astype(np.float64)
    att = reference.attention_forward(i64, NH)[2]
    assert np.array_equal(got, reference.attention_backward(dout32.astype(np.float64), i64, att, NH)[0])
    d32 = reference.attention_backward(dout32, inp32, reference.attention_forward(inp32, NH)[2], NH)[0]
    assert 0 < np.abs(d32 - got).max() < 1e-4        # float32 rounds; float64 is the yardstick


@pytest.mark.parametrize("bad, match", [
    (np.zeros((2, 4, 18), np.int32), "dtype"),
    (np.zeros((2, 4, 18), np.float16), "dtype"),
    (np.zeros((4, 18), np.float32), "shape"),
    (np.zeros((2, 4, 17), np.float32), "divisible by 3"),
    (np.zeros((2, 4, 36), np.float32)[:, :, ::2], "contiguous"),
    (np.full((2, 4, 18), np.nan, np.float32), "NaN"),
])
def test_reference_rejects_bad_input(bad, match):
    with pytest.raises(InputError, match=match):
        reference.attention_forward(bad, 2)


def test_reference_rejects_bad_heads_and_mismatched_arrays():
    inp, dout, _ = small(C=6)
    with pytest.raises(InputError, match="C must be divisible by NH"):
        reference.attention_forward(inp, 4)
    att = reference.attention_forward(inp, 2)[2]
    with pytest.raises(InputError, match="dout must have shape"):
        reference.attention_backward(dout[:, :-1].copy(), inp, att, 2)
    with pytest.raises(InputError, match="att must have dtype"):
        reference.attention_backward(dout, inp, att.astype(np.float32), 2)
