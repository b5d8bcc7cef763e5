#!/usr/bin/env python
"""Kernels 14 and 15 with and without their dQ adds: what kernel 14's atomics cost, what kernel
15's bulk reductions cost, and the same bytes in 64 small reductions (notebook 15).

    python benchmarks/fused_dq.py [--T 1024,4096,16384] [--repeats 10] [--json FILE]

Each variant is kernels/flash_attention14.cu or 15.cu with a text replaced
(knockouts.variant_source; the files are untouched):
  kernel 14 without atomics     the float4 atomicAdd of dQ is gone (and with it the shuffles
                                that build its float4s)
  kernel 15 without reductions  the cp.reduce.async.bulk is gone; the stores of dQ into shared
                                memory, the wait and the mbarrier stay
  kernel 15, 64 reductions      the same 16 KiB per tile, added by 64 reductions of 256 bytes
                                (one per query's row of 64 floats), as a first version did
The variants without adds compute wrong gradients; their times are honest. Only flash_backward
is timed (the tiles are prepared once before; dq or dq_tiles is zeroed before each call), all
five interleaved; B=4 NH=12 HS=64, TF32; CUDA events, L2 flushed, median and quartiles. Also
records every SASS opcode of both unchanged kernels (cuobjdump -sass, when it is on PATH).
sm_90 only.
"""
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))   # run from a checkout

from attnlab import fused
from attnlab.device import context, device_info
from knockouts import arguments, compiled, measure_tiled, sass_counts

NO_ATOMICS = ('''            if (row < T)
                atomicAdd(reinterpret_cast<float4*>(out + 8 * j),
                          make_float4(scale * x.x, scale * x.y, scale * x.z, scale * x.w));
''', "")
REDUCE = '''    asm volatile("cp.reduce.async.bulk.global.shared::cta.bulk_group.add.f32 [%0], [%1], %2;"
                 :: "l"(dq_tile), "r"(smem_addr(sdQ)), "n"(DQ_TILE_FLOATS * 4) : "memory");
'''
NO_REDUCTIONS = (REDUCE, "")
ROW_REDUCTIONS = (REDUCE, '''    for (int u = 0; u < OTHER; ++u)
        asm volatile("cp.reduce.async.bulk.global.shared::cta.bulk_group.add.f32 [%0], [%1], %2;"
                     :: "l"(dq_tile + HS * u), "r"(smem_addr(sdQ + HS * u)), "n"(HS * 4) : "memory");
''')
# name -> (kernel, replacements)
VARIANTS = {"kernel 14": (14, ()), "kernel 14 without atomics": (14, (NO_ATOMICS,)),
            "kernel 15": (15, ()), "kernel 15 without reductions": (15, (NO_REDUCTIONS,)),
            "kernel 15, 64 reductions": (15, (ROW_REDUCTIONS,))}


def main(argv=None):
    Ts, repeats, json_path = arguments(__doc__, argv)
    context()
    why = fused.gpu_unsupported_reason(True, 15)
    if why:
        print(f"fused_dq: {why}", file=sys.stderr)
        return 2
    fns = {name: (kernel, compiled(kernel, r)) for name, (kernel, r) in VARIANTS.items()}
    report = {"device": device_info()["name"], "repeats": repeats, "variants": list(VARIANTS),
              "sass": {f"kernel {k}": sass_counts(k) for k in (14, 15)},
              "flash_backward": {str(T): measure_tiled(T, fns, repeats) for T in Ts}}
    if json_path:
        Path(json_path).write_text(json.dumps(report, indent=2))
    print(f"{report['device']}: flash_backward alone, median ms (IQR)")
    for T, rows in report["flash_backward"].items():
        for name, r in rows.items():
            print(f"  T={T:>5} {name:29} {r['median_ms']:9.4f} ({r['q1_ms']:.4f}-{r['q3_ms']:.4f})")
    for name, ops in report["sass"].items():
        shown = ("RED", "ATOM", "SHFL", "UBLKCP", "UBLKRED", "SYNCS", "BAR", "HGMMA")
        print(f"  {name} SASS: " + (", ".join(f"{o} {n}" for o, n in sorted(ops.items()) if o.startswith(shown))
                                    if ops else "no cuobjdump"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
