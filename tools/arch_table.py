"""Print docs/architectures.md: every kernel's registers and shared memory per architecture.

    python tools/arch_table.py > docs/architectures.md

Compiles every kernels/*.cu with every set of -D defines the library uses at run time, for
attnlab.archs.ARCHS (the wgmma sources of kernels.ARCH_SPECIFIC for sm_90a only, shown in the
sm_90 column; one nvcc call per build, in parallel; no GPU needed: a few minutes on 2 cores),
and checks each kernel against its architecture's limits at the block sizes it is
launched with (attnlab.archs.launches, violations).
"""
import argparse
import concurrent.futures
import os
import subprocess
import sys

from attnlab import kernels
from attnlab.archs import (ARCHS, KB, LIMITS, builds, hardware, launches, ptxas_report,
                           violations)
from attnlab.checks import BLOCK_SIZES

INTRO = """\
# Kernels per GPU architecture

Every kernel is compiled for the architectures students run: sm_75 (T4), sm_80 (A100),
sm_86 (RTX 30xx, A10), sm_89 (RTX 40xx, L4) and sm_90 (H100, H200), with each set of `-D`
defines it is compiled with at run time, and ptxas's report (`-Xptxas -v`) is checked against
that architecture's per-block limits at the block sizes it is launched with
(`tests/test_archs.py`, on any machine with nvcc; `attnlab/archs.py`). The sources that use
Hopper's wgmma are compiled for the architecture-specific target sm_90a only, which runs on
sm_90 (H100, H200) and no other GPU (`attnlab.kernels.ARCH_SPECIFIC`):
{specific}.

## Limits

From the CUDA C++ Programming Guide, "Technical Specifications per Compute Capability"
(`attnlab.archs.LIMITS`). On all five: at most 1024 threads and 255 registers per thread,
64K 32-bit registers per SM and per block (allocated per warp, in units of 256), 48 KB of
static shared memory per block; more (dynamic) shared memory up to the opt-in maximum needs
`cudaFuncSetAttribute`.

{limits}

A kernel fits when, at each block size it is launched with: registers per thread <= 255,
registers x threads (per warp rounded up to 256) <= 64K, static shared <= 48 KB, and static +
dynamic shared <= the opt-in maximum.

## Registers and shared memory

Regenerate with `python tools/arch_table.py > docs/architectures.md` (this one: {nvcc}).
Each cell: registers per thread / shared memory per block (static + dynamic, bytes) at the
largest block size checked. **✗**: does not fit (see the notes); *spills*: ptxas spills to
local memory (stack frame and spill bytes in the notes); *(sm_90a)*: built for sm_90a, in the
sm_90 column; —: not built (TF32=1 needs sm_80: flash_attention.cu has an `#error` below it;
the later fused backward kernels need TF32 tensor cores, sm_80; the sm_90a sources run on
sm_90 only).
Kernels 1–5, softmax_forward and permute are checked at every block size of the CLI's sweep
({block_sizes}).

{table}

{notes}"""


def limits_table():
    rows = ["| | " + " | ".join(ARCHS) + " |", "|---" * (len(ARCHS) + 1) + "|"]
    for label, field in (("shared memory per block, opt-in max (KB)", "max_shared_per_block_optin"),
                         ("shared memory per SM (KB)", "shared_per_sm"),
                         ("resident warps per SM", "max_warps_per_sm"),
                         ("resident blocks per SM", "max_blocks_per_sm")):
        values = [getattr(LIMITS[a], field) for a in ARCHS]
        if "KB" in label:
            values = [v // KB for v in values]
        rows.append(f"| {label} | " + " | ".join(str(v) for v in values) + " |")
    return "\n".join(rows)


def compile_all(jobs):
    """{(source, defines, archs): report}, slowest (flash_attention) first, in parallel."""
    todo = sorted(builds(), key=lambda b: b[0] != "flash_attention")
    with concurrent.futures.ThreadPoolExecutor(max_workers=jobs) as pool:
        futures = {b: pool.submit(ptxas_report, kernels.kernel_source(b[0]),
                                  f"kernels/{b[0]}.cu", b[1], b[2]) for b in todo}
        return {b: f.result() for b, f in futures.items()}


def block_column(runs):
    threads = [t for t, _ in runs]
    if len(threads) > 1:
        return f"{min(threads)}–{max(threads)}"
    t, shared = runs[0]
    return f"{t}" + (f" (+{shared} B dynamic)" if shared else "")


def table(reports):
    head = ["source", "defines", "kernel", "threads"] + list(ARCHS)
    rows = ["| " + " | ".join(head) + " |", "|---" * len(head) + "|"]
    notes = []
    for (source, defines, archs), report in sorted(reports.items()):
        for name in sorted(report[archs[0]]):
            runs = launches(source, defines, name)
            cells = []
            for column in ARCHS:
                # the build for this column: the architecture itself, or its sm_90a target
                arch = next((a for a in archs if hardware(a) == column), None)
                if arch is None:
                    cells.append("—")
                    continue
                k = report[arch][name]
                threads, shared = max(runs)
                cell = f"{k.registers} / {k.smem + shared}"
                if arch != column:
                    cell += f" *({arch})*"
                problems = sorted({v for t, s in runs for v in violations(k, arch, t, s)})
                if problems:
                    cell += " **✗**"
                    notes += [f"- {source} {fmt(defines)} `{name}` on {arch}: {p}" for p in problems]
                if (k.stack, k.spill_stores, k.spill_loads) != (0, 0, 0):
                    cell += " *spills*"
                    notes.append(f"- {source} {fmt(defines)} `{name}` on {arch}: spills, "
                                 f"{k.stack} B stack frame, {k.spill_stores} B spill stores, "
                                 f"{k.spill_loads} B spill loads ({k.registers} registers)")
                cells.append(cell)
            rows.append(f"| {source} | {fmt(defines)} | `{name}` | {block_column(runs)} | "
                        + " | ".join(cells) + " |")
    return "\n".join(rows), ("Notes:\n\n" + "\n".join(notes) + "\n") if notes else ""


def fmt(defines):
    return " ".join(f"{k}={v}" for k, v in defines)


def nvcc_version():
    out = subprocess.run([kernels.require_nvcc(), "--version"], capture_output=True, text=True)
    release = [ln for ln in out.stdout.splitlines() if "release" in ln]
    return release[-1].strip() if release else "nvcc"


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--jobs", type=int, default=os.cpu_count() or 2,
                   help="nvcc calls at once (default: the CPU count)")
    args = p.parse_args(argv)
    rows, notes = table(compile_all(args.jobs))
    sys.stdout.write(INTRO.format(limits=limits_table(), nvcc=nvcc_version(), table=rows,
                                  notes=notes,
                                  specific=", ".join(f"{s}.cu" for s in kernels.ARCH_SPECIFIC),
                                  block_sizes=", ".join(str(b) for b in BLOCK_SIZES)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
