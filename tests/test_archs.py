"""Every kernel source compiles for every architecture students run (sm_75 T4 ... sm_90 H200;
the wgmma sources of kernels.ARCH_SPECIFIC for sm_90a only), with every set of -D defines it is
compiled with at run time, and every kernel fits each architecture's per-block limits at the
block sizes it is launched with (ptxas -v, no GPU).

Each (source, defines) is compiled once, for all its architectures in one nvcc call, and the
calls run in parallel (module fixture ``reports``).
"""
import concurrent.futures
import os
import shutil

import pytest

from attnlab import InputError, KernelCompileError, fused, kernels
from attnlab.archs import (ARCHS, LIMITS, SPECIFIC_ARCHS, TF32_ARCHS, KernelReport, builds,
                           hardware, launches, parse_ptxas, ptxas_report, registers_per_block,
                           violations)
from attnlab.checks import BLOCK_SIZES

needs_nvcc = pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc is not on PATH")

BUILDS = builds()
BUILD_ARCHS = {(source, defines): archs for source, defines, archs in BUILDS}
FP32 = (("HEAD_SIZE", 64), ("TF32", 0))
TF32 = (("HEAD_SIZE", 64), ("TF32", 1))
TF32_ON_SM75 = ("flash_attention", TF32, ("sm_75",))   # must not compile: #error below sm_80
# must not compile either: the wgmma sources for plain sm_90 (ptxas: wgmma needs sm_90a), and the
# TF32-only fused kernels with TF32=0 and the fp32-only ones with TF32=1 (#error)
WGMMA_ON_SM90 = [(s, d, ("sm_90",)) for s, d, archs in BUILDS if archs == SPECIFIC_ARCHS]
FP32_OF_TF32_ONLY = [(fused.BACKWARD_SOURCES[k], FP32, SPECIFIC_ARCHS) for k in fused.TF32_ONLY]
TF32_OF_FP32_ONLY = [(fused.BACKWARD_SOURCES[k], TF32, SPECIFIC_ARCHS) for k in fused.FP32_ONLY]
MUST_FAIL = [TF32_ON_SM75] + WGMMA_ON_SM90 + FP32_OF_TF32_ONLY + TF32_OF_FP32_ONLY

# fp32 flash_forward / flash_backward need more shared memory than a T4's 64 KB opt-in
# maximum (the library refuses to launch them there): test_fp32_flash_kernels_do_not_fit_sm75.
# Kernels 10's and 11's flash_backward (111,616 and 112,896 B) do not fit sm_86/sm_89's 99 KB: the library falls
# back to kernel 9 there (tests/test_fused.py).
SHARED_MEMORY_TOO_BIG = {("flash_attention", FP32, "sm_75", "flash_forward"),
                         ("flash_attention", FP32, "sm_75", "flash_backward")} | {
    (source, defines, arch, "flash_backward") for source in ("flash_attention10", "flash_attention11")
    for defines in (FP32, TF32) for arch in ("sm_86", "sm_89")}
# Kernels 10's and 11's 3xTF32 variants hold split operands next to 128 accumulator registers
# and spill a few bytes at 255 registers (kernel 10: reloaded once per tile; kernel 11: a few
# loads and stores per 16-query slice, between its products; notebook 13 says so).
# {(source, defines): most spill bytes allowed}
KNOWN_SPILLS = {("flash_attention10", FP32): 128, ("flash_attention11", FP32): 160}


def build_id(source, defines):
    return "-".join([source] + [f"{k}={v}" for k, v in defines])


def _compile(source, defines, archs):
    return ptxas_report(kernels.kernel_source(source), f"kernels/{source}.cu", defines, archs)


@pytest.fixture(scope="module")
def reports():
    """{(source, defines, archs): ptxas_report or the exception it raised}, for BUILDS and
    MUST_FAIL; the slow flash_attention compiles are started first."""
    jobs = sorted(BUILDS + MUST_FAIL, key=lambda b: b[0] != fused.SOURCE)
    with concurrent.futures.ThreadPoolExecutor(max_workers=os.cpu_count() or 2) as pool:
        futures = {job: pool.submit(_compile, *job) for job in jobs}
        return {job: f.exception() or f.result() for job, f in futures.items()}


def report_of(reports, source, defines, archs=None):
    result = reports[(source, defines, archs or BUILD_ARCHS[(source, defines)])]
    if isinstance(result, Exception):
        raise result
    return result


# ---------------------------------------------------------------------------------------------
# No nvcc needed

def test_the_builds_are_the_run_time_ones():
    """Kernels 6-8 once per block size, flash_attention fp32 everywhere and TF32 on sm_80+,
    fused kernels 10 and 11 in both precisions on sm_80+, every other source once with no
    defines for all five architectures; the wgmma sources (kernels.ARCH_SPECIFIC) for sm_90a
    only, the fused ones (kernel 12 ...) in TF32 only."""
    sources = sorted(p.stem for p in kernels.KERNEL_DIR.glob("*.cu"))
    expected = []
    for source in sources:
        if source == "flash_attention":
            expected += [(source, FP32, ARCHS), (source, TF32, TF32_ARCHS)]
        elif source in ("flash_attention10", "flash_attention11"):
            expected += [(source, FP32, TF32_ARCHS), (source, TF32, TF32_ARCHS)]
        elif source in kernels.ARCH_SPECIFIC:
            version = {s: k for k, s in fused.BACKWARD_SOURCES.items()}.get(source)
            expected.append((source, () if version is None else FP32 if version in fused.FP32_ONLY
                             else TF32, ("sm_90a",)))
        elif source in ("softmax_backward6", "softmax_backward7", "softmax_backward8"):
            expected += [(source, (("BLOCK_SIZE", bs),), ARCHS) for bs in BLOCK_SIZES]
        else:
            expected.append((source, (), ARCHS))
    assert sorted(BUILDS) == sorted(expected)
    assert {"permute", "softmax_forward", "flash_attention"} | {
        f"softmax_backward{k}" for k in range(1, 9)} <= set(sources)
    assert ("flash_attention12", TF32, ("sm_90a",)) in BUILDS
    assert ("wgmma_check", (), ("sm_90a",)) in BUILDS
    assert [d for s, d, _ in BUILDS if s == "flash_attention12"] == [TF32]


def test_every_wgmma_kernel_is_built_for_sm90a_in_one_precision():
    """The fused backward kernels on wgmma (fused.WGMMA_KERNELS) are compiled for the
    architecture-specific target (kernels.ARCH_SPECIFIC) in one precision: TF32 (12-17) or
    fp32-accurate 3xTF32 (18); their limits are sm_90's."""
    assert fused.WGMMA_KERNELS and "wgmma_check" in kernels.ARCH_SPECIFIC
    for k in fused.WGMMA_KERNELS:
        assert fused.BACKWARD_SOURCES[k] in kernels.ARCH_SPECIFIC, k
        assert (k in fused.TF32_ONLY) != (k in fused.FP32_ONLY), k
        assert [d for s, d, _ in BUILDS if s == fused.BACKWARD_SOURCES[k]] == \
            [FP32 if k in fused.FP32_ONLY else TF32], k
    assert SPECIFIC_ARCHS == ("sm_90a",) and hardware("sm_90a") == "sm_90"
    assert [hardware(a) for a in ARCHS] == list(ARCHS)


def test_launch_geometry():
    assert launches("softmax_backward3", (), "softmax_autoregressive_backward_kernel3") == \
        [(bs, 0) for bs in BLOCK_SIZES]
    assert launches("softmax_backward7", (("BLOCK_SIZE", 64),), "k") == [(64, 0)]
    for defines, tf32 in ((FP32, False), (TF32, True)):
        for name in ("flash_forward", "flash_backward"):
            assert launches("flash_attention", defines, name) == \
                [(fused.THREADS, fused.shared_memory_bytes(name, tf32))]
        assert launches("flash_attention", defines, "flash_backward_preprocess") == [(256, 0)]
        for k in (10, 11):
            assert launches(f"flash_attention{k}", defines, "flash_backward") == \
                [(fused.BACKWARD_THREADS[k], fused.shared_memory_bytes("flash_backward", tf32, k))]
    assert fused.BACKWARD_THREADS[9] == fused.THREADS == 128
    # kernel 12 (wgmma, TF32 only): 2 warpgroups, 197,120 B of shared memory
    assert launches("flash_attention12", TF32, "flash_backward") == \
        [(fused.BACKWARD_THREADS[12], 197_120)] == [(256, 197_120)]
    for k in fused.WGMMA_KERNELS:
        tf32 = k in fused.TF32_ONLY
        assert launches(fused.BACKWARD_SOURCES[k], TF32 if tf32 else FP32, "flash_backward") == \
            [(fused.BACKWARD_THREADS[k], fused.shared_memory_bytes("flash_backward", tf32, k))]
    # kernel 18 (3xTF32): one warpgroup, the same 229,912 B as kernels 15-17
    assert launches("flash_attention18", FP32, "flash_backward") == [(128, 229_912)]
    assert launches("flash_attention18", FP32, "flash_backward_prep") == [(128, 0)]
    for name in ("wgmma_check", "wgmma_rate"):        # one warpgroup
        assert launches("wgmma_check", (), name) == [(128, 0)]


def test_parse_ptxas():
    text = """ptxas info    : 0 bytes gmem
ptxas info    : Compiling entry function 'k8' for 'sm_75'
ptxas info    : Function properties for k8
    8 bytes stack frame, 4 bytes spill stores, 12 bytes spill loads
ptxas info    : Used 30 registers, used 1 barriers, 128 bytes smem, 392 bytes cmem[0]
ptxas info    : Compile time = 9.1 ms
ptxas info    : 10 bytes gmem
ptxas info    : Compiling entry function 'k8' for 'sm_90'
ptxas info    : Function properties for k8
    0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads
ptxas info    : Used 27 registers, used 0 barriers
"""
    assert parse_ptxas(text) == {
        "sm_75": {"k8": KernelReport(30, 128, 8, 4, 12, 392, 1)},
        "sm_90": {"k8": KernelReport(27, 0, 0, 0, 0, None, 0)}}


def test_violations():
    def kernel(registers=32, smem=0):
        return KernelReport(registers, smem, 0, 0, 0, None, 0)
    assert violations(kernel(64), "sm_75", 1024) == []
    assert registers_per_block(65, 1024) == 72 * 1024        # per warp: 65*32 -> 2304
    assert violations(kernel(65), "sm_90", 1024) == \
        ["65 registers x 1024 threads = 73728 per block (allocated per warp) > 65536"]
    assert violations(kernel(255), "sm_90", 256) == []
    assert violations(kernel(), "sm_90", 2048) == ["2048 threads > 1024 per block"]
    assert violations(kernel(smem=48 * 1024), "sm_75", 32) == []
    assert "static shared" in violations(kernel(smem=48 * 1024 + 4), "sm_90", 32)[0]
    assert violations(kernel(smem=1024), "sm_75", 128, 63 * 1024) == []
    assert violations(kernel(smem=1024), "sm_75", 128, 63 * 1024 + 4) == \
        ["1024 B static + 64516 B dynamic shared = 65540 B > 65536 B per block (sm_75, "
         "opt-in maximum)"]
    # sm_90a is sm_90's hardware: the same limits
    assert violations(kernel(230), "sm_90a", 256, 197_120) == []
    assert violations(kernel(230), "sm_90a", 256, 227 * 1024 + 4) == \
        ["0 B static + 232452 B dynamic shared = 232452 B > 232448 B per block (sm_90a, "
         "opt-in maximum)"]
    assert violations(kernel(), "sm_90a", 2048) == violations(kernel(), "sm_90", 2048)
    with pytest.raises(InputError, match=r"arch must be one of .*got 'sm_90b'"):
        violations(kernel(), "sm_90b", 32)
    with pytest.raises(InputError, match=r"like 'sm_90' or 'sm_90a', got \('sm_90f',\)"):
        ptxas_report("", "k.cu", archs=("sm_90f",))


# ---------------------------------------------------------------------------------------------
# nvcc: compile each build for its architectures, check ptxas's report against the limits

@needs_nvcc
@pytest.mark.parametrize("build", BUILDS, ids=[build_id(s, d) for s, d, _ in BUILDS])
def test_compiles(reports, build):
    source, defines, archs = build
    report = report_of(reports, *build)
    assert sorted(report) == sorted(archs)
    declared = set(kernels.kernel_names(kernels.kernel_source(source)))
    for arch in archs:
        assert set(report[arch]) == declared, arch


@needs_nvcc
def test_tf32_needs_sm80(reports):
    with pytest.raises(KernelCompileError,
                       match=r"flash_attention\.cu[:(]\d+.*TF32=1 needs compute capability 8\.0"):
        report_of(reports, *TF32_ON_SM75)


@needs_nvcc
@pytest.mark.parametrize("build", WGMMA_ON_SM90, ids=[s for s, _, _ in WGMMA_ON_SM90])
def test_wgmma_sources_need_sm90a(reports, build):
    """Why kernels.ARCH_SPECIFIC exists: for plain sm_90, ptxas refuses wgmma (and kernel 29's
    setmaxnreg, which comes first in its PTX)."""
    with pytest.raises(KernelCompileError,
                       match=rf"{build[0]}\.cu:\n.*Instruction '(wgmma|setmaxnreg)\.[^']*' not supported on "
                             r"\.target 'sm_90'"):
        report_of(reports, *build)


@needs_nvcc
@pytest.mark.parametrize("build", FP32_OF_TF32_ONLY, ids=[s for s, _, _ in FP32_OF_TF32_ONLY])
def test_tf32_only_kernels_refuse_fp32(reports, build):
    with pytest.raises(KernelCompileError, match=r"#error .*TF32 only: for fp32 accuracy use "
                                                 r"kernel 18 or 11 \(3xTF32\)"):
        report_of(reports, *build)


@needs_nvcc
@pytest.mark.parametrize("build", TF32_OF_FP32_ONLY, ids=[s for s, _, _ in TF32_OF_FP32_ONLY])
def test_fp32_only_kernels_refuse_tf32(reports, build):
    with pytest.raises(KernelCompileError, match=r"#error .*fp32-accurate \(3xTF32\) only: for "
                                                 r"TF32 use kernel 17"):
        report_of(reports, *build)


FIT_CASES = [(s, d, arch) for s, d, archs in BUILDS for arch in archs]
FIT_IDS = [f"{build_id(s, d)}-{arch}" for s, d, arch in FIT_CASES]


@needs_nvcc
@pytest.mark.parametrize("source, defines, arch", FIT_CASES, ids=FIT_IDS)
def test_fits(reports, source, defines, arch):
    """Registers, registers per block and shared memory, at every block size launched."""
    report = report_of(reports, source, defines)
    problems = []
    for name, kernel in report[arch].items():
        if (source, defines, arch, name) in SHARED_MEMORY_TOO_BIG:
            continue
        for threads, shared in launches(source, defines, name):
            problems += [f"{name} ({kernel.registers} registers) at {threads} threads, {shared} B "
                         f"dynamic shared: {v}" for v in violations(kernel, arch, threads, shared)]
    assert problems == []


@needs_nvcc
@pytest.mark.parametrize("source, defines, arch", FIT_CASES,
                         ids=[f"{build_id(s, d)}-{a}" for s, d, a in FIT_CASES])
def test_no_spills(reports, source, defines, arch):
    """No stack frame and no spill stores/loads, in any kernel on any architecture (the flash
    kernels' __launch_bounds__ ask each architecture for the blocks its shared memory fits),
    except KNOWN_SPILLS, within their bound."""
    report = report_of(reports, source, defines)
    allowed = KNOWN_SPILLS.get((source, defines), 0)
    spilled = {name: (k.stack, k.spill_stores, k.spill_loads) for name, k in report[arch].items()
               if max(k.stack, k.spill_stores, k.spill_loads) > allowed}
    assert spilled == {}, "(stack, spill stores, spill loads) bytes"


@needs_nvcc
def test_fp32_flash_kernels_do_not_fit_sm75(reports):
    """fp32 flash_forward (71 KB) and flash_backward (81.5 KB) need more shared memory than
    sm_75's 64 KB per block: the library refuses them on a T4. They fit sm_80 and newer."""
    report = report_of(reports, "flash_attention", FP32)
    for name in ("flash_forward", "flash_backward"):
        [(threads, shared)] = launches("flash_attention", FP32, name)
        assert shared > LIMITS["sm_75"].max_shared_per_block_optin
        [problem] = violations(report["sm_75"][name], "sm_75", threads, shared)
        assert "dynamic shared" in problem and "opt-in maximum" in problem
        for arch in ARCHS[1:]:
            assert violations(report[arch][name], arch, threads, shared) == [], (name, arch)
