"""Timing GPU work the way it should be timed.

- CUDA events around the work, so we measure the GPU, not Python's launch queue;
- warm-up calls first, so compilation, module loading and cuBLAS's heuristics are
  not in the numbers;
- the L2 cache flushed before each repeat, so no repeat profits from the previous one's
  data: by reading a buffer twice the size of L2 (kernels/l2_flush.cu), which leaves only
  clean lines behind; llm.c's memset flush leaves dirty lines that the timed call must write
  back (notebook 00 measures the two);
- several repeats, reported as median and quartiles (and min / max): one timing lies;
- two kernels compared in one run, interleaved (A B A B ...), so that a drift of the GPU's
  clock or temperature falls on both (``interleaved``).
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

    @classmethod
    def of(cls, times_ms):
        t = np.asarray(times_ms, dtype=float)
        return cls(float(np.median(t)), float(t.min()), float(t.max()), len(t), list(map(float, t)))

    @property
    def quartiles_ms(self):
        """(first quartile, third quartile) of the repeats: the IQR's ends."""
        q1, q3 = np.percentile(self.times_ms, [25, 75])
        return float(q1), float(q3)

    def __str__(self):
        q1, q3 = self.quartiles_ms
        return (f"{self.median_ms:9.4f} ms (IQR {q1:.4f}-{q3:.4f}, min {self.min_ms:.4f}, "
                f"max {self.max_ms:.4f}, {self.repeats} repeats)")

    def as_dict(self):
        return asdict(self)


FLUSHES = ("read", "memset")


class L2Flusher:
    """Empties the L2 cache: ``method="read"`` reads a buffer twice L2's size (the default),
    ``"memset"`` overwrites one L2's size, as llm.c does (leaving dirty lines behind)."""

    def __init__(self, method="read"):
        if method not in FLUSHES:
            raise InputError(f"flush must be one of {FLUSHES}, got {method!r}")
        context()
        import pycuda.driver as cuda
        from .kernels import get_function
        self.method = method
        l2 = device_info()["l2_cache_bytes"]
        self.nbytes = 2 * l2 if method == "read" else l2
        self.buf = cuda.mem_alloc(self.nbytes)
        self.out = cuda.mem_alloc(4)
        cuda.memset_d32(self.buf, 0, self.nbytes // 4)
        self._memset = cuda.memset_d32
        self._read = get_function("l2_flush", "l2_flush_read_kernel")
        self._sms = device_info()["sms"]

    def flush(self):
        if self.method == "memset":
            self._memset(self.buf, 0, self.nbytes // 4)
        else:
            self._read(self.buf, np.int64(self.nbytes // 16), np.float32(-1.0), self.out,
                       grid=(4 * self._sms, 1, 1), block=(512, 1, 1))

    def free(self):
        self.buf.free()
        self.out.free()


def _check_fn(name, fn):
    if not callable(fn):
        raise InputError(f"{name} must be callable (a function that launches the GPU work), "
                         f"got {type(fn).__name__} {fn!r}")


def _check_fns(fns):
    """fns: a non-empty dict of name -> callable (interleaved, sustained)."""
    if not isinstance(fns, dict) or not fns:
        raise InputError(f"fns must be a non-empty dict of name -> function, got {fns!r}")
    for name, fn in fns.items():
        _check_fn(f"fns[{name!r}]", fn)


def _warm_up(fns, warmup):
    """Call each of fns ``warmup`` times, then wait for the GPU."""
    import pycuda.driver as cuda
    for fn in fns.values():
        for _ in range(warmup):
            fn()
    cuda.Context.synchronize()


def interleaved(fns, repeats=20, warmup=2, flush_l2=True, flush="read"):
    """Time several pieces of GPU work in turns (A B A B ...): {name: Timing}.

    ``fns`` maps a name to a function that launches the work. Before each timed call the L2
    cache is flushed (``flush``: "read" or "memset", see L2Flusher) unless ``flush_l2`` is
    False; the flush is outside the two events.
    """
    _check_fns(fns)
    repeats = check_int("repeats", repeats)
    warmup = check_int("warmup", warmup, minimum=0)
    if flush_l2 and flush not in FLUSHES:
        raise InputError(f"flush must be one of {FLUSHES}, got {flush!r}")
    context()
    import pycuda.driver as cuda
    _warm_up(fns, warmup)
    flusher = L2Flusher(flush) if flush_l2 else None
    start, stop = cuda.Event(), cuda.Event()
    times = {name: [] for name in fns}
    try:
        for _ in range(repeats):
            for name, fn in fns.items():
                if flusher:
                    flusher.flush()
                start.record()
                fn()
                stop.record()
                stop.synchronize()
                times[name].append(stop.time_since(start))
    finally:
        if flusher:
            flusher.free()
    return {name: Timing.of(t) for name, t in times.items()}


def flush_effect(fn, repeats=50, warmup=2):
    """Time ``fn()`` after no flush, after a read flush and after a memset flush, in turns:
    {"none" | "read" | "memset": Timing}. Notebook 00 uses it to check the flush: a memset
    leaves dirty lines in L2, and a call that must write them back runs slower after it."""
    _check_fn("fn", fn)
    repeats = check_int("repeats", repeats)
    warmup = check_int("warmup", warmup, minimum=0)
    context()
    import pycuda.driver as cuda
    for _ in range(warmup):
        fn()
    flushers = {m: L2Flusher(m) for m in FLUSHES}
    start, stop = cuda.Event(), cuda.Event()
    times = {"none": [], **{m: [] for m in FLUSHES}}
    try:
        for _ in range(repeats):
            for method in times:
                if method != "none":
                    flushers[method].flush()
                start.record()
                fn()
                stop.record()
                stop.synchronize()
                times[method].append(stop.time_since(start))
    finally:
        for f in flushers.values():
            f.free()
    return {m: Timing.of(t) for m, t in times.items()}


def benchmark(fn, repeats=10, warmup=2, flush_l2=True, flush="read"):
    """Time ``fn()`` (which launches GPU work) and return a Timing."""
    _check_fn("fn", fn)
    return interleaved({"fn": fn}, repeats, warmup, flush_l2, flush)["fn"]


def median_quartiles(t):
    """(median, q1, q3) in ms of a Timing, or of a row dict with median_ms, q1_ms, q3_ms (as
    committed results store them)."""
    if isinstance(t, dict):
        return t["median_ms"], t["q1_ms"], t["q3_ms"]
    return (t.median_ms, *t.quartiles_ms)


def overlap(a, b):
    """True when the interquartile ranges of two Timings (or row dicts) overlap: not resolved."""
    (_, a1, a3), (_, b1, b3) = median_quartiles(a), median_quartiles(b)
    return a1 <= b3 and b1 <= a3


def speedup(before, after):
    """'before / after' of two Timings (or row dicts): (median ratio, low, high), low and high
    from the quartiles (the slow quarter of ``after`` against the fast quarter of ``before``)."""
    (bm, b1, b3), (am, a1, a3) = median_quartiles(before), median_quartiles(after)
    return bm / am, b1 / a3, b3 / a1


def verdict(before, after):
    """Notebook 00's rule for ``after`` against ``before``: (kind, ratio, low, high), kind
    "not resolved" (the IQRs overlap), "faster" or "slower"; for "slower" the ratio and its
    range are after / before, so that they read as "1.03x slower"."""
    ratio, low, high = speedup(before, after)
    if overlap(before, after):
        return "not resolved", ratio, low, high
    if ratio >= 1:
        return "faster", ratio, low, high
    return "slower", 1 / ratio, 1 / high, 1 / low


def describe_speedup(before, after, names=("before", "after")):
    """One line: the ratio of medians with its range, or 'not resolved' when the IQRs overlap."""
    kind, ratio, low, high = verdict(before, after)
    if kind == "not resolved":
        return (f"{names[1]} vs {names[0]}: {ratio:.2f}x, not resolved on this GPU "
                f"(interquartile ranges overlap)")
    return f"{names[1]} is {ratio:.2f}x {kind} than {names[0]} (range {low:.2f}-{high:.2f}x)"


def sweep(fn, block_sizes=BLOCK_SIZES, **kwargs):
    """Benchmark ``fn(block_size)`` for each block size; return {block_size: Timing}."""
    block_sizes = [check_block_size(bs) for bs in block_sizes]
    return {bs: benchmark(lambda: fn(bs), **kwargs) for bs in block_sizes}


def best(timings):
    """The (block_size, Timing) with the lowest median."""
    return min(timings.items(), key=lambda kv: kv[1].median_ms)


@dataclass
class Sustained:
    """One piece of GPU work run back to back: the median call time of each window of calls,
    and what NVML said (attnlab.power) while it ran; None where NVML could not be read."""
    windows_ms: list          # per window of calls: its median call time
    calls: int
    joules_per_call: float    # the energy counter's rise over its blocks, over its calls
    sm_mhz: float             # medians of one sample during each window
    power_w: float
    power_capped: float       # the share of samples with the power-cap reason

    @property
    def median_ms(self):
        return float(np.median(self.windows_ms))

    @property
    def quartiles_ms(self):
        q1, q3 = np.percentile(self.windows_ms, [25, 75])
        return float(q1), float(q3)

    def __str__(self):
        q1, q3 = self.quartiles_ms
        nvml = nvml_text(self.joules_per_call, self.sm_mhz, self.power_w, self.power_capped)
        return f"{self.median_ms:9.4f} ms (IQR {q1:.4f}-{q3:.4f}, {self.calls} calls){nvml}"


def nvml_text(joules_per_call, sm_mhz, power_w, power_capped):
    """What NVML said, for a line of text: '' where it said nothing, n/a for a missing value."""
    if all(v is None for v in (joules_per_call, sm_mhz, power_w, power_capped)):
        return ""

    def text(v, spec, scale=1):
        return "n/a" if v is None else f"{scale * v:{spec}}"
    return (f"; {text(joules_per_call, '.4g')} J per call, {text(sm_mhz, '.0f')} MHz, {text(power_w, '.0f')} W, "
            f"power-capped in {text(power_capped, '.0f', 100)} % of samples")


def sustained(fns, seconds=4.0, rounds=2, window=10, warmup=2):
    """Run each piece of GPU work back to back, as training does: for ``seconds`` per block, the
    functions in turns, ``rounds`` rounds (A B, then B A, ...: none always starts cool), no L2
    flush. Windows of ``window`` calls between CUDA events; while a window runs, one NVML sample
    of its GPU (attnlab.power). Between windows the GPU waits while the host reads the events:
    choose ``window`` so that a window lasts many milliseconds. {name: Sustained}. Under
    sustained load a GPU may run at its power cap, where a call's time is its energy over the
    cap: compare with ``interleaved`` (single calls, L2 flushed)."""
    from . import power
    _check_fns(fns)
    if isinstance(seconds, bool) or not isinstance(seconds, (int, float)) or not seconds > 0:
        raise InputError(f"seconds must be a number > 0, got {seconds!r}")
    rounds, window = check_int("rounds", rounds), check_int("window", window)
    warmup = check_int("warmup", warmup, minimum=0)
    context()
    import time
    import pycuda.driver as cuda
    _warm_up(fns, warmup)
    bus = cuda.Device(0).pci_bus_id()      # NVML's numbering of the GPUs is not CUDA's
    events = [cuda.Event() for _ in range(window + 1)]
    got = {name: {"windows": [], "calls": 0, "mj": 0, "samples": []} for name in fns}
    order = list(fns.items())
    for r in range(rounds):
        for name, fn in (order if r % 2 == 0 else order[::-1]):
            g, start, e0 = got[name], time.perf_counter(), power.sample(bus)["energy_mj"]
            while time.perf_counter() - start < seconds:
                events[0].record()
                for i in range(window):
                    fn()
                    events[i + 1].record()
                g["samples"].append(power.sample(bus))     # the window is running now
                events[-1].synchronize()
                g["windows"].append(float(np.median([events[i + 1].time_since(events[i]) for i in range(window)])))
                g["calls"] += window
            e1 = power.sample(bus)["energy_mj"]
            g["mj"] = None if e0 is None or e1 is None or g["mj"] is None else g["mj"] + e1 - e0

    def of(samples, key, average=np.median):
        values = [s[key] for s in samples if s[key] is not None]
        return float(average(values)) if values else None
    return {name: Sustained(g["windows"], g["calls"], None if g["mj"] is None else g["mj"] / 1000 / g["calls"],
                            of(g["samples"], "sm_mhz"), of(g["samples"], "power_w"),
                            of(g["samples"], "power_capped", np.mean))
            for name, g in got.items()}
