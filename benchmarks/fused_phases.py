#!/usr/bin/env python
"""Kernel 22 with each part of a warpgroup's work between its turns at the tensor cores knocked
out: which part still holds the tensor cores up (docs/fused-speed.md, eighteenth session).

    python benchmarks/fused_phases.py [--T 1024,4096,16384] [--repeats 10] [--json FILE]

In kernel 22 the two warpgroups take turns: one issues its five products while the other works
on its last ones. The tensor cores idle whenever that work takes longer than the other's five
products. Each variant is kernels/flash_attention22.cu with a text replaced
(knockouts.variant_source; the file is untouched):
  no exp            x = lse-shifted score, no exp2 (MUFU.EX2); the mask, the roundings stay
  no roundings      P^T and dS^T not rounded to TF32 (no cvt.rn)
  no dS stores      dS^T not stored into shared memory (dQ^T reads what is there)
  no dQ stores      dQ^T neither scaled nor stored into shared memory
  no dQ reduction   no bulk reduction of dQ^T into dq_tiles (its wait finds nothing to wait for)
  no read wait      the reducer does not wait for the last reduction to have read its dQ^T
                    before dS^T overwrites it (a race: wrong dQ, honest time)
  no math           neither exp nor roundings: x * (p - d) and x, masked, are left
  no dQ traffic     no dS stores, dQ stores, dQ reduction nor read wait: the math is left
(Both last two together spill registers with nvcc 13.0: not a variant.)
The variants compute wrong gradients; their times are honest. Only flash_backward is timed (the
tiles are prepared once before; dq_tiles is zeroed before each call), all interleaved; B=4 NH=12
HS=64, TF32; CUDA events, L2 flushed, median and quartiles. sm_90 only.
"""
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))   # run from a checkout

from attnlab import bench, fused
from attnlab.device import context, device_info
from knockouts import arguments, compiled, measure_tiled

KERNEL = 22
MATH = '''                    float x = exp2f(fmaf(c, s[at], -lse2));
                    if (edge && (key > q0 + col || q0 + col >= T)) x = 0.f;
                    p[at] = round_tf32_rn(x * (p[at] - d));
                    s[at] = round_tf32_rn(x);
'''
NO_EXP = (MATH, MATH.replace("exp2f(fmaf(c, s[at], -lse2))", "fmaf(c, s[at], -lse2)"))
NO_ROUNDINGS = (MATH, MATH.replace("round_tf32_rn(x * (p[at] - d))", "x * (p[at] - d)")
                          .replace("round_tf32_rn(x)", "x"))
NO_DS_STORES = ("                    sdSw[core_index(col, krow + 8 * r, 64)] =",
                "                    if (T < 0) sdSw[core_index(col, krow + 8 * r, 64)] =")
NO_DQ_STORES = ("            *reinterpret_cast<float4*>(sdSw + 4 * (wt + 128 * jj)) =",
                "            if (T < 0) *reinterpret_cast<float4*>(sdSw + 4 * (wt + 128 * jj)) =")
NO_REDUCTION = ("        if (reducer) reduce_dq(dq_tiles + (size_t)j * DQ_TILE_FLOATS, sdSw);\n", "")
NO_READ_WAIT = ('        if (reducer && j > i0) asm volatile("cp.async.bulk.wait_group.read 0;" ::: "memory");', "")
NO_MATH = (MATH, NO_EXP[1].replace("round_tf32_rn(x * (p[at] - d))", "x * (p[at] - d)").replace("round_tf32_rn(x)", "x"))
NO_DQ_TRAFFIC = (NO_DS_STORES, NO_DQ_STORES, NO_REDUCTION, NO_READ_WAIT)
# name -> replacements of kernel 22's source
VARIANTS = {"kernel 22": (), "no exp": (NO_EXP,), "no roundings": (NO_ROUNDINGS,),
            "no dS stores": (NO_DS_STORES,), "no dQ stores": (NO_DQ_STORES,),
            "no dQ reduction": (NO_REDUCTION,), "no read wait": (NO_READ_WAIT,),
            "no math": (NO_MATH,), "no dQ traffic": NO_DQ_TRAFFIC}


def main(argv=None):
    Ts, repeats, json_path = arguments(__doc__, argv)
    context()
    why = fused.gpu_unsupported_reason(True, KERNEL)
    if why:
        print(f"fused_phases: {why}", file=sys.stderr)
        return 2
    fns = {name: (KERNEL, compiled(KERNEL, r)) for name, r in VARIANTS.items()}
    report = {"device": device_info()["name"], "repeats": repeats, "variants": list(VARIANTS),
              "registers": {name: fn.num_regs for name, (_, fn) in fns.items()},
              "flash_backward": {str(T): measure_tiled(T, fns, repeats) for T in Ts}}
    if json_path:
        Path(json_path).write_text(json.dumps(report, indent=2))
    print(f"{report['device']}: kernel 22's flash_backward alone, median ms (IQR), and against kernel 22")
    for T, rows in report["flash_backward"].items():
        base = rows["kernel 22"]
        for name, r in rows.items():
            kind = bench.verdict(base, r)[0]      # the series' rule: IQRs that overlap are not resolved
            gain = 100 * abs(1 - r["median_ms"] / base["median_ms"])
            apart = kind if kind == "not resolved" else f"{gain:.1f} % {kind}"
            print(f"  T={T:>5} {name:16} {report['registers'][name]:3} registers {r['median_ms']:9.4f} "
                  f"({r['q1_ms']:.4f}-{r['q3_ms']:.4f}) {'' if name == 'kernel 22' else apart}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
