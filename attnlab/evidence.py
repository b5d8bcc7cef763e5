"""The compiler's evidence for a kernel, and the profiler's where it can be read.

- ``attributes(fn)``: registers, shared and local (stack) bytes of a compiled PyCUDA function;
- ``occupancy(registers, shared, block_size, arch)``: the blocks and warps per SM those allow,
  and which limit binds (from attnlab.archs.LIMITS, the occupancy calculator's arithmetic);
- ``sass(name, function, defines)``: the kernel's SASS (nvcc -cubin, cuobjdump -sass) and
  the instruction mix of its innermost loops. It needs nvcc, not a GPU;
- ``ncu_metrics(...)``: DRAM bytes, achieved occupancy and warp-stall reasons read by
  Nsight Compute in a child process, where this machine's ncu can read counters.
"""
import collections
import csv
import io
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from . import processes
from .archs import LIMITS, registers_per_block
from .checks import BLOCK_SIZES
from .errors import InputError, KernelCompileError, SetupError
from .kernels import (KERNEL_DIR, format_nvcc_error, get_function, kernel_path, nvcc_options,
                      require_nvcc)

RESERVED_SHARED_PER_BLOCK = 1024     # bytes the runtime keeps per block from sm_80 on
SUB_PARTITIONS = 4                   # warp schedulers (and register-file quarters) per SM


def attributes(fn):
    """What the compiler gave a PyCUDA function: registers and bytes of memory per thread/block."""
    return {"registers": fn.num_regs, "shared_bytes": fn.shared_size_bytes,
            "local_bytes": fn.local_size_bytes, "max_threads_per_block": fn.max_threads_per_block}


def occupancy(registers, shared_bytes, block_size, arch="sm_90"):
    """Resident blocks and warps per SM for a kernel, and the limit that binds.

    Returns {"blocks", "warps", "occupancy" (fraction of the SM's warp slots), "limiter",
    "limits" (blocks allowed by each resource)}.
    """
    if arch not in LIMITS:
        raise InputError(f"arch must be one of {list(LIMITS)}, got {arch!r}")
    lim = LIMITS[arch]
    warps = -(-block_size // 32)
    reserved = RESERVED_SHARED_PER_BLOCK if int(arch[3:]) >= 80 else 0
    # registers: allocated per warp (rounded up to 256), from the register file of one of the
    # SM's 4 sub-partitions (each warp lives on one): cuda_occupancy.h's arithmetic
    per_warp = registers_per_block(registers, 32)
    warps_by_registers = SUB_PARTITIONS * (lim.registers_per_sm // SUB_PARTITIONS // per_warp) \
        if per_warp else lim.max_warps_per_sm
    limits = {
        "blocks": lim.max_blocks_per_sm,
        "warps": lim.max_warps_per_sm // warps,
        "registers": warps_by_registers // warps,
        "shared memory": lim.shared_per_sm // (shared_bytes + reserved) if shared_bytes + reserved
        else lim.max_blocks_per_sm,
    }
    blocks = min(limits.values())
    limiter = min(limits, key=limits.get)
    return {"blocks": blocks, "warps": blocks * warps,
            "occupancy": blocks * warps / lim.max_warps_per_sm, "limiter": limiter,
            "limits": limits}


def per_block_size(name, function, defines_for, arch, block_sizes=BLOCK_SIZES):
    """{block size: {"attributes", "occupancy"}} of ``function`` in kernels/NAME.cu compiled
    with ``defines_for(block size)`` for each block size (kernels 6-8 are compiled per block
    size, and their registers differ)."""
    out = {}
    for bs in block_sizes:
        a = attributes(get_function(name, function, **defines_for(bs)))
        out[bs] = {"attributes": a,
                   "occupancy": occupancy(a["registers"], a["shared_bytes"], bs, arch)}
    return out


def describe_occupancy(attrs, block_sizes, arch="sm_90"):
    """A table: per block size, blocks and warps per SM, occupancy and the binding limit."""
    lines = [f"registers {attrs['registers']}, static shared {attrs['shared_bytes']} B, "
             f"local (stack) {attrs['local_bytes']} B per thread; {arch}:",
             "block size | blocks/SM | warps/SM | occupancy | limited by"]
    for bs in block_sizes:
        o = occupancy(attrs["registers"], attrs["shared_bytes"], bs, arch)
        lines.append(f"{bs:>10} | {o['blocks']:>9} | {o['warps']:>8} | {o['occupancy']:>9.0%} | "
                     f"{o['limiter']}")
    return "\n".join(lines)


# ---------------------------------------------------------------------------- SASS

_INSTRUCTION = re.compile(r"/\*([0-9a-f]{4,})\*/\s+(.*?)\s*;")
_LABEL = re.compile(r"^\s*(\.L_x_\d+):")
_BRANCH_TARGET = re.compile(r"`\((\.L_x_\d+)\)|\bBRA(?:\.\w+)*\s+(0x[0-9a-f]+)")


def find_cuobjdump(nvcc):
    """cuobjdump of nvcc's toolkit (or on PATH); raises SetupError when there is none."""
    from .libraries import nvcc_root
    root = nvcc_root(nvcc)
    found = shutil.which("cuobjdump", path=str(Path(root) / "bin")) if root else None
    found = found or shutil.which("cuobjdump")
    if not found:
        raise SetupError(f"cuobjdump is in neither {root}/bin nor on PATH: the SASS cannot be "
                         f"read; install the CUDA toolkit's cuobjdump (it comes with nvcc in a "
                         f"full toolkit)")
    return found


def sass_text(name, function, defines=None, arch="sm_90"):
    """The SASS of ``function`` in kernels/NAME.cu, compiled as the GPU path compiles it."""
    nvcc = require_nvcc()
    path = kernel_path(name)
    with tempfile.TemporaryDirectory() as tmp:
        cubin = Path(tmp) / "kernel.cubin"
        cmd = [nvcc, "-cubin", f"-arch={arch}", *nvcc_options(defines or {}), f"-I{KERNEL_DIR}",
               "-o", str(cubin), str(path)]
        proc = subprocess.run(cmd, capture_output=True, text=True)
        if proc.returncode != 0:
            raise KernelCompileError(format_nvcc_error(str(path), proc.stderr + proc.stdout))
        cuobjdump = find_cuobjdump(nvcc)
        out = subprocess.run([cuobjdump, "-sass", "-fun", function, str(cubin)],
                             capture_output=True, text=True, check=True)
    return out.stdout


def parse_sass(text):
    """[(address, opcode, text)] and {label: address} of one function's SASS."""
    instructions, labels, pending = [], {}, []
    for line in text.splitlines():
        m = _LABEL.match(line)
        if m:
            pending.append(m.group(1))
            continue
        m = _INSTRUCTION.search(line)
        if not m:
            continue
        addr, body = int(m.group(1), 16), m.group(2)
        for label in pending:
            labels[label] = addr
        pending = []
        words = body.split()
        op = words[1] if words[0].startswith("@") else words[0]
        instructions.append((addr, op, body))
    return instructions, labels


def loops(instructions, labels):
    """Backward branches as (start, end) address ranges, innermost first (none inside)."""
    found = set()
    for addr, op, body in instructions:
        m = _BRANCH_TARGET.search(body)
        if not (op.startswith("BRA") and m):
            continue
        # cuobjdump writes the target as a label `(.L_x_N) or as an address 0x560
        target = labels.get(m.group(1), addr) if m.group(1) else int(m.group(2), 16)
        if target < addr:
            found.add((target, addr))
    innermost = [r for r in found
                 if not any(o != r and r[0] <= o[0] and o[1] <= r[1] for o in found)]
    return sorted(innermost, key=lambda r: r[0])


def mix(instructions, start, end):
    """Counter of opcode families (FFMA, LDG, LDS, ...) in [start, end]."""
    return collections.Counter(op.split(".")[0] for addr, op, _ in instructions
                               if start <= addr <= end)


def sass(name, function, defines=None, arch="sm_90"):
    """The instruction mix of each innermost loop of a kernel, largest first:
    [{"start", "end", "instructions", "mix"}]."""
    instructions, labels = parse_sass(sass_text(name, function, defines, arch))
    out = []
    for start, end in loops(instructions, labels):
        m = mix(instructions, start, end)
        out.append({"start": start, "end": end, "instructions": sum(m.values()),
                    "mix": dict(m.most_common())})
    return sorted(out, key=lambda r: -r["instructions"])


def describe_loops(found, top=2):
    """The largest innermost loops and their mix, as text."""
    lines = []
    for r in found[:top]:
        lines.append(f"loop at {r['start']:#06x}-{r['end']:#06x}: {r['instructions']} instructions: "
                     + ", ".join(f"{op} {n}" for op, n in r["mix"].items()))
    return "\n".join(lines) if lines else "no loop in this kernel's SASS"


# ---------------------------------------------------------------------------- Nsight Compute

NCU_METRICS = ("dram__bytes_read.sum", "dram__bytes_write.sum", "gpu__time_duration.sum",
               "sm__warps_active.avg.pct_of_peak_sustained_active",
               "smsp__inst_executed.sum")
NCU_L1_METRICS = ("l1tex__t_requests_pipe_lsu_mem_global_op_ld.sum",   # warp-wide global loads
                  "l1tex__t_sectors_pipe_lsu_mem_global_op_ld.sum",    # their 32-byte sectors
                  "l1tex__t_sector_hit_rate.pct",
                  "lts__t_sectors_srcunit_tex_op_read.sum")            # L2 sectors L1 read
NCU_SECTIONS = ("WarpStateStats",)


def ncu_command(kernel_regex, target_args, ncu="ncu", metrics=NCU_METRICS + NCU_L1_METRICS):
    """The ncu command line that profiles one launch of the kernels matching the regex."""
    cmd = [ncu, "--clock-control", "none", "--csv", "--page", "raw", "--print-units", "base",
           "--kernel-name", f"regex:{kernel_regex}", "--launch-count", "1",
           "--metrics", ",".join(metrics)]
    for s in NCU_SECTIONS:
        cmd += ["--section", s]
    return cmd + [sys.executable, *target_args]


def parse_ncu_csv(text):
    """{metric: value} from ncu's --csv --page raw output (one profiled launch)."""
    rows = list(csv.reader(io.StringIO(text[text.index('"ID"'):])))
    header, values = rows[0], rows[2]       # rows[1] holds the units
    out = {}
    for name, value in zip(header, values):
        try:
            out[name] = float(value.replace(",", ""))
        except ValueError:
            out[name] = value
    return out


def stall_reasons(metrics, top=4):
    """The largest warp-stall reasons, in cycles per issued instruction."""
    named = {m: v for m, v in metrics.items() if "issue_stalled_" in m and isinstance(v, float)}
    per_issue = {m: v for m, v in named.items() if m.endswith("_per_issue_active.ratio")}
    stalls = {re.split(r"_per|\.", m.split("issue_stalled_")[1])[0]: v
              for m, v in (per_issue or named).items()}
    return sorted(stalls.items(), key=lambda kv: -kv[1])[:top]


def ncu_metrics(kernel_regex, target_args, timeout=600):
    """Profile one launch with ncu: (metrics dict, None) or (None, why it could not)."""
    ncu = shutil.which("ncu")
    if not ncu:
        return None, "ncu is not on PATH"
    for metrics in (NCU_METRICS + NCU_L1_METRICS, NCU_METRICS):    # the L1 names may be unknown
        finished = processes.run(ncu_command(kernel_regex, target_args, ncu, metrics), timeout)
        if finished.timed_out:                  # ncu and the program it profiles are ended
            return None, f"ncu took longer than {timeout} s"
        if '"ID"' in finished.stdout:
            break
    if '"ID"' not in finished.stdout:
        tail = (finished.stderr + finished.stdout).strip().splitlines()[-5:]
        return None, "ncu read no counters: " + " | ".join(tail)
    return parse_ncu_csv(finished.stdout), None
