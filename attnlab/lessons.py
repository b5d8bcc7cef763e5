"""Helpers shared by notebooks 03–10, one notebook per softmax-backward kernel.

Each of those notebooks is a worklog: show what changed, **count** (``count``), predict,
validate, **measure** with spread, interleaved with the kernel before (``measure``), place
the time **against the roof** (``against_roof``), show the compiler's **evidence**
(``compiler_evidence``) and the profiler's (``ncu_evidence``), and explain the gap. The pieces
live here so that the notebooks stay short and alike; they hold no state. Numbers from other
notebooks (the best block size of an earlier kernel, kernel 1's seconds-long call) come from
the committed results of ``python -m attnlab report`` (``committed``), never from a cache.
"""
import difflib

import numpy as np

from . import attention, bench, ceilings, counts, evidence, kernels, report
from .checks import BLOCK_SIZES, KERNELS, check_block_size, check_kernel
from .errors import InputError
from .launch import block_size_defines, ceil_div, compiled_per_block_size
from .problem import DEFAULT, SMALL, make_inputs
from .validate import TF32_TOLERANCES, TOLERANCES, validate

TINY = dict(B=1, T=256, C=768, NH=12)    # where kernel 1 is cheap enough to sweep
GRADIENTS = ("datt", "dpreatt", "dinp")
PARTS = ("backward", "softmax")          # the whole attention backward, or the softmax backward alone

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
        if compiled_per_block_size(check_kernel(k)):
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


def sweep(buf, kernel, block_sizes=BLOCK_SIZES, part="backward", tf32=False, repeats=None,
          budget_ms=500):
    """{block_size: Timing} for one kernel at each block size."""
    fn = runner(buf, kernel, part, tf32)
    block_sizes = [check_block_size(b) for b in block_sizes]
    warmup = 1
    if repeats is None:
        repeats, warmup = _plan(lambda: fn(block_sizes[0]), budget_ms)
    return {bs: bench.benchmark(lambda bs=bs: fn(bs), repeats=repeats, warmup=warmup)
            for bs in block_sizes}


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


# ---------------------------------------------------------------------------- the worklog

def committed(kernel):
    """Kernel ``kernel``'s entry in the committed results/h200/kernels.json (best block size,
    timings with their quartiles, count, evidence), measured by ``python -m attnlab report``."""
    return report.load("kernels")["kernels"][str(kernel)]


def this_gpu_ceilings():
    """The measured ceilings: results/h200/ceilings.json on an H200, measured now elsewhere."""
    return ceilings.for_this_gpu(report.results_dir() / "ceilings.json")


def count(kernel, block_size, shape=DEFAULT):
    """Print the count of one call of the softmax backward alone; return the Count."""
    c = counts.count(kernel, shape["B"], shape["T"], shape["NH"], block_size)
    print(counts.describe(c))
    return c


def floors(c, ceil):
    """Print the shortest times the measured ceilings allow for Count ``c``, and which binds."""
    f = counts.floors(c, ceil)
    print(f"floors for kernel {c.kernel} at block size {c.block_size} on the measured ceilings "
          f"of {ceil['gpu']}:")
    for k, label in (("dram", "DRAM traffic at the copy bandwidth"),
                     ("loads", "loads at the shared-memory load rate"),
                     ("multiply_adds", "multiply-adds at the FMA rate")):
        print(f"  {label:<38} {f[k]:12.4f} ms")
    top = max(f, key=f.get)
    print(f"  the highest floor is the {top.replace('_', '-')} one: {f[top]:.4f} ms")
    return f


def _iqr(t):
    q1, q3 = t.quartiles_ms
    return f"{q1:.4f}-{q3:.4f}"


def measure(buf, runs, part="softmax", repeats=None):
    """Time several (kernel, block size) runs interleaved (A B A B ...) and print median, IQR
    and min-max of each, then each run against the first. ``runs`` = {label: (kernel, bs)}.
    Repeats: >= 20, >= 50 when a call takes under 1 ms. Returns {label: Timing}."""
    fns = {label: (lambda f=runner(buf, k, part), b=check_block_size(bs): f(b))
           for label, (k, bs) in runs.items()}
    if repeats is None:
        probe = max(bench.benchmark(fn, repeats=1, warmup=1).median_ms for fn in fns.values())
        repeats = report.repeats_for(probe)
    timings = bench.interleaved(fns, repeats=repeats)
    what = "softmax backward alone" if part == "softmax" else "whole attention backward"
    print(f"{what}, B={buf.B} T={buf.T} C={buf.C} NH={buf.NH}, {repeats} interleaved repeats, "
          f"L2 flushed before each")
    print(f"{'run':>24} | {'median ms':>10} | {'IQR ms':>17} | {'min-max ms':>17}")
    for label, t in timings.items():
        print(f"{label:>24} | {t.median_ms:10.4f} | {_iqr(t):>17} | "
              f"{f'{t.min_ms:.4f}-{t.max_ms:.4f}':>17}")
    labels = list(timings)
    for label in labels[1:]:
        print(bench.describe_speedup(timings[labels[0]], timings[label], (labels[0], label)))
    return timings


def against_roof(c, timing, ceil):
    """Print what a measured Timing achieves against the ceilings, for Count ``c``."""
    r = counts.roof(c, timing.median_ms, ceil)
    f = counts.floors(c, ceil)
    print(f"kernel {c.kernel} at block size {c.block_size}: {timing.median_ms:.4f} ms (median)")
    rows = (("DRAM-equivalent", "dram", "GB/s", 1e9, ceil["copy"]["median"] / 1e9),
            ("loads issued", "loads", "GB/s", 1e9, ceil["shared_load"]["median"] / 1e9),
            ("multiply-adds", "multiply_adds", "G/s", 1e9, ceil["fma"]["median"] / 1e9))
    for label, key, unit, scale, top in rows:
        print(f"  {label:<16} {r[key]['rate'] / scale:>12,.4g} {unit} = "
              f"{100 * r[key]['fraction']:.3g}% of {top:,.0f} {unit}; floor {f[key]:.4g} ms")
    top = max(f, key=f.get)
    print(f"  measured / highest floor ({top.replace('_', '-')}): "
          f"{timing.median_ms / f[top]:.2f}x")
    return r


def _defines(kernel, block_size):
    """The -D defines kernel ``kernel`` is compiled with at this block size (kernels 6-8)."""
    return block_size_defines(check_kernel(kernel), check_block_size(block_size))


def compiler_evidence(kernel, block_sizes=BLOCK_SIZES, sass_block_size=256, loops=2):
    """Print registers, shared and local bytes, occupancy per block size, and the instruction
    mix of the innermost loops of the SASS; return the attributes per block size."""
    kernel = check_kernel(kernel)
    from .device import arch
    gpu_arch = arch()
    table = evidence.per_block_size(source_name(kernel), function_name(kernel),
                                    lambda bs: _defines(kernel, bs), gpu_arch, block_sizes)
    print(f"kernel {kernel} on {gpu_arch}")
    print("block size | registers | shared B | local B | blocks/SM | warps/SM | occupancy | "
          "limited by")
    for bs, e in table.items():
        a, o = e["attributes"], e["occupancy"]
        print(f"{bs:>10} | {a['registers']:>9} | {a['shared_bytes']:>8} | {a['local_bytes']:>7} | "
              f"{o['blocks']:>9} | {o['warps']:>8} | {o['occupancy']:>9.0%} | {o['limiter']}")
    defines = _defines(kernel, sass_block_size)
    found = evidence.sass(source_name(kernel), function_name(kernel), defines, gpu_arch)
    note = f" (compiled with -DBLOCK_SIZE={sass_block_size})" if defines else ""
    print(f"innermost loops of the SASS{note}, largest first:")
    print(evidence.describe_loops(found, loops))
    return {bs: e["attributes"] for bs, e in table.items()}, found


def ladder(upto, part="softmax"):
    """Print kernels 1..``upto`` from the committed H200 results: block size, median ms and
    IQR of the softmax backward alone (``part="softmax"``) or of the whole backward with fp32
    GEMMs (``part="backward"``), and the step from the kernel before. Returns {label: Timing}
    (median, min and max only) for plots.plot_times."""
    key = {"softmax": "softmax", "backward": "backward_fp32"}[part]
    rep = report.load("kernels")
    what = "softmax backward alone" if part == "softmax" else "whole backward, fp32 GEMMs"
    print(f"{what}, {rep['device']['name']}, committed results/h200/kernels.json")
    print(f"{'kernel':>6} | {'block size':>10} | {'median ms':>10} | {'IQR ms':>19} | step")
    out, prev = {}, None
    for k in range(1, check_kernel(upto) + 1):
        e = rep["kernels"][str(k)]
        s = e[key]
        step = f"{prev / s['median_ms']:.2f}x" if prev else ""
        print(f"{k:>6} | {e['block_size']:>10} | {s['median_ms']:10.4f} | "
              f"{s['q1_ms']:.4f}-{s['q3_ms']:.4f} | {step}")
        out[f"kernel {k}"] = bench.Timing(s["median_ms"], s["min_ms"], s["max_ms"], s["repeats"], [])
        prev = s["median_ms"]
    return out


def ncu_evidence(kernel):
    """Print what Nsight Compute read for this kernel in the committed results (ncu.json):
    DRAM bytes against the count, achieved occupancy, the top warp stalls."""
    entry = report.load("ncu")[str(check_kernel(kernel))]
    if "unavailable" in entry:
        print(f"ncu could not read counters on the machine that made results/h200: "
              f"{entry['unavailable']}")
        return entry
    m, bs = entry["metrics"], entry["block_size"]
    c = counts.count(kernel, **{k: DEFAULT[k] for k in ("B", "T", "NH")}, block_size=bs)
    dram = m["dram__bytes_read.sum"] + m["dram__bytes_write.sum"]
    print(f"ncu, kernel {kernel} at block size {bs}, one call at the default shape:")
    print(f"  DRAM bytes read + written: {dram / 1e6:,.1f} MB = {dram / c.dram_bytes:.2f}x the "
          f"minimum of {c.dram_bytes / 1e6:,.1f} MB")
    print(f"  achieved occupancy: {m['sm__warps_active.avg.pct_of_peak_sustained_active']:.1f}% "
          f"of the SM's warp slots")
    print("  top warp stalls (cycles per issued instruction): " +
          ", ".join(f"{name} {v:.2f}" for name, v in entry["stalls"]))
    return entry


def breakdown(buf, kernel_numbers, repeats=20):
    """For each kernel: the softmax backward alone, and the whole backward with fp32 and with
    TF32 GEMMs, at its best block size in the committed results. Prints a table; returns
    {kernel: {name: ms}}."""
    rows = {}
    for k in kernel_numbers:
        bs_soft = bs_whole = committed(k)["block_size"]
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
    if compiled_per_block_size(kernel) and block_size is None:
        raise InputError(f"kernel {kernel} is compiled for one block size: pass block_size")
    defines = block_size_defines(kernel, check_block_size(block_size)) if block_size else {}
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


def time_variant(buf, fn, grid, block, repeats=20):
    """Timing of a variant's softmax backward alone on ``buf``."""
    return bench.benchmark(lambda: launch_variant(buf, fn, grid, block), repeats=repeats)


__all__ = ["DEFAULT", "SMALL", "TINY", "BLOCK_SIZES", "KERNELS", "ceil_div", "show_kernel",
           "show_diff", "prepare", "prepare_inputs", "compile_kernels", "check_backward",
           "validate_backward", "validate_block_sizes", "runner", "time_one", "sweep",
           "print_sweeps", "committed", "this_gpu_ceilings", "count", "floors", "measure", "against_roof",
           "compiler_evidence", "ncu_evidence", "ladder", "breakdown", "plot_breakdown",
           "compile_variant", "check_variant", "time_variant", "launch_variant",
           "poison_dpreatt"]
