"""Tensor maps (sm_90): what the copy engine needs to copy a box of a global array into shared
memory (cp.async.bulk.tensor), encoded by the CUDA driver's cuTensorMapEncodeTiled.

PyCUDA has no binding for it, so it is called by ctypes (the driver library attnlab.pdl loads). A map
is 128 opaque bytes; the kernels in fused.KV_MAPS take theirs (of k and v; those in fused.Q_MAPS also
of q) as __grid_constant__ kernel parameters, where the copy engine fetches them cheaply
(attnlab.cubin says where they lie).
"""
import ctypes

from . import pdl
from .errors import InputError

MAP_BYTES = 128
FLOAT32 = 7                                   # CU_TENSOR_MAP_DATA_TYPE_FLOAT32 (cuda.h)
SWIZZLES = {0: 0, 32: 1, 64: 2, 128: 3}       # bytes -> CU_TENSOR_MAP_SWIZZLE_NONE, _32B, _64B, _128B
INTERLEAVE_NONE, L2_PROMOTION_NONE, OOB_FILL_ZEROS = 0, 0, 0   # a box past the array's end reads zeros


def check_map_arguments(address, shape, strides, box, swizzle):
    """InputError, naming the argument, where the driver's documented rules for a float32 map are
    broken: ``shape``, byte ``strides`` and ``box`` in numpy's order (outermost first), the innermost
    dimension contiguous floats."""
    rank = len(shape)
    if not 1 <= rank <= 5 or len(strides) != rank or len(box) != rank:
        raise InputError(f"shape, strides and box must have the same rank, 1 to 5: got {shape}, {strides}, {box}")
    if swizzle not in SWIZZLES:
        raise InputError(f"swizzle must be one of {sorted(SWIZZLES)} bytes, got {swizzle!r}")
    if address % (128 if swizzle else 16):
        raise InputError(f"address must be {128 if swizzle else 16}-byte aligned"
                         f"{' with a swizzle' if swizzle else ''}, got {address:#x}")
    if strides[-1] != 4:
        raise InputError(f"strides: the innermost dimension must be contiguous floats (4 bytes), got {strides}")
    if not all(0 < n <= 2 ** 32 for n in shape):
        raise InputError(f"shape: each dimension must be 1 .. 2**32, got {shape}")
    if not all(s % 16 == 0 and 0 < s < 2 ** 40 for s in strides[:-1]):
        raise InputError(f"strides: each but the innermost must be a multiple of 16 bytes below 2**40, got {strides}")
    if not all(0 < b <= 256 for b in box):
        raise InputError(f"box: each dimension must be 1 .. 256, got {box}")
    if box[-1] * 4 % 16:
        raise InputError(f"box: its innermost dimension must be a multiple of 16 bytes, got {box[-1]} floats")
    if swizzle and box[-1] * 4 > swizzle:
        raise InputError(f"box: with a {swizzle}-byte swizzle its innermost dimension is at most {swizzle} bytes, "
                         f"got {box[-1]} floats")


def tiled_map(address, shape, strides, box, swizzle=0):
    """The 128 bytes of a tensor map of the float32 array at device ``address`` (check_map_arguments'
    order and rules), copied in boxes of ``box`` elements, each box's rows of ``swizzle`` bytes (0, 32,
    64 or 128) with their 16-byte chunks swizzled; zeros where a box reaches past the array."""
    check_map_arguments(address, shape, strides, box, swizzle)
    lib, rank = pdl.driver(), len(shape)
    raw = ctypes.create_string_buffer(2 * MAP_BYTES)
    at = (ctypes.addressof(raw) + MAP_BYTES - 1) // MAP_BYTES * MAP_BYTES   # cuda.h aligns a CUtensorMap to 128 bytes
    status = lib.cuTensorMapEncodeTiled(
        ctypes.c_void_p(at), FLOAT32, ctypes.c_uint32(rank), ctypes.c_void_p(address),
        (ctypes.c_uint64 * rank)(*reversed(shape)),            # the driver's order: innermost first
        (ctypes.c_uint64 * max(rank - 1, 1))(*reversed(strides[:-1])),   # the innermost stride is implied
        (ctypes.c_uint32 * rank)(*reversed(box)), (ctypes.c_uint32 * rank)(*[1] * rank),
        INTERLEAVE_NONE, SWIZZLES[swizzle], L2_PROMOTION_NONE, OOB_FILL_ZEROS)
    pdl.check_status(lib, status, f"cuTensorMapEncodeTiled (shape {shape}, box {box})")
    return ctypes.string_at(at, MAP_BYTES)
