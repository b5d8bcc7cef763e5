"""Bad input gets a clear error naming the argument, raised before any GPU work.

These run without a GPU: every check below must fire before attnlab touches CUDA.
"""
import numpy as np
import pytest

from attnlab import InputError, attention, checks, launch

GOOD = np.zeros((2, 8, 18), np.float32)          # B=2 T=8 C=6


@pytest.mark.parametrize("bs", [0, 16, 48, 96, 2048, 256.0, "256", True])
def test_block_size_must_be_power_of_two_32_to_1024(bs):
    with pytest.raises(InputError, match="block_size must be a power of two in 32..1024"):
        checks.check_block_size(bs)


@pytest.mark.parametrize("k", [0, 9, -1, 2.0, None])
def test_kernel_number_out_of_range(k):
    with pytest.raises(InputError, match=r"kernel must be one of \[1, 2, 3, 4, 5, 6, 7, 8\]"):
        checks.check_kernel(k)


def test_shape_errors_name_the_values():
    with pytest.raises(InputError, match=r"C must be divisible by NH \(C=768, NH=10"):
        checks.check_shape(4, 1024, 768, 10)
    with pytest.raises(InputError, match="T must be a multiple of 4.*T=1022"):
        checks.check_shape(4, 1022, 768, 12)
    with pytest.raises(InputError, match="B must be >= 1, got 0"):
        checks.check_shape(0, 8, 6, 2)
    with pytest.raises(InputError, match="NH must be an int"):
        checks.check_shape(1, 8, 6, 2.0)


@pytest.mark.parametrize("inp, match", [
    (GOOD.astype(np.float64), "inp must have dtype float32, got float64"),
    (GOOD.astype(np.int64), "inp must have dtype float32, got int64"),
    (GOOD.astype(np.float16), "inp must have dtype float32, got float16"),
    (GOOD[0], r"inp must have shape \(\?, \?, \?\), got \(8, 18\)"),
    (np.zeros((2, 8, 36), np.float32)[..., ::2], "C-contiguous"),
    (np.where(np.arange(18) == 3, np.inf, GOOD).astype(np.float32), "NaN/Inf"),
    (np.zeros((2, 6, 18), np.float32), "T must be a multiple of 4"),
    ([[0.0]], "numpy array"),
])
def test_gpu_forward_rejects_before_touching_the_gpu(inp, match):
    with pytest.raises(InputError, match=match):
        attention.gpu_forward(inp, 2)


def test_gpu_backward_checks_every_argument_first():
    dout = np.zeros((2, 8, 6), np.float32)
    with pytest.raises(InputError, match=r"dout must have shape \(2, 8, 6\)"):
        attention.gpu_backward(dout[:, :4].copy(), GOOD, 2)
    with pytest.raises(InputError, match="kernel must be one of"):
        attention.gpu_backward(dout, GOOD, 2, kernel=9)
    with pytest.raises(InputError, match="block_size"):
        attention.gpu_backward(dout, GOOD, 2, block_size=100)
    with pytest.raises(InputError, match="C must be divisible by NH"):
        attention.gpu_backward(dout, GOOD, 4)
    with pytest.raises(InputError, match="NaN"):
        attention.gpu_backward(np.full_like(dout, np.nan), GOOD, 2)


def test_buffers_check_shape_before_allocating():
    with pytest.raises(InputError, match="T must be a multiple of 4"):
        attention.AttentionBuffers(4, 1023, 768, 12)


def test_launch_geometry_matches_llmc():
    # (grid, block, defines) per kernel at the default shape, block size 256
    g = {k: launch.softmax_backward_launch(k, 4, 1024, 12, 256) for k in range(1, 9)}
    assert g[1][0] == (4, 1, 1)
    assert g[2][0] == (4, 48, 1)
    assert g[3][0] == (128, 48, 1)
    assert g[4][0] == g[5][0] == (16, 48, 1)
    assert g[6][0] == g[7][0] == (1024, 48, 1)
    assert g[8][0] == (256, 48, 1)
    assert all(v[1] == (256, 1, 1) for v in g.values())
    assert g[5][2] == {} and g[6][2] == {"BLOCK_SIZE": 256}


def test_bytes_needed_counts_every_buffer():
    B, T, C, NH = 4, 1024, 768, 12
    tt = B * NH * T * T
    expected = 4 * (2 * B * T * 3 * C + 2 * 3 * B * T * C + 4 * tt + 2 * B * T * C + 2 * B * T * C)
    assert attention.bytes_needed(B, T, C, NH) == expected
