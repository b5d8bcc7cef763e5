"""attnlab.tma with the CUDA driver faked (no GPU needed): a map's arguments reach
cuTensorMapEncodeTiled in the driver's order, the numbers are cuda.h's, and the mistakes a user
makes describing an array (strides in floats, the driver's order, a box too wide for its swizzle)
are refused in Python, naming the argument, before the driver."""
import ctypes

import pytest

from attnlab import pdl, tma
from attnlab.errors import InputError, SetupError
from test_pdl import run_against_cuda_h

T, HS = 1024, 64
Q = 0x7F00_0000_0000                      # a device address, as cudaMalloc aligns them (256 bytes)
Q_MAP = dict(shape=(48, T, HS), strides=(4 * T * HS, 4 * HS, 4), box=(1, 64, 32), swizzle=128)


class FakeDriver:
    """cuTensorMapEncodeTiled, recording what it was given and writing a recognisable map."""

    def __init__(self, status=0):
        self.status, self.calls = status, []

    def cuTensorMapEncodeTiled(self, at, dtype, rank, address, dims, strides, box, element_strides,
                               interleave, swizzle, l2, oob):
        n = rank.value
        self.calls.append({"dtype": dtype, "rank": n, "address": address.value, "dims": list(dims)[:n],
                           "strides": list(strides)[:n - 1], "box": list(box)[:n],
                           "element_strides": list(element_strides)[:n], "aligned": at.value % 128 == 0,
                           "modes": (interleave, swizzle, l2, oob)})
        ctypes.memmove(at.value, bytes(range(128)), 128)
        return self.status

    def cuGetErrorName(self, status, out):
        ctypes.cast(out, ctypes.POINTER(ctypes.c_char_p))[0] = b"CUDA_ERROR_INVALID_VALUE"
        return 0


@pytest.fixture
def driver(monkeypatch):
    fake = FakeDriver()
    monkeypatch.setattr(pdl, "driver", lambda: fake)
    return fake


def test_a_map_reaches_the_driver_innermost_first(driver):
    m = tma.tiled_map(Q, **Q_MAP)
    assert m == bytes(range(128))                   # the 128 bytes the driver wrote
    (call,) = driver.calls
    assert call["dtype"] == 7 and call["rank"] == 3 and call["address"] == Q and call["aligned"]
    assert call["dims"] == [HS, T, 48]
    assert call["strides"] == [4 * HS, 4 * T * HS]  # the innermost stride (4 bytes) is implied
    assert call["box"] == [32, 64, 1] and call["element_strides"] == [1, 1, 1]
    assert call["modes"] == (0, 3, 0, 0)            # no interleave, 128-byte swizzle, zeros past the end


def test_a_failing_driver_call_says_which_and_why(driver):
    driver.status = 1
    with pytest.raises(SetupError, match=r"cuTensorMapEncodeTiled \(shape \(48, 1024, 64\).*failed: CUDA_ERROR_INVALID_VALUE"):
        tma.tiled_map(Q, **Q_MAP)


@pytest.mark.parametrize("change, message", [
    (dict(strides=(T * HS, HS, 1)), "strides: the innermost dimension must be contiguous floats"),    # in floats
    (dict(shape=(HS, T, 48), strides=(4, 4 * HS, 4 * T * HS), box=(32, 64, 1)),                      # innermost first
     "strides: the innermost dimension must be contiguous floats"),
    (dict(box=(1, 64, 64)), "with a 128-byte swizzle its innermost dimension is at most 128 bytes, got 64 floats"),
    (dict(box=(1, 64, 2)), "box: its innermost dimension must be a multiple of 16 bytes, got 2 floats"),
    (dict(box=(1, 512, 32)), r"box: each dimension must be 1 .. 256, got \(1, 512, 32\)"),
    (dict(box=(64, 32)), "shape, strides and box must have the same rank"),
    (dict(swizzle=3), r"swizzle must be one of \[0, 32, 64, 128\] bytes, got 3"),   # the enum, not bytes
    (dict(strides=(4 * T * HS, 4 * HS + 4, 4)), "strides: each but the innermost must be a multiple of 16 bytes"),
    (dict(shape=(48, 0, HS)), r"shape: each dimension must be 1 .. 2\*\*32, got \(48, 0, 64\)"),
])
def test_a_wrong_description_is_refused_before_the_driver(driver, change, message):
    with pytest.raises(InputError, match=message):
        tma.tiled_map(Q, **{**Q_MAP, **change})
    assert driver.calls == []


def test_a_misaligned_address_is_refused(driver):
    with pytest.raises(InputError, match="address must be 128-byte aligned with a swizzle, got 0x7f0000000040"):
        tma.tiled_map(Q + 64, **Q_MAP)          # q of a head that starts mid-allocation
    with pytest.raises(InputError, match="address must be 16-byte aligned, got 0x7f0000000004"):
        tma.tiled_map(Q + 4, **{**Q_MAP, "swizzle": 0})
    assert driver.calls == []


def test_the_numbers_are_this_toolkit_s(tmp_path):
    """Compiled against the toolkit's own cuda.h, where there is one and a C compiler."""
    got = tuple(map(int, run_against_cuda_h(tmp_path, "numbers", """#include <stdio.h>
#include <cuda.h>
int main(void) {
    printf("%zu %zu %d %d %d %d %d %d %d %d\\n", sizeof(CUtensorMap), _Alignof(CUtensorMap),
           (int)CU_TENSOR_MAP_DATA_TYPE_FLOAT32, (int)CU_TENSOR_MAP_SWIZZLE_NONE, (int)CU_TENSOR_MAP_SWIZZLE_32B,
           (int)CU_TENSOR_MAP_SWIZZLE_64B, (int)CU_TENSOR_MAP_SWIZZLE_128B, (int)CU_TENSOR_MAP_INTERLEAVE_NONE,
           (int)CU_TENSOR_MAP_L2_PROMOTION_NONE, (int)CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
    return 0;
}
""").split()))
    assert got == (tma.MAP_BYTES, tma.MAP_BYTES, tma.FLOAT32, *tma.SWIZZLES.values(), tma.INTERLEAVE_NONE,
                   tma.L2_PROMOTION_NONE, tma.OOB_FILL_ZEROS)
