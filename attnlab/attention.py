"""Causal self-attention on the GPU: llm.c's forward and backward, on the seed's buffers.

Forward:  inp (B,T,3C) --permute--> q,k,v (B,NH,T,HS) --SGEMM--> preatt (B,NH,T,T)
          --softmax_forward_kernel5--> att --SGEMM--> vaccum (B,NH,T,HS) --unpermute--> out (B,T,C)
Backward: the same steps in reverse, with one of the eight softmax-backward kernels.

Two invariants make every call idempotent and the dense GEMMs correct:
- the softmax kernels write only the lower triangle of ``att`` and ``dpreatt``, and the
  GEMMs after them read all of T×T, so both buffers are zeroed once when allocated and
  their upper triangles are never written afterwards;
- every gradient has exactly one producer, so the GEMMs use beta = 0 and the permute
  kernels write with ``=`` (llm.c uses beta = 1 and ``+=``, which makes repeated timing
  calls accumulate); nothing needs clearing between calls.
"""
import numpy as np

from . import gemm, kernels
from .buffers import DeviceBuffers, fill, qkv_pointers
from .checks import (check_array, check_block_size, check_kernel, check_qkv, check_shape,
                     check_tf32)
from .errors import AttnlabError, InputError
from .launch import elementwise_launch, softmax_backward_launch, softmax_forward_launch

FORWARD_BUFFERS = {"inp": "B T 3C", "qkvr": "3 B NH T HS", "preatt": "B NH T T",
                   "att": "B NH T T", "vaccum": "B NH T HS", "out": "B T C"}
BACKWARD_BUFFERS = {"dout": "B T C", "dvaccum": "B NH T HS", "datt": "B NH T T",
                    "dpreatt": "B NH T T", "dqkvr": "3 B NH T HS", "dinp": "B T 3C"}


def buffer_shapes(B, T, C, NH, backward=True):
    """The shape of every buffer of the forward (and backward) pass."""
    dims = {"B": B, "T": T, "C": C, "3C": 3 * C, "NH": NH, "HS": C // NH, "3": 3}
    names = dict(FORWARD_BUFFERS, **(BACKWARD_BUFFERS if backward else {}))
    return {n: tuple(dims[d] for d in spec.split()) for n, spec in names.items()}


def bytes_needed(B, T, C, NH, backward=True):
    """GPU bytes for all the buffers of this shape (float32)."""
    return sum(4 * int(np.prod(s)) for s in buffer_shapes(B, T, C, NH, backward).values())


class AttentionBuffers(DeviceBuffers):
    """Every device buffer of one attention problem (llm.c's), allocated once.

    ``buf.inp``, ``buf.att``, ``buf.dinp``... are pycuda GPUArrays (see FORWARD_BUFFERS and
    BACKWARD_BUFFERS for their shapes); ``buf.get('att')`` copies one back to numpy.
    """

    def __init__(self, B, T, C, NH, backward=True):
        self.B, self.T, self.C, self.NH = check_shape(B, T, C, NH)
        self.HS = C // NH
        self.backward = backward
        self._allocate(buffer_shapes(B, T, C, NH, backward), f"B={B} T={T} C={C} NH={NH}")
        # the upper triangles of att and dpreatt are read by the GEMMs and never written
        fill(self.arrays["att"], 0.0)
        if backward:
            fill(self.arrays["dpreatt"], 0.0)

    def poison_gradients(self):
        """Fill every element the backward must write with NaN.

        Then an element a kernel forgets to write shows up as NaN and fails validation
        (stale values from an earlier, correct kernel would hide it). The upper triangle
        of dpreatt stays 0: no kernel writes it, and the GEMMs rely on it.
        """
        for name in ("dinp", "dqkvr", "dvaccum", "datt"):
            fill(self._array(name), np.nan)
        lower = np.tril(np.ones((self.T, self.T), bool))
        row = np.where(lower, np.nan, 0).astype(np.float32)
        self.set("dpreatt", np.broadcast_to(row, self.arrays["dpreatt"].shape).copy(), finite=False)


def _check_buffers(buf):
    if not isinstance(buf, AttentionBuffers):
        raise InputError(f"buf must be an AttentionBuffers (attention.AttentionBuffers(B, T, C, NH)), "
                         f"got {type(buf).__name__}")
    if not buf.arrays:
        raise AttnlabError("these AttentionBuffers were freed; allocate new ones")


def forward(buf, block_size=256, tf32=False):
    """Run the forward pass on ``buf`` (reads buf.inp; writes qkvr, preatt, att, vaccum, out)."""
    bs = check_block_size(block_size)
    _check_buffers(buf)
    B, T, C, NH, HS = buf.B, buf.T, buf.C, buf.NH, buf.HS
    tf32 = check_tf32(tf32)
    q, k, v = qkv_pointers(buf.qkvr, B, T, C)
    grid, block = elementwise_launch(B * T * C, bs)
    kernels.get_function("permute", "permute_kernel")(
        np.intp(q), np.intp(k), np.intp(v), buf.inp.gpudata,
        np.int32(B), np.int32(T), np.int32(NH), np.int32(HS), grid=grid, block=block)
    # preatt = q @ kᵀ (row-major). cuBLAS sees each row-major (T, HS) matrix as a
    # column-major (HS, T) one, i.e. its transpose, and writes preattᵀ = k·qᵀ: so the
    # first operand is k, transposed ('t'), and the second q, as it is ('n').
    gemm.sgemm_strided_batched("t", "n", T, T, HS, 1.0, k, HS, T * HS, q, HS, T * HS,
                               0.0, buf.preatt.gpudata, T, T * T, B * NH, tf32)
    grid, block = softmax_forward_launch(B * NH, T)
    kernels.get_function("softmax_forward", "softmax_forward_kernel5")(
        buf.att.gpudata, np.float32(1.0 / np.sqrt(HS)), buf.preatt.gpudata,
        np.int32(B * NH), np.int32(T), grid=grid, block=block)
    # vaccum = att @ v
    gemm.sgemm_strided_batched("n", "n", HS, T, T, 1.0, v, HS, T * HS, buf.att.gpudata, T, T * T,
                               0.0, buf.vaccum.gpudata, HS, T * HS, B * NH, tf32)
    grid, block = elementwise_launch(B * T * C, bs)
    kernels.get_function("permute", "unpermute_kernel")(
        buf.vaccum.gpudata, buf.out.gpudata,
        np.int32(B), np.int32(T), np.int32(NH), np.int32(HS), grid=grid, block=block)


def softmax_backward(buf, kernel=8, block_size=256):
    """Only the softmax backward: dpreatt (lower triangle) from datt and att."""
    check_kernel(kernel)
    check_block_size(block_size)
    _check_buffers(buf)
    grid, block, defines = softmax_backward_launch(kernel, buf.B, buf.T, buf.NH, block_size)
    fn = kernels.get_function(f"softmax_backward{kernel}",
                              f"softmax_autoregressive_backward_kernel{kernel}", **defines)
    fn(buf.dpreatt.gpudata, buf.datt.gpudata, buf.att.gpudata,
       np.int32(buf.B), np.int32(buf.T), np.int32(buf.C), np.int32(buf.NH),
       grid=grid, block=block)


def backward(buf, kernel=8, block_size=256, tf32=False):
    """Run the backward pass on ``buf`` after ``forward`` (reads dout; writes dinp etc.)."""
    kernel = check_kernel(kernel)
    bs = check_block_size(block_size)
    _check_buffers(buf)
    if not buf.backward:
        raise InputError("buf was allocated with backward=False: it has no gradient buffers")
    B, T, C, NH, HS = buf.B, buf.T, buf.C, buf.NH, buf.HS
    tf32 = check_tf32(tf32)
    q, k, v = qkv_pointers(buf.qkvr, B, T, C)
    dq, dk, dv = qkv_pointers(buf.dqkvr, B, T, C)
    grid, block = elementwise_launch(B * T * C, bs)
    kernels.get_function("permute", "unpermute_backward_kernel")(
        buf.dvaccum.gpudata, buf.dout.gpudata,
        np.int32(B), np.int32(T), np.int32(NH), np.int32(HS), grid=grid, block=block)
    dvaccum, datt, dpreatt = buf.dvaccum.gpudata, buf.datt.gpudata, buf.dpreatt.gpudata
    # datt = dvaccum @ vᵀ (all of T×T)
    gemm.sgemm_strided_batched("t", "n", T, T, HS, 1.0, v, HS, T * HS, dvaccum, HS, T * HS,
                               0.0, datt, T, T * T, B * NH, tf32)
    # dv = attᵀ @ dvaccum
    gemm.sgemm_strided_batched("n", "t", HS, T, T, 1.0, dvaccum, HS, T * HS,
                               buf.att.gpudata, T, T * T, 0.0, dv, HS, T * HS, B * NH, tf32)
    softmax_backward(buf, kernel, bs)
    # dq = dpreatt @ k
    gemm.sgemm_strided_batched("n", "n", HS, T, T, 1.0, k, HS, T * HS, dpreatt, T, T * T,
                               0.0, dq, HS, T * HS, B * NH, tf32)
    # dk = dpreattᵀ @ q
    gemm.sgemm_strided_batched("n", "t", HS, T, T, 1.0, q, HS, T * HS, dpreatt, T, T * T,
                               0.0, dk, HS, T * HS, B * NH, tf32)
    grid, block = elementwise_launch(B * T * C, bs)
    kernels.get_function("permute", "permute_backward_kernel")(
        buf.dinp.gpudata, np.intp(dq), np.intp(dk), np.intp(dv),
        np.int32(B), np.int32(T), np.int32(NH), np.int32(HS), grid=grid, block=block)


def gpu_forward(inp, n_head, block_size=256, tf32=False):
    """numpy in, numpy out: (out, preatt, att) computed on the GPU."""
    B, T, C, NH = check_qkv(inp, n_head)
    check_block_size(block_size)
    check_tf32(tf32)
    with AttentionBuffers(B, T, C, NH, backward=False) as buf:
        buf.set("inp", inp)
        forward(buf, block_size, tf32)
        return buf.get("out"), buf.get("preatt"), buf.get("att")


def gpu_backward(dout, inp, n_head, kernel=8, block_size=256, tf32=False):
    """numpy in, numpy out: (dinp, dpreatt, datt) computed on the GPU (runs the forward first)."""
    B, T, C, NH = check_qkv(inp, n_head)
    check_array("dout", dout, (B, T, C))
    check_kernel(kernel)
    check_block_size(block_size)
    check_tf32(tf32)
    with AttentionBuffers(B, T, C, NH) as buf:
        buf.set("inp", inp)
        buf.set("dout", dout)
        forward(buf, 256, tf32)
        backward(buf, kernel, block_size, tf32)
        return buf.get("dinp"), buf.get("dpreatt"), buf.get("datt")
