"""Timing GPU work the way it should be timed.

- CUDA events around the work, so we measure the GPU, not Python's launch queue;
- warm-up calls first, so compilation, module loading and cuBLAS's heuristics are
  not in the numbers;
- the L2 cache flushed before each repeat (a memset of a buffer the size of L2, as
  llm.c's benchmark_kernel does), so no repeat profits from the previous one's data;
- several repeats, reported as min / median / max: one wall-clock timing lies.
"""
from dataclasses import asdict, dataclass

import numpy as np

from .checks import BLOCK_SIZES, check_block_size, check_int
from .errors import InputError
from .device import context, device_info


@dataclass
class Timing:
    """Milliseconds of one piece of GPU work over several repeats."""
    median_ms: float
    min_ms: float
    max_ms: float
    repeats: int
    times_ms: list

    def __str__(self):
        return (f"{self.median_ms:9.4f} ms (min {self.min_ms:.4f}, max {self.max_ms:.4f}, "
                f"{self.repeats} repeats)")

    def as_dict(self):
        return asdict(self)


class L2Flusher:
    """A device buffer as large as the L2 cache; ``flush()`` overwrites it."""

    def __init__(self):
        context()
        import pycuda.driver as cuda
        self.nbytes = device_info()["l2_cache_bytes"]
        self.buf = cuda.mem_alloc(self.nbytes)
        self._memset = cuda.memset_d32

    def flush(self):
        self._memset(self.buf, 0, self.nbytes // 4)

    def free(self):
        self.buf.free()


def benchmark(fn, repeats=10, warmup=2, flush_l2=True):
    """Time ``fn()`` (which launches GPU work) and return a Timing."""
    if not callable(fn):
        raise InputError(f"fn must be callable (a function that launches the GPU work), "
                         f"got {type(fn).__name__} {fn!r}")
    repeats = check_int("repeats", repeats)
    warmup = check_int("warmup", warmup, minimum=0)
    context()
    import pycuda.driver as cuda
    for _ in range(warmup):
        fn()
    cuda.Context.synchronize()
    flusher = L2Flusher() if flush_l2 else None
    start, stop = cuda.Event(), cuda.Event()
    times = []
    try:
        for _ in range(repeats):
            if flusher:
                flusher.flush()
            start.record()
            fn()
            stop.record()
            stop.synchronize()
            times.append(stop.time_since(start))
    finally:
        if flusher:
            flusher.free()
    t = np.array(times)
    return Timing(float(np.median(t)), float(t.min()), float(t.max()), repeats, times)


def sweep(fn, block_sizes=BLOCK_SIZES, **kwargs):
    """Benchmark ``fn(block_size)`` for each block size; return {block_size: Timing}."""
    block_sizes = [check_block_size(bs) for bs in block_sizes]
    return {bs: benchmark(lambda: fn(bs), **kwargs) for bs in block_sizes}


def best(timings):
    """The (block_size, Timing) with the lowest median."""
    return min(timings.items(), key=lambda kv: kv[1].median_ms)
