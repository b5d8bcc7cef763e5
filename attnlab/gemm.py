"""Batched GEMMs through scikit-cuda's cuBLAS handle.

scikit-cuda 0.5.3 binds ``cublasSgemmBatched`` (an array of pointers per operand) but
not ``cublasSgemmStridedBatched`` (one pointer and a fixed stride per operand, what
attention needs), nor ``cublasSetMathMode`` (to choose TF32 tensor-op math). Both are
in the cuBLAS library scikit-cuda has already loaded; we declare their C signatures on
that same library object and check their status with scikit-cuda's own
``cublasCheckStatus``, so errors read as scikit-cuda's do. Which cuBLAS file scikit-cuda
loads (a toolkit's ``libcublas.so``, or a pip wheel's ``libcublas.so.12``/``.13``) is chosen by
``attnlab.libraries``.

cuBLAS is column-major; our buffers are row-major. A row-major M×N matrix read as
column-major is its N×M transpose, so the row-major product C = A·B is computed as the
column-major product Cᵀ = Bᵀ·Aᵀ: swap the operands, keep the transposes' meaning.
"""
import atexit
import contextlib
import ctypes

from .device import context
from .checks import check_int
from .errors import InputError

OPS = {"n": 0, "t": 1}                 # CUBLAS_OP_N, CUBLAS_OP_T
DEFAULT_MATH, TF32_TENSOR_OP_MATH = 0, 3  # cublasMath_t

_cublas = None
_handle = None
_tf32 = None


def _bind():
    """Import skcuda.cublas (never skcuda.misc: it breaks on numpy 2) and add two bindings."""
    global _cublas
    if _cublas is not None:
        return _cublas
    context()                          # the primary context must exist before cuBLAS
    from .libraries import import_skcuda_cublas
    cublas = import_skcuda_cublas()    # from the cuBLAS libraries.find_library found
    lib = cublas._libcublas
    p, i, ll = ctypes.c_void_p, ctypes.c_int, ctypes.c_longlong
    lib.cublasSgemmStridedBatched.restype = i
    lib.cublasSgemmStridedBatched.argtypes = [
        p, i, i,                       # handle, transa, transb
        i, i, i,                       # m, n, k
        p,                             # alpha (host pointer)
        p, i, ll,                      # A, lda, strideA
        p, i, ll,                      # B, ldb, strideB
        p,                             # beta
        p, i, ll,                      # C, ldc, strideC
        i]                             # batchCount
    lib.cublasSetMathMode.restype = i
    lib.cublasSetMathMode.argtypes = [p, i]
    lib.cublasGetMathMode.restype = i
    lib.cublasGetMathMode.argtypes = [p, ctypes.POINTER(i)]
    _cublas = cublas
    return cublas


def handle():
    """The process's cuBLAS handle (created on first use, destroyed at exit)."""
    global _handle
    if _handle is None:
        cublas = _bind()
        _handle = cublas.cublasCreate()
        atexit.register(_destroy)      # registered after the context: runs before it goes
    return _handle


def _destroy():
    global _handle, _tf32
    if _handle is not None:
        _cublas.cublasDestroy(_handle)
        _handle, _tf32 = None, None


def set_tf32(enabled):
    """Choose cuBLAS's math for SGEMM: exact fp32 (False) or TF32 tensor cores (True)."""
    global _tf32
    if not isinstance(enabled, (bool, int)) or enabled not in (0, 1):
        raise InputError(f"enabled must be a bool, got {type(enabled).__name__} {enabled!r}")
    enabled = bool(enabled)
    h = handle()
    if enabled != _tf32:
        mode = TF32_TENSOR_OP_MATH if enabled else DEFAULT_MATH
        _cublas.cublasCheckStatus(_cublas._libcublas.cublasSetMathMode(h, mode))
        _tf32 = enabled


def tf32_enabled():
    """What cuBLAS's math mode is now (read back from cuBLAS)."""
    h = handle()
    mode = ctypes.c_int()
    _cublas.cublasCheckStatus(_cublas._libcublas.cublasGetMathMode(h, ctypes.byref(mode)))
    return mode.value == TF32_TENSOR_OP_MATH


@contextlib.contextmanager
def tf32(enabled=True):
    """``with tf32():`` runs the GEMMs inside in TF32, then restores the previous mode."""
    before = tf32_enabled()
    set_tf32(enabled)
    try:
        yield
    finally:
        set_tf32(before)


def sgemm_strided_batched(transa, transb, m, n, k, alpha, A, lda, stride_a,
                          B, ldb, stride_b, beta, C, ldc, stride_c, batch):
    """cublasSgemmStridedBatched, column-major, on device pointers (ints or gpudata).

    For each of ``batch`` matrices: C = alpha·op(A)·op(B) + beta·C, op per 'n' or 't'.
    """
    if transa not in OPS or transb not in OPS:
        raise InputError(f"transa and transb must be 'n' or 't', got {transa!r}, {transb!r}")
    for name, value in (("m", m), ("n", n), ("k", k), ("stride_a", stride_a),
                        ("stride_b", stride_b), ("stride_c", stride_c)):
        check_int(name, value, minimum=0)
    for name, value in (("lda", lda), ("ldb", ldb), ("ldc", ldc), ("batch", batch)):
        check_int(name, value, minimum=1)
    h = handle()
    a, b = ctypes.c_float(alpha), ctypes.c_float(beta)
    status = _cublas._libcublas.cublasSgemmStridedBatched(
        h, OPS[transa], OPS[transb], m, n, k, ctypes.byref(a),
        int(A), lda, stride_a, int(B), ldb, stride_b, ctypes.byref(b),
        int(C), ldc, stride_c, batch)
    _cublas.cublasCheckStatus(status)


def cublas_version():
    """cuBLAS's version number (e.g. 130100)."""
    return _bind().cublasGetVersion(handle())
