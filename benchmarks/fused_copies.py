#!/usr/bin/env python
"""Kernels 13 and 14 with and without their query-tile copies: how much of kernel 13's time
the copies cost, and how much of that kernel 14's copy engine hides (notebook 14).

    python benchmarks/fused_copies.py [--T 1024,4096,16384] [--repeats 10] [--json FILE]

Each variant is kernels/flash_attention13.cu or 14.cu with a text replaced
(knockouts.variant_source: flash_wgmma.cuh inlined so that it can be changed too; the files are
untouched):
  kernel 13 without copies   copy_layouts issues no cp.async (the products read whatever the
                             shared memory holds)
  kernel 14 without copies   copy_half_bulk issues no bulk copy and arms no mbarrier, and
                             mbar_wait returns at once
The variants compute wrong gradients; their times are honest: what is left when the copies are
gone. Only flash_backward is timed (the tiles are prepared once before), all four interleaved;
B=4 NH=12 HS=64, TF32; CUDA events, L2 flushed, median and quartiles (attnlab.bench). Also
records, for each unchanged kernel, the SASS instructions that copy and wait (cuobjdump -sass
of the same source built by nvcc for sm_90a, when cuobjdump is on PATH). sm_90 only.
"""
import argparse
import json
import re
import shutil
import subprocess
import sys
import tempfile
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))   # run from a checkout

import numpy as np

from attnlab import bench, fused, kernels
from attnlab.buffers import qkv_pointers
from attnlab.checks import check_int, parse_list
from attnlab.device import context, device_info
from attnlab.problem import DEFAULT
from knockouts import compiled

NO_CP_ASYNC = ("        cp_async16(s + f, g + f);\n", "")
NO_BULK = ('''    asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;"
                 :: "r"(smem_addr(bar)), "n"(HALF_TILE_BYTES) : "memory");
    asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];"
                 :: "r"(smem_addr(s)), "l"(g), "n"(HALF_TILE_BYTES), "r"(smem_addr(bar)) : "memory");
''', '    asm volatile("" ::: "memory");\n')
NO_WAIT = ('''    asm volatile("{\\n.reg .pred done;\\nwait:\\n"
                 "mbarrier.try_wait.parity.shared::cta.b64 done, [%0], %1;\\n"
                 "@!done bra wait;\\n}" :: "r"(smem_addr(bar)), "r"(phase) : "memory");
''', '    asm volatile("" ::: "memory");\n')
# name -> (kernel, replacements)
VARIANTS = {"kernel 13": (13, ()), "kernel 13 without copies": (13, (NO_CP_ASYNC,)),
            "kernel 14": (14, ()), "kernel 14 without copies": (14, (NO_BULK, NO_WAIT))}
# SASS opcodes that copy query tiles or wait for them, and the block barriers
SASS_OPS = ("LDGSTS", "LDGDEPBAR", "DEPBAR", "UBLKCP", "SYNCS", "BAR.SYNC", "HGMMA")


def sass_counts(kernel):
    """{opcode: count} in flash_backward's SASS (sm_90a), or None without cuobjdump."""
    cuobjdump = shutil.which("cuobjdump")
    if cuobjdump is None:
        return None
    with tempfile.TemporaryDirectory() as tmp:
        cubin = Path(tmp) / "k.cubin"
        subprocess.run([kernels.require_nvcc(), "-cubin", "-gencode=arch=compute_90a,code=sm_90a",
                        *kernels.nvcc_options({"HEAD_SIZE": 64, "TF32": 1}), f"-I{kernels.KERNEL_DIR}",
                        "-o", str(cubin), str(kernels.kernel_path(f"flash_attention{kernel}"))],
                       check=True, capture_output=True)
        sass = subprocess.run([cuobjdump, "-sass", "-fun", "flash_backward", str(cubin)],
                              check=True, capture_output=True, text=True).stdout
    ops = Counter(m.group(1) for m in re.finditer(r"/\*[0-9a-f]{4,}\*/\s+(?:@!?U?P\w+\s+)?([A-Z][A-Z0-9_.]*)", sass))
    return {op: sum(n for o, n in ops.items() if o == op or o.startswith(op + "."))
            for op in SASS_OPS}


def measure(T, fns, repeats):
    import pycuda.driver as cuda
    B, C, NH = DEFAULT.B, DEFAULT.C, DEFAULT.NH
    rng = np.random.default_rng(0)
    with fused.FusedBuffers(B, T, C, NH) as buf:
        buf.set("inp", rng.uniform(-1, 1, (B, T, 3 * C)).astype(np.float32))
        buf.set("dout", rng.uniform(-1, 1, (B, T, C)).astype(np.float32))
        fused.fused_forward(buf, True)
        fused.fused_backward(buf, True, 13)      # the query tiles and D, as the backward makes them
        q, k, v = qkv_pointers(buf.qkvr, B, T, C)
        tiles = int(buf.kernel_buffers(13)["tiles"].gpudata)
        lse, D, dinp = int(buf.lse.gpudata), int(buf.D.gpudata), int(buf.dinp.gpudata)

        def launch(kernel, fn):
            grid, block, shared = fused.fused_launch(B, T, NH, True, kernel)["flash_backward"]
            cuda.memset_d2d32(dinp, 4 * 3 * C, 0, C, B * T)
            fn.prepared_call(grid, block, dinp, tiles, k, v, lse, D, T, NH, np.float32(1 / 8),
                             shared_size=shared)
        timings = bench.interleaved({n: (lambda k=VARIANTS[n][0], f=f: launch(k, f)) for n, f in fns.items()},
                                    repeats=repeats, warmup=2)
    return {n: {"median_ms": t.median_ms, "q1_ms": float(t.quartiles_ms[0]),
                "q3_ms": float(t.quartiles_ms[1])} for n, t in timings.items()}


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--T", default="1024,4096,16384")
    p.add_argument("--repeats", type=int, default=10)
    p.add_argument("--json", default=None)
    args = p.parse_args(argv)
    Ts = parse_list(args.T, "--T", None, lambda v: check_int("--T", int(v)))
    repeats = check_int("--repeats", args.repeats)
    context()
    why = fused.gpu_unsupported_reason(True, 14)
    if why:
        print(f"fused_copies: {why}", file=sys.stderr)
        return 2
    fns = {name: compiled(*v) for name, v in VARIANTS.items()}
    report = {"device": device_info()["name"], "repeats": repeats, "variants": list(VARIANTS),
              "sass": {f"kernel {k}": sass_counts(k) for k in (13, 14)},
              "flash_backward": {str(T): measure(T, fns, repeats) for T in Ts}}
    if args.json:
        Path(args.json).write_text(json.dumps(report, indent=2))
    print(f"{report['device']}: flash_backward alone, median ms (IQR)")
    for T, rows in report["flash_backward"].items():
        for name, r in rows.items():
            print(f"  T={T:>5} {name:25} {r['median_ms']:9.4f} ({r['q1_ms']:.4f}-{r['q3_ms']:.4f})")
    for name, ops in report["sass"].items():
        print(f"  {name} SASS: " + (", ".join(f"{o} {n}" for o, n in ops.items()) if ops else "no cuobjdump"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
