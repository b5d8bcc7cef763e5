"""This GPU's ceilings, measured: the roofs each kernel's time is set against.

``measure()`` runs the four microbenchmarks of kernels/ceilings.cu with ``attnlab.bench``
and returns a dict (JSON-ready): the launch cost, the copy bandwidth (DRAM), the fp32
multiply-add rate and the shared-memory load rate, each with its median and spread.
``python -m attnlab report`` stores them in results/<gpu>/ceilings.json; ``for_this_gpu``
reads that file when it was measured on this GPU's model, and measures afresh otherwise.
"""
import json

import numpy as np

from . import bench, kernels
from .device import context, device_info

COPY_BYTES = 2 * 2 ** 30        # 2 GiB in, 2 GiB out: dozens of times the L2 cache
FMA_ITERATIONS = 4096
FMA_CHAINS = 8                  # kernels/ceilings.cu
MMA_ITERATIONS = 2048
MMA_CHAINS = 8                  # kernels/ceilings.cu
SHARED_ITERATIONS = 4096
SHARED_LOADS = 4 * 4            # bytes a thread reads from shared memory per iteration, x4 loads


def _function(name):
    return kernels.get_function("ceilings", name)


def _grid(sm_multiple, block):
    return (device_info()["sms"] * sm_multiple, 1, 1), (block, 1, 1)


def _summary(timing, work, unit):
    """The rate ``work / time`` at the median and at the quartiles of a Timing."""
    q1, q3 = timing.quartiles_ms
    return {"median": work / (timing.median_ms * 1e-3), "from_q3": work / (q3 * 1e-3),
            "to_q1": work / (q1 * 1e-3), "unit": unit, "timing": timing.as_dict()}


def launch_cost(repeats=200):
    """Time of one empty launch (CUDA events around a single launch, no flush)."""
    fn = _function("empty_kernel")
    t = bench.benchmark(lambda: fn(grid=(1, 1, 1), block=(32, 1, 1)), repeats=repeats,
                        warmup=10, flush_l2=False)
    return {"median_us": t.median_ms * 1e3, "q1_us": t.quartiles_ms[0] * 1e3,
            "q3_us": t.quartiles_ms[1] * 1e3, "timing": t.as_dict()}


def copy_bandwidth(nbytes=COPY_BYTES, repeats=20):
    """Bytes read + written per second by copy_kernel over ``nbytes``."""
    import pycuda.driver as cuda
    fn = _function("copy_kernel")
    n4 = nbytes // 16
    src, dst = cuda.mem_alloc(n4 * 16), cuda.mem_alloc(n4 * 16)
    try:
        cuda.memset_d32(src, 0, n4 * 4)
        grid, block = _grid(32, 256)
        t = bench.benchmark(lambda: fn(dst, src, np.int64(n4), grid=grid, block=block),
                            repeats=repeats)
    finally:
        src.free()
        dst.free()
    return _summary(t, 2 * n4 * 16, "bytes/s")


def _time_on_chip(name, sm_multiple, block, args, repeats):
    """(Timing, threads) of ``name(out, *args)``, a kernel whose work stays on the chip
    (registers, shared memory): no L2 flush; ``out`` takes one float per thread."""
    import pycuda.driver as cuda
    fn = _function(name)
    grid, block = _grid(sm_multiple, block)
    threads = grid[0] * block[0]
    out = cuda.mem_alloc(threads * 4)
    try:
        t = bench.benchmark(lambda: fn(out, *args, grid=grid, block=block), repeats=repeats,
                            flush_l2=False)
    finally:
        out.free()
    return t, threads


def fma_rate(repeats=20):
    """fp32 multiply-adds per second of fma_kernel (8 independent chains per thread)."""
    t, threads = _time_on_chip("fma_kernel", 16, 256, (np.int32(FMA_ITERATIONS),
                               np.float32(0.999), np.float32(0.001)), repeats)
    return _summary(t, threads * FMA_ITERATIONS * FMA_CHAINS, "multiply-adds/s")


def shared_load_rate(repeats=20):
    """Bytes per second that shared_load_kernel's threads read from shared memory."""
    t, threads = _time_on_chip("shared_load_kernel", 8, 1024, (np.int32(SHARED_ITERATIONS),),
                               repeats)
    return _summary(t, threads * SHARED_ITERATIONS * SHARED_LOADS, "bytes/s")


def _has_tf32_mma():
    major, minor = (int(x) for x in device_info()["compute_capability"].split("."))
    return (major, minor) >= (8, 0)


def mma_tf32_rate(repeats=20):
    """Flops per second of mma_tf32_kernel: mma.sync.m16n8k8 TF32 products (2048 flops each,
    8 independent chains per warp); None below compute capability 8.0. Not one of measure()'s
    four: the roof of the fused tensor-core kernels (benchmarks/fused_ladder.py)."""
    if not _has_tf32_mma():
        return None
    t, threads = _time_on_chip("mma_tf32_kernel", 16, 256, (np.int32(MMA_ITERATIONS),), repeats)
    return _summary(t, threads // 32 * MMA_ITERATIONS * MMA_CHAINS * 2048, "flops/s")


def measure():
    """All four ceilings of this GPU, as a JSON-ready dict."""
    context()
    d = device_info()
    return {"gpu": d["name"], "arch": d["arch"], "sms": d["sms"], "clock_mhz": d["clock_mhz"],
            "launch": launch_cost(), "copy": copy_bandwidth(), "fma": fma_rate(),
            "shared_load": shared_load_rate()}


def load(path):
    """The ceilings stored at ``path`` (a ceilings.json written by ``report``)."""
    with open(path) as f:
        return json.load(f)


def for_this_gpu(path):
    """The stored ceilings if they were measured on this GPU's model, else measured now."""
    stored = load(path)
    if stored["gpu"] == device_info()["name"]:
        return stored
    print(f"{path} was measured on {stored['gpu']}; measuring this GPU's ceilings now")
    return measure()


def sanitize_steps(B, T, C, NH):
    """Launch each kernel of kernels/ceilings.cu and the L2 flush (kernels/l2_flush.cu) once,
    small and untimed, for ``python -m attnlab sanitize`` (the shape does not matter to them),
    and on sm_90 kernels/wgmma_check.cu's two; returns the sources run."""
    import pycuda.driver as cuda
    context()
    block, blocks, n4 = 256, 4, 4096
    src, dst, out = (cuda.mem_alloc(n4 * 16), cuda.mem_alloc(n4 * 16),
                     cuda.mem_alloc(1024 * 4))
    try:
        cuda.memset_d32(src, 0, n4 * 4)
        _function("empty_kernel")(grid=(1, 1, 1), block=(32, 1, 1))
        _function("copy_kernel")(dst, src, np.int64(n4), grid=(blocks, 1, 1), block=(block, 1, 1))
        _function("fma_kernel")(out, np.int32(16), np.float32(0.999), np.float32(0.001),
                                grid=(blocks, 1, 1), block=(block, 1, 1))
        _function("shared_load_kernel")(out, np.int32(16), grid=(1, 1, 1), block=(1024, 1, 1))
        if _has_tf32_mma():
            _function("mma_tf32_kernel")(out, np.int32(16), grid=(blocks, 1, 1),
                                         block=(block, 1, 1))
        flusher = bench.L2Flusher()
        flusher.flush()
        cuda.Context.synchronize()
        flusher.free()
        ran = ["ceilings", "l2_flush"]
        if device_info()["arch"] == "sm_90":   # wgmma (sm_90a): benchmarks/wgmma_rate.py's kernels
            cuda.memset_d32(src, 0, 3 * 64 * 64)    # a, b: 64 x 64 each; out: 3 x 64 x 64 (dst)
            check = kernels.get_function("wgmma_check", "wgmma_check")
            check(dst, src, src, grid=(1, 1, 1), block=(128, 1, 1))
            kernels.get_function("wgmma_check", "wgmma_rate")(
                out, np.int32(2), np.int32(1), grid=(1, 1, 1), block=(128, 1, 1))
            cuda.Context.synchronize()
            ran.append("wgmma_check")
    finally:
        for b in (src, dst, out):
            b.free()
    return ran


def describe(c):
    """The ceilings as a few lines of text."""
    g = 1e9
    return "\n".join([
        f"ceilings of {c['gpu']} ({c['sms']} SMs), measured with kernels/ceilings.cu:",
        f"  launch of an empty kernel:     {c['launch']['median_us']:8.2f} us "
        f"(IQR {c['launch']['q1_us']:.2f}-{c['launch']['q3_us']:.2f})",
        f"  copy bandwidth (DRAM):         {c['copy']['median'] / g:8.0f} GB/s "
        f"(IQR {c['copy']['from_q3'] / g:.0f}-{c['copy']['to_q1'] / g:.0f})",
        f"  fp32 multiply-adds:            {c['fma']['median'] / 1e12:8.2f} T/s "
        f"(IQR {c['fma']['from_q3'] / 1e12:.2f}-{c['fma']['to_q1'] / 1e12:.2f})",
        f"  shared-memory loads:           {c['shared_load']['median'] / g:8.0f} GB/s "
        f"(IQR {c['shared_load']['from_q3'] / g:.0f}-{c['shared_load']['to_q1'] / g:.0f})",
    ])
