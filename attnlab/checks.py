"""Argument checks shared by the CPU reference and the GPU layer.

Every check runs before any allocation or kernel launch, and every message names the
argument, the value received and what was expected.
"""
import numpy as np

from .errors import InputError

BLOCK_SIZES = (32, 64, 128, 256, 512, 1024)
KERNELS = tuple(range(1, 9))
MAX_GRID_Y = 65535        # the softmax-backward kernels launch B*NH rows of blocks (gridDim.y)
MAX_INT32 = 2**31 - 1     # the permute kernels index the (B, T, 3C) buffer with 32-bit ints


def check_int(name, value, minimum=1):
    """A plain positive integer (bools and floats are refused)."""
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, np.integer)):
        raise InputError(f"{name} must be an int, got {type(value).__name__} {value!r}")
    if value < minimum:
        raise InputError(f"{name} must be >= {minimum}, got {value}")
    return int(value)


def check_tf32(tf32):
    """tf32 must be a bool (True: TF32 tensor cores, False: fp32 CUDA cores)."""
    if not isinstance(tf32, (bool, np.bool_)):
        raise InputError(f"tf32 must be True (TF32 tensor cores) or False (fp32 CUDA cores), "
                         f"got {type(tf32).__name__} {tf32!r}")
    return bool(tf32)


def check_shape(B, T, C, NH, gpu=True, square=True):
    """B, T, C, NH: C divisible by NH; for the GPU kernels also B*NH at most 65535 (rows of
    blocks) and B*T*3C below 2**31 (32-bit indices); with ``square`` (the materialized T x T
    path of kernels 1-8) also T a multiple of 4 and T*T below 2**31. The fused kernels
    (``square=False``) mask their rows and take any T >= 1."""
    B, T, C, NH = (check_int(n, v) for n, v in (("B", B), ("T", T), ("C", C), ("NH", NH)))
    if C % NH:
        raise InputError(f"C must be divisible by NH (C={C}, NH={NH}, C % NH = {C % NH})")
    if gpu and square and T % 4:
        raise InputError(f"T must be a multiple of 4 (the softmax kernels read rows as float4 "
                         f"and kernel 8 does 4 rows per block), got T={T}")
    if gpu and square and T * T > MAX_INT32:
        raise InputError(f"T*T must be at most 2**31-1 = {MAX_INT32} (the kernels index inside "
                         f"one T x T matrix with 32-bit ints), got T={T}: T*T = {T * T}")
    if gpu and B * NH > MAX_GRID_Y:
        raise InputError(f"B*NH must be at most {MAX_GRID_Y} (the softmax-backward kernels "
                         f"launch one row of blocks per (b, h), and a grid has at most "
                         f"{MAX_GRID_Y} rows), got B={B}, NH={NH}: B*NH = {B * NH}")
    if gpu and B * T * 3 * C > MAX_INT32:
        raise InputError(f"B*T*3*C must be at most 2**31-1 = {MAX_INT32} (the permute kernels "
                         f"index the (B, T, 3C) buffer with 32-bit ints), got B={B}, T={T}, "
                         f"C={C}: B*T*3*C = {B * T * 3 * C}")
    return B, T, C, NH


def check_block_size(block_size, name="block_size"):
    """A power of two in 32..1024: a whole number of warps, at most a block's limit."""
    if isinstance(block_size, (bool, np.bool_)) or not isinstance(block_size, (int, np.integer)) \
            or int(block_size) not in BLOCK_SIZES:
        raise InputError(f"{name} must be a power of two in 32..1024 {BLOCK_SIZES}, "
                         f"got {block_size!r}")
    return int(block_size)


def check_kernel(kernel, allowed=KERNELS, name="kernel"):
    """A softmax-backward kernel number."""
    if isinstance(kernel, (bool, np.bool_)) or not isinstance(kernel, (int, np.integer)) \
            or int(kernel) not in allowed:
        raise InputError(f"{name} must be one of {list(allowed)}, got {kernel!r}")
    return int(kernel)


def check_array(name, a, shape, dtypes=(np.float32,), finite=True):
    """A contiguous numpy array of the given shape (None = any size) and dtype."""
    if not isinstance(a, np.ndarray):
        raise InputError(f"{name} must be a numpy array, got {type(a).__name__}; "
                         f"pass np.asarray({name}, dtype=np.float32)")
    allowed = tuple(np.dtype(d) for d in dtypes)
    if a.dtype not in allowed:
        want = " or ".join(str(d) for d in allowed)
        raise InputError(f"{name} must have dtype {want}, got {a.dtype}")
    if a.ndim != len(shape) or any(s is not None and s != n for s, n in zip(shape, a.shape)):
        want = "(" + ", ".join("?" if s is None else str(s) for s in shape) + ")"
        raise InputError(f"{name} must have shape {want}, got {a.shape}")
    if not a.flags.c_contiguous:
        raise InputError(f"{name} must be C-contiguous, got a strided view (shape {a.shape}, "
                         f"strides {a.strides}); pass np.ascontiguousarray({name})")
    if finite and not np.isfinite(a).all():
        bad = np.argwhere(~np.isfinite(a))
        raise InputError(f"{name} must be finite, but holds {len(bad)} NaN/Inf value(s), first "
                         f"at index {tuple(int(i) for i in bad[0])} (value {a[tuple(bad[0])]})")
    return a


def check_qkv(inp, n_head, dtypes=(np.float32,), gpu=True, square=True):
    """inp is (B, T, 3C) holding Q, K, V; returns (B, T, C, NH) (check_shape's rules)."""
    check_array("inp", inp, (None, None, None), dtypes)
    B, T, C3 = inp.shape
    if C3 % 3:
        raise InputError(f"inp must have shape (B, T, 3*C); its last dimension {C3} "
                         f"is not divisible by 3 (inp.shape = {inp.shape})")
    n_head = check_int("n_head", n_head)
    C = C3 // 3
    if C % n_head:
        raise InputError(f"C must be divisible by NH: C = inp.shape[2] / 3 = {C}, "
                         f"NH = n_head = {n_head}, C % NH = {C % n_head}")
    return check_shape(B, T, C, n_head, gpu, square)


def parse_list(text, option, allowed=None, convert=str):
    """'a,b' -> ['a', 'b'] (order kept), each in ``allowed``. An empty item ('64,,128', '64,')
    and a value named twice are refused: both are typos more often than intentions."""
    items = [t.strip() for t in str(text).split(",")]
    if not any(items):
        raise InputError(f"{option} must name at least one value, got {text!r}")
    if not all(items):
        raise InputError(f"{option} must be comma-separated values with none empty, got "
                         f"{text!r} (two commas in a row, or a comma at an end)")
    out = []
    for item in items:
        where = repr(item) if len(items) == 1 else f"{item!r} in {text!r}"
        try:
            value = convert(item)
        except InputError:
            raise
        except ValueError:
            raise InputError(f"{option} must be comma-separated integers, got {where}") from None
        if allowed is not None and value not in allowed:
            raise InputError(f"{option} must be a comma-separated subset of "
                             f"{','.join(map(str, allowed))}, got {where}")
        if value in out:
            raise InputError(f"{option} must name each value once, got {value} twice in {text!r}")
        out.append(value)
    return out


def parse_block_sizes(text, option="--block-sizes"):
    """'64,256' -> [64, 256]: parse_list of block sizes, each checked by check_block_size."""
    return parse_list(text, option, None, lambda v: check_block_size(int(v), option))
