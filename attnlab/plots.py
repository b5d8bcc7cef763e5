"""The series' plots, so every notebook draws timings the same way (matplotlib)."""
import numpy as np

from . import bench


def _plt():
    import matplotlib.pyplot as plt
    return plt


def plot_sweep(sweeps, title="time vs block size", ax=None):
    """Median time (with min..max bars) vs block size; sweeps = {label: {bs: Timing}}."""
    plt = _plt()
    ax = ax or plt.subplots(figsize=(7, 4))[1]
    for label, timings in sweeps.items():
        bs = sorted(timings)
        med = np.array([timings[b].median_ms for b in bs])
        lo = med - np.array([timings[b].min_ms for b in bs])
        hi = np.array([timings[b].max_ms for b in bs]) - med
        ax.errorbar(bs, med, yerr=[lo, hi], marker="o", capsize=3, label=label)
    ax.set_xscale("log", base=2)
    ax.set_xticks(sorted({b for t in sweeps.values() for b in t}))
    ax.get_xaxis().set_major_formatter(_plt().ScalarFormatter())
    ax.set_xlabel("block size (threads)")
    ax.set_ylabel("time (ms), median of repeats")
    ax.set_title(title)
    ax.grid(True, alpha=0.3)
    ax.legend()
    return ax


def plot_times(times, title="", log=True, unit="ms", ax=None, highlight=None):
    """Horizontal bars, one per label; times = {label: ms (or a Timing)}."""
    plt = _plt()
    labels = list(times)
    values = [getattr(v, "median_ms", v) for v in times.values()]
    ax = ax or plt.subplots(figsize=(7, 0.45 * len(labels) + 1.2))[1]
    colors = ["tab:orange" if l == highlight else "tab:blue" for l in labels]
    ax.barh(labels, values, color=colors)
    ax.invert_yaxis()
    if log:
        ax.set_xscale("log")
        _plain_log_labels(ax.xaxis)
    for y, v in enumerate(values):
        ax.text(v, y, f" {v:.3g} {unit}", va="center")
    ax.set_xlabel(f"time ({unit})" + (", log scale" if log else ""))
    ax.set_title(title)
    ax.margins(x=0.25)
    return ax


def heatmap(matrix, title="", ax=None, cmap="viridis", log=False):
    """Show one T×T matrix (e.g. one head's att)."""
    plt = _plt()
    ax = ax or plt.subplots(figsize=(5, 4.5))[1]
    m = np.asarray(matrix, dtype=np.float64)
    if log:
        from matplotlib.colors import LogNorm
        im = ax.imshow(np.where(m > 0, m, np.nan), cmap=cmap, norm=LogNorm())
    else:
        im = ax.imshow(m, cmap=cmap)
    ax.set_xlabel("t2 (key position)")
    ax.set_ylabel("t (query position)")
    ax.set_title(title)
    plt.colorbar(im, ax=ax, fraction=0.046)
    return ax


# ---------------------------------------------------------------- the lessons' two pictures

def _row(t, **extra):
    """A row dict (median_ms, q1_ms, q3_ms and ``extra``) of a Timing or of a row dict."""
    med, q1, q3 = bench.median_quartiles(t)
    return {**extra, "median_ms": med, "q1_ms": q1, "q3_ms": q3}


def _iqr_bars(rows):
    """(medians, [lower, upper] error lengths) of rows that carry median/q1/q3 in ms."""
    med = np.array([r["median_ms"] for r in rows])
    return med, [med - np.array([r["q1_ms"] for r in rows]),
                 np.array([r["q3_ms"] for r in rows]) - med]


def ladder_rows(upto, part="softmax"):
    """Kernels 1..``upto`` from the committed results/h200/kernels.json, one row each: label,
    median/q1/q3 in ms and ``roof`` = highest floor / median (the fraction of the roof the
    kernel reaches). ``part``: "softmax" (the softmax backward alone) or "backward" (whole,
    fp32 GEMMs; its roof is not counted, so ``roof`` is None)."""
    from . import report
    key = {"softmax": "softmax", "backward": "backward_fp32"}[part]
    kernels = report.load("kernels")["kernels"]
    rows = []
    for k in range(1, upto + 1):
        e = kernels[str(k)]
        s = e[key]
        roof = max(e["floors_ms"].values()) / s["median_ms"] if part == "softmax" else None
        rows.append({"label": f"kernel {k}", "median_ms": s["median_ms"], "q1_ms": s["q1_ms"],
                     "q3_ms": s["q3_ms"], "roof": roof})
    return rows


def plot_ladder(rows, title, highlight=None, roof_label="% of its roof (highest floor / time)"):
    """The series-wide ladder: each row's median time with IQR bars (log scale) beside the
    fraction of its roof it reaches. ``rows``: dicts with label, median_ms, q1_ms, q3_ms, roof
    (a fraction, or None to leave the bar out), as ``ladder_rows`` gives."""
    plt = _plt()
    fig, (left, right) = plt.subplots(1, 2, figsize=(10, 0.45 * len(rows) + 1.8), sharey=True,
                                      layout="constrained")
    labels = [r["label"] for r in rows]
    y = np.arange(len(rows))
    colors = ["tab:orange" if l == highlight else "tab:blue" for l in labels]
    med, err = _iqr_bars(rows)
    left.barh(y, med, color=colors, alpha=0.8)
    left.errorbar(med, y, xerr=err, fmt="none", ecolor="black", capsize=3)
    left.set_xscale("log")
    _plain_log_labels(left.xaxis)
    left.set_yticks(y, labels)
    left.invert_yaxis()
    for yi, m in zip(y, med):
        left.text(m, yi, f"  {m:.3g} ms", va="center")
    left.set_xlabel("time (ms, median; bars: IQR), log scale")
    left.margins(x=0.3)
    fractions = [100 * r["roof"] if r["roof"] is not None else 0.0 for r in rows]
    right.barh(y, fractions, color=colors, alpha=0.8)
    for yi, f, r in zip(y, fractions, rows):
        right.text(f, yi, f"  {f:.3g} %" if r["roof"] is not None else "  not counted",
                   va="center")
    right.set_xlim(0, max(100.0, max(fractions) * 1.25))
    right.set_xlabel(roof_label)
    fig.suptitle(title)
    return fig


def _plain_log_labels(axis):
    """A log-scaled ``axis``' tick labels as plain numbers (0.1, 12), not 10^-1 or 1.2 x 10^1:
    matplotlib's LogFormatter chooses which ticks to label (fewer on a wide axis), this writes them."""
    from matplotlib.ticker import LogFormatter

    class Plain(LogFormatter):
        def __call__(self, x, pos=None):
            return f"{x:g}" if super().__call__(x, pos) else ""
    axis.set_major_formatter(Plain(labelOnlyBase=False))
    axis.set_minor_formatter(Plain(labelOnlyBase=False))


def plot_against_roof(measured, floors_ms, predicted_ms=None, title="", unit="ms", targets_ms=None):
    """One kernel's measurement placed against its roof: each measured run (median with IQR
    bars; ``measured`` = {label: Timing or row dict}) on a log time axis, the floors the
    ceilings allow (``floors_ms`` = {name: ms}) as vertical lines, targets set by people, not
    by the hardware (``targets_ms`` = {name: ms}), as grey ones, and the prediction as a shaded
    band (``predicted_ms`` = (low, high) in ms, or None)."""
    plt = _plt()
    rows = [_row(t, label=label) for label, t in measured.items()]
    fig, ax = plt.subplots(figsize=(9, 0.6 * len(rows) + 2.2), layout="constrained")
    y = np.arange(len(rows))
    med, err = _iqr_bars(rows)
    if predicted_ms is not None:
        ax.axvspan(*predicted_ms, color="tab:green", alpha=0.15, label="prediction")
    styles = ("--", ":", "-.", (0, (5, 1)))
    for kind, lines, color in (("floor", floors_ms, "tab:red"), ("target", targets_ms or {}, "tab:gray")):
        for (name, ms), style in zip(sorted(lines.items(), key=lambda kv: -kv[1]), styles):
            ax.axvline(ms, color=color, linestyle=style, label=f"{kind}: {name} ({ms:.3g} {unit})")
    ax.errorbar(med, y, xerr=err, fmt="o", color="tab:blue", capsize=4, label="measured (IQR)")
    for yi, m in zip(y, med):
        ax.annotate(f"{m:.3g} {unit}", (m, yi), textcoords="offset points", xytext=(0, 8),
                    ha="center")
    ax.set_yticks(y, [r["label"] for r in rows])
    ax.set_ylim(len(rows) - 0.4, -0.6)
    ax.set_xscale("log")
    _plain_log_labels(ax.xaxis)
    ax.set_xlabel(f"time ({unit}, median; bars: IQR), log scale")
    ax.set_title(title)
    ax.grid(True, axis="x", alpha=0.3, which="both")
    ax.legend(loc="upper center", bbox_to_anchor=(0.5, -0.22), ncol=2, frameon=False)
    return fig


# ---- notebook 13: the fused ladder, its roofs, and kernel 12's removed costs

def fused_ladder_rows(T, kernels=(9, 10, 11, 12, 13), ladder=None, wgmma=None):
    """Rows for ``plot_ladder`` from results/h200/fused_ladder.json at sequence length T, one per
    method of ``kernels``: label, median/q1/q3 of the whole fused backward in ms, and ``roof`` =
    the tensor-core FLOP/s it executes over the measured rate of its instruction (mma.sync for
    kernels 9-11; wgmma, A in shared memory, results/h200/wgmma_rate.json, for 12-13); None
    on CUDA cores. ``ladder``/``wgmma``: those files' dicts (loaded when None)."""
    from . import report
    from .fused import WGMMA_KERNELS
    ladder = report.load("fused_ladder") if ladder is None else ladder
    wgmma = report.load("wgmma_rate") if wgmma is None else wgmma
    if str(T) not in ladder["speed"]:
        raise ValueError(f"T={T!r}: fused_ladder.json has T = {', '.join(ladder['speed'])}")
    rates = {"mma.sync": ladder["mma_tf32_roof"]["median"] / 1e12,
             "wgmma": wgmma["wgmma_tflops"]["shared memory"]["median"]}
    rows = []
    for name in ladder["methods"]:
        k, precision = int(name.split()[0][1:]), name.split()[1]
        if k not in kernels:
            continue
        r = ladder["speed"][str(T)][name]
        executed = r["executed_mma_tflops"]
        rate = rates["wgmma" if k in WGMMA_KERNELS else "mma.sync"]
        shown = "TF32" if precision == "tf32" else ("fp32" if k == 9 else "3xTF32")
        rows.append({"label": f"kernel {k} {shown}", "median_ms": r["median_ms"],
                     "q1_ms": r["q1_ms"], "q3_ms": r["q3_ms"],
                     "roof": executed / rate if executed else None})
    return rows


def plot_rate_against_roofs(rows, title, unit="TFLOP/s"):
    """Each row's rate as a bar (``rate``, with ``rate_lo``..``rate_hi`` as its IQR bar) and its
    roofs as short horizontal marks across the bar (``roofs`` = {name: rate}; one legend entry
    per name). Rows: dicts with label, rate, rate_lo, rate_hi, roofs."""
    plt = _plt()
    for r in rows:
        if not r["rate_lo"] <= r["rate"] <= r["rate_hi"]:
            raise ValueError(f"{r['label']}: rate {r['rate']} is not within its IQR "
                             f"{r['rate_lo']}..{r['rate_hi']}")
    fig, ax = plt.subplots(figsize=(9, 4.8), layout="constrained")
    x = np.arange(len(rows))
    rate = np.array([r["rate"] for r in rows])
    ax.bar(x, rate, width=0.6, color="tab:blue", alpha=0.8, label=f"measured ({unit}; bars: IQR)")
    ax.errorbar(x, rate, yerr=[rate - [r["rate_lo"] for r in rows],
                               np.array([r["rate_hi"] for r in rows]) - rate],
                fmt="none", ecolor="black", capsize=4)
    for xi, v in zip(x, rate):
        ax.annotate(f"{v:.3g}", (xi, v), textcoords="offset points", xytext=(0, -14), ha="center",
                    color="white", fontweight="bold")
    names = list(dict.fromkeys(n for r in rows for n in r["roofs"]))
    styles = dict(zip(names, (("tab:red", "-"), ("tab:green", "--"), ("tab:purple", ":"),
                              ("tab:brown", "-."))))
    for name in names:
        color, ls = styles[name]
        for i, (xi, r) in enumerate(zip(x, rows)):
            if name in r["roofs"]:
                ax.hlines(r["roofs"][name], xi - 0.42, xi + 0.42, colors=color, linestyles=ls, lw=2.5,
                          label=name if i == next(j for j, q in enumerate(rows) if name in q["roofs"])
                          else None)
                ax.annotate(f"{r['roofs'][name]:.3g}", (xi + 0.42, r["roofs"][name]), fontsize=8,
                            color=color, va="center")
    ax.set_xticks(x, [r["label"] for r in rows])
    ax.set_ylabel(unit)
    ax.set_ylim(0, 1.15 * max([*rate, *(v for r in rows for v in r["roofs"].values())]))
    ax.set_title(title)
    ax.grid(True, axis="y", alpha=0.3)
    ax.legend(loc="upper center", bbox_to_anchor=(0.5, -0.08), ncol=2, fontsize=8, frameon=False)
    return fig


def plot_waterfall(start, steps, end, title, unit="ms"):
    """A waterfall: the bar ``start`` = (label, value), each step = (label, change) floating from
    the running total (decreases green, increases red), then the bar ``end`` = (label, value),
    which must equal start plus the changes (to 0.1 %; add a step for any remainder)."""
    plt = _plt()
    total = start[1] + sum(d for _, d in steps)
    if abs(total - end[1]) > 1e-3 * abs(end[1]):
        raise ValueError(f"end={end!r}: start {start[1]:.4g} plus the steps is {total:.4g}; "
                         f"add a step for the remainder")
    fig, ax = plt.subplots(figsize=(10, 4.8), layout="constrained")
    labels = [start[0], *(s[0] for s in steps), end[0]]
    level = start[1]
    ax.bar(0, start[1], color="tab:blue")
    ax.annotate(f"{start[1]:.4g} {unit}", (0, start[1]), textcoords="offset points",
                xytext=(0, 3), ha="center")
    for i, (_, d) in enumerate(steps, 1):
        ax.bar(i, d, bottom=level, color="tab:green" if d < 0 else "tab:red")
        ax.annotate(f"{d:+.3g}", (i, max(level, level + d)), textcoords="offset points",
                    xytext=(0, 3), ha="center")
        ax.plot([i - 1.4, i + 0.4], [level, level], color="gray", lw=0.8, ls=":")
        level += d
    ax.bar(len(steps) + 1, end[1], color="tab:orange")
    ax.annotate(f"{end[1]:.4g} {unit}", (len(steps) + 1, end[1]), textcoords="offset points",
                xytext=(0, 3), ha="center")
    ax.set_xticks(np.arange(len(labels)), labels, rotation=20, ha="right")
    levels = np.cumsum([start[1], *(d for _, d in steps)])
    ax.set_ylim(min(0, levels.min()), 1.12 * max(levels.max(), end[1]))
    ax.set_ylabel(f"time ({unit})")
    ax.set_title(title)
    ax.grid(True, axis="y", alpha=0.3)
    return fig


# ---- notebook 03: measured time against a model over block sizes

def plot_sweep_vs_model(measured, model, title, ylabel="time (ms), log scale"):
    """Measured time against a model's, over block sizes, one colour per shape.

    ``measured`` = {label: {block_size: Timing or ms}}: a Timing draws its median with IQR
    bars, a bare number (one call) a hollow point; ``model`` = {label: {block_size: ms}}
    draws a dashed line in the same colour. Block sizes on a log2 axis, time on a log axis."""
    plt = _plt()
    fig, ax = plt.subplots(figsize=(8, 4.5), layout="constrained")
    for i, label in enumerate(measured):
        color = f"C{i}"
        points = measured[label]
        bs = sorted(points)
        med = np.array([getattr(points[b], "median_ms", points[b]) for b in bs], dtype=float)
        timed = [b for b in bs if hasattr(points[b], "quartiles_ms")]
        if timed:
            quart = np.array([points[b].quartiles_ms for b in timed])
            m = np.array([points[b].median_ms for b in timed])
            ax.errorbar(timed, m, yerr=[m - quart[:, 0], quart[:, 1] - m], fmt="o",
                        color=color, capsize=3, label=f"{label}: measured (median, IQR)")
        single = [b for b in bs if b not in timed]
        if single:
            ax.plot(single, [points[b] for b in single], "o", mfc="none", color=color,
                    label=f"{label}: measured (one call each)")
        if label in model:
            mb = sorted(model[label])
            ax.plot(mb, [model[label][b] for b in mb], "--", color=color,
                    label=f"{label}: model")
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    sizes = sorted({b for d in (*measured.values(), *model.values()) for b in d})
    ax.set_xticks(sizes)
    ax.get_xaxis().set_major_formatter(plt.ScalarFormatter())
    ax.set_xlabel("block size (threads)")
    ax.set_ylabel(ylabel)
    ax.set_title(title)
    ax.grid(True, alpha=0.3, which="both")
    ax.legend(fontsize="small")
    return fig


# ---- notebook 08: the instruction model stacked beside the measured time

def plot_instruction_model(stacks, issue_per_s, measured=None, lines=None, title="",
                           xlabel="block size (threads)"):
    """A model's warp instructions beside the measured time, per block size (or any key).

    ``stacks`` = {key: {part: warp instructions}}, the same parts in every key: one stacked bar
    per key, each part drawn as the time it takes at the issue ceiling (``issue_per_s`` warp
    instructions per second), its total in billions on top. ``measured`` = {key: Timing or
    row dict} draws the median with IQR bars beside each bar; ``lines`` = {label: {key: ms}}
    draws other times (floors, a profiler's count) as dashed lines with markers."""
    from .errors import InputError
    if not issue_per_s or issue_per_s <= 0:
        raise InputError(f"issue_per_s must be a positive rate, got {issue_per_s!r}")
    keys = list(stacks)
    parts = list(stacks[keys[0]]) if keys else []
    if any(list(stacks[k]) != parts for k in keys):
        raise InputError(f"stacks must have the same parts for every key, got "
                         f"{ {k: list(v) for k, v in stacks.items()} }")
    plt = _plt()
    fig, ax = plt.subplots(figsize=(9, 4.8), layout="constrained")
    x = np.arange(len(keys))
    width = 0.38
    bottom = np.zeros(len(keys))
    for i, part in enumerate(parts):
        ms = np.array([stacks[k][part] / issue_per_s * 1e3 for k in keys])
        ax.bar(x - width / 2, ms, width, bottom=bottom, color=f"C{i}", alpha=0.75,
               label=f"model: {part}")
        bottom += ms
    for xi, k, top in zip(x, keys, bottom):
        total = sum(stacks[k].values())
        ax.text(xi - width / 2, top, f"{total / 1e9:.2f} G", ha="center", va="bottom",
                fontsize="small")
    if measured:
        rows = [_row(measured[k], key=k) for k in keys if measured.get(k) is not None]
        xm = np.array([keys.index(r["key"]) for r in rows]) + width / 2
        med, err = _iqr_bars(rows)
        ax.errorbar(xm, med, yerr=err, fmt="s", color="black", capsize=4,
                    label="measured (median, IQR)")
    styles = (("v", "tab:red"), ("^", "tab:brown"), ("D", "tab:purple"), ("X", "tab:gray"))
    for (label, values), (marker, color) in zip((lines or {}).items(), styles):
        pts = [(keys.index(k), ms) for k, ms in values.items() if k in keys]
        ax.plot([p[0] for p in pts], [p[1] for p in pts], linestyle="--", marker=marker,
                color=color, alpha=0.8, markersize=8, label=label)
    ax.set_xticks(x, [str(k) for k in keys])
    ax.set_xlabel(xlabel)
    ax.set_ylabel("time (ms); bars: instructions / issue ceiling")
    ax.set_title(title)
    ax.grid(True, axis="y", alpha=0.3)
    ax.legend(loc="upper left", fontsize="small")
    return fig


# ---- notebook 09: how a count grows with the sequence length (O(T³) against O(T²))

def plot_growth(lines, title, points=None, xlabel="sequence length T",
                ylabel="time (ms), log scale"):
    """Quantities that grow with a size, on log-log axes, each with its measured growth.

    ``lines`` = {label: {x: value}} draws one line with markers per label; its legend gives the
    growth per doubling of x over its last two points (x² grows 4× per doubling, x³ 8×).
    ``points`` = {label: {x: Timing, row dict (median_ms, q1_ms, q3_ms) or a number}} draws
    measured points with IQR bars (a bare number without)."""
    from .errors import InputError
    if not lines:
        raise InputError("lines must hold at least one {label: {x: value}}")
    for label, values in lines.items():
        if len(values) < 2 or any(x <= 0 or v <= 0 for x, v in values.items()):
            raise InputError(f"{label!r}: a line needs at least two points, all positive "
                             f"(log axes), got {values!r}")
    plt = _plt()
    fig, ax = plt.subplots(figsize=(9, 5), layout="constrained")
    markers = ("o", "s", "^", "v", "D", "P")
    for i, (label, values) in enumerate(lines.items()):
        xs = sorted(values)
        ys = np.array([values[x] for x in xs], dtype=float)
        per_doubling = (ys[-1] / ys[-2]) ** (np.log(2) / np.log(xs[-1] / xs[-2]))
        ax.plot(xs, ys, marker=markers[i % len(markers)], color=f"C{i}", alpha=0.85,
                label=f"{label}: {per_doubling:.1f}× per doubling")
    for j, (label, values) in enumerate((points or {}).items()):
        for x, t in sorted(values.items()):
            if isinstance(t, dict) or hasattr(t, "quartiles_ms"):
                med, lo, hi = bench.median_quartiles(t)
            else:
                med = lo = hi = float(t)
            ax.errorbar([x], [med], yerr=[[med - lo], [hi - med]], fmt="*", markersize=13,
                        color="black" if j == 0 else f"C{len(lines) + j}", capsize=4,
                        label=label if x == min(values) else None)
            ax.annotate(f"{med:.3g}", (x, med), textcoords="offset points", xytext=(8, -4),
                        fontsize="small")
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    xs = sorted({x for v in lines.values() for x in v})
    ax.set_xticks(xs)
    ax.get_xaxis().set_major_formatter(plt.ScalarFormatter())
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.set_title(title)
    ax.grid(True, alpha=0.3, which="both")
    ax.legend(fontsize="small", loc="upper left")
    return fig


# ---- notebook 10: knock-outs, each variant's median and IQR beside the kernel it changes

def plot_knockouts(times, reference, title="", unit="ms"):
    """Variants of one kernel (each with one trick removed) beside it, read by notebook 00's
    rule. ``times`` = {label: Timing or row dict with median_ms, q1_ms, q3_ms}, one run of
    interleaved repeats; ``reference`` = the label every other row is compared with (the
    kernel itself). One point per row, its median with IQR bars, on a linear time axis; the
    reference's IQR as a shaded band; each other row labelled with ``reference / row``: the
    ratio of medians with its range, or "not resolved" when the two IQRs overlap."""
    from .errors import InputError
    rows = [_row(t, label=label) for label, t in times.items()]
    for r in rows:
        if not r["q1_ms"] <= r["median_ms"] <= r["q3_ms"]:
            raise InputError(f"{r['label']}: median {r['median_ms']} is not within its IQR "
                             f"{r['q1_ms']}..{r['q3_ms']}")
    labels = [r["label"] for r in rows]
    if reference not in labels:
        raise InputError(f"reference={reference!r} is not one of the rows: {labels}")
    if len(rows) < 2:
        raise InputError(f"need the reference and at least one variant, got {labels}")
    ref = rows[labels.index(reference)]
    plt = _plt()
    fig, ax = plt.subplots(figsize=(9, 0.6 * len(rows) + 1.8), layout="constrained")
    y = np.arange(len(rows))
    ax.axvspan(ref["q1_ms"], ref["q3_ms"], color="tab:orange", alpha=0.15,
               label=f"{reference}: IQR")
    colors = {"reference": "tab:orange", "faster": "tab:green", "slower": "tab:red",
              "not resolved": "tab:gray"}
    legend = set()
    for yi, r in zip(y, rows):
        if r is ref:
            kind, text = "reference", "the reference"
        else:
            kind, ratio, low, high = bench.verdict(ref, r)
            text = (f"{ratio:.2f}x, not resolved (IQRs overlap)" if kind == "not resolved" else
                    f"{ratio:.2f}x {kind} (range {low:.2f}-{high:.2f}x)")
        name = {"reference": reference, "not resolved": "not resolved (IQRs overlap)"}.get(
            kind, f"resolved: {kind} than {reference}")
        ax.errorbar(r["median_ms"], yi, xerr=[[r["median_ms"] - r["q1_ms"]],
                                              [r["q3_ms"] - r["median_ms"]]],
                    fmt="o", color=colors[kind], capsize=4, label=None if kind in legend else name)
        legend.add(kind)
        ax.annotate(f"{r['median_ms']:.4g} {unit}: {text}", (r["median_ms"], yi),
                    textcoords="offset points", xytext=(0, 8), ha="center", fontsize="small")
    ax.set_yticks(y, labels)
    ax.set_ylim(len(rows) - 0.4, -0.7)
    lo = min(r["q1_ms"] for r in rows)
    hi = max(r["q3_ms"] for r in rows)
    pad = 0.6 * (hi - lo) or 0.05 * hi
    ax.set_xlim(lo - pad, hi + pad)
    ax.set_xlabel(f"time ({unit}, median; bars: IQR)")
    ax.set_title(title)
    ax.grid(True, axis="x", alpha=0.3)
    ax.legend(loc="upper center", bbox_to_anchor=(0.5, -0.18), ncol=2, frameon=False)
    return fig


# ---- notebook 11: where the time goes, each stage beside its floor

def plot_stages_against_floors(measured, floors_ms, title, unit="ms"):
    """Each stage of a computation (one row per stage, in order) as horizontal bars: for each
    measured series, the median with IQR bars, and on the same bar a black mark at the floor
    that series is held against, labelled with measured / floor.

    ``measured`` = {series label: {stage: Timing or row dict with median_ms, q1_ms, q3_ms}};
    ``floors_ms`` = {floor label: {stage: ms}}, one per series, in the same order (the i-th
    floor is the i-th series' floor). Every series and floor must name the same stages."""
    from .errors import InputError
    series, floors = list(measured), list(floors_ms)
    if not series or len(floors) != len(series):
        raise InputError(f"need one floor per measured series, got series {series} and floors "
                         f"{floors}")
    stages = list(measured[series[0]])
    for label, values in [*measured.items(), *floors_ms.items()]:
        if list(values) != stages:
            raise InputError(f"{label!r} has stages {list(values)}, expected {stages}")
    plt = _plt()
    fig, ax = plt.subplots(figsize=(10, 0.5 * len(stages) * len(series) + 2.2),
                           layout="constrained")
    y = np.arange(len(stages))
    height = 0.8 / len(series)
    for i, (label, floor_label) in enumerate(zip(series, floors)):
        rows = [_row(measured[label][stage]) for stage in stages]
        med, err = _iqr_bars(rows)
        yi = y - 0.4 + height * (i + 0.5)
        ax.barh(yi, med, height, xerr=err, color=f"C{i}", alpha=0.75, capsize=2,
                label=f"{label}: median, IQR")
        floor = np.array([floors_ms[floor_label][s] for s in stages])
        ax.plot(floor, yi, linestyle="none", marker="|", markersize=14, markeredgewidth=2.5,
                color="black" if i == 0 else "dimgray", label=floor_label)
        for yy, m, f in zip(yi, med, floor):
            ratio = f"{m / f:.2f}x floor" if f > 0 else "no floor"
            ax.text(m, yy, f"  {m:.3g} {unit}, {ratio}", va="center", fontsize="small")
    ax.set_yticks(y, stages)
    ax.invert_yaxis()
    ax.set_xlim(0, ax.get_xlim()[1] * 1.3)
    ax.set_xlabel(f"time ({unit}, median; bars: IQR; marks: floors)")
    ax.set_ylabel("stage, in the order it runs")
    ax.set_title(title)
    ax.grid(True, axis="x", alpha=0.3)
    ax.legend(loc="upper center", bbox_to_anchor=(0.5, -0.1), ncol=2, fontsize="small",
              frameon=False)
    return fig


# ---- notebook 14: when each copy of a query tile is issued, and when it must have landed

def plot_copy_schedule(rows, title, xlabel=None, after="next step"):
    """One tile step of each kernel as a row of phases (``phases`` = [(name, start, end)] in
    units of a step; a schematic, not to scale) and its copies as arrows from where they are
    issued to where the products need them (``copies`` = [(name, issued, needed)], needed >
    issued; a copy needed past 1 is for the next step). ``rows`` = [{label, phases, copies,
    note}]: ``note`` (the count: instructions per step) is written under the row. Any other
    span of work can be drawn the same way: ``xlabel`` says what the axis is, ``after`` what
    follows at 1, and the arrows are then whatever must happen before what (a register freed
    before a product may overwrite it)."""
    from .errors import InputError
    for r in rows:
        for name, issued, needed in r["copies"]:
            if not 0 <= issued < needed:
                raise InputError(f"{r['label']}: copy {name!r} is needed at {needed}, not after "
                                 f"it is issued at {issued}")
    plt = _plt()
    fig, ax = plt.subplots(figsize=(10, 1.9 * len(rows) + 0.8), layout="constrained")
    colors = plt.get_cmap("tab20").colors
    names = list(dict.fromkeys(p[0] for r in rows for p in r["phases"]))
    for i, r in enumerate(rows):
        y = 2 * i
        for name, start, end in r["phases"]:
            ax.barh(y, end - start, left=start, height=0.5, color=colors[names.index(name) % 20],
                    edgecolor="black", linewidth=0.5)
            ax.text((start + end) / 2, y, name, ha="center", va="center", fontsize=8)
        ax.barh(y, 0.25, left=1.0, height=0.5, color="white", edgecolor="grey", linestyle=":")
        ax.text(1.125, y, after, ha="center", va="center", fontsize=8, color="grey", wrap=True)
        for k, (name, issued, needed) in enumerate(r["copies"]):
            h = y - 0.45 - 0.3 * (len(r["copies"]) - 1 - k)   # the first copy on top
            ax.annotate("", xy=(needed, h), xytext=(issued, h),
                        arrowprops={"arrowstyle": "->", "color": "tab:red"})
            ax.text(issued, h, f"{name}  ", ha="right", va="center", fontsize=8, color="tab:red")
        ax.text(0.0, y + 0.5, r["note"], ha="left", va="center", fontsize=8, style="italic")
    ax.set_yticks([2 * i for i in range(len(rows))], [r["label"] for r in rows])
    ax.set_ylim(2 * len(rows) - 1.3, -1.2)      # inverted: the first row on top, its arrows above it
    ax.set_xlim(-0.45, 1.3)
    ax.set_xlabel(xlabel or "one tile step (schematic: where each copy is issued → where it must have landed)")
    ax.set_title(title)
    return fig
