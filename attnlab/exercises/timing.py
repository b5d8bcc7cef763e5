"""Timing a student's kernel against the series' kernel, and saying what the times show.

The two kernels run interleaved (A B A B ..., ``attnlab.bench.interleaved``) on the same
inputs, with L2 flushed before each run, so a drift of the GPU's clock falls on both. The
softmax-backward reference of exercises 4 and 5 runs at its best block size on this GPU: the
one in the committed results (results/h200/kernels.json) when this GPU is the one they were
measured on and the shape is theirs, else the best of a sweep over the block sizes. The
verdict is "not resolved" when the two interquartile ranges overlap (``bench.overlap``),
else the ratio of the medians with its range (``bench.speedup``).
"""
from pathlib import Path

from .. import bench
from ..checks import BLOCK_SIZES
from ..launch import softmax_backward_launch
from ..problem import Shape

BACKWARD_ARGS = ["dpreatt", "datt", "att", "B", "T", "C", "NH"]


# ------------------------------------------------------------------ in the checking process

def committed_best(kernel):
    """{gpu, shape, block_size, source} of softmax-backward ``kernel``'s best block size in the
    committed results (``attnlab.report.load("kernels")``), or None when they are not here."""
    try:
        from .. import report
        data = report.load("kernels")
        return dict(gpu=data["device"]["name"], shape=dict(data["shape"]),
                    block_size=int(data["kernels"][str(kernel)]["block_size"]),
                    source=Path("results", report.results_dir().name, "kernels.json").as_posix())
    except (OSError, KeyError, TypeError, ValueError):
        return None


def backward_reference(kernel, block_size="best"):
    """The job's description of softmax-backward ``kernel`` as the reference: at a fixed block
    size, or at its best ("best": the child chooses, see ``choose_block_size``)."""
    ref = dict(softmax_backward=kernel, block_size=block_size, args=BACKWARD_ARGS)
    if block_size == "best":
        ref.update(committed=committed_best(kernel), block_sizes=list(BLOCK_SIZES))
    return ref


def verdict(yours, reference):
    """Your kernel against the reference (two bench.Timing): "not resolved" when their
    interquartile ranges overlap, else "1.10x faster (range 1.05-1.15x)" or "... slower"."""
    if bench.overlap(yours, reference):
        return "not resolved"
    ratio, low, high = bench.speedup(reference, yours)        # > 1: yours is faster
    if ratio >= 1:
        return f"{ratio:.2f}x faster (range {low:.2f}-{high:.2f}x)"
    return f"{1 / ratio:.2f}x slower (range {1 / high:.2f}-{1 / low:.2f}x)"


def _iqr(t):
    q1, q3 = t.quartiles_ms
    return f"IQR {q1:.4f}-{q3:.4f}"


def describe_time(who, yours, reference, label, shape_label):
    """One line: both medians and the verdict; with both IQRs when it is not resolved."""
    head = (f"time at {shape_label} (median of {yours.repeats}, interleaved with the reference, "
            f"L2 flushed): ")
    v = verdict(yours, reference)
    if v == "not resolved":
        return (head + f"{who} {yours.median_ms:.4f} ms ({_iqr(yours)}), reference ({label}) "
                f"{reference.median_ms:.4f} ms ({_iqr(reference)}): not resolved (the "
                f"interquartile ranges overlap: run the check again before you believe a "
                f"difference)")
    return (head + f"{who} {yours.median_ms:.4f} ms, reference ({label}) "
            f"{reference.median_ms:.4f} ms: {v}")


def timing_summary(yours, reference, label, shape_label):
    """CheckResult.timing: the medians, their ratio and IQRs, the verdict, what was timed."""
    return dict(yours_ms=yours.median_ms, reference_ms=reference.median_ms,
                ratio=yours.median_ms / reference.median_ms, yours_iqr_ms=yours.quartiles_ms,
                reference_iqr_ms=reference.quartiles_ms, verdict=verdict(yours, reference),
                reference=label, shape=shape_label)


def timings(times):
    """{name: bench.Timing} from the child's {name: [ms, ...]}."""
    return {name: bench.Timing.of(ms) for name, ms in times.items()}


# ------------------------------------------------------------------- in the child process

def choose_block_size(ref, shape, gpu, sweep):
    """(block size, how it was chosen or None) of a softmax-backward reference on this GPU.

    A fixed block size is kept. "best" is the committed results' best when ``gpu`` (this
    GPU's name) and ``shape`` are those they were measured on, else the best of
    ``sweep(block_sizes)`` ({block size: bench.Timing}), the fastest median."""
    if ref["block_size"] != "best":
        return ref["block_size"], None
    c = ref.get("committed")
    if c and c["gpu"] == gpu and Shape(**c["shape"]) == Shape(**shape):
        return c["block_size"], f"its best on the {c['gpu']} in {c['source']}"
    sizes = ref["block_sizes"]
    best, _ = bench.best(sweep(sizes))
    return best, f"the fastest on this GPU of block sizes {sizes[0]}-{sizes[-1]}, swept now"


def reference_launch(ref, shape, block_size, how=None):
    """The reference as a fixed launch: {kernel, function, defines, grid, block, args, label};
    ``how``: how the block size was chosen, for the label."""
    if "softmax_backward" not in ref:
        return ref
    k = ref["softmax_backward"]
    grid, block, defines = softmax_backward_launch(k, shape["B"], shape["T"], shape["NH"],
                                                   block_size)
    return dict(kernel=f"softmax_backward{k}",
                function=f"softmax_autoregressive_backward_kernel{k}", defines=defines,
                grid=grid, block=block, args=ref["args"],
                label=f"kernel {k} at block size {block_size}, {how}" if how else
                f"kernel {k}, block {block_size}")
