"""Helpers shared by notebooks 03–10, one notebook per softmax-backward kernel.

Every one of those notebooks does the same things for its kernel: show the source, describe
the launch, validate the whole backward against the CPU reference, sweep the block size,
put the time beside the earlier kernels', and let the reader try a change. The pieces live
here so that the notebooks stay short and alike; the GPU work goes through
``attnlab.attention``, ``attnlab.bench`` and ``attnlab.kernels``.

Timings are recorded in a small JSON file beside the CPU reference cache
(``$ATTNLAB_CACHE/lessons-timings.json``), keyed by GPU, shape, GEMM math and a hash of
the kernel's source. Later notebooks read the best block size (and kernel 1's single
call of several seconds) from there instead of sweeping every earlier kernel again.
"""
import difflib
import hashlib
import json
import os
import textwrap
import time

import numpy as np

from . import attention, bench, kernels
from .checks import BLOCK_SIZES, KERNELS, check_block_size, check_kernel
from .errors import InputError
from .launch import ceil_div, softmax_backward_launch
from .problem import DEFAULT_SHAPE, cache_dir, make_inputs
from .validate import TF32_TOLERANCES, TOLERANCES, validate

DEFAULT = dict(DEFAULT_SHAPE)            # B=4 T=1024 C=768 NH=12: timing and validation
SMALL = dict(B=2, T=260, C=192, NH=3)    # validation: T not a multiple of any block size, T % 8 == 4
TINY = dict(B=1, T=256, C=768, NH=12)    # where kernel 1 is cheap enough to sweep
GRADIENTS = ("datt", "dpreatt", "dinp")
PARTS = ("backward", "softmax")          # the whole attention backward, or the softmax backward alone

TITLES = {
    1: "naive: a thread per column t3, looping over every (b, h)",
    2: "one row of blocks per (b, h)",
    3: "a warp per column t3",
    4: "8 columns per warp: reuse every load 8 times",
    5: "no branches in the inner loop",
    6: "a block per row, products shared through shared memory",
    7: "the algebra: O(T) work per row",
    8: "4 rows per block, longest first, streaming loads",
}


# ---------------------------------------------------------------------------- showing

def source_name(kernel):
    """'softmax_backward<kernel>': the file kernels/<name>.cu."""
    return f"softmax_backward{check_kernel(kernel)}"


def function_name(kernel):
    return f"softmax_autoregressive_backward_kernel{check_kernel(kernel)}"


def show_kernel(kernel):
    """The source of kernels/softmax_backward<kernel>.cu, as Markdown for a notebook."""
    from IPython.display import Markdown
    return Markdown(f"```cuda\n{kernels.kernel_source(source_name(kernel)).rstrip()}\n```")


def code_lines(kernel):
    """The kernel's source without its leading comment block."""
    lines = kernels.kernel_source(source_name(kernel)).splitlines()
    i = 0
    while i < len(lines) and (lines[i].startswith("//") or not lines[i].strip()):
        i += 1
    return lines[i:]


def diff_text(old, new, context=3):
    """A unified diff of the code (not the header comments) of two kernels."""
    return "\n".join(difflib.unified_diff(
        code_lines(old), code_lines(new), f"kernels/{source_name(old)}.cu",
        f"kernels/{source_name(new)}.cu", n=context, lineterm=""))


def show_diff(old, new, context=3):
    """What changed in the code from kernel ``old`` to kernel ``new``, as Markdown."""
    from IPython.display import Markdown
    return Markdown(f"```diff\n{diff_text(old, new, context)}\n```")


def _wrap(text, indent="  "):
    return textwrap.fill(" ".join(text.split()), width=92, initial_indent=indent,
                         subsequent_indent=indent)


def _n(count, noun):
    return f"{count:,} {noun}" + ("" if count == 1 else "s")


def _idle(count, noun):
    """The sentence about threads or warps past the end, or nothing when there are none."""
    if count == 0:
        return ""
    verb = "has" if count == 1 else "have"
    return f"{_n(count, noun)} {verb} t3 >= T and exit at once. "


def describe_launch(kernel, B, T, NH, block_size=256):
    """A paragraph: the grid, the block, and what each thread, warp or block does."""
    kernel = check_kernel(kernel)
    bs = check_block_size(block_size)
    grid, block, defines = softmax_backward_launch(kernel, B, T, NH, bs)
    bh = B * NH
    wpb = bs // 32
    blocks = grid[0] * grid[1] * grid[2]
    threads = blocks * bs
    head = [f"kernel {kernel} at B={B} T={T} NH={NH}, block size {bs}:",
            f"  grid {grid}, block {block}: {blocks:,} blocks of {bs} threads "
            f"({_n(wpb, 'warp')}) = {threads:,} threads, {_n(threads // 32, 'warp')}"]
    if defines:
        flags = " ".join(f"-D{k}={v}" for k, v in defines.items())
        head.append(f"  compiled with {flags}: the block size is a compile-time constant")
    if kernel == 1:
        role = (f"The grid is a single row of blocks. Thread t3 = blockIdx.x*{bs} + threadIdx.x "
                f"owns column t3 of all {bh} (b, h) matrices: it loops over the {bh} of them and, "
                f"in each, over the rows t = t3..{T - 1}, summing t+1 terms per row. "
                f"{_idle(threads - T, 'thread')}The busiest thread "
                f"(t3 = 0) computes {bh * T:,} outputs and {bh * T * (T + 1) // 2:,} terms, "
                f"one after the other.")
    elif kernel == 2:
        role = (f"blockIdx.y = b*NH + h picks one of the {bh} (b, h) matrices. Thread "
                f"t3 = blockIdx.x*{bs} + threadIdx.x owns column t3 of that matrix and loops "
                f"over its rows t = t3..{T - 1}. {_idle(threads - bh * T, 'thread')}"
                f"The busiest thread (t3 = 0) computes {T:,} outputs and "
                f"{T * (T + 1) // 2:,} terms; the thread of t3 = {T - 1} computes one output.")
    elif kernel == 3:
        role = (f"blockIdx.y = b*NH + h picks the (b, h) matrix. Each warp owns one column: "
                f"t3 = blockIdx.x*{wpb} + (warp rank in the block). For each row "
                f"t = t3..{T - 1} its 32 lanes take t2 = lane, lane+32, ... <= t, so one load "
                f"instruction of the warp reads 32 consecutive floats of one row; a warp "
                f"reduction adds up the 32 partial sums and lane 0 stores dpreatt[t3]. "
                f"{_idle(threads // 32 - bh * T, 'warp')}The busiest "
                f"warp (t3 = 0) visits {T:,} rows, the longest in {ceil_div(T, 32)} steps of 32.")
    elif kernel in (4, 5):
        role = (f"blockIdx.y = b*NH + h picks the (b, h) matrix. Each warp owns the 8 adjacent "
                f"columns t3..t3+7, t3 = 8*(blockIdx.x*{wpb} + warp rank). For each row "
                f"t = t3..{T - 1} the lanes split t2 as in kernel 3, and each att[t2], datt[t2] "
                f"a lane loads serves 8 running sums held in registers; then 8 warp "
                f"reductions, and lane k stores column t3+k if t3+k <= t. "
                f"{_idle(threads // 32 - bh * ceil_div(T, 8), 'warp')}")
        if T % 8:
            what = ("every access to them is skipped" if kernel == 4 else
                    "its loads of att[t3+k] are clipped to att[min(t, t3+k)], inside the row, "
                    "and the stores skipped")
            role += (f"The last warp of each (b, h) has t3 = {T - T % 8}: its columns {T}.."
                     f"{T - T % 8 + 7} do not exist; {what}. ")
        if kernel == 5:
            role += "(The same geometry as kernel 4: only the loop inside changed.)"
    elif kernel == 6:
        nt = ceil_div(T, bs)
        role = (f"blockIdx.x = t and blockIdx.y = b*NH + h: one block per row (b, h, t). Thread i "
                f"owns the columns t3 = i, i+{bs}, ... <= t, one tile of {bs} columns at a "
                f"time. For each tile of {bs} values of t2, every thread first puts one product "
                f"att[t2]*datt[t2] into the shared array p_s ({4 * bs:,} bytes), then every thread "
                f"reads all of them. Row t takes ceil((t+1)/{bs}) tiles each way: the longest "
                f"row runs {nt} x {nt} tile steps; in row t = 0 one thread of {bs} has a column.")
    elif kernel == 7:
        role = (f"blockIdx.x = t and blockIdx.y = b*NH + h: one block per row (b, h, t). Pass 1: "
                f"thread i sums att[t2]*datt[t2] over t2 = i, i+{bs}, ... <= t; warp reductions, "
                f"then one more over the {wpb} per-warp sums in shared memory, give S. Pass 2: "
                f"thread i writes dpreatt[t3] = scale*att[t3]*(datt[t3] - S) for "
                f"t3 = i, i+{bs}, ... <= t. The longest row takes {ceil_div(T, bs)} steps per "
                f"pass; rows t < {bs - 1} leave threads idle.")
    else:
        role = (f"blockIdx.y = b*NH + h. Block x handles the 4 rows t = {T - 1}-4x down to "
                f"{T - 4}-4x of its (b, h), so block 0 gets the longest rows: {T // 4:,} blocks "
                f"per (b, h). Each row is done as in kernel 7 (a block reduction for S, then a "
                f"pass with streaming loads and stores that writes dpreatt), with a barrier "
                f"between the rows.")
    return "\n".join(head + [_wrap(role)])


def work(B, T, C, NH):
    """Counts for one problem: outputs, O(T^3) terms, GEMM multiply-adds, bytes."""
    bh = B * NH
    lower = bh * T * (T + 1) // 2                  # elements t3 <= t of one (B, NH, T, T) tensor
    return {
        "outputs": lower,
        "terms": bh * T * (T + 1) * (2 * T + 1) // 6,   # sum over rows of (t+1)^2
        "gemm_macs": 4 * bh * T * T * (C // NH),
        "softmax_bytes": 3 * 4 * lower,            # read att, datt, write dpreatt (lower triangles)
    }


def work_summary(B, T, C, NH):
    """The counts of ``work`` as a few lines of text."""
    w = work(B, T, C, NH)
    return "\n".join([
        f"B={B} T={T} C={C} NH={NH} (head size {C // NH}): {B * NH} (b, h) matrices of {T} x {T}",
        f"  outputs dpreatt[b,h,t,t3] with t3 <= t:           {w['outputs']:>16,}",
        f"  terms of the sum over t2 (sum over rows of (t+1)^2): {w['terms']:>14,}",
        f"  multiply-adds of the four backward GEMMs:          {w['gemm_macs']:>16,}",
        f"  bytes of att, datt, dpreatt (lower triangles):     {w['softmax_bytes']:>16,}",
    ])


# ---------------------------------------------------------------------------- running

def prepare(problem, tf32=False):
    """Device buffers for ``problem``, its inputs copied in and the forward run.

    Use as ``with lessons.prepare(p) as buf:`` or call ``buf.free()`` when done.
    """
    buf = attention.AttentionBuffers(problem.B, problem.T, problem.C, problem.NH)
    try:
        buf.set("inp", problem.inp)
        buf.set("dout", problem.dout)
        attention.forward(buf, 256, tf32)
    except BaseException:
        buf.free()
        raise
    return buf


def prepare_inputs(B, T, C, NH, seed=0):
    """Like ``prepare`` for random inputs without a CPU reference (for timing only).

    Runs the forward and one backward, so att and datt hold real values.
    """
    inp, dout = make_inputs(B, T, C, NH, seed)
    buf = attention.AttentionBuffers(B, T, C, NH)
    try:
        buf.set("inp", inp)
        buf.set("dout", dout)
        attention.forward(buf)
        attention.backward(buf, 8, 256)
    except BaseException:
        buf.free()
        raise
    return buf


def compile_kernels(*kernel_numbers, block_sizes=BLOCK_SIZES):
    """Compile these kernels now (kernels 6-8 once per block size), so that nvcc's messages,
    if any, appear here and not in a later cell."""
    for k in kernel_numbers:
        if check_kernel(k) >= 6:
            for bs in block_sizes:
                kernels.load(source_name(k), BLOCK_SIZE=check_block_size(bs))
        else:
            kernels.load(source_name(k))


def _check_same_shape(buf, problem):
    if (buf.B, buf.T, buf.C, buf.NH) != (problem.B, problem.T, problem.C, problem.NH):
        raise InputError(f"buffers are B={buf.B} T={buf.T} C={buf.C} NH={buf.NH} but the "
                         f"problem is B={problem.B} T={problem.T} C={problem.C} NH={problem.NH}")


def check_backward(buf, problem, kernel, block_size=256, tf32=False, verbose=False,
                   timed=False):
    """Poison the gradients with NaN, run the whole backward, check datt, dpreatt, dinp.

    Returns (the three validation Reports, the Timing of the call if ``timed`` else None);
    raises ValidationError on any mismatch.
    """
    _check_same_shape(buf, problem)
    buf.poison_gradients()
    def run():
        attention.backward(buf, kernel, block_size, tf32)

    timing = None
    if timed:    # CUDA events around this one call (no warm-up, no L2 flush)
        timing = bench.benchmark(run, repeats=1, warmup=0, flush_l2=False)
    else:
        run()
    tol = TF32_TOLERANCES if tf32 else TOLERANCES
    reports = [validate(buf.get(n), getattr(problem, n), n, tol[n], verbose=verbose)
               for n in GRADIENTS]
    return reports, timing


def validate_backward(buf, problem, kernel, block_size=256, tf32=False, timed=False):
    """Poison the gradients with NaN, run the whole backward, check datt, dpreatt, dinp.

    Every element is compared with the CPU reference (|gpu - ref| <= tol + |ref|*FLT_EPSILON);
    prints one stable line per tensor, raises ValidationError on any mismatch.
    TF32 GEMMs are checked against the looser TF32 tolerances. With ``timed=True`` the call
    is timed with CUDA events and its Timing returned (for kernel 1, whose one call at the
    default shape takes seconds); otherwise returns None.
    """
    return check_backward(buf, problem, kernel, block_size, tf32, verbose=True, timed=timed)[1]


def validate_block_sizes(problem, kernel, block_sizes=BLOCK_SIZES):
    """``validate_backward`` at each block size on fresh buffers; one line per block size."""
    with prepare(problem) as buf:
        for bs in block_sizes:
            reports, _ = check_backward(buf, problem, kernel, bs)
            counts = " + ".join(f"{r.checked:,}" for r in reports)
            print(f"kernel {kernel}, B={problem.B} T={problem.T} C={problem.C} NH={problem.NH}, "
                  f"block size {bs:>4}: datt, dpreatt, dinp OK ({counts} elements)")


def runner(buf, kernel, part="backward", tf32=False):
    """fn(block_size) that runs one call: the whole backward, or the softmax backward alone."""
    kernel = check_kernel(kernel)
    if part == "backward":
        return lambda bs: attention.backward(buf, kernel, bs, tf32)
    if part == "softmax":
        return lambda bs: attention.softmax_backward(buf, kernel, bs)
    raise InputError(f"part must be one of {PARTS}, got {part!r}")


def _plan(fn, budget_ms):
    """Time one call (after one warm-up); choose repeats (3..10) and warm-ups for fn."""
    probe = bench.benchmark(fn, repeats=1, warmup=1)
    ms = max(probe.median_ms, 1e-3)
    repeats = int(min(10, max(3, budget_ms // ms)))
    return repeats, (1 if ms > 20 else 2)


def time_one(buf, kernel, block_size, part="backward", tf32=False, repeats=None, budget_ms=500):
    """Timing (median of repeats, L2 flushed before each) of one kernel at one block size.

    With repeats=None, 3 to 10 repeats, as many as fit in about ``budget_ms``.
    """
    fn = runner(buf, kernel, part, tf32)
    bs = check_block_size(block_size)
    warmup = 1
    if repeats is None:
        repeats, warmup = _plan(lambda: fn(bs), budget_ms)
    return bench.benchmark(lambda: fn(bs), repeats=repeats, warmup=warmup)


def one_call(buf, kernel, block_size, part="backward", tf32=False, record_it=True):
    """Time a single call (no warm-up: compile the kernel first). For kernel 1's seconds."""
    fn = runner(buf, kernel, part, tf32)
    bs = check_block_size(block_size)
    t = bench.benchmark(lambda: fn(bs), repeats=1, warmup=0)
    if record_it:
        record(buf, kernel, {bs: t}, part, tf32)
    return t


def sweep(buf, kernel, block_sizes=BLOCK_SIZES, part="backward", tf32=False, repeats=None,
          budget_ms=500, record_it=True):
    """{block_size: Timing} for one kernel; records the best block size (see ``record``)."""
    fn = runner(buf, kernel, part, tf32)
    block_sizes = [check_block_size(b) for b in block_sizes]
    warmup = 1
    if repeats is None:
        repeats, warmup = _plan(lambda: fn(block_sizes[0]), budget_ms)
    timings = {bs: bench.benchmark(lambda bs=bs: fn(bs), repeats=repeats, warmup=warmup)
               for bs in block_sizes}
    if record_it:
        record(buf, kernel, timings, part, tf32)
    return timings


def print_sweeps(sweeps):
    """A table of median times per block size; sweeps = {label: {block_size: Timing}}."""
    labels = list(sweeps)
    sizes = sorted({bs for t in sweeps.values() for bs in t})
    width = max(12, *(len(l) + 5 for l in labels))
    print(f"{'block size':>10} | " + " | ".join(f"{l + ' (ms)':>{width}}" for l in labels))
    for bs in sizes:
        cells = [f"{sweeps[l][bs].median_ms:>{width}.4f}" if bs in sweeps[l] else " " * width
                 for l in labels]
        print(f"{bs:>10} | " + " | ".join(cells))
    for l in labels:
        bs, t = bench.best(sweeps[l])
        print(f"best for {l}: block size {bs}, {t.median_ms:.4f} ms (median of {t.repeats}; "
              f"min {t.min_ms:.4f}, max {t.max_ms:.4f})")


# ---------------------------------------------------------------------------- records

_device_name = None


def _device():
    global _device_name
    if _device_name is None:
        from .device import device_info
        _device_name = device_info()["name"]
    return _device_name


def record_path():
    """The JSON file where the lessons keep their best timings."""
    return cache_dir() / "lessons-timings.json"


def record_key(shape, kernel, part="backward", tf32=False, device=None):
    """GPU | shape | part | GEMM math | kernel | hash of the kernel's source."""
    src = kernels.kernel_source(source_name(kernel))
    digest = hashlib.sha1(src.encode()).hexdigest()[:12]
    s = " ".join(f"{k}={shape[k]}" for k in ("B", "T", "C", "NH"))
    return (f"{device or _device()} | {s} | {part} | {'tf32' if tf32 else 'fp32'} | "
            f"kernel {kernel} | {digest}")


def _shape(buf):
    return dict(B=buf.B, T=buf.T, C=buf.C, NH=buf.NH)


def _load_records():
    try:
        return json.loads(record_path().read_text())
    except (OSError, ValueError):
        return {}


def record(buf, kernel, timings, part="backward", tf32=False):
    """Keep the best of ``timings`` ({block_size: Timing}) for this GPU, shape and kernel."""
    bs, t = bench.best(timings)
    records = _load_records()
    records[record_key(_shape(buf), kernel, part, tf32)] = {
        "block_size": bs, "median_ms": t.median_ms, "min_ms": t.min_ms, "max_ms": t.max_ms,
        "repeats": t.repeats, "times_ms": list(t.times_ms),
        "when": time.strftime("%Y-%m-%d %H:%M:%S")}
    path = record_path()
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f"{path.stem}.{os.getpid()}.tmp")
    tmp.write_text(json.dumps(records, indent=1, sort_keys=True))
    os.replace(tmp, path)


def recorded(shape, kernel, part="backward", tf32=False):
    """(block_size, Timing, when) recorded for this GPU, shape and kernel source, or None."""
    r = _load_records().get(record_key(shape, kernel, part, tf32))
    if not r:
        return None
    t = bench.Timing(r["median_ms"], r["min_ms"], r["max_ms"], r["repeats"], r["times_ms"])
    return r["block_size"], t, r["when"]


def best_block_size(buf, kernel, part="backward", tf32=False):
    """The recorded best block size, or a quick sweep (3 repeats) to find and record it."""
    r = recorded(_shape(buf), kernel, part, tf32)
    if r is not None:
        return r[0]
    return bench.best(sweep(buf, kernel, part=part, tf32=tf32, repeats=3))[0]


def kernel1_time(buf):
    """(block_size, Timing, how) of kernel 1's whole backward on ``buf``: the recorded single
    call, or one call now at the block size that was best on the TINY shape (32 if unknown)."""
    r = recorded(_shape(buf), 1)
    if r is not None:
        return r[0], r[1], f"1 call, recorded {r[2]}"
    tiny = recorded(TINY, 1)
    bs = tiny[0] if tiny else 32
    print(f"kernel 1: no time recorded for this GPU and shape yet (notebook 03 records it); "
          f"timing one call now at block size {bs}")
    compile_kernels(1)
    return bs, one_call(buf, 1, bs), "1 call, now"


def compare_kernels(buf, kernel, own, repeats=3):
    """Whole-backward time of every kernel up to ``kernel``, each at its best block size.

    ``own`` is this notebook's sweep of ``kernel``. Earlier kernels are timed now at the block
    size their own notebook found best (recorded), except kernel 1, whose single call of
    seconds is taken from the record. Prints a table; returns {'kernel k': Timing}.
    """
    kernel = check_kernel(kernel)
    rows = {}
    for k in range(1, kernel):
        if k == 1:
            rows[1] = kernel1_time(buf)
        else:
            bs = best_block_size(buf, k)
            t = time_one(buf, k, bs, repeats=repeats)
            rows[k] = (bs, t, f"now, {repeats} repeats")
    bs, t = bench.best(own)
    rows[kernel] = (bs, t, f"this notebook's sweep, {t.repeats} repeats")
    print(f"whole attention backward, B={buf.B} T={buf.T} C={buf.C} NH={buf.NH}, fp32 GEMMs")
    print(f"{'kernel':>6} | {'block size':>10} | {'median ms':>11} | {'vs previous':>12} | timed")
    prev = None
    for k, (bs, t, how) in rows.items():
        speed = f"{prev / t.median_ms:11.2f}x" if prev else f"{'':>12}"
        print(f"{k:>6} | {bs:>10} | {t.median_ms:11.4f} | {speed} | {how}")
        prev = t.median_ms
    first, last = rows[min(rows)][1].median_ms, rows[kernel][1].median_ms
    if kernel > 1:
        print(f"kernel {kernel} is {first / last:,.1f}x faster than kernel 1")
    return {f"kernel {k}": t for k, (bs, t, how) in rows.items()}


def breakdown(buf, kernel_numbers, repeats=10):
    """For each kernel: the softmax backward alone, and the whole backward with fp32 and with
    TF32 GEMMs, each at its best block size. Prints a table; returns {kernel: {name: ms}}."""
    rows = {}
    for k in kernel_numbers:
        bs_soft = best_block_size(buf, k, "softmax")
        bs_whole = best_block_size(buf, k, "backward")
        rows[k] = {
            "softmax": time_one(buf, k, bs_soft, "softmax", repeats=repeats).median_ms,
            "fp32": time_one(buf, k, bs_whole, "backward", False, repeats=repeats).median_ms,
            "tf32": time_one(buf, k, bs_whole, "backward", True, repeats=repeats).median_ms,
        }
        attention.backward(buf, k, bs_whole, False)   # leave fp32 results in the buffers
    print(f"milliseconds, B={buf.B} T={buf.T} C={buf.C} NH={buf.NH}; 'rest' = whole backward - "
          f"softmax alone (the 4 GEMMs and 2 permutes)")
    print(f"{'kernel':>6} | {'softmax alone':>13} | {'whole, fp32':>11} | {'rest, fp32':>10} | "
          f"{'whole, TF32':>11} | {'rest, TF32':>10}")
    for k, r in rows.items():
        print(f"{k:>6} | {r['softmax']:13.4f} | {r['fp32']:11.4f} | {r['fp32'] - r['softmax']:10.4f}"
              f" | {r['tf32']:11.4f} | {r['tf32'] - r['softmax']:10.4f}")
    return rows


def plot_breakdown(rows, title="", ax=None):
    """Stacked bars: the softmax backward and the rest, per kernel and GEMM math."""
    import matplotlib.pyplot as plt
    labels, soft, rest = [], [], []
    for k, r in rows.items():
        for math in ("fp32", "tf32"):
            labels.append(f"kernel {k}, {math.upper() if math == 'tf32' else math} GEMMs")
            soft.append(r["softmax"])
            rest.append(max(r[math] - r["softmax"], 0.0))
    ax = ax or plt.subplots(figsize=(7, 0.5 * len(labels) + 1.6), layout="constrained")[1]
    ax.barh(labels, soft, color="tab:orange", label="softmax backward")
    ax.barh(labels, rest, left=soft, color="tab:blue", label="4 GEMMs + 2 permutes")
    ax.invert_yaxis()
    for y, (s, r) in enumerate(zip(soft, rest)):
        ax.text(s + r, y, f" {s + r:.3g} ms", va="center")
    ax.set_xlabel("time (ms), whole attention backward")
    ax.set_title(title)
    ax.margins(x=0.2)
    ax.legend(loc="upper center", bbox_to_anchor=(0.5, -0.3), ncol=2, frameon=False)
    return ax


# ---------------------------------------------------------------------------- throughput

def peak_bandwidth_gbs():
    """Theoretical DRAM bandwidth (GB/s) from the memory clock and bus width the driver
    reports (double data rate)."""
    from .device import device_info
    d = device_info()
    return 2 * d["memory_clock_mhz"] * 1e6 * d["memory_bus_bits"] / 8 / 1e9


FP32_LANES_PER_SM = {"sm_70": 64, "sm_75": 64, "sm_80": 64}   # 128 on sm_86 and later


def peak_fp32_tflops():
    """Theoretical FP32 rate (TFLOP/s, an FMA counted as 2) from SMs, lanes and clock."""
    from .device import device_info
    d = device_info()
    lanes = FP32_LANES_PER_SM.get(d["arch"], 128)
    return d["sms"] * lanes * 2 * d["clock_mhz"] * 1e6 / 1e12


# ---------------------------------------------------------------------------- try it

def variant_source(kernel, replace=None):
    """The source of kernel ``kernel`` with each ``old`` text replaced by ``new``
    (replace = {old: new}); raises InputError if an ``old`` is not in the source."""
    src = kernels.kernel_source(source_name(kernel))
    for old, new in (replace or {}).items():
        if old not in src:
            raise InputError(f"{old!r} does not occur in kernels/{source_name(kernel)}.cu; "
                             f"look at its source (lessons.show_kernel({kernel}))")
        src = src.replace(old, new)
    return src


def compile_variant(kernel, replace=None, block_size=None):
    """Compile a changed copy of a kernel (see ``variant_source``); returns the function.

    Kernels 6-8 need ``block_size`` (their -DBLOCK_SIZE). The file in kernels/ is untouched.
    """
    kernel = check_kernel(kernel)
    defines = {}
    if kernel >= 6:
        if block_size is None:
            raise InputError(f"kernel {kernel} is compiled for one block size: pass block_size")
        defines["BLOCK_SIZE"] = check_block_size(block_size)
    module = kernels.compile_source(variant_source(kernel, replace),
                                    f"{source_name(kernel)}_variant.cu", defines)
    return module.get_function(function_name(kernel))


def launch_variant(buf, fn, grid, block):
    """Launch a softmax-backward function with the shared argument list on ``buf``."""
    fn(buf.dpreatt.gpudata, buf.datt.gpudata, buf.att.gpudata, np.int32(buf.B), np.int32(buf.T),
       np.int32(buf.C), np.int32(buf.NH), grid=tuple(grid), block=tuple(block))


def poison_dpreatt(buf):
    """dpreatt's lower triangle to NaN (the upper stays 0), leaving datt and att alone."""
    lower = np.tril(np.ones((buf.T, buf.T), bool))
    row = np.where(lower, np.nan, 0).astype(np.float32)
    buf.set("dpreatt", np.broadcast_to(row, buf.dpreatt.shape).copy(), finite=False)


def check_variant(buf, problem, fn, grid, block):
    """Run a variant's softmax backward on ``buf`` (after a validated backward, so att and
    datt are right) and validate dpreatt over the whole tensor; raises if wrong."""
    _check_same_shape(buf, problem)
    poison_dpreatt(buf)
    launch_variant(buf, fn, grid, block)
    validate(buf.get("dpreatt"), problem.dpreatt, "dpreatt")


def time_variant(buf, fn, grid, block, repeats=10):
    """Timing of a variant's softmax backward alone on ``buf``."""
    return bench.benchmark(lambda: launch_variant(buf, fn, grid, block), repeats=repeats)


__all__ = ["DEFAULT", "SMALL", "TINY", "TITLES", "BLOCK_SIZES", "KERNELS", "ceil_div",
           "show_kernel", "show_diff", "describe_launch", "work", "work_summary", "prepare",
           "prepare_inputs", "compile_kernels", "check_backward", "validate_backward", "validate_block_sizes",
           "runner", "time_one", "one_call", "sweep", "print_sweeps", "record", "recorded",
           "best_block_size", "compare_kernels", "breakdown", "plot_breakdown",
           "peak_bandwidth_gbs", "peak_fp32_tflops", "compile_variant", "check_variant",
           "time_variant", "launch_variant", "poison_dpreatt"]
