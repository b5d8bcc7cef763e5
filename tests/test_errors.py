"""One test per row of docs/errors.md: what each public function and CLI option does with
bad input. Every message must name the argument, the value received and what was expected.

Most rows run anywhere: the arguments are checked before any CUDA call, and the
``forbid_gpu`` fixture (tests/conftest.py) proves it (any GPU use fails the test with an
AssertionError, on a GPU host too). Rows about a missing GPU use ``no_gpu``, which monkeypatches
``attnlab.device.gpu_status``. The command line's rows are tests/test_cli.py. Rows that need
a real GPU are marked ``gpu``. Rows that document a gap (a known bad behaviour, owned by
another file) are ``xfail(strict=True)``: they start failing the day the gap is fixed, to
have their mark removed.
"""
import re
import subprocess
import sys
import types
from pathlib import Path

import numpy as np
import pytest

from attnlab import (AttnlabError, GPUMemoryError, InputError, KernelCompileError, NoGPUError,
                     NvccNotFoundError, ValidationError, attention, bench, device, gemm, kernels,
                     reference)
from attnlab import compare, make_inputs, make_problem, validate
from attnlab.checks import check_shape

ROOT = Path(__file__).resolve().parent.parent
INP = np.random.default_rng(0).uniform(-1, 1, (2, 8, 18)).astype(np.float32)   # B=2 T=8 C=6
DOUT = np.random.default_rng(1).uniform(-1, 1, (2, 8, 6)).astype(np.float32)
NH = 2
BAD_SRC = 'extern "C" __global__ void k(float* x) {\n    x[0] = 1.0f\n}\n'   # ';' missing
gap = pytest.mark.xfail(strict=True, reason="a known gap, listed in docs/errors.md")


def poke(a, index, value):
    a = a.copy()
    a[index] = value
    return a


def strided(a):
    """The same values as ``a``, as a non-contiguous view."""
    wide = np.zeros(a.shape[:-1] + (2 * a.shape[-1],), a.dtype)
    wide[..., ::2] = a
    return wide[..., ::2]


# ------------------------------------------------------------ inp: shared by the reference and GPU

INP_ROWS = [
    # (id, inp, n_head, message) for every function that takes inp (B, T, 3C)
    ("int", INP.astype(np.int64), NH, "inp must have dtype float32{}, got int64"),
    ("f16", INP.astype(np.float16), NH, "inp must have dtype float32{}, got float16"),
    ("list", INP.tolist(), NH, "inp must be a numpy array, got list; pass np.asarray(inp, dtype=np.float32)"),
    ("rank", INP[0], NH, "inp must have shape (?, ?, ?), got (8, 18)"),
    ("3c", INP[..., :17].copy(), NH, "inp must have shape (B, T, 3*C); its last dimension 17 is "
                                     "not divisible by 3 (inp.shape = (2, 8, 17))"),
    ("strided", strided(INP), NH, "inp must be C-contiguous, got a strided view (shape (2, 8, 18), "
                                  "strides (1152, 144, 8)); pass np.ascontiguousarray(inp)"),
    ("fortran", np.asfortranarray(INP), NH, "inp must be C-contiguous, got a strided view (shape "
                                            "(2, 8, 18), strides (4, 8, 64))"),
    ("nan", poke(INP, (1, 2, 3), np.nan), NH, "inp must be finite, but holds 1 NaN/Inf value(s), "
                                              "first at index (1, 2, 3) (value nan)"),
    ("inf", poke(INP, (0, 7, 17), -np.inf), NH, "inp must be finite, but holds 1 NaN/Inf value(s), "
                                                "first at index (0, 7, 17) (value -inf)"),
    ("heads", INP, 4, "C must be divisible by NH: C = inp.shape[2] / 3 = 6, NH = n_head = 4, "
                      "C % NH = 2"),
    ("nhead-float", INP, 2.0, "n_head must be an int, got float 2.0"),
    ("nhead-zero", INP, 0, "n_head must be >= 1, got 0"),
    ("empty", INP[:0], NH, "B must be >= 1, got 0"),
]


@pytest.mark.parametrize("inp, n_head, message",
                         [pytest.param(i, h, m.format(" or float64"), id=f"ref-{n}")
                          for n, i, h, m in INP_ROWS])
def test_reference_forward_rejects(forbid_gpu, inp, n_head, message):
    with pytest.raises(InputError) as e:
        reference.attention_forward(inp, n_head)
    assert message in str(e.value)


@pytest.mark.parametrize("inp, n_head, message",
                         [pytest.param(i, h, m.format(""), id=f"gpu-{n}") for n, i, h, m in INP_ROWS])
@pytest.mark.parametrize("call", ["gpu_forward", "gpu_backward"])
def test_gpu_functions_reject_before_touching_the_gpu(forbid_gpu, call, inp, n_head, message):
    with pytest.raises(InputError) as e:
        if call == "gpu_forward":
            attention.gpu_forward(inp, n_head)
        else:
            attention.gpu_backward(DOUT, inp, n_head)
    assert message in str(e.value)


def test_reference_takes_float64_and_any_t(forbid_gpu):
    out, preatt, att = reference.attention_forward(INP.astype(np.float64), NH)
    assert out.dtype == preatt.dtype == att.dtype == np.float64
    out5 = reference.attention_forward(INP[:, :5].copy(), NH)[0]      # T = 5: fine on the CPU
    assert out5.shape == (2, 5, 6)


@pytest.mark.parametrize("inp, message", [
    (INP.astype(np.float64), "inp must have dtype float32, got float64"),
    (INP[:, :6].copy(), "T must be a multiple of 4 (the softmax kernels read rows as float4 and "
                        "kernel 8 does 4 rows per block), got T=6"),
], ids=["gpu-f64", "gpu-t4"])
@pytest.mark.parametrize("call", ["gpu_forward", "gpu_backward"])
def test_gpu_functions_are_float32_only_and_need_t_multiple_of_4(forbid_gpu, call, inp, message):
    dout = DOUT[:, :inp.shape[1]].copy()
    with pytest.raises(InputError) as e:
        if call == "gpu_forward":
            attention.gpu_forward(inp, NH)
        else:
            attention.gpu_backward(dout.astype(inp.dtype), inp, NH)
    assert message in str(e.value)


def test_reference_overflow_is_reported_not_returned_as_nan(forbid_gpu):
    """|inp| ~ 1e20 is finite, but q.k overflows float32: an InputError names inp and its
    largest |value|, instead of an out full of NaN and only numpy's RuntimeWarning."""
    with np.errstate(all="ignore"):
        with pytest.raises(InputError, match=r"inp is finite but too large for float32 arithmetic"
                                             r".*\(largest \|inp\| = 1e\+20\)"):
            reference.attention_forward(np.full((1, 4, 6), 1e20, np.float32), 1)


# ------------------------------------------------------------ the reference backward

ATT = reference.attention_forward(INP, NH)[2]


@pytest.mark.parametrize("args, message", [
    pytest.param((DOUT.astype(np.float64), INP, ATT), "dout must have dtype float32, got float64",
                 id="refb-dout-dtype"),
    pytest.param((DOUT[:, :7].copy(), INP, ATT), "dout must have shape (2, 8, 6), got (2, 7, 6)",
                 id="refb-dout-shape"),
    pytest.param((strided(DOUT), INP, ATT), "dout must be C-contiguous", id="refb-dout-strided"),
    pytest.param((poke(DOUT, (0, 1, 2), np.inf), INP, ATT),
                 "dout must be finite, but holds 1 NaN/Inf value(s), first at index (0, 1, 2) "
                 "(value inf)", id="refb-dout-nan"),
    pytest.param((DOUT, INP, ATT[:, :1].copy()), "att must have shape (2, 2, 8, 8), got (2, 1, 8, 8)",
                 id="refb-att-shape"),
    pytest.param((DOUT, INP, ATT.astype(np.float64)), "att must have dtype float32, got float64",
                 id="refb-att-dtype"),
    pytest.param((DOUT, INP, poke(ATT, (1, 1, 3, 2), np.nan)),
                 "att must be finite, but holds 1 NaN/Inf value(s), first at index (1, 1, 3, 2)",
                 id="refb-att-nan"),
    pytest.param((DOUT, INP.astype(np.int32), ATT), "inp must have dtype float32 or float64, got int32",
                 id="refb-inp"),
])
def test_reference_backward_rejects(forbid_gpu, args, message):
    with pytest.raises(InputError) as e:
        reference.attention_backward(*args, NH)
    assert message in str(e.value)


# ------------------------------------------------------------ gpu_backward's own arguments

@pytest.mark.parametrize("kwargs, message", [
    pytest.param(dict(dout=DOUT.astype(np.float64)), "dout must have dtype float32, got float64",
                 id="gpub-dout-f64"),
    pytest.param(dict(dout=DOUT.astype(np.int32)), "dout must have dtype float32, got int32",
                 id="gpub-dout-int"),
    pytest.param(dict(dout=DOUT.astype(np.float16)), "dout must have dtype float32, got float16",
                 id="gpub-dout-f16"),
    pytest.param(dict(dout=DOUT[:, :4].copy()), "dout must have shape (2, 8, 6), got (2, 4, 6)",
                 id="gpub-dout-shape"),
    pytest.param(dict(dout=strided(DOUT)), "dout must be C-contiguous, got a strided view",
                 id="gpub-dout-strided"),
    pytest.param(dict(dout=poke(DOUT, (1, 0, 5), np.nan)),
                 "dout must be finite, but holds 1 NaN/Inf value(s), first at index (1, 0, 5)",
                 id="gpub-dout-nan"),
    pytest.param(dict(kernel=0), "kernel must be one of [1, 2, 3, 4, 5, 6, 7, 8], got 0",
                 id="gpub-kernel"),
    pytest.param(dict(kernel=9), "kernel must be one of [1, 2, 3, 4, 5, 6, 7, 8], got 9",
                 id="gpub-kernel-9"),
    pytest.param(dict(kernel=8.0), "kernel must be one of [1, 2, 3, 4, 5, 6, 7, 8], got 8.0",
                 id="gpub-kernel-float"),
    pytest.param(dict(block_size=48), "block_size must be a power of two in 32..1024 "
                 "(32, 64, 128, 256, 512, 1024), got 48", id="gpub-bs"),
    pytest.param(dict(block_size=2048), "got 2048", id="gpub-bs-2048"),
])
def test_gpu_backward_rejects(forbid_gpu, kwargs, message):
    args = dict(dout=DOUT, inp=INP, n_head=NH)
    args.update(kwargs)
    with pytest.raises(InputError) as e:
        attention.gpu_backward(**args)
    assert message in str(e.value)


@pytest.mark.parametrize("bs", [0, 16, 48, 100, 2048, 256.0, "256", True, None])
def test_gpu_forward_block_size(forbid_gpu, bs):
    with pytest.raises(InputError, match=r"block_size must be a power of two in 32\.\.1024 .*got"):
        attention.gpu_forward(INP[:, :8].copy(), NH, block_size=bs)


# ------------------------------------------------------------ forward / backward / softmax_backward

BUF = types.SimpleNamespace(B=2, T=8, C=6, NH=2, HS=3)     # never reached: the checks come first


@pytest.mark.parametrize("call, message", [
    pytest.param(lambda: attention.forward(BUF, block_size=100), "block_size must be a power of two "
                 "in 32..1024 (32, 64, 128, 256, 512, 1024), got 100", id="forward-bs"),
    pytest.param(lambda: attention.backward(BUF, kernel=9), "kernel must be one of "
                 "[1, 2, 3, 4, 5, 6, 7, 8], got 9", id="backward-kernel"),
    pytest.param(lambda: attention.backward(BUF, 8, block_size=33), "block_size must be a power of "
                 "two in 32..1024", id="backward-bs"),
    pytest.param(lambda: attention.softmax_backward(BUF, kernel=0), "kernel must be one of "
                 "[1, 2, 3, 4, 5, 6, 7, 8], got 0", id="smb-kernel"),
    pytest.param(lambda: attention.softmax_backward(BUF, 8, block_size=96), "block_size must be a "
                 "power of two in 32..1024 (32, 64, 128, 256, 512, 1024), got 96", id="smb-bs"),
])
def test_buffer_functions_check_before_launching(forbid_gpu, call, message):
    with pytest.raises(InputError) as e:
        call()
    assert message in str(e.value)


def test_forward_refuses_what_is_not_attention_buffers(no_gpu):
    """Anything but AttentionBuffers gets an InputError naming buf (not an AttributeError)."""
    with pytest.raises(InputError, match="buf must be an AttentionBuffers"):
        attention.forward("not buffers")


# ------------------------------------------------------------ AttentionBuffers

@pytest.mark.parametrize("shape, message", [
    pytest.param((4, 1024, 768, 10), "C must be divisible by NH (C=768, NH=10, C % NH = 8)",
                 id="buffers-heads"),
    pytest.param((4, 1023, 768, 12), "T must be a multiple of 4 (the softmax kernels read rows as "
                 "float4 and kernel 8 does 4 rows per block), got T=1023", id="buffers-t4"),
    pytest.param((0, 1024, 768, 12), "B must be >= 1, got 0", id="buffers-zero"),
    pytest.param((4.0, 1024, 768, 12), "B must be an int, got float 4.0", id="buffers-float"),
    pytest.param((True, 1024, 768, 12), "B must be an int, got bool True", id="buffers-bool"),
    pytest.param((8192, 4, 768, 12), "B*NH must be at most 65535 (the softmax-backward kernels "
                 "launch one row of blocks per (b, h), and a grid has at most 65535 rows), got "
                 "B=8192, NH=12: B*NH = 98304", id="buffers-grid"),
    pytest.param((64, 16384, 768, 12), "B*T*3*C must be at most 2**31-1 = 2147483647 (the permute "
                 "kernels index the (B, T, 3C) buffer with 32-bit ints), got B=64, T=16384, C=768: "
                 "B*T*3*C = 2415919104", id="buffers-int32"),
])
def test_attention_buffers_check_the_shape_before_cuda(forbid_gpu, shape, message):
    with pytest.raises(InputError) as e:
        attention.AttentionBuffers(*shape)
    assert message in str(e.value)


def test_the_largest_shapes_that_pass_the_limits():
    assert check_shape(5461, 4, 12, 12) == (5461, 4, 12, 12)           # B*NH = 65532
    B, T, C = 1, 46340, 15444                   # T*T = 2147395600, B*T*3C = 2147024880
    assert check_shape(B, T, C, 2) == (B, T, C, 2)


def test_t_squared_must_fit_32_bit_offsets():
    with pytest.raises(InputError, match=r"T\*T must be at most 2\*\*31-1 = 2147483647 .*got "
                                         r"T=46344: T\*T = 2147766336"):
        check_shape(1, 46344, 12, 2)


@pytest.mark.gpu
@pytest.mark.gpu_memory     # alone on the GPU's memory under pytest-xdist (tests/conftest.py)
def test_attention_buffers_too_large_for_free_memory_says_so_before_allocating():
    from attnlab.device import free_memory
    free_before = free_memory()[0]
    need = attention.bytes_needed(16, 16384, 768, 12)
    with pytest.raises(GPUMemoryError) as e:
        attention.AttentionBuffers(16, 16384, 768, 12)
    msg = str(e.value)
    assert f"B=16 T=16384 C=768 NH=12 needs {need:,} bytes ({need / 2**30:.2f} GiB) of GPU memory" in msg
    assert re.search(r"but only [\d,]+ bytes \([\d.]+ GiB\) of [\d.]+ GiB are free", msg)
    assert free_memory()[0] == free_before, "nothing may be allocated before the check"


@pytest.mark.gpu
@pytest.mark.parametrize("host, message", [
    pytest.param(INP.astype(np.float64), "inp must have dtype float32, got float64", id="set-f64"),
    pytest.param(INP[:, :4].copy(), "inp must have shape (2, 8, 18), got (2, 4, 18)", id="set-shape"),
    pytest.param(strided(INP), "inp must be C-contiguous", id="set-strided"),
    pytest.param(poke(INP, (0, 0, 0), np.nan), "inp must be finite", id="set-nan"),
])
def test_attention_buffers_set_checks_the_array(host, message):
    with attention.AttentionBuffers(2, 8, 6, 2) as buf:
        with pytest.raises(InputError) as e:
            buf.set("inp", host)
    assert message in str(e.value)


@pytest.mark.gpu
def test_attention_buffers_set_unknown_name():
    """A name that is not a buffer gets an InputError naming it (not a KeyError)."""
    with attention.AttentionBuffers(2, 8, 6, 2) as buf:
        with pytest.raises(InputError, match="inpt"):
            buf.set("inpt", INP)


@pytest.mark.gpu
def test_attention_buffers_used_after_free():
    """Freed buffers passed to forward get an error saying they were freed (not an
    AttributeError or KeyError on the missing arrays)."""
    buf = attention.AttentionBuffers(2, 8, 6, 2)
    buf.free()
    with pytest.raises(AttnlabError, match="freed"):
        attention.forward(buf)


# ------------------------------------------------------------ no GPU, for every GPU entry point

NO_GPU_CALLS = {
    "require_gpu": lambda: device.require_gpu("the test"),
    "device_info": lambda: device.device_info(),
    "buffers": lambda: attention.AttentionBuffers(2, 8, 6, 2),
    "gpu_forward": lambda: attention.gpu_forward(INP, NH),
    "gpu_backward": lambda: attention.gpu_backward(DOUT, INP, NH),
    "load": lambda: kernels.load("permute", ATTNLAB_NO_GPU_TEST=1),   # a define no cache holds
    "compile_source": lambda: kernels.compile_source('extern "C" __global__ void k() {}'),
    "sgemm": lambda: gemm.sgemm_strided_batched("n", "n", 1, 1, 1, 1.0, 0, 1, 1, 0, 1, 1,
                                                 0.0, 0, 1, 1, 1),
    "benchmark": lambda: bench.benchmark(lambda: None),
    "sweep": lambda: bench.sweep(lambda bs: None, [256]),
}


@pytest.mark.parametrize("name", NO_GPU_CALLS)
def test_no_gpu_is_a_clear_error(no_gpu, name):
    with pytest.raises(NoGPUError) as e:
        NO_GPU_CALLS[name]()
    assert re.fullmatch(r".+ needs a CUDA GPU: no GPU in this test", str(e.value))


def test_no_gpu_reasons_are_specific():
    """The reason is one of these (whatever this machine has)."""
    ok, why = device.gpu_status()
    assert ok or re.match(r"PyCUDA is not importable|no CUDA driver|the CUDA driver reports no GPU|"
                          r"no usable CUDA GPU", why)


# ------------------------------------------------------------ kernels

def test_unknown_kernel_source_lists_the_sources(forbid_gpu):
    for call in (kernels.kernel_source, kernels.kernel_path):
        with pytest.raises(InputError) as e:
            call("softmax_backward42")
        msg = str(e.value)
        assert "name='softmax_backward42'" in msg and "'softmax_backward8'" in msg


def test_load_of_an_unknown_source_is_refused_before_cuda(monkeypatch):
    monkeypatch.setattr(device, "gpu_status",
                        lambda: (_ for _ in ()).throw(AssertionError("GPU used")))
    with pytest.raises(InputError, match="no kernel source .*softmax_backward42.cu"):
        kernels.load("softmax_backward42")


def test_get_function_with_an_unknown_name_lists_the_kernels(monkeypatch):
    class Module:
        def get_function(self, name):
            raise RuntimeError("cuModuleGetFunction failed: named symbol not found")
    monkeypatch.setattr(kernels, "load", lambda name, **defines: Module())
    with pytest.raises(InputError) as e:
        kernels.get_function("permute", "permute")
    assert ("function='permute' is not a kernel of" in str(e.value)
            and "['permute_kernel', 'unpermute_kernel', 'unpermute_backward_kernel', "
                "'permute_backward_kernel']" in str(e.value))


@pytest.mark.gpu
def test_get_function_with_an_unknown_name_on_the_gpu():
    with pytest.raises(InputError, match=r"function='softmax_forward_kernel4' is not a kernel of "
                                         r".*softmax_forward\.cu; its extern \"C\" kernels are "
                                         r"\['softmax_forward_kernel5'\]"):
        kernels.get_function("softmax_forward", "softmax_forward_kernel4")


@pytest.mark.parametrize("call, message", [
    pytest.param(lambda: kernels.compile_source(b"__global__ void k() {}"),
                 "source must be a str of CUDA C, got bytes", id="compile-source-type"),
    pytest.param(lambda: kernels.compile_source("", filename=3), "filename must be a str", id="compile-filename"),
    pytest.param(lambda: kernels.compile_source("", defines=5), "defines must be a dict or (name, "
                 "value) pairs, e.g. {'BLOCK_SIZE': 256}, got 5", id="compile-defines"),
    pytest.param(lambda: kernels.compile_source("", defines={"BLOCK SIZE": 1}),
                 "defines: each name must be a C identifier, got 'BLOCK SIZE'", id="compile-define-name"),
    pytest.param(lambda: kernels.nvcc_check(None), "source must be a str of CUDA C, got NoneType",
                 id="nvcc-check-source"),
    pytest.param(lambda: kernels.nvcc_check("", arch="90"), "arch must name a GPU architecture like "
                 "'sm_90', got '90'", id="nvcc-check-arch"),
])
def test_compile_arguments_are_checked_first(forbid_gpu, call, message):
    with pytest.raises(InputError) as e:
        call()
    assert message in str(e.value)


needs_nvcc = pytest.mark.skipif(__import__("shutil").which("nvcc") is None, reason="no nvcc on PATH")


@needs_nvcc
def test_nvcc_check_compile_error_names_the_file_and_line():
    with pytest.raises(KernelCompileError) as e:
        kernels.nvcc_check(BAD_SRC, "my_kernel.cu")
    msg = str(e.value)
    assert msg.startswith("nvcc could not compile my_kernel.cu:")
    assert re.search(r"my_kernel\.cu\([23]\): error: expected a \";\"", msg)


@needs_nvcc
def test_nvcc_check_missing_block_size_define():
    with pytest.raises(KernelCompileError, match=r"softmax_backward6\.cu(\(\d+\)|:\d+:\d+): error.*"
                                                 r"compile with -DBLOCK_SIZE=N"):
        kernels.nvcc_check(kernels.kernel_source("softmax_backward6"), "softmax_backward6.cu")


def test_nvcc_check_without_nvcc(monkeypatch):
    monkeypatch.setenv("PATH", "")
    with pytest.raises(NvccNotFoundError, match="nvcc is not on PATH: the kernels are compiled at "
                                                "run time; install the CUDA toolkit"):
        kernels.nvcc_check('extern "C" __global__ void k() {}', "k.cu")


@pytest.mark.gpu
def test_compile_source_error_names_the_file_and_line():
    with pytest.raises(KernelCompileError) as e:
        kernels.compile_source(BAD_SRC, "my_kernel.cu")
    msg = str(e.value)
    assert msg.startswith("nvcc could not compile my_kernel.cu:")
    assert re.search(r"my_kernel\.cu\([23]\): error: expected a \";\"", msg)


@pytest.mark.gpu
def test_compile_source_without_nvcc(monkeypatch):
    monkeypatch.setenv("PATH", "")
    with pytest.raises(NvccNotFoundError, match="nvcc is not on PATH"):
        kernels.compile_source('extern "C" __global__ void k() {}', "k.cu")


@pytest.mark.gpu
def test_load_without_its_block_size_define():
    with pytest.raises(KernelCompileError, match=r"softmax_backward7\.cu(\(\d+\)|:\d+:\d+): error.*"
                                                 r"compile with -DBLOCK_SIZE=N"):
        kernels.load("softmax_backward7")


# ------------------------------------------------------------ gemm

def test_sgemm_transpose_flags(forbid_gpu):
    with pytest.raises(InputError, match="transa and transb must be 'n' or 't', got 'N', 'n'"):
        gemm.sgemm_strided_batched("N", "n", 1, 1, 1, 1.0, 0, 1, 1, 0, 1, 1, 0.0, 0, 1, 1, 1)


def test_sgemm_dimensions_are_checked(forbid_gpu):
    """A negative dimension gets an InputError naming it, before cuBLAS (whose
    CUBLAS_STATUS_INVALID_VALUE would name no argument)."""
    with pytest.raises(InputError, match="m must be >= 0, got -1"):
        gemm.sgemm_strided_batched("n", "n", -1, 1, 1, 1.0, 0, 1, 1, 0, 1, 1, 0.0, 0, 1, 1, 1)


@pytest.mark.parametrize("call", [
    pytest.param(lambda: gemm.sgemm_strided_batched("n", "n", 1, 1, 1, 1.0, 0, 1, 1, 0, 1, 1,
                                                    0.0, 0, 1, 1, 1, tf32="no"), id="sgemm"),
    pytest.param(lambda: attention.gpu_forward(INP, NH, tf32="no"), id="gpu_forward"),
    pytest.param(lambda: attention.gpu_backward(DOUT, INP, NH, tf32="no"), id="gpu_backward"),
])
def test_tf32_wants_a_bool(forbid_gpu, call):
    """A str is refused: bool('no') is True, so taking it would turn TF32 on."""
    with pytest.raises(InputError, match=r"tf32 must be True \(TF32 tensor cores\) or False "
                                         r"\(fp32 CUDA cores\), got str 'no'"):
        call()


# ------------------------------------------------------------ bench

@pytest.mark.parametrize("kwargs, message", [
    pytest.param(dict(repeats=0), "repeats must be >= 1, got 0", id="bench-repeats"),
    pytest.param(dict(repeats=2.5), "repeats must be an int, got float 2.5", id="bench-repeats-float"),
    pytest.param(dict(warmup=-1), "warmup must be >= 0, got -1", id="bench-warmup"),
])
def test_benchmark_arguments(forbid_gpu, kwargs, message):
    with pytest.raises(InputError) as e:
        bench.benchmark(lambda: None, **kwargs)
    assert message in str(e.value)


def test_sweep_passes_its_arguments_on(forbid_gpu):
    with pytest.raises(InputError, match="repeats must be >= 1, got 0"):
        bench.sweep(lambda bs: None, [256], repeats=0)


def test_benchmark_wants_a_callable(forbid_gpu):
    with pytest.raises(InputError, match="fn must be callable"):
        bench.benchmark(None)


def test_sweep_checks_block_sizes(forbid_gpu):
    with pytest.raises(InputError, match="block_size"):
        bench.sweep(lambda bs: None, [48])


# ------------------------------------------------------------ make_inputs / make_problem

@pytest.mark.parametrize("call", [make_inputs, lambda *a, **k: make_problem(*a, cache=False, **k)],
                         ids=["inputs", "problem"])
@pytest.mark.parametrize("args, kwargs, message", [
    pytest.param((1, 4, 6, 4), {}, "C must be divisible by NH (C=6, NH=4, C % NH = 2)", id="heads"),
    pytest.param((0, 4, 6, 2), {}, "B must be >= 1, got 0", id="zero"),
    pytest.param((1, 4.0, 6, 2), {}, "T must be an int, got float 4.0", id="float"),
    pytest.param((1, 4, 6, 2), {"seed": -1}, "seed must be >= 0, got -1", id="seed"),
    pytest.param((1, 4, 6, 2), {"seed": 1.5}, "seed must be an int, got float 1.5", id="seed-float"),
])
def test_problem_arguments(forbid_gpu, call, args, kwargs, message, monkeypatch, tmp_path):
    monkeypatch.setenv("ATTNLAB_CACHE", str(tmp_path))
    with pytest.raises(InputError) as e:
        call(*args, **kwargs)
    assert message in str(e.value)


def test_problem_takes_any_t_and_gives_finite_float32(forbid_gpu, tmp_path, monkeypatch):
    monkeypatch.setenv("ATTNLAB_CACHE", str(tmp_path))
    p = make_problem(1, 5, 6, 2, cache=False)           # T = 5: the CPU reference takes it
    for name in ("inp", "dout", "out", "dinp"):
        a = getattr(p, name)
        assert a.dtype == np.float32 and np.isfinite(a).all()


def test_problem_refuses_a_damaged_cache(forbid_gpu, tmp_path, monkeypatch):
    """A cache file holding a NaN is not returned as it is: the problem comes back finite."""
    from attnlab import problem
    monkeypatch.setenv("ATTNLAB_CACHE", str(tmp_path))
    monkeypatch.setattr(problem, "_memo", {})
    make_problem(1, 4, 6, 2)
    path = problem.cache_dir() / "reference-B1-T4-C6-NH2-seed0.npz"
    arrays = dict(np.load(path))
    arrays["out"][0, 0, 0] = np.nan
    np.savez(path, **arrays)
    monkeypatch.setattr(problem, "_memo", {})
    p = make_problem(1, 4, 6, 2)
    assert np.isfinite(p.out).all()


# ------------------------------------------------------------ validate / compare

def test_compare_shape_mismatch():
    with pytest.raises(InputError, match=r"dinp: gpu result has shape \(2, 3\), reference \(2, 4\)"):
        compare(np.zeros((2, 3)), np.zeros((2, 4)), "dinp")


def test_compare_unknown_name_needs_tol():
    with pytest.raises(InputError, match=r"tol must be given for 'foo' \(known names: \['att', "):
        compare(np.zeros(3), np.zeros(3), "foo")


def test_validate_nan_on_the_gpu_side_fails_with_coordinates():
    ref = np.zeros((2, 4, 6), np.float32)
    gpu = poke(ref, (1, 3, 5), np.nan)
    with pytest.raises(ValidationError) as e:
        validate(gpu, ref, "dinp")
    assert "dinp: FAILED - 1 of 48 elements" in str(e.value)
    assert "(b=1, t=3, c=5): expected 0, got nan" in str(e.value)
    r = compare(gpu, ref, "dinp")                  # compare: the same, as a failed Report
    assert not r.ok and r.worst[0][0] == {"b": 1, "t": 3, "c": 5}


@pytest.mark.parametrize("bad", [np.nan, np.inf], ids=["nan", "inf"])
def test_compare_reports_nan_in_the_reference(bad):
    """A NaN/Inf reference element is a mismatch (llm.c skips such elements and says OK)."""
    r = compare(np.zeros(2, np.float32), np.array([bad, 0.0], np.float32), "x", 1e-3)
    assert not r.ok and r.mismatches == 1


def test_compare_non_numeric():
    with pytest.raises(InputError, match="gpu"):
        compare(np.array(["a"]), np.array([1.0]), "x", 1e-3)


def test_compare_tol_must_be_a_number():
    with pytest.raises(InputError, match="tol"):
        compare(np.zeros(1), np.zeros(1), "x", "1e-3")


# ------------------------------------------------------------ docs/errors.md has a test per row

def collected_ids():
    """Every test id in the test files docs/errors.md cites, as pytest collects them."""
    p = subprocess.run([sys.executable, "-m", "pytest", "--collect-only", "-q", "-p",
                        "no:cacheprovider", "tests/test_errors.py", "tests/test_cli.py",
                        "tests/test_sanitize.py",
                        "tests/test_fused.py", "tests/test_exercises.py",
                        "tests/test_libraries.py", "tests/test_environment.py",
                        "tests/test_bench_stats.py", "tests/test_prose_numbers.py"],
                       capture_output=True, text=True, cwd=ROOT, timeout=300)
    ids = {}
    for line in p.stdout.splitlines():
        m = re.match(r"tests/(test_\w+\.py)::(test_\w+)(?:\[(.*)\])?$", line.strip())
        if m:
            ids.setdefault((m.group(1), m.group(2)), []).append(m.group(3) or "")
    assert ids, p.stdout + p.stderr
    return ids


def test_every_row_of_the_table_names_a_test_that_exists():
    doc = (ROOT / "docs" / "errors.md").read_text()
    ids = collected_ids()
    rows = [ln for ln in doc.splitlines() if ln.startswith("|") and not set(ln) <= set("|-: ")]
    cited = 0
    for row in rows:
        cells = [c.strip() for c in row.strip("|").split("|")]
        if cells[0] in ("Bad input", "Class"):
            continue
        refs = re.findall(r"`(test_\w+\.py)::(test_\w+)(?:\[([^\]`]+)\])?`", cells[-1])
        assert refs, f"docs/errors.md row without a test: {row}"
        for file, func, param in refs:
            assert (file, func) in ids, f"{file}::{func}, cited in docs/errors.md, is not a test"
            if param:
                assert any(i == param or i.startswith(param + "-") or i.endswith("-" + param)
                           or f"-{param}-" in i for i in ids[(file, func)]), \
                    f"{file}::{func}[{param}], cited in docs/errors.md, is not a test"
            cited += 1
    assert cited > 80
