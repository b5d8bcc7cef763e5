"""The GPU architectures the kernels are built for, their per-block limits, and what ptxas
says each kernel uses there (registers, shared memory, spills), without a GPU.

    report = ptxas_report(kernel_source("softmax_backward8"), "kernels/softmax_backward8.cu",
                          {"BLOCK_SIZE": 256})
    violations(report["sm_75"]["softmax_autoregressive_backward_kernel8"], "sm_75", 256)  # []
"""
import re
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path

from .checks import BLOCK_SIZES
from .errors import InputError, KernelCompileError
from .kernels import (ARCH_SPECIFIC, KERNEL_DIR, format_nvcc_error, nvcc_options, require_nvcc,
                      with_line)

# The architectures the kernels are built and checked for, and GPUs of each
GPUS = {"sm_75": "T4, RTX 20xx", "sm_80": "A100", "sm_86": "RTX 30xx, A10",
        "sm_89": "RTX 40xx, L4", "sm_90": "H100, H200"}
ARCHS = tuple(GPUS)
TF32_ARCHS = tuple(a for a in ARCHS if int(a[3:]) >= 80)     # flash_attention.cu with TF32=1
# The architecture-specific target the sources of kernels.ARCH_SPECIFIC (wgmma) are built for:
# it runs on sm_90 (H100/H200) only, whose limits it has (hardware()).
SPECIFIC_ARCHS = ("sm_90a",)

KB = 1024
REGISTER_ALLOCATION_UNIT = 256   # registers are allocated per warp in units of 256 (all five)


@dataclass(frozen=True)
class Limits:
    """Per-block and per-SM limits of one compute capability (bytes for shared memory)."""
    max_shared_per_block_optin: int   # static + dynamic, with cudaFuncSetAttribute
    shared_per_sm: int
    max_warps_per_sm: int
    max_blocks_per_sm: int
    max_threads_per_block: int = 1024
    max_registers_per_thread: int = 255
    registers_per_sm: int = 64 * KB
    registers_per_block: int = 64 * KB
    max_static_shared_per_block: int = 48 * KB


# CUDA C++ Programming Guide, "Technical Specifications per Compute Capability"; cross-checked
# with CUDA 13.0's include/cuda_occupancy.h (blocks and shared memory per SM, allocation unit).
LIMITS = {
    "sm_75": Limits(64 * KB, 64 * KB, 32, 16),
    "sm_80": Limits(163 * KB, 164 * KB, 64, 32),
    "sm_86": Limits(99 * KB, 100 * KB, 48, 16),
    "sm_89": Limits(99 * KB, 100 * KB, 48, 24),
    "sm_90": Limits(227 * KB, 228 * KB, 64, 32),
}


def compute_capability(arch):
    """(major, minor) of an architecture: 'sm_90' -> (9, 0), 'sm_90a' -> (9, 0)."""
    digits = hardware(arch)[3:]
    return int(digits[:-1]), int(digits[-1])


def hardware(arch):
    """The architecture of LIMITS that ``arch`` runs on: sm_90a (architecture-specific) is sm_90."""
    return re.sub(r"(?<=\d)a$", "", arch)


@dataclass(frozen=True)
class KernelReport:
    """What ptxas -v reports for one kernel on one architecture (sizes in bytes)."""
    registers: int
    smem: int               # static shared memory
    stack: int              # stack frame
    spill_stores: int
    spill_loads: int
    cmem: int | None        # cmem[0] (kernel arguments, constants); sm_90's report omits it
    barriers: int


def _check_archs(archs):
    archs = tuple(archs)
    if not archs or not all(isinstance(a, str) and re.fullmatch(r"sm_\d{2,3}a?", a) for a in archs):
        raise InputError(f"archs must name GPU architectures like 'sm_90' or 'sm_90a', got "
                         f"{archs!r}")
    return archs


def ptxas_report(source, filename, defines=(), archs=ARCHS):
    """Compile CUDA source for several architectures in one nvcc call; parse ptxas -v.

    Same options and include path as the GPU path (kernels.nvcc_options). Returns
    {arch: {kernel name: KernelReport}}; a compile error raises KernelCompileError.
    """
    archs = _check_archs(archs)
    if not isinstance(source, str):
        raise InputError(f"source must be a str of CUDA C, got {type(source).__name__}")
    options = nvcc_options(defines)            # also checks the defines
    nvcc = require_nvcc()
    gencode = [f"-gencode=arch=compute_{a[3:]},code={a}" for a in archs]
    with tempfile.TemporaryDirectory() as tmp:
        src = Path(tmp) / "kernel.cu"
        src.write_text(with_line(source, filename))
        cmd = [nvcc, "--fatbin", *gencode, *options, f"-I{KERNEL_DIR}", "-Xptxas", "-v",
               "-o", str(Path(tmp) / "kernel.fatbin"), str(src)]
        proc = subprocess.run(cmd, capture_output=True, text=True)
    if proc.returncode != 0:
        raise KernelCompileError(format_nvcc_error(filename, proc.stderr + proc.stdout))
    report = parse_ptxas(proc.stderr + proc.stdout)
    missing = [a for a in archs if a not in report]
    if missing:
        raise KernelCompileError(f"ptxas reported no kernel of {filename} for {missing}:\n"
                                 f"{proc.stderr}")
    return report


_ENTRY = re.compile(r"Compiling entry function '(\w+)' for '(sm_\w+)'")
_PROPERTIES = re.compile(r"Function properties for (\w+)\s*\n\s*(\d+) bytes stack frame, "
                         r"(\d+) bytes spill stores, (\d+) bytes spill loads")
_USED = re.compile(r"Used (\d+) registers([^\n]*)")


def parse_ptxas(text):
    """{arch: {kernel: KernelReport}} from the text of ptxas -v (one or several archs)."""
    report = {}
    # each entry's block runs from its "Compiling entry function" line to the next one
    starts = list(_ENTRY.finditer(text))
    for m, nxt in zip(starts, starts[1:] + [None]):
        name, arch = m.groups()
        block = text[m.end():nxt.start() if nxt else len(text)]
        props = [p for p in _PROPERTIES.finditer(block) if p.group(1) == name]
        used = _USED.search(block)
        if not props or used is None:
            raise ValueError(f"ptxas -v: no properties or registers for {name} ({arch}):\n{block}")
        rest = used.group(2)

        def number(pattern):
            found = re.search(pattern, rest)
            return int(found.group(1)) if found else None

        stack, stores, loads = (int(g) for g in props[0].groups()[1:])
        report.setdefault(arch, {})[name] = KernelReport(
            registers=int(used.group(1)), smem=number(r"(\d+) bytes smem") or 0, stack=stack,
            spill_stores=stores, spill_loads=loads, cmem=number(r"(\d+) bytes cmem\[0\]"),
            barriers=number(r"used (\d+) barriers") or 0)
    return report


def registers_per_block(registers, threads):
    """Registers one block takes: per warp, registers x 32 rounded up to 256."""
    warps = -(-threads // 32)
    per_warp = -(-registers * 32 // REGISTER_ALLOCATION_UNIT) * REGISTER_ALLOCATION_UNIT
    return warps * per_warp


def violations(kernel, arch, threads, dynamic_shared=0):
    """Why a launch of ``kernel`` (a KernelReport) with ``threads`` per block and
    ``dynamic_shared`` bytes would not fit ``arch``: readable strings, [] when it fits."""
    if not isinstance(arch, str) or hardware(arch) not in LIMITS:
        raise InputError(f"arch must be one of {list(LIMITS)} (or sm_90a), got {arch!r}")
    lim = LIMITS[hardware(arch)]
    out = []
    if threads > lim.max_threads_per_block:
        out.append(f"{threads} threads > {lim.max_threads_per_block} per block")
    if kernel.registers > lim.max_registers_per_thread:
        out.append(f"{kernel.registers} registers > {lim.max_registers_per_thread} per thread")
    regs = registers_per_block(kernel.registers, threads)
    if regs > lim.registers_per_block:
        out.append(f"{kernel.registers} registers x {threads} threads = {regs} per block "
                   f"(allocated per warp) > {lim.registers_per_block}")
    if kernel.smem > lim.max_static_shared_per_block:
        out.append(f"{kernel.smem} B static shared > {lim.max_static_shared_per_block} B")
    shared = kernel.smem + dynamic_shared
    if shared > lim.max_shared_per_block_optin:
        out.append(f"{kernel.smem} B static + {dynamic_shared} B dynamic shared = {shared} B > "
                   f"{lim.max_shared_per_block_optin} B per block ({arch}, opt-in maximum)")
    return out


# ---------------------------------------------------------------------------------------------
# How the project compiles and launches each source at run time (launch.py, fused.py)

def builds():
    """(source, defines, archs) for every way a kernels/*.cu is compiled at run time: kernels
    6-8 once per block size (-DBLOCK_SIZE), flash_attention with TF32=0 and (sm_80+) TF32=1,
    the later fused backward kernels (tensor cores) on sm_80+ in each precision they have
    (fused.precisions: TF32_ONLY TF32=1 only, FP32_ONLY TF32=0 only); the sources of kernels.ARCH_SPECIFIC for sm_90a only."""
    from . import fused
    from .launch import block_size_defines
    version = {s: k for k, s in fused.BACKWARD_SOURCES.items()}
    out = []
    for source in sorted(p.stem for p in KERNEL_DIR.glob("*.cu")):
        specific = source in ARCH_SPECIFIC
        if source == fused.SOURCE:
            out += [(source, (("HEAD_SIZE", 64), ("TF32", tf32)), archs)
                    for tf32, archs in ((0, ARCHS), (1, TF32_ARCHS))]
        elif source in version:
            out += [(source, (("HEAD_SIZE", 64), ("TF32", tf32)),
                     SPECIFIC_ARCHS if specific else TF32_ARCHS)
                    for tf32 in map(int, fused.precisions(version[source]))]
        elif re.fullmatch(r"softmax_backward\d+", source):
            k = int(source[len("softmax_backward"):])
            variants = {tuple(sorted(block_size_defines(k, bs).items())) for bs in BLOCK_SIZES}
            out += [(source, defines, ARCHS) for defines in sorted(variants)]
        else:
            out.append((source, (), SPECIFIC_ARCHS if specific else ARCHS))
    return out


# Sources launched with one block size (threads, dynamic shared bytes), not the CLI's sweep:
# wgmma_check's kernels are one warpgroup (benchmarks/wgmma_rate.py).
FIXED_LAUNCHES = {"wgmma_check": (128, 0)}


def launches(source, defines, kernel):
    """[(threads per block, dynamic shared bytes)] of the run-time launches of ``kernel``,
    from ``source`` compiled with ``defines``: every block size of the CLI's sweep, unless
    the block size is compiled in (BLOCK_SIZE) or fixed (the fused kernels, FIXED_LAUNCHES)."""
    from . import fused
    defines = dict(defines)
    if source in fused.BACKWARD_SOURCES.values():
        version = {s: k for k, s in fused.BACKWARD_SOURCES.items()}[source]
        # (l2_bytes: any value, only the grid of a GROUPED kernel depends on it)
        _, block, shared = fused.fused_launch(1, 64, 1, bool(defines["TF32"]), version, l2_bytes=0)[kernel]
        return [(block[0], shared)]
    if source in FIXED_LAUNCHES:
        return [FIXED_LAUNCHES[source]]
    if "BLOCK_SIZE" in defines:
        return [(defines["BLOCK_SIZE"], 0)]
    return [(bs, 0) for bs in BLOCK_SIZES]
