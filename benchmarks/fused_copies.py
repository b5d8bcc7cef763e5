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
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))   # run from a checkout

from attnlab import fused
from attnlab.device import context, device_info
from knockouts import arguments, compiled, measure_tiled, sass_counts

NO_CP_ASYNC = ("        cp_async16(s + f, g + f);\n", "")
NO_BULK = ('''    asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;"
                 :: "r"(smem_addr(bar)), "n"(BYTES) : "memory");
    asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];"
                 :: "r"(smem_addr(s)), "l"(g), "n"(BYTES), "r"(smem_addr(bar)) : "memory");
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


def main(argv=None):
    Ts, repeats, json_path = arguments(__doc__, argv)
    context()
    why = fused.gpu_unsupported_reason(True, 14)
    if why:
        print(f"fused_copies: {why}", file=sys.stderr)
        return 2
    fns = {name: compiled(*v) for name, v in VARIANTS.items()}
    report = {"device": device_info()["name"], "repeats": repeats, "variants": list(VARIANTS),
              "sass": {f"kernel {k}": sass_counts(k, SASS_OPS) for k in (13, 14)},
              "flash_backward": {str(T): measure_tiled(T, {n: (VARIANTS[n][0], f) for n, f in fns.items()}, repeats)
                                 for T in Ts}}
    if json_path:
        Path(json_path).write_text(json.dumps(report, indent=2))
    print(f"{report['device']}: flash_backward alone, median ms (IQR)")
    for T, rows in report["flash_backward"].items():
        for name, r in rows.items():
            print(f"  T={T:>5} {name:25} {r['median_ms']:9.4f} ({r['q1_ms']:.4f}-{r['q3_ms']:.4f})")
    for name, ops in report["sass"].items():
        print(f"  {name} SASS: " + (", ".join(f"{o} {n}" for o, n in ops.items()) if ops else "no cuobjdump"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
