"""Batched GEMMs through scikit-cuda's cuBLAS handle.

scikit-cuda 0.5.3 binds ``cublasSgemmBatched`` (an array of pointers per operand) but
not ``cublasSgemmStridedBatched`` (one pointer and a fixed stride per operand, what
attention needs), nor ``cublasSetMathMode`` (to choose TF32 tensor-op math). Both are
in the cuBLAS library scikit-cuda has already loaded; we declare their C signatures on
that same library object and check their status with scikit-cuda's own
``cublasCheckStatus``, so errors read as scikit-cuda's do. Which cuBLAS file scikit-cuda
loads (a toolkit's ``libcublas.so``, or a pip wheel's ``libcublas.so.12``/``.13``) is chosen by
``attnlab.libraries``.

The math is chosen per call (``tf32=``): each GEMM sets cuBLAS's math mode on the handle
right before it runs, so no earlier call, and no other caller, decides a GEMM's precision.

cuBLAS is column-major; our buffers are row-major. A row-major M×N matrix read as
column-major is its N×M transpose, so the row-major product C = A·B is computed as the
column-major product Cᵀ = Bᵀ·Aᵀ: swap the operands, keep the transposes' meaning.
"""
import atexit
import ctypes

from .checks import check_int, check_tf32
from .device import context
from .errors import InputError

OPS = {"n": 0, "t": 1}                 # CUBLAS_OP_N, CUBLAS_OP_T
DEFAULT_MATH, TF32_TENSOR_OP_MATH = 0, 3  # cublasMath_t

_cublas = None
_handle = None


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
    global _handle
    if _handle is not None:
        _cublas.cublasDestroy(_handle)
        _handle = None


def sgemm_strided_batched(transa, transb, m, n, k, alpha, A, lda, stride_a,
                          B, ldb, stride_b, beta, C, ldc, stride_c, batch, tf32=False):
    """cublasSgemmStridedBatched, column-major, on device pointers (ints or gpudata).

    For each of ``batch`` matrices: C = alpha·op(A)·op(B) + beta·C, op per 'n' or 't';
    in exact fp32 (``tf32=False``) or on TF32 tensor cores (``tf32=True``).
    """
    tf32 = check_tf32(tf32)
    if transa not in OPS or transb not in OPS:
        raise InputError(f"transa and transb must be 'n' or 't', got {transa!r}, {transb!r}")
    for name, value in (("m", m), ("n", n), ("k", k), ("stride_a", stride_a),
                        ("stride_b", stride_b), ("stride_c", stride_c)):
        check_int(name, value, minimum=0)
    for name, value in (("lda", lda), ("ldb", ldb), ("ldc", ldc), ("batch", batch)):
        check_int(name, value, minimum=1)
    h = handle()
    mode = TF32_TENSOR_OP_MATH if tf32 else DEFAULT_MATH
    _cublas.cublasCheckStatus(_cublas._libcublas.cublasSetMathMode(h, mode))
    a, b = ctypes.c_float(alpha), ctypes.c_float(beta)
    status = _cublas._libcublas.cublasSgemmStridedBatched(
        h, OPS[transa], OPS[transb], m, n, k, ctypes.byref(a),
        int(A), lda, stride_a, int(B), ldb, stride_b, ctypes.byref(b),
        int(C), ldc, stride_c, batch)
    _cublas.cublasCheckStatus(status)


def cublas_version():
    """cuBLAS's version number (e.g. 130100)."""
    return _bind().cublasGetVersion(handle())
