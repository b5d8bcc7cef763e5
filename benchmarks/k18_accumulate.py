#!/usr/bin/env python
"""Kernel 18 against itself with each tile's dV and dK added into one accumulator by the tensor
cores (as kernel 17 does), not by FADD: dinp against float64 at the small and default shapes,
the whole backward interleaved at --T, and the SASS opcode counts of kernels 17 and 18.

    python benchmarks/k18_accumulate.py [--T 4096,16384] [--repeats 10] [--json FILE]

The variant is kernels/flash_attention18.cu with texts replaced (benchmarks/knockouts.py); its
flash_backward replaces kernel 18's for the calls it is timed or checked in."""
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))   # run from a checkout

import numpy as np

from attnlab import bench, fused, reference
from attnlab.device import context, device_info
from attnlab.problem import DEFAULT, SMALL, make_problem
from knockouts import arguments, compiled, sass_counts

ONE_ACCUMULATOR = [   # dV and dK accumulate in the tensor cores, over every tile
    ("product_rs(d, lo, b, 1);", "product_rs(d, lo, b, 0);"),
    ("product3_rs(tV, ph, pl, sdOt);", "product3_rs(dV, ph, pl, sdOt);"),
    ("wg_hold(tV);\n#pragma unroll\n        for (int n = 0; n < 32; ++n) dV[n] += tV[n];", "wg_hold(dV);"),
    ("product3_rs(tK, dh, dl, sQt);", "product3_rs(dK, dh, dl, sQt);"),
    ("wg_hold(tK);\n        wg_hold(dQ);\n#pragma unroll\n        for (int n = 0; n < 32; ++n) dK[n] += tK[n];",
     "wg_hold(dK);\n        wg_hold(dQ);"),
]


def main(argv=None):
    Ts, repeats, out = arguments(__doc__, argv, T="4096,16384")
    context()
    own = fused._function
    variant = {"fn": None}

    def function(name, tf32=False, version=fused.FUSED_KERNEL):   # the variant, when set
        if name == "flash_backward" and version == 18 and variant["fn"] is not None:
            return variant["fn"]
        return own(name, tf32, version)
    fused._function = function
    fns = {"kernel 18": None, "one accumulator": compiled(18, ONE_ACCUMULATOR)}
    report = {"device": device_info()["name"], "variants": {"one accumulator": ONE_ACCUMULATOR},
              "accuracy": {}, "speed": {}}
    for label, shape in (("small", SMALL), ("default", DEFAULT)):
        pr = make_problem(**shape)
        dinp64 = reference.dinp_float64(pr.dout, pr.inp, pr.NH)
        report["accuracy"][label] = {}
        for name, fn in fns.items():
            variant["fn"] = fn
            dinp = fused.gpu_fused_backward(pr.dout, pr.inp, pr.NH, tf32=False, kernel=18)
            report["accuracy"][label][name] = {"dinp_err_vs_float64": float(np.abs(dinp - dinp64).max()),
                                               "dinp_err_vs_reference": float(np.abs(dinp - pr.dinp).max())}
            print(label, name, report["accuracy"][label][name], flush=True)
    B, NH, C = DEFAULT.B, DEFAULT.NH, DEFAULT.C
    for T in Ts:
        rng = np.random.default_rng(0)
        with fused.FusedBuffers(B, T, C, NH) as buf:
            buf.set("inp", rng.uniform(-1, 1, (B, T, 3 * C)).astype(np.float32))
            buf.set("dout", rng.uniform(-1, 1, (B, T, C)).astype(np.float32))
            fused.fused_forward(buf, False)

            def call(fn):
                variant["fn"] = fn
                fused.fused_backward(buf, False, 18)
            t = bench.interleaved({n: (lambda f=f: call(f)) for n, f in fns.items()}, repeats=repeats, warmup=2)
        report["speed"][str(T)] = {n: {"median_ms": x.median_ms, "q1_ms": float(x.quartiles_ms[0]),
                                       "q3_ms": float(x.quartiles_ms[1])} for n, x in t.items()}
        print(T, report["speed"][str(T)], flush=True)
    report["sass"] = {f"kernel {k}": sass_counts(k) for k in (17, 18)}
    if out:
        Path(out).write_text(json.dumps(report, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
