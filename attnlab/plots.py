"""The series' plots, so every notebook draws timings the same way (matplotlib)."""
import numpy as np


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
