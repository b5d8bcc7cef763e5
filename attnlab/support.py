"""Which backward kernels run on which GPU, from each architecture's limits (archs.LIMITS) and
what the fused kernels need (fused.unsupported_reason), without a GPU. The README's table
(``readme_table``) and ``python -m attnlab backward --help`` (``kernel_lines``) come from here.
"""
import textwrap

from . import fused
from .archs import ARCHS, GPUS, LIMITS, compute_capability
from .checks import KERNELS


def precisions(kernel):
    """The --tf32 settings backward ``kernel`` has: (False, True), or one (fused.precisions)."""
    return fused.precisions(kernel) if kernel in fused.FUSED_KERNELS else (False, True)


def runs_on(kernel, tf32):
    """The architectures of ARCHS that run backward ``kernel`` with ``tf32``. Kernels 1-8 (and
    the forward) run on all of them: tests/test_archs.py checks that they fit each one."""
    if kernel in KERNELS:
        return ARCHS
    return tuple(a for a in ARCHS if fused.unsupported_reason(
        tf32, compute_capability(a), LIMITS[a].max_shared_per_block_optin, kernel) is None)


def _cell(kernel, arch):
    ran = tuple(tf32 for tf32 in precisions(kernel) if arch in runs_on(kernel, tf32))
    if not ran:
        return "—"
    if ran == (False, True):
        return "yes"
    return "yes, with --tf32" if ran == (True,) else "yes, without --tf32"


def _label(kernels):
    """(1, ..., 8) -> '1–8'; (10, 11) -> '10, 11'."""
    if len(kernels) > 2:
        return f"{kernels[0]}–{kernels[-1]}"
    return ", ".join(map(str, kernels))


def readme_table():
    """The README's table: per architecture, which backward kernels run (consecutive kernels
    that run on the same GPUs share a row)."""
    rows = []                                   # [(kernels, cells)]
    for k in KERNELS + fused.FUSED_KERNELS:
        cells = tuple(_cell(k, a) for a in ARCHS)
        if rows and rows[-1][1] == cells:
            rows[-1][0].append(k)
        else:
            rows.append(([k], cells))
    lines = ["| `backward` kernel | " + " | ".join(f"{a} ({GPUS[a]})" for a in ARCHS) + " |",
             "|---" * (len(ARCHS) + 1) + "|"]
    lines += [f"| {_label(ks)} | " + " | ".join(cells) + " |" for ks, cells in rows]
    return "\n".join(lines)


def _precision(kernel):
    if kernel in fused.TF32_ONLY:
        return "TF32 only (give --tf32)"
    if kernel in fused.FP32_ONLY:
        return "fp32-accurate 3xTF32 only (no --tf32)"
    if kernel == fused.FUSED_KERNEL:
        return "fp32 on CUDA cores, --tf32: TF32 tensor cores"
    return "fp32-accurate 3xTF32 on tensor cores, --tf32: one TF32 product"


def _where(kernel):
    """'sm_80, sm_90', or per precision where they differ."""
    by = {tf32: ", ".join(runs_on(kernel, tf32)) or f"none of {', '.join(ARCHS)}"
          for tf32 in precisions(kernel)}
    if len(set(by.values())) == 1:
        return next(iter(by.values()))
    return "; ".join(f"{'--tf32' if tf32 else 'fp32'} on {archs}" for tf32, archs in by.items())


def kernel_lines(width=88):
    """``backward --help``'s list of every kernel: what it is, its precisions, whether it is
    bit-identical run to run, and the architectures that run it."""
    items = [(f"{KERNELS[0]}-{KERNELS[-1]}",
              f"the softmax-backward kernels of the materialized pipeline (notebooks 03-10; "
              f"--block-sizes: the block sizes timed); fp32 GEMMs, --tf32: TF32 GEMMs; runs on "
              f"{', '.join(runs_on(KERNELS[0], False))}")]
    for k in fused.FUSED_KERNELS:
        how = fused.BACKWARDS[k].dq_adds
        same = "bit-identical run to run" if fused.DETERMINISTIC[k] else \
            f"not bit-identical run to run ({how})"
        items.append((str(k), f"fused: {fused.ABOUT[k]}; {_precision(k)}; {same}; runs on "
                              f"{_where(k)}"))
    lines = ["kernels (N):"]
    for label, text in items:
        lines += textwrap.wrap(text, width, initial_indent=f"  {label:<5} ",
                               subsequent_indent=" " * 8, break_on_hyphens=False)
    return lines
