"""The fused (FlashAttention-2 style) attention of kernels/flash_attention.cu, and the later
fused backward kernels (kernel 10: kernels/flash_attention10.cu; kernel 12 and later: on
Hopper's wgmma, sm_90 only, TF32 only).

On any machine: bad arguments are refused before the GPU is touched, the launch geometry and
memory are what the kernels expect, and other head sizes do not compile (that both variants
compile for every architecture, fit its limits and do not spill: tests/test_archs.py). On a
GPU: out and dinp of both precisions against the CPU reference over whole tensors, at the
small shape (T=260, a partial last tile) and the default shape, and two runs give
bit-identical results, for every deterministic fused backward kernel (the others differ
only in dq, by rounding); kernels 10's and 11's fp32-accurate (3xTF32) variants are within 2x
of kernel 9's fp32 CUDA-core error against a float64 reference. A GPU test of a kernel this
GPU cannot run is skipped with fused.gpu_unsupported_reason's text.
"""
import argparse
import re
import shutil

import numpy as np
import pytest

from attnlab import GPUMemoryError, InputError, KernelCompileError, cli, cubin, fused, kernels
from attnlab.buffers import qkv_pointers
from attnlab.errors import AttnlabError
from attnlab.archs import ARCHS, LIMITS
from attnlab.problem import make_inputs
from attnlab import reference
from attnlab.reference import causal_mask, split_heads
from attnlab.validate import compare

needs_nvcc = pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc is not on PATH")

PRECISIONS = [False, True]
# (fused backward kernel, tf32) of every method the GPU tests run (TF32_ONLY: no fp32;
# FP32_ONLY: no TF32)
METHODS = [(k, tf32) for k in fused.FUSED_KERNELS for tf32 in fused.precisions(k)]
METHOD_IDS = [f"k{k}-{'tf32' if tf32 else 'fp32'}" for k, tf32 in METHODS]
LAST = fused.FUSED_KERNELS[-1]
TF32_ONLY_MESSAGE = ("tf32=False: fused backward kernel {} runs in TF32 only (tf32=True, --tf32); "
                     "for fp32 accuracy use kernel 18 or 11 (3xTF32)")
WGMMA_MESSAGE = ("fused backward kernel {} runs on Hopper's warpgroup MMA (wgmma), which only "
                 "compute capability 9.0 has (sm_90a); this GPU is {}: use kernel 11, or kernel 9")


def precision(tf32):
    return "tf32" if tf32 else "fp32"


def skip_unless_supported(tf32, kernel):
    """Skip a GPU test of a kernel this GPU cannot run, saying why."""
    why = fused.gpu_unsupported_reason(tf32, kernel)
    if why:
        pytest.skip(why)


# ---------------------------------------------------------------------------------------------
# No GPU needed

@pytest.fixture
def gpu_forbidden(monkeypatch):
    """Any use of the GPU during the test fails it."""
    def touched(*args, **kwargs):
        raise AssertionError("the GPU was touched before the arguments were checked")
    for where in ("attnlab.fused.context", "attnlab.buffers.free_memory",
                  "attnlab.buffers.context", "attnlab.device.context", "attnlab.device.require_gpu",
                  "attnlab.kernels.compile_source"):
        monkeypatch.setattr(where, touched)


@pytest.mark.parametrize("C, NH", [(96, 3), (768, 6), (192, 2), (64, 2)])
def test_head_size_other_than_64_is_refused_before_the_gpu(gpu_forbidden, C, NH):
    inp, dout = make_inputs(1, 8, C, NH)
    hs = C // NH
    for call in (lambda: fused.gpu_fused_forward(inp, NH),
                 lambda: fused.gpu_fused_backward(dout, inp, NH, tf32=True),
                 lambda: fused.FusedBuffers(1, 8, C, NH)):
        with pytest.raises(InputError, match=rf"\[64\] only, got HS = {C} / {NH} = {hs}"):
            call()


def test_bad_arguments_are_refused_before_the_gpu(gpu_forbidden):
    inp, dout = make_inputs(2, 8, 128, 2)
    cases = [
        (lambda: fused.gpu_fused_forward(inp, 2, tf32="yes"), "tf32 must be True"),
        (lambda: fused.gpu_fused_forward(inp, 2, tf32=1), "tf32 must be True"),
        (lambda: fused.gpu_fused_forward(inp.astype(np.float64), 2), "dtype"),
        (lambda: fused.gpu_fused_forward(inp, 3), "divisible"),
        (lambda: fused.gpu_fused_backward(dout[:, :4], inp, 2), "dout must have shape"),
        (lambda: fused.gpu_fused_backward(dout, np.ascontiguousarray(inp[:, :, :-3]), 2),
         "divisible"),
        (lambda: fused.gpu_fused_forward(inp[:, ::2], 2), "C-contiguous"),
        (lambda: fused.FusedBuffers(1, 32768 * 64 + 4, 128, 2), "fused backward"),
        (lambda: fused.gpu_fused_backward(dout, inp, 2, kernel=8),
         r"fused backward kernel must be one of \[9, 10, 11, 12(, \d+)*\], got 8"),
        (lambda: fused.gpu_fused_backward(dout, inp, 2, kernel=True), "got True"),
        (lambda: fused.gpu_fused_backward(dout, inp, 2, kernel=13.0), r"got 13\.0"),
        (lambda: fused.gpu_fused_backward(dout, inp, 2, kernel="13"), "got '13'"),
        (lambda: fused.gpu_fused_backward(dout, inp, 2, kernel=np.True_), r"got (np\.)?True"),
        (lambda: fused.prep_of(17.0), r"got 17\.0"),
        (lambda: fused.fused_launch(1, 64, 1, False, LAST + 1), f"got {LAST + 1}"),
    ]
    for call, message in cases:
        with pytest.raises(InputError, match=message):
            call()


@pytest.mark.parametrize("T", [1, 3, 6, 63, 65, 127, 129, 1031, 3001])
def test_fused_path_takes_any_T_the_materialized_one_a_multiple_of_4(gpu_forbidden, T):
    """The rule that T be a multiple of 4 belongs to the softmax kernels of the materialized
    path (float4 rows, 4 rows per block); the fused kernels mask their rows: any T >= 1."""
    from attnlab.checks import check_qkv, check_shape
    inp, _ = make_inputs(1, T, 128, 2)
    assert fused.check_fused_shape(1, T, 128, 2) == (1, T, 128, 2)
    assert fused._checked_inputs(inp, 2, True, 13) == (1, T, 128, 2)
    if T % 4:
        for call in (lambda: check_shape(1, T, 128, 2), lambda: check_qkv(inp, 2)):
            with pytest.raises(InputError, match=f"T must be a multiple of 4.*got T={T}"):
                call()


def test_other_head_sizes_are_refused_with_what_the_materialized_path_would_need(gpu_forbidden):
    """HS != 64: the refusal says what the materialized pipeline (any head size) needs at
    that shape, so that nobody is sent to a 200 GB allocation; and its 32-bit T*T limit."""
    from attnlab.attention import bytes_needed
    for B, T, C, NH in ((4, 16384, 1536, 12), (1, 64, 96, 3)):
        need = bytes_needed(B, T, C, NH) / 2**30
        with pytest.raises(InputError) as e:
            fused.check_fused_shape(B, T, C, NH)
        assert (f"at B={B} T={T} C={C} NH={NH} it needs {need:.2f} GiB of GPU memory"
                in str(e.value))
    assert bytes_needed(4, 16384, 1536, 12) > 190 * 2**30
    with pytest.raises(InputError, match=r"T\*T = 2,500,000,000 is above its 32-bit limit"):
        fused.check_fused_shape(1, 50000, 96, 3)


def test_cli_backward_9_checks_before_the_gpu(gpu_forbidden):
    common = dict(command="backward", kernel=fused.FUSED_KERNEL, seed=0, warmup=2,
                  block_sizes=None)
    args = argparse.Namespace(B=1, T=64, C=96, NH=3, repeats=3, tf32=False, **common)
    with pytest.raises(InputError, match="HS"):
        cli.run(args)
    args = argparse.Namespace(B=1, T=64, C=128, NH=2, repeats=0, tf32=True, **common)
    with pytest.raises(InputError, match="repeats"):
        cli.run(args)
    args = argparse.Namespace(B=1, T=64, C=96, NH=3, repeats=3, tf32=True, **{**common, "kernel": 10})
    with pytest.raises(InputError, match="HS"):
        cli.run(args)
    args = argparse.Namespace(B=1, T=64, C=128, NH=2, repeats=3, tf32=True,
                              **{**common, "kernel": LAST + 1})
    with pytest.raises(InputError, match=re.escape(
            f"kernel must be 1-{LAST} (1-8: the softmax-backward kernels, 9-{LAST}: the fused "
            f"backward), got {LAST + 1}")):
        cli.run(args)


@pytest.mark.parametrize("kernel", fused.TF32_ONLY)
def test_tf32_only_kernels_refuse_fp32_before_the_gpu(gpu_forbidden, capsys, kernel):
    """Kernel 12 (and any later TF32_ONLY kernel) has no fp32 variant: tf32=False is an
    InputError from the functions, and the command line says to add --tf32, before any CUDA
    call."""
    inp, dout = make_inputs(1, 64, 128, 2)
    message = TF32_ONLY_MESSAGE.format(kernel)
    for call in (lambda: fused.gpu_fused_backward(dout, inp, 2, tf32=False, kernel=kernel),
                 lambda: fused.fused_backward(None, False, kernel),
                 lambda: fused.check_precision(False, kernel)):
        with pytest.raises(InputError, match=re.escape(message)):
            call()
    cli_message = (f"backward {kernel} runs in TF32 only: add --tf32 (python -m attnlab backward "
                   f"{kernel} --tf32); for fp32 accuracy use backward 18 or 11 (3xTF32)")
    args = argparse.Namespace(command="backward", kernel=kernel, B=1, T=64, C=128, NH=2, seed=0,
                              warmup=2, repeats=3, tf32=False, block_sizes=None)
    with pytest.raises(InputError, match=re.escape(cli_message)):
        cli.run(args)
    assert cli.main(["backward", str(kernel), "--B", "1", "--T", "64", "--C", "128",
                     "--NH", "2"]) == 2
    assert capsys.readouterr().err == f"attnlab: {cli_message}\n"
    assert fused.check_precision(True, kernel) is True and fused.check_precision(False, 11) is False


@pytest.mark.parametrize("kernel", fused.FP32_ONLY)
def test_the_compile_time_refusal_names_the_same_tf32_kernel(kernel):
    """An fp32-only kernel's #error (what nvcc says when it is built with -DTF32=1) and its
    header name the TF32 kernel that the Python refusals name (fused.TF32_CHOICE): changing
    one without the other fails here."""
    source = kernels.kernel_source(fused.BACKWARD_SOURCES[kernel])
    said = re.findall(r"for TF32 use kernel (\d+)", source)
    assert said and set(said) == {str(fused.TF32_CHOICE)}, said


@pytest.mark.parametrize("kernel", fused.FP32_ONLY)
def test_fp32_only_kernels_refuse_tf32_before_the_gpu(gpu_forbidden, capsys, kernel):
    """Kernel 18 (3xTF32 on wgmma) has no TF32 variant: tf32=True is an InputError from the
    functions, and the command line says to drop --tf32, before any CUDA call."""
    inp, dout = make_inputs(1, 64, 128, 2)
    message = (f"tf32=True: fused backward kernel {kernel} is fp32-accurate only (3xTF32: "
               f"tf32=False, no --tf32); for TF32 use kernel 17")
    for call in (lambda: fused.gpu_fused_backward(dout, inp, 2, tf32=True, kernel=kernel),
                 lambda: fused.fused_backward(None, True, kernel),
                 lambda: fused.check_precision(True, kernel)):
        with pytest.raises(InputError, match=re.escape(message)):
            call()
    cli_message = (f"backward {kernel} is fp32-accurate only (3xTF32): drop --tf32 (python -m "
                   f"attnlab backward {kernel}); for TF32 use backward 17 --tf32")
    assert cli.main(["backward", str(kernel), "--tf32", "--B", "1", "--T", "64", "--C", "128",
                     "--NH", "2"]) == 2
    assert capsys.readouterr().err == f"attnlab: {cli_message}\n"
    assert fused.check_precision(False, kernel) is False and fused.precisions(kernel) == (False,)


@pytest.mark.parametrize("T, tiles", [(4, 1), (60, 1), (64, 1), (68, 2), (260, 5), (516, 9),
                                      (1024, 16), (16384, 256)])
def test_tile_counts_and_grids(T, tiles):
    assert fused.n_tiles(T) == tiles
    for tf32 in PRECISIONS:
        launch = fused.fused_launch(4, T, 12, tf32)
        grid, block, _ = launch["flash_forward"]
        assert grid == (48, tiles, 1) and block == (128, 1, 1)
        grid, block, _ = launch["flash_backward"]
        assert grid == (48, 2 * tiles, 1) and block == (128, 1, 1)
        grid, block, shared = launch["flash_backward_preprocess"]
        assert grid[0] * 16 >= 48 * T > (grid[0] - 1) * 16 and block == (256, 1, 1) and shared == 0
        # kernel 10: a dK/dV and a dQ block per 128 rows, both precisions alike
        grid, block, shared = fused.fused_launch(4, T, 12, tf32, 10)["flash_backward"]
        assert grid == (48, 2 * -(-T // 128), 1) and block == (128, 1, 1)
        assert shared == 4 * (2 * (128 + 64) * 72 + 2 * 128) == 111_616
        # kernel 11: one block per 128 keys (it adds dQ too); 32 queries at a time, and dS^T
        grid, block, shared = fused.fused_launch(4, T, 12, tf32, 11)["flash_backward"]
        assert grid == (48, -(-T // 128), 1) and block == (128, 1, 1)
        assert shared == 4 * (2 * (128 + 32) * 72 + 2 * 32 + 128 * 40) == 112_896
    # kernel 12 (TF32 only): one block of 2 warpgroups per 128 keys (it adds dQ too); K, V, K^T
    # of its keys, Q, dO and their transposes of 64 queries, dS, lse and D, unpadded
    grid, block, shared = fused.fused_launch(4, T, 12, True, 12)["flash_backward"]
    assert grid == (48, -(-T // 128), 1) and block == (256, 1, 1)
    assert block[0] == fused.BACKWARD_THREADS[12]
    assert shared == 4 * (3 * 128 * 64 + 4 * 64 * 64 + 64 * 128 + 2 * 64) == 197_120
    assert fused.fused_launch(4, T, 12, True, 12)["flash_forward"] == \
        fused.fused_launch(4, T, 12, True)["flash_forward"]
    # kernel 14: kernel 13's block with a second stage of Q and dO and three 8-byte mbarriers,
    # 2,520 bytes under sm_90's 232,448 per block; its prep is kernel 13's (256 threads)
    launch = fused.fused_launch(4, T, 12, True, 14)
    assert launch["flash_backward"][2] == 197_120 + 4 * 2 * 64 * 64 + 3 * 8 == 229_912
    assert launch["flash_backward_prep"] == fused.fused_launch(4, T, 12, True, 13)["flash_backward_prep"]
    assert launch["flash_backward_prep"][1] == (256, 1, 1)
    # kernel 15: kernel 14's block and a fourth mbarrier; flash_backward_dq, one block per
    # (b, h) and query tile, writes dq_tiles into dinp
    launch = fused.fused_launch(4, T, 12, True, 15)
    assert launch["flash_backward"][2] == 229_912 + 8
    assert launch["flash_backward_dq"] == ((48, -(-T // 64), 1), (256, 1, 1), 0)
    assert "flash_backward_dq" not in fused.fused_launch(4, T, 12, True, 14)
    # kernel 16: kernel 15 without its fourth mbarrier (dQ waits in a query stage, not in dS)
    launch = fused.fused_launch(4, T, 12, True, 16)
    assert launch["flash_backward"][2] == 229_912
    assert launch["flash_backward_dq"] == fused.fused_launch(4, T, 12, True, 15)["flash_backward_dq"]
    # kernel 17: kernel 16's block (it changes only how P^T and dS^T are rounded)
    launch = fused.fused_launch(4, T, 12, True, 17)
    assert launch["flash_backward"][2] == 229_912
    assert launch["flash_backward_dq"] == fused.fused_launch(4, T, 12, True, 16)["flash_backward_dq"]


def test_launch_bounds_ask_each_arch_for_the_blocks_its_shared_memory_fits():
    """The minimum blocks per SM in flash_attention.cu's __launch_bounds__ are, per architecture,
    the most blocks that shared memory fits (1 KB of an SM's reserved per block): fewer would
    leave registers unused, more would only cap the registers and spill."""
    from attnlab.archs import LIMITS
    text = kernels.kernel_source("flash_attention")
    assert re.search(r"#if !defined\(__CUDA_ARCH__\) \|\| __CUDA_ARCH__ >= 900\s+"
                     r"#define FWD_MIN_BLOCKS \(TF32 \? 4 : 3\)\s+#define BWD_MIN_BLOCKS \(TF32 \? 3 : 2\)\s+"
                     r"#elif __CUDA_ARCH__ == 800\s+#define FWD_MIN_BLOCKS 2\s+"
                     r"#define BWD_MIN_BLOCKS \(TF32 \? 2 : 1\)\s+#else\s+"
                     r"#define FWD_MIN_BLOCKS 1\s+#define BWD_MIN_BLOCKS 1\s+#endif", text)
    assumed = {  # (kernel, tf32): blocks, as written above
        "sm_90": {("flash_forward", True): 4, ("flash_backward", True): 3,
                  ("flash_forward", False): 3, ("flash_backward", False): 2},
        "sm_80": {("flash_forward", True): 2, ("flash_backward", True): 2,
                  ("flash_forward", False): 2, ("flash_backward", False): 1},
        "sm_86": dict.fromkeys([(k, t) for k in ("flash_forward", "flash_backward")
                                for t in (True, False)], 1),
    }
    assumed["sm_89"] = assumed["sm_86"]
    for arch, blocks in assumed.items():
        per_sm = LIMITS[arch].shared_per_sm
        for (name, tf32), n in blocks.items():
            need = fused.shared_memory_bytes(name, tf32) + 1024
            assert n * need <= per_sm < (n + 1) * need, (arch, name, tf32, n, need)
    assert "#define TS (HS + 8)" in text and fused.TILE_FLOATS == 64 * (64 + 8)
    with pytest.raises(InputError):
        fused.shared_memory_bytes("flash_backward_preprocess", False)


def test_memory_grows_like_T_not_T_squared():
    from attnlab.attention import bytes_needed
    for T in (1024, 4096):
        assert fused.fused_bytes_needed(4, 2 * T, 768, 12) == 2 * fused.fused_bytes_needed(4, T, 768, 12)
    assert fused.fused_bytes_needed(4, 16384, 768, 12) < 3.1 * 2**30
    assert bytes_needed(4, 16384, 768, 12) > 190 * 2**30
    shapes = fused.fused_buffer_shapes(4, 16384, 768, 12)
    assert all(16384 * 16384 > np.prod(s) // 4 for s in shapes.values())
    assert set(fused.fused_buffer_shapes(1, 8, 128, 2, backward=False)) == set(fused.FORWARD_ONLY)


def test_a_numpy_kernel_number_is_taken_as_a_plain_int():
    """A kernel number from a numpy array (a loop over np.arange, a sweep's table) is taken, as
    the int it equals: f-strings and dict keys downstream see 17, not np.int64(17)."""
    for k in (np.int64(17), np.int32(13), np.uint8(9)):
        got = fused.check_fused_kernel(k)
        assert got == int(k) and type(got) is int
    assert fused.prep_of(np.int64(17)) == fused.prep_of(17)


def test_every_kernel_record_is_consistent():
    """What a new record in fused.BACKWARDS must respect: the copy engine and dq_tiles come only
    with ready-made tiles, tiles only on wgmma, a wgmma block is warpgroups of 64 keys each (and
    kernel 29's one more warpgroup for dQ^T, on tiles), and the source exists and is built for sm_90a
    when it uses wgmma."""
    for k, b in fused.BACKWARDS.items():
        assert (kernels.KERNEL_DIR / f"{b.source}.cu").is_file(), k
        assert b.precisions in (fused.TF32, fused.FP32, fused.BOTH), k
        if b.dq_tiled or b.split_tiles or b.mbarriers:
            assert b.tiled, k
        if b.tiled:
            assert b.wgmma and not b.deterministic, k
        if b.wgmma:
            assert b.source in kernels.ARCH_SPECIFIC and b.threads % 128 == 0, k
            assert b.own_rows == 64 * (fused.PASS_THREADS[k] // 128), k
        if b.dq_warpgroup:
            assert b.dq_tiled and b.pingpong and fused.PASS_THREADS[k] == b.threads - 128 == 256, k
        if b.split_tiles:
            assert b.precisions == fused.FP32, k
        assert b.dq_adds in ("atomics", "bulk reductions", "float4 reductions"), k
        if b.dq_adds == "bulk reductions":    # the copy engine adds into dq_tiles
            assert b.dq_tiled and b.mbarriers, k


def test_each_tiled_kernel_has_its_prep_kernel():
    """prep_of is where a TILED kernel's flash_backward_prep comes from: kernel 13's (256
    threads) or, for the SPLIT_TILES and PDL kernels, their own (as many threads as their backward,
    kernel 29's 128 fewer); the launch has those threads, its dq pass too. Other kernels have none,
    and say so."""
    assert {k: fused.prep_of(k) for k in fused.TILED} == {
        **{k: ("flash_attention13", 256) for k in (13, 14, 15, 16, 17, 19, 20, 21, 22, 23)}, 18: ("flash_attention18", 128),
        24: ("flash_attention24", 256), 25: ("flash_attention25", 256), 26: ("flash_attention26", 256),
        27: ("flash_attention27", 256), 28: ("flash_attention28", 256), 29: ("flash_attention29", 256)}
    for k, threads in {13: 256, 14: 256, 15: 256, 16: 256, 17: 256, 18: 128, 19: 256, 20: 256, 21: 256, 22: 256, 23: 256,
                       24: 256, 25: 256, 26: 256, 27: 256, 28: 256, 29: 256}.items():
        launch = fused.fused_launch(4, 1024, 12, fused.precisions(k)[-1], k, l2_bytes=60 * 2**20)
        assert launch["flash_backward_prep"] == ((48, 16, 1), (threads, 1, 1), 0), k
        if k in fused.DQ_TILED:
            assert launch["flash_backward_dq"] == ((48, 16, 1), (threads, 1, 1), 0), k
    # kernel 29's flash_backward: three warpgroups, its prep and dq pass two (its source's NUM_THREADS)
    assert fused.fused_launch(4, 1024, 12, True, 29, l2_bytes=60 * 2**20)["flash_backward"][1] == (384, 1, 1)
    assert fused.DQ_WARPGROUP == (29,)
    for k in (9, 10, 11, 12):
        with pytest.raises(InputError, match=f"kernel {k} has no flash_backward_prep: only the TILED"):
            fused.prep_of(k)
        assert "flash_backward_prep" not in fused.fused_launch(4, 1024, 12, True, k)


def test_a_kernel_s_own_buffers_are_only_those_it_uses():
    """#23: kernel 13 reads neither do nor dqkvr; kernels 9-12 read no query tiles. Each
    kernel's buffers come on top of the shared ones, whose names they do not repeat."""
    B, T, C, NH = 4, 16384, 768, 12
    for kernel in fused.FUSED_KERNELS:
        own = fused.kernel_buffer_shapes(B, T, C, NH, kernel)
        assert set(own) == ({fused.tiles_name(kernel), "dq_tiles"} if kernel in fused.DQ_TILED else
                            {"tiles"} if kernel in fused.TILED else {"do", "dqkvr"}), kernel
        assert not set(own) & set(fused.fused_buffer_shapes(B, T, C, NH))
        assert fused.extra_bytes_needed(B, T, C, NH, kernel) == sum(4 * int(np.prod(s)) for s in own.values())
    assert fused.kernel_buffer_shapes(B, T, C, NH, 9)["dqkvr"] == (3, B, NH, T, C // NH)
    assert fused.kernel_buffer_shapes(B, T, C, NH, 13)["tiles"] == fused.query_tiles_shape(B, T, NH)
    # kernel 13 at T=16k: what it allocates, against the 3.76 GiB it had with do and dqkvr
    k13 = fused.fused_bytes_needed(B, T, C, NH) + fused.extra_bytes_needed(B, T, C, NH, 13)
    k9 = fused.fused_bytes_needed(B, T, C, NH) + fused.extra_bytes_needed(B, T, C, NH, 9)
    assert k9 + fused.extra_bytes_needed(B, T, C, NH, 13) == pytest.approx(3.76 * 2**30, rel=0.01)
    assert k13 == k9 + fused.extra_bytes_needed(B, T, C, NH, 13) - fused.extra_bytes_needed(B, T, C, NH, 9)
    assert k13 == pytest.approx(3.01 * 2**30, rel=0.01)
    # kernel 14 reads the same query tiles: its second stage is shared memory, not a buffer
    assert fused.kernel_buffer_shapes(B, T, C, NH, 14) == fused.kernel_buffer_shapes(B, T, C, NH, 13)
    # kernel 15 adds dQ into a buffer of its own, 64 x 64 floats per (b, h) and query tile:
    # 192 MiB at T=16k, in place of atomics into dinp
    assert fused.kernel_buffer_shapes(B, T, C, NH, 15)["dq_tiles"] == (B * NH, T // 64, 64 * 64)
    assert fused.extra_bytes_needed(B, T, C, NH, 15) - fused.extra_bytes_needed(B, T, C, NH, 14) == 192 * 2**20
    assert fused.kernel_buffer_shapes(B, T, C, NH, 16) == fused.kernel_buffer_shapes(B, T, C, NH, 15)
    assert fused.kernel_buffer_shapes(B, T, C, NH, 17) == fused.kernel_buffer_shapes(B, T, C, NH, 15)
    # kernel 18 (3xTF32): each of the four layouts as a high and a low part, twice kernel 17's
    # tiles (1.5 GiB at T=16k), and the same dq_tiles
    # under another name, so that buffers which ran kernel 17 first do not hand it theirs
    k18 = fused.kernel_buffer_shapes(B, T, C, NH, 18)
    assert set(k18) == {"split_tiles", "dq_tiles"}
    assert k18["split_tiles"] == (B * NH, T // 64, 8 * 64 * 64) and k18["dq_tiles"] == (B * NH, T // 64, 64 * 64)
    assert 4 * np.prod(k18["split_tiles"]) == 1.5 * 2**30
    assert fused.extra_bytes_needed(B, T, C, NH, 18) - fused.extra_bytes_needed(B, T, C, NH, 17) == 0.75 * 2**30
    # kernel 19 (ping-pong): kernel 17's buffers; its dq_tiles hold dQ^T, in the same size
    assert fused.kernel_buffer_shapes(B, T, C, NH, 19) == fused.kernel_buffer_shapes(B, T, C, NH, 17)
    # kernel 27 copies Q from q: three layouts (dO, Q^T, dO^T), 0.75 of kernel 26's tiles (192 MiB fewer
    # at T=16k), under another name, so that buffers which ran kernel 26 first do not hand it theirs
    k27 = fused.kernel_buffer_shapes(B, T, C, NH, 27)
    assert set(k27) == {"three_layout_tiles", "dq_tiles"} and k27["three_layout_tiles"] == (B * NH, T // 64, 3 * 64 * 64)
    assert fused.extra_bytes_needed(B, T, C, NH, 26) - fused.extra_bytes_needed(B, T, C, NH, 27) == 192 * 2**20
    assert fused.kernel_buffer_shapes(B, T, C, NH, 28) == k27      # kernel 28 changes only how dK and dV are stored
    with pytest.raises(InputError, match=f"got {LAST + 1}"):
        fused.kernel_buffer_shapes(B, T, C, NH, LAST + 1)


def test_memory_is_checked_before_allocating(monkeypatch):
    monkeypatch.setattr("attnlab.buffers.context", lambda: None)
    monkeypatch.setattr("attnlab.buffers.free_memory", lambda: (1000, 2000))
    need = fused.fused_bytes_needed(1, 64, 128, 2)
    with pytest.raises(GPUMemoryError, match=rf"{need:,} bytes.*1,000 bytes"):
        fused.FusedBuffers(1, 64, 128, 2)


@needs_nvcc
def test_other_head_sizes_do_not_compile():
    with pytest.raises(KernelCompileError, match="HEAD_SIZE=64 only"):
        kernels.nvcc_check(kernels.kernel_source("flash_attention"), "kernels/flash_attention.cu",
                           {"HEAD_SIZE": 128, "TF32": 0}.items())


# ---------------------------------------------------------------------------------------------
# On the GPU


def run_fused(problem, tf32, kernel=fused.FUSED_KERNEL):
    """(out, dinp, lse) of the fused forward and backward on the problem's inputs."""
    with fused.FusedBuffers(problem.B, problem.T, problem.C, problem.NH) as buf:
        buf.set("inp", problem.inp)
        buf.set("dout", problem.dout)
        fused.fused_forward(buf, tf32)
        fused.fused_backward(buf, tf32, kernel)
        return buf.get("out"), buf.get("dinp"), buf.get("lse")


def check_against_reference(problem, tf32, kernel):
    skip_unless_supported(tf32, kernel)
    out, dinp, _ = run_fused(problem, tf32, kernel)
    tol = fused.FUSED_TOLERANCES[precision(tf32)]
    for name, got in (("out", out), ("dinp", dinp)):
        report = compare(got, getattr(problem, name), name, tol[name])
        assert report.ok, str(report)


@pytest.mark.gpu
@pytest.mark.parametrize("kernel, tf32", METHODS, ids=METHOD_IDS)
def test_small_shape_matches_reference(small, kernel, tf32):
    check_against_reference(small, tf32, kernel)


@pytest.mark.gpu
@pytest.mark.parametrize("kernel, tf32", METHODS, ids=METHOD_IDS)
def test_default_shape_matches_reference(default, kernel, tf32):
    check_against_reference(default, tf32, kernel)


@pytest.mark.gpu
@pytest.mark.parametrize("shape", ["small", "default"])
def test_3xtf32_is_as_accurate_as_fp32_cuda_cores(shape, request):
    """Kernels 10 and 11 without tf32 (3xTF32 on tensor cores) against a float64 reference:
    their max |dinp error| is within 2x of kernel 9's fp32 CUDA-core kernel's, on the same
    inputs."""
    problem = request.getfixturevalue(shape)
    dinp64 = reference.dinp_float64(problem.dout, problem.inp, problem.NH)
    err = {k: np.abs(run_fused(problem, False, k)[1] - dinp64).max() for k in (9, 10, 11)}
    assert 0 < err[10] <= 2 * err[9] and 0 < err[11] <= 2 * err[9], err


@pytest.mark.gpu
@pytest.mark.parametrize("tf32", PRECISIONS, ids=["fp32", "tf32"])
def test_lse_is_the_log_sum_exp(small, tf32):
    _, _, lse = run_fused(small, tf32)
    q, k, _ = (x.astype(np.float64) for x in split_heads(small.inp, small.NH))
    s = np.where(causal_mask(small.T), q @ k.transpose(0, 1, 3, 2) / np.sqrt(64.0), -np.inf)
    m = s.max(axis=-1, keepdims=True)
    ref = (m + np.log(np.exp(s - m).sum(axis=-1, keepdims=True)))[..., 0]
    assert np.abs(lse - ref).max() < (1e-3 if tf32 else 2e-5)   # emulated: 1.4e-4 and 6e-7


@pytest.mark.gpu
@pytest.mark.parametrize("kernel, tf32", [m for m in METHODS if fused.DETERMINISTIC[m[0]]],
                         ids=[i for m, i in zip(METHODS, METHOD_IDS) if fused.DETERMINISTIC[m[0]]])
def test_two_runs_are_bit_identical(small, kernel, tf32):
    skip_unless_supported(tf32, kernel)
    with fused.FusedBuffers(small.B, small.T, small.C, small.NH) as buf:
        buf.set("inp", small.inp)
        buf.set("dout", small.dout)
        fused.fused_forward(buf, tf32)
        fused.fused_backward(buf, tf32, kernel)
        first = buf.get("dinp"), buf.get("out")
        fused.fused_forward(buf, tf32)
        fused.fused_backward(buf, tf32, kernel)
        fused.fused_backward(buf, tf32, kernel)   # idempotent: nothing accumulates
        second = buf.get("dinp"), buf.get("out")
    third = run_fused(small, tf32, kernel)[1::-1]   # fresh buffers
    for a, b, c in zip(first, second, third):
        assert np.array_equal(a.view(np.uint32), b.view(np.uint32))
        assert np.array_equal(a.view(np.uint32), c.view(np.uint32))


NON_DETERMINISTIC = [m for m in METHODS if not fused.DETERMINISTIC[m[0]]]


@pytest.mark.gpu
@pytest.mark.parametrize("kernel, tf32", NON_DETERMINISTIC,
                         ids=[i for m, i in zip(METHODS, METHOD_IDS) if m in NON_DETERMINISTIC])
def test_atomic_kernels_runs_differ_only_in_dq_and_by_rounding(small, kernel, tf32):
    """Kernels 11 and 12 add dQ with atomics: repeated runs may differ, in dq only (dK and dV
    keep one writer each), by no more than rounding (each run matches the reference:
    test_small_shape_matches_reference)."""
    skip_unless_supported(tf32, kernel)
    C = small.C
    runs = [run_fused(small, tf32, kernel)[1] for _ in range(3)]
    for dinp in runs[1:]:
        assert np.array_equal(dinp[..., C:], runs[0][..., C:])         # dk, dv bit-identical
        assert np.abs(dinp[..., :C] - runs[0][..., :C]).max() <= 1e-5 * np.abs(runs[0]).max()


ODD_T = [1, 3, 63, 65, 127, 129, 1031]    # partial tiles of 64 and 128 rows, and a lone row


@pytest.mark.gpu
@pytest.mark.parametrize("T", ODD_T)
@pytest.mark.parametrize("kernel, tf32", METHODS, ids=METHOD_IDS)
def test_any_T_matches_reference(kernel, tf32, T):
    """The fused kernels at T not a multiple of 4, 64 or 128 (T = 1: one query, one key),
    against the CPU reference over whole tensors (out and dinp)."""
    from attnlab import make_problem
    check_against_reference(make_problem(B=2, T=T, C=128, NH=2), tf32, kernel)


@pytest.mark.gpu
def test_backward_before_forward_or_without_dout_is_refused_before_launching(small):
    """FusedBuffers remember what they hold: fused_backward on buffers whose forward never ran
    (or ran on an inp since replaced), or without dout, raises instead of reading
    uninitialised qkvr, o, lse; fused_forward without inp likewise."""
    with fused.FusedBuffers(small.B, small.T, small.C, small.NH) as buf:
        with pytest.raises(InputError, match=re.escape("fused_forward needs buf.inp: call "
                                                       "buf.set('inp', inp) first")):
            fused.fused_forward(buf)
        buf.set("inp", small.inp)
        buf.set("dout", small.dout)
        for kernel in (9, 13):
            with pytest.raises(InputError, match=re.escape(
                    "fused_backward needs the forward: call fused_forward(buf) first")):
                fused.fused_backward(buf, True, kernel)
        fused.fused_forward(buf)
        buf.set("inp", small.inp)           # a new inp: the forward's results are stale
        with pytest.raises(InputError, match="call fused_forward"):
            fused.fused_backward(buf)
    with fused.FusedBuffers(small.B, small.T, small.C, small.NH) as buf:
        buf.set("inp", small.inp)
        fused.fused_forward(buf)
        with pytest.raises(InputError, match=re.escape(
                "fused_backward needs buf.dout: call buf.set('dout', dout) first")):
            fused.fused_backward(buf)
        buf.set("dout", small.dout)
        fused.fused_backward(buf)           # now it runs


@pytest.mark.gpu
def test_a_kernel_allocates_only_the_buffers_it_uses(small):
    """#23: a backward with kernel 13 leaves do and dqkvr unallocated; a later kernel-9
    backward on the same buffers allocates them then, and both still validate."""
    skip_unless_supported(True, 13)
    with fused.FusedBuffers(small.B, small.T, small.C, small.NH) as buf:
        assert set(buf.arrays) == set(fused.fused_buffer_shapes(small.B, small.T, small.C, small.NH))
        buf.set("inp", small.inp)
        buf.set("dout", small.dout)
        for kernel, tf32, added in ((13, True, {"tiles"}), (9, False, {"do", "dqkvr"})):
            before = set(buf.arrays)
            fused.fused_forward(buf, tf32)
            fused.fused_backward(buf, tf32, kernel)
            assert set(buf.arrays) - before == added, kernel
            tol = fused.FUSED_TOLERANCES[precision(tf32)]["dinp"]
            assert compare(buf.get("dinp"), small.dinp, "dinp", tol).ok, kernel
    with pytest.raises(AttnlabError, match="freed"):
        buf.kernel_buffers(9)


@pytest.mark.gpu
def test_every_kernel_on_one_set_of_buffers(small):
    """Each backward kernel in turn on the same FusedBuffers, as the benchmarks run them: each
    gets its own buffers (kernel 18's query tiles are twice kernel 17's, under another name:
    with one name it was handed kernel 17's and wrote past them) and validates."""
    skip_unless_supported(False, 18)
    with fused.FusedBuffers(small.B, small.T, small.C, small.NH) as buf:
        buf.set("inp", small.inp)
        buf.set("dout", small.dout)
        for kernel, tf32 in METHODS:
            fused.fused_forward(buf, tf32)
            fused.fused_backward(buf, tf32, kernel)
            tol = fused.FUSED_TOLERANCES[precision(tf32)]["dinp"]
            assert compare(buf.get("dinp"), small.dinp, "dinp", tol).ok, (kernel, tf32)
        assert buf.arrays["split_tiles"].size == 2 * buf.arrays["tiles"].size


@pytest.mark.gpu
def test_numpy_helpers(small):
    out = fused.gpu_fused_forward(small.inp, small.NH)
    dinp = fused.gpu_fused_backward(small.dout, small.inp, small.NH)
    assert compare(out, small.out, "out", 1e-3).ok
    assert compare(dinp, small.dinp, "dinp", 1e-3).ok
    skip_unless_supported(False, 10)
    dinp = fused.gpu_fused_backward(small.dout, small.inp, small.NH, kernel=10)
    assert compare(dinp, small.dinp, "dinp", 1e-3).ok


# ---------------------------------------------------------------------------------------------
# GPUs that cannot run the fused kernels (no GPU needed)

@pytest.mark.parametrize("arch", ARCHS)
@pytest.mark.parametrize("tf32", [False, True], ids=["fp32", "tf32"])
def test_which_gpus_run_the_fused_kernels(arch, tf32):
    why = fused.unsupported_reason(tf32, (int(arch[3]), int(arch[4])),
                                   LIMITS[arch].max_shared_per_block_optin)
    if arch != "sm_75":
        assert why is None
    elif tf32:
        assert why.startswith("tf32=True needs TF32 tensor cores (compute capability 8.0 or newer)")
    else:
        need = fused.shared_memory_bytes("flash_backward", False)
        assert why == (f"the fused fp32 kernels need {need:,} bytes of shared memory per block "
                       f"(flash_backward of kernel 9), and this GPU (sm_75) allows 65,536: use "
                       f"the materialized pipeline (attnlab.attention, kernels 1-8) instead")


@pytest.mark.parametrize("arch", ARCHS)
@pytest.mark.parametrize("tf32", [False, True], ids=["fp32", "tf32"])
@pytest.mark.parametrize("kernel, shared", [(10, "111,616"), (11, "112,896")])
def test_kernels_10_11_run_on_sm80_and_sm90_and_say_why_not_elsewhere(arch, tf32, kernel, shared):
    """Kernels 10 and 11 need tensor cores in both precisions and over 110 KB of shared memory
    per block: sm_80 and sm_90 run them; sm_86/sm_89 (99 KB) and sm_75 are told to use 9."""
    why = fused.unsupported_reason(tf32, (int(arch[3]), int(arch[4])),
                                   LIMITS[arch].max_shared_per_block_optin, kernel)
    if arch in ("sm_80", "sm_90"):
        assert why is None
    elif arch == "sm_75":
        assert why == (f"fused backward kernel {kernel} runs on TF32 tensor cores in both "
                       f"precisions (compute capability 8.0 or newer); this GPU is sm_75: use "
                       f"kernel 9")
    else:
        assert why == (f"the fused {'TF32' if tf32 else 'fp32'} kernels need {shared} bytes of "
                       f"shared memory per block (flash_backward of kernel {kernel}), and this "
                       f"GPU ({arch}) allows {LIMITS[arch].max_shared_per_block_optin:,}: use "
                       f"fused kernel 9 instead")


@pytest.mark.parametrize("arch", ARCHS)
@pytest.mark.parametrize("tf32", [False, True], ids=["fp32", "tf32"])
@pytest.mark.parametrize("kernel", fused.WGMMA_KERNELS)
def test_wgmma_kernels_run_on_sm90_only_and_say_why_not_elsewhere(arch, tf32, kernel):
    """Kernel 12 (and later ones on wgmma) is built for sm_90a: sm_90 runs it (its 197,120 bytes
    of shared memory fit); every other GPU is told to use kernel 11 or 9, whatever the
    precision (fp32 is refused before, by check_precision)."""
    why = fused.unsupported_reason(tf32, (int(arch[3]), int(arch[4])),
                                   LIMITS[arch].max_shared_per_block_optin, kernel)
    if arch == "sm_90":
        assert why is None
        assert fused.shared_memory_bytes("flash_backward", True, kernel) <= \
            LIMITS["sm_90"].max_shared_per_block_optin
    else:
        assert why == WGMMA_MESSAGE.format(kernel, arch)
    assert fused.unsupported_reason(True, (10, 0), 227 * 1024, kernel) == \
        WGMMA_MESSAGE.format(kernel, "sm_100")


def pretend_gpu(monkeypatch, cc, optin):
    """fused.gpu_unsupported_reason as on a GPU of compute capability ``cc`` that allows
    ``optin`` bytes of shared memory per block."""
    monkeypatch.setattr(fused, "gpu_unsupported_reason", lambda tf32, version=9:
                        fused.unsupported_reason(tf32, cc, optin, version))


def forbid_allocation(monkeypatch):
    """Any allocation of fused buffers or of a problem fails the test."""
    def no_allocation(*args, **kwargs):
        raise AssertionError("allocated on a GPU that cannot run the kernels")
    monkeypatch.setattr(fused, "FusedBuffers", no_allocation)
    monkeypatch.setattr("attnlab.problem.make_problem", no_allocation)


def test_wgmma_kernels_are_refused_off_hopper_before_allocating(monkeypatch, capsys):
    """On an A100 (sm_80) gpu_fused_backward and ``backward 12 --tf32`` raise
    UnsupportedGPUError with the reason before any buffer is allocated or kernel compiled;
    kernel 11 is not refused there."""
    from attnlab import UnsupportedGPUError
    pretend_gpu(monkeypatch, (8, 0), 163 * 1024)
    forbid_allocation(monkeypatch)
    inp, dout = make_inputs(2, 260, 192, 3)
    for kernel in fused.WGMMA_KERNELS:
        why = WGMMA_MESSAGE.format(kernel, "sm_80")
        tf32 = fused.precisions(kernel)[-1]
        with pytest.raises(UnsupportedGPUError, match=re.escape(why)):
            fused.gpu_fused_backward(dout, inp, 3, tf32=tf32, kernel=kernel)
        assert cli.main(["backward", str(kernel)] + ["--tf32"] * tf32 + ["--B", "2", "--T", "260",
                        "--C", "192", "--NH", "3"]) == 2
        assert capsys.readouterr().err == f"attnlab: {why}\n"
    with pytest.raises(AssertionError, match="allocated"):     # kernel 11 gets as far as allocating
        fused.gpu_fused_backward(dout, inp, 3, tf32=True, kernel=11)


def test_sanitize_steps_run_tf32_only_kernels_in_tf32_only(monkeypatch, capsys, fake_fused_buffers):
    """Under the sanitizer each fused kernel runs in each precision it has that this GPU runs:
    on an H200 kernel 12 in TF32 only; on an A100 not at all, saying why on stderr."""
    ran = []
    monkeypatch.setattr(fused, "fused_forward", lambda buf, tf32: None)
    monkeypatch.setattr(fused, "fused_backward",
                        lambda buf, tf32, kernel: ran.append((kernel, tf32)))
    for cc, optin in (((9, 0), 227 * 1024), ((8, 0), 163 * 1024)):
        ran.clear()
        pretend_gpu(monkeypatch, cc, optin)
        sources = fused.sanitize_steps(1, 64, 128, 2)
        expected = [(k, tf32) for k in fused.FUSED_KERNELS for tf32 in (False, True)
                    if (tf32 or k not in fused.TF32_ONLY) and not (tf32 and k in fused.FP32_ONLY)
                    and (cc == (9, 0) or k not in fused.WGMMA_KERNELS)]
        assert ran == expected
        assert sources == sorted({"flash_attention", "permute"}
                                 | {fused.BACKWARD_SOURCES[k] for k, _ in expected})
        assert (12, False) not in ran and ((12, True) in ran) == (cc == (9, 0))
        err = capsys.readouterr().err
        for k in fused.WGMMA_KERNELS:
            assert (f"attnlab.fused: kernel {k} not run under the sanitizer: "
                    f"{WGMMA_MESSAGE.format(k, 'sm_80')}" in err) == (cc == (8, 0))


def test_a_gpu_without_the_shared_memory_is_refused_before_allocating(monkeypatch):
    """On a T4 (sm_75, 64 KB per block) gpu_fused_* and backward 9 raise UnsupportedGPUError
    before any buffer is allocated or kernel compiled."""
    from attnlab import UnsupportedGPUError
    from attnlab.cli import main
    pretend_gpu(monkeypatch, (7, 5), 64 * 1024)
    forbid_allocation(monkeypatch)
    inp, dout = make_inputs(2, 260, 192, 3)
    for tf32 in (False, True):
        with pytest.raises(UnsupportedGPUError, match="sm_75"):
            fused.gpu_fused_forward(inp, 3, tf32=tf32)
        with pytest.raises(UnsupportedGPUError, match="sm_75"):
            fused.gpu_fused_backward(dout, inp, 3, tf32=tf32)
    assert main(["backward", "9", "--B", "2", "--T", "260", "--C", "192", "--NH", "3"]) == 2
    assert main(["backward", "10", "--B", "2", "--T", "260", "--C", "192", "--NH", "3"]) == 2


def test_a_kernel_is_looked_up_and_prepared_once(monkeypatch):
    """fused._function is cached: a backward call launches 3-4 kernels, and looking each one up,
    checking the GPU and preparing it again on every call would put host time between the
    launches that the benchmarks time (kernel 15's change had lost the cache once)."""
    import sys
    import types
    looked_up = []

    class Fn:
        def prepare(self, fmt):
            self.fmt = fmt

    monkeypatch.setitem(sys.modules, "pycuda", types.ModuleType("pycuda"))
    monkeypatch.setitem(sys.modules, "pycuda.driver", types.ModuleType("pycuda.driver"))
    monkeypatch.setattr(fused, "check_supported", lambda tf32, version: None)
    monkeypatch.setattr(fused.kernels, "get_function", lambda *a, **k: looked_up.append(a) or Fn())
    fused._function.cache_clear()
    try:
        first = fused._function("flash_backward_prep", True, 15)
        assert fused._function("flash_backward_prep", True, 15) is first
        assert looked_up == [(fused.PREP_SOURCE, "flash_backward_prep")]
        assert first.fmt == fused.ARG_FORMATS["flash_backward_prep"]
        assert fused._function("flash_backward_dq", True, 15).fmt == fused.ARG_FORMATS["flash_backward_dq"]
        assert looked_up[-1] == ("flash_attention15", "flash_backward_dq")
        fused._function("flash_backward_prep", False, 18)      # kernel 18 brings its own
        assert looked_up[-1] == ("flash_attention18", "flash_backward_prep")
        with pytest.raises(InputError, match="kernel 12 has no flash_backward_prep"):
            fused._function("flash_backward_prep", True, 12)
    finally:
        fused._function.cache_clear()


def test_kernel_19_s_shared_memory_is_what_its_source_lays_out():
    """Kernel 19 (and 20, launched in another order) has no K^T tile; Q, dO, Q^T and dO^T in two stages;
    dS of 64 queries x 128 keys; lse and D per warpgroup in two stages; 8 mbarriers: the
    layout of kernels/flash_attention19.cu, in floats of 4 bytes. It fits the H200's 227 KiB
    per block, and kernel 17's K^T tile (32 KiB) is what the second Q^T/dO^T stage replaced."""
    assert fused.PINGPONG == (19, 20, 21, 22, 23, 24, 25, 26, 27, 28, 29)
    assert fused.shared_memory_bytes("flash_backward", True, 20) == fused.shared_memory_bytes("flash_backward", True, 19)
    floats = 2 * 128 * 64 + 8 * 64 * 64 + 64 * 128 + 2 * 2 * 2 * 64 + 8 * 2
    assert fused.shared_memory_bytes("flash_backward", True, 19) == 4 * floats == 231_488 <= 227 * 1024
    k17 = fused.shared_memory_bytes("flash_backward", True, 17)
    assert 231_488 - k17 == 4 * (4 * 2 * 64 - 2 * 64 + 5 * 2)   # lse/D: 4 stages of 2 x 64 floats, not 1; 5 more mbarriers


H200_L2 = 60 * 2**20       # the H200's L2 cache (device_info() in notebook 00)


def test_kernel_20_rereads_its_query_tiles_dq_tiles_lse_and_d():
    """reread_bytes_per_head is what one (b, h) of kernel 20 holds in its own buffers (the query
    tiles and dq_tiles of kernel_buffer_shapes) plus lse and D: 1,288 bytes per query at T a
    multiple of 64, 21,102,592 at T=16384 (20 MiB)."""
    for T in (1, 64, 65, 1031, 16384):
        own = fused.kernel_buffer_shapes(1, T, 64, 1, 20)
        floats = sum(int(np.prod(s)) for s in own.values()) + 2 * T
        assert fused.reread_bytes_per_head(T) == 4 * floats, T
    assert fused.reread_bytes_per_head(16384) == 1288 * 16384 == 21_102_592


@pytest.mark.parametrize("T, G", [(1024, 24), (2048, 16), (4096, 8), (8192, 4), (16384, 2)])
def test_kernel_20_runs_as_many_heads_at_once_as_fit_in_l2(T, G):
    """On the H200 (60 MiB of L2) at B=4 NH=12: G heads whose reread bytes fit, a divisor of 48,
    and the next divisor would not fit. The grid is (G, key tiles, 48 / G): kernel 19's blocks."""
    assert fused.heads_at_once(4, T, 12, H200_L2) == G
    assert 48 % G == 0 and G * fused.reread_bytes_per_head(T) <= H200_L2
    bigger = min(d for d in range(G + 1, 49) if 48 % d == 0) if G < 48 else None
    assert bigger is None or bigger * fused.reread_bytes_per_head(T) > H200_L2
    grid = fused.fused_launch(4, T, 12, True, 20, l2_bytes=H200_L2)["flash_backward"][0]
    k19 = fused.fused_launch(4, T, 12, True, 19)["flash_backward"][0]
    assert grid == (G, T // 128, 48 // G) and np.prod(grid) == np.prod(k19)


def test_kernel_20_s_group_is_a_divisor_at_least_one():
    """Heads that do not divide into groups that fit: one at a time (NH=7: 7 is prime); an L2
    smaller than one head's tiles: still one; all heads fit: all of them (kernel 19's order)."""
    assert fused.heads_at_once(1, 1024, 7, 3 * fused.reread_bytes_per_head(1024)) == 1
    assert fused.heads_at_once(2, 16384, 12, 10) == 1
    assert fused.heads_at_once(2, 1024, 3, H200_L2) == 6
    assert fused.heads_at_once(3, 4096, 4, 6 * fused.reread_bytes_per_head(4096)) == 6


@pytest.mark.parametrize("l2, why", [("60 MiB", "l2_bytes must be an int, got str '60 MiB'"),
                                     (60.0 * 2**20, "l2_bytes must be an int, got float 62914560.0"),
                                     (-1, "l2_bytes must be >= 0, got -1"),
                                     # unhashable: refused by name before the remembered plan sees it
                                     ([60 << 20], "l2_bytes must be an int, got list [62914560]")])
def test_kernel_20_s_l2_size_is_checked(l2, why):
    with pytest.raises(InputError, match=re.escape(why)):
        fused.fused_launch(4, 1024, 12, True, 20, l2_bytes=l2)


def assert_same_gradients_but_dq_order(dinp, ref, problem):
    """dinp against ref, another TF32 kernel's on the same problem: dK and dV (one writer each)
    bit-identical, dQ within rounding (bulk reductions add in any order), and the whole dinp
    within the TF32 tolerance of the CPU reference."""
    C = problem.C
    assert np.array_equal(dinp[..., C:].view(np.uint32), ref[..., C:].view(np.uint32))
    assert np.abs(dinp[..., :C] - ref[..., :C]).max() <= 1e-5 * np.abs(ref).max()
    report = compare(dinp, problem.dinp, "dinp", fused.FUSED_TOLERANCES["tf32"]["dinp"])
    assert report.ok, str(report)


@pytest.mark.gpu
@pytest.mark.parametrize("G", [1, 2, 3, 6])
def test_kernel_20_in_any_group_size_computes_kernel_19_s_gradients(G, monkeypatch):
    """Kernel 20 with G heads at a time (an L2 that holds G heads' tiles) at B=2 T=1031 NH=3:
    dK and dV bit-identical to kernel 19's (one writer each), dQ within rounding (bulk
    reductions add in any order), and the whole dinp within the TF32 tolerance of the CPU
    reference."""
    from attnlab import make_problem
    skip_unless_supported(True, 20)
    problem = make_problem(B=2, T=1031, C=192, NH=3)
    k19 = run_fused(problem, True, 19)[1]
    l2 = G * fused.reread_bytes_per_head(problem.T)
    assert fused.heads_at_once(2, problem.T, 3, l2) == G
    monkeypatch.setattr(fused, "l2_cache_bytes", lambda: l2)
    assert fused.fused_launch(2, problem.T, 3, True, 20)["flash_backward"][0] == (G, 9, 6 // G)
    assert_same_gradients_but_dq_order(run_fused(problem, True, 20)[1], k19, problem)


@pytest.mark.parametrize("kernel", [21, 22, 23])
def test_kernel_launches_as_the_one_before(kernel):
    """Kernel 21 changes how its products' descriptors are made, kernel 22 when a warpgroup
    waits for its products, kernel 23 how dQ reaches dq_tiles, nothing else: the same grid, block
    and shared memory as the kernel before at every T, the same buffers and the same prep."""
    for T in (1, 1031, 4096, 16384):
        assert fused.fused_launch(4, T, 12, True, kernel, l2_bytes=H200_L2) == fused.fused_launch(4, T, 12, True, kernel - 1, l2_bytes=H200_L2)
        assert fused.kernel_buffer_shapes(4, T, 64, 12, kernel) == fused.kernel_buffer_shapes(4, T, 64, 12, kernel - 1)
    assert fused.prep_of(kernel) == fused.prep_of(kernel - 1) and kernel in fused.GROUPED


@pytest.mark.gpu
@pytest.mark.parametrize("kernel, B, T, C, NH", [(21, 2, 1031, 192, 3), (21, 4, 1024, 768, 12),
                                                 (22, 2, 1, 192, 3), (22, 2, 65, 192, 3), (22, 2, 1031, 192, 3), (22, 4, 1024, 768, 12),
                                                 (23, 2, 1, 192, 3), (23, 2, 65, 192, 3), (23, 2, 1031, 192, 3), (23, 4, 1024, 768, 12),
                                                 (23, 1, 4096, 64, 1)])
def test_kernel_computes_the_one_before_s_gradients(kernel, B, T, C, NH):
    """Kernel 21 (descriptors made another way), kernel 22 (its products waited for later) and
    kernel 23 (dQ added by float4 reductions) compute the kernel before's products in the same
    order: dK and dV bit-identical to it (one writer each), dQ within rounding (reductions add in
    any order), the whole dinp within the TF32 tolerance of the CPU reference. T = 1 and 65 have
    one and two query tiles, so a block's last tile is its first; at T=4096 the last query tile gets
    the reductions of 32 key tiles."""
    from attnlab import make_problem
    skip_unless_supported(True, kernel)
    problem = make_problem(B=B, T=T, C=C, NH=NH)
    assert_same_gradients_but_dq_order(run_fused(problem, True, kernel)[1], run_fused(problem, True, kernel - 1)[1], problem)


# ---------------------------------------------------------------------------------------------
# fused_backward's launches, recorded with PyCUDA faked (no GPU needed)

class _FakePointer(int):
    def free(self):
        pass


class _FakeArray:
    """A GPUArray stand-in: a device pointer (a number, 256-byte aligned) and a size."""
    next_pointer = 1 << 32

    def __init__(self, shape, dtype=np.float32):
        self.shape = tuple(np.atleast_1d(shape))
        self.size = int(np.prod(self.shape))
        self.gpudata = _FakePointer(_FakeArray.next_pointer)
        _FakeArray.next_pointer += 4 * self.size + 256

    def set(self, host):
        pass


@pytest.fixture
def recorded_launches(monkeypatch):
    """[(kernel or memset, arguments, keywords)] of every launch the fused pipeline makes, with PyCUDA
    faked: FusedBuffers allocate pointers only, and each kernel records its prepared_call."""
    import sys
    import types
    from attnlab import buffers
    launches = []
    driver = types.SimpleNamespace(memset_d32=lambda *a: launches.append(("memset_d32", a, {})),
                                   memset_d2d32=lambda *a: launches.append(("memset_d2d32", a, {})))
    gpuarray = types.SimpleNamespace(empty=_FakeArray)
    monkeypatch.setitem(sys.modules, "pycuda", types.SimpleNamespace(driver=driver, gpuarray=gpuarray))
    monkeypatch.setitem(sys.modules, "pycuda.driver", driver)
    monkeypatch.setitem(sys.modules, "pycuda.gpuarray", gpuarray)
    for module in (buffers, fused):
        monkeypatch.setattr(module, "context", lambda: None, raising=False)
        monkeypatch.setattr(module, "free_memory", lambda: (2**40, 2**40), raising=False)
    monkeypatch.setattr(fused, "l2_cache_bytes", lambda: H200_L2)

    class Kernel:
        def __init__(self, name, tf32=False, version=None):
            self.name = (name, tf32, version)

        def prepared_call(self, *args, **kw):
            launches.append((self.name, args, kw))
    monkeypatch.setattr(fused, "_function", Kernel)

    class Dependent(Kernel):               # launched by programmatic dependent launch (attnlab.pdl)
        def __init__(self, name, tf32, version):
            self.name = (name, tf32, version, "PDL")
    monkeypatch.setattr(fused, "_dependent", Dependent)
    from attnlab import tma                # a tensor map: 128 bytes naming what it maps
    monkeypatch.setattr(tma, "tiled_map", lambda address, *a: address.to_bytes(8, "little") * 16)
    return launches


def test_fused_backward_launches_what_it_worked_out_once(recorded_launches):
    """fused_backward works out its launches once per kernel and precision (backward_launches, kept in
    the FusedBuffers) and then only launches them: a second call makes the same launches as the
    first, in order; the grids are fused_launch's; the kernels are the pipeline of each kind
    (TILED: zero dq, prep, backward and, DQ_TILED, the dq kernel; the others: unpermute, D, zero dq
    unless deterministic, backward, permute); PDL kernels launch their backward and dq kernel by
    programmatic dependent launch, the others none. Freed buffers refuse before any launch."""
    B, T, C, NH = 2, 65, 192, 3
    buf = fused.FusedBuffers(B, T, C, NH)
    buf.holds |= {"inp", "dout", "forward"}
    for kernel in fused.FUSED_KERNELS:
        for tf32 in fused.precisions(kernel):
            recorded_launches.clear()
            fused.fused_backward(buf, tf32, kernel)
            first = list(recorded_launches)
            fused.fused_backward(buf, tf32, kernel)
            assert recorded_launches[len(first):] == first and (kernel, tf32) in buf.launches, kernel
            names = [n[0] if isinstance(n, tuple) else n for n, *_ in first]
            if kernel in fused.PREP_ZEROES:          # the prep zeroes dq_tiles: no memset
                expect = ["flash_backward_prep", "flash_backward", "flash_backward_dq"]
            elif kernel in fused.DQ_TILED:
                expect = ["memset_d32", "flash_backward_prep", "flash_backward", "flash_backward_dq"]
            elif kernel in fused.TILED:
                expect = ["memset_d2d32", "flash_backward_prep", "flash_backward"]
            else:
                expect = ["unpermute_backward_kernel", "flash_backward_preprocess",
                          *([] if fused.DETERMINISTIC[kernel] else ["memset_d32"]),
                          "flash_backward", "permute_backward_kernel"]
            assert names == expect, (kernel, names)
            for name, args, _ in first:             # each fused kernel's launch passes what its format packs
                if isinstance(name, tuple) and name[0].startswith("flash_backward"):
                    assert len(args) - 2 == len(cubin.format_layout(fused._arg_format(name[0], kernel))), (kernel, name, args)
            if kernel in fused.KV_MAPS:              # flash_backward's last arguments: the maps of k and v (and q)
                (back,) = [args for n, args, _ in first if isinstance(n, tuple) and n[0] == "flash_backward"]
                q, k, v = qkv_pointers(buf.qkvr, B, T, C)
                maps = (k, v, q) if kernel in fused.Q_MAPS else (k, v)
                assert back[-len(maps):] == tuple(x.to_bytes(8, "little") * 16 for x in maps), kernel
                assert not isinstance(back[-len(maps) - 1], bytes), kernel
            if kernel in fused.PREP_ZEROES:          # the prep's last argument: the dq_tiles the memset zeroed
                (prep_args,) = [args for n, args, _ in first if isinstance(n, tuple) and n[0] == "flash_backward_prep"]
                assert prep_args[-1] == buf.kernel_buffers(kernel)["dq_tiles"].gpudata, kernel
            dependent = [n[0] for n, *_ in first if isinstance(n, tuple) and n[-1] == "PDL"]
            assert dependent == (["flash_backward", "flash_backward_dq"] if kernel in fused.PDL else []), (kernel, dependent)
            own = buf.kernel_buffers(kernel)       # what the memset zeroes: all that atomics add into
            zeroed = {"memset_d32": (own["dq_tiles"].gpudata, 0, own["dq_tiles"].size) if kernel in fused.DQ_TILED else
                      (own["dqkvr"].gpudata if "dqkvr" in own else None, 0, B * T * C),
                      "memset_d2d32": (buf.dinp.gpudata, 4 * 3 * C, 0, C, B * T)}
            for name, args, _ in first:
                if name in zeroed:
                    assert args == zeroed[name], (kernel, name, args)
            plan = fused.fused_launch(B, T, NH, tf32, kernel)
            for name, args, kw in first:
                if isinstance(name, tuple) and name[0] in plan:
                    assert args[:2] == plan[name[0]][:2], (kernel, name)
                    assert kw.get("shared_size", 0) == (plan[name[0]][2] if name[0] == "flash_backward" else 0)
    buf.free()
    assert buf.launches == {}
    recorded_launches.clear()
    with pytest.raises(AttnlabError, match="freed"):
        fused.fused_backward(buf, True, 23)
    assert recorded_launches == []
