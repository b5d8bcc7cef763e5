#!/usr/bin/env python
"""What kernel 12's time goes to: its flash_backward with one piece of work removed at a time,
timed interleaved with the unchanged kernel -- the experiment that kernel 13 answers.

    python benchmarks/fused_k12_costs.py [--T 1024,16384] [--repeats 10] [--json FILE]

Each variant is kernels/flash_attention12.cu with a text replaced (knockouts.variant_source: its
header flash_wgmma.cuh inlined, so that it can be changed too; the files are untouched):
  no transposed stores   Q and dO tiles are not stored transposed (K^T still is, once per block)
  no dS stores           dS is not written to shared memory
  no atomics             dQ is computed but not added to dq (a never-true store keeps it live)
  none of the three      all three removed
The variants compute wrong gradients; their times are honest: what is left when the piece is
gone. B=4 NH=12 HS=64, TF32; CUDA events, L2 flushed, median and quartiles (attnlab.bench).
sm_90 only.
"""
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))   # run from a checkout

import numpy as np

from attnlab import bench, fused
from attnlab.buffers import qkv_pointers
from attnlab.device import context, device_info
from attnlab.problem import DEFAULT
from knockouts import arguments, compiled

TRANSPOSED = ("        if (st) {", "        if (st && ROWS == OWN) {")
DS_STORES = ("                    sdS[core_index(col, krow + 8 * r, OWN)] = p[at];\n", "")
ATOMICS = ("atomicAdd(out + 8 * j + e, scale * dQ[4 * j + 2 * r + e]);",
           "if (dQ[4 * j + 2 * r + e] == 12345.f) out[8 * j + e] = 0.f;")
VARIANTS = {"kernel 12": (), "no transposed stores": (TRANSPOSED,), "no dS stores": (DS_STORES,),
            "no atomics": (ATOMICS,), "none of the three": (TRANSPOSED, DS_STORES, ATOMICS)}


def measure(T, fns, repeats):
    import pycuda.driver as cuda
    B, C, NH = DEFAULT.B, DEFAULT.C, DEFAULT.NH
    rng = np.random.default_rng(0)
    with fused.FusedBuffers(B, T, C, NH) as buf:
        buf.set("inp", rng.uniform(-1, 1, (B, T, 3 * C)).astype(np.float32))
        buf.set("dout", rng.uniform(-1, 1, (B, T, C)).astype(np.float32))
        fused.fused_forward(buf, True)
        fused.fused_backward(buf, True, 12)      # do and D, as the backward leaves them
        q, k, v = qkv_pointers(buf.qkvr, B, T, C)
        own = buf.kernel_buffers(12)
        dq, dk, dv = qkv_pointers(own["dqkvr"], B, T, C)
        do, lse, D = int(own["do"].gpudata), int(buf.lse.gpudata), int(buf.D.gpudata)
        grid, block, shared = fused.fused_launch(B, T, NH, True, 12)["flash_backward"]

        def launch(fn):
            cuda.memset_d32(dq, 0, B * NH * T * 64)
            fn.prepared_call(grid, block, dq, dk, dv, q, k, v, do, lse, D, T,
                             np.float32(1 / 8), shared_size=shared)
        timings = bench.interleaved({n: (lambda f=f: launch(f)) for n, f in fns.items()},
                                    repeats=repeats, warmup=2)
    return {n: {"median_ms": t.median_ms, "q1_ms": float(t.quartiles_ms[0]),
                "q3_ms": float(t.quartiles_ms[1])} for n, t in timings.items()}


def main(argv=None):
    Ts, repeats, json_path = arguments(__doc__, argv, T="1024,16384")
    context()
    why = fused.gpu_unsupported_reason(True, 12)
    if why:
        print(f"fused_k12_costs: {why}", file=sys.stderr)
        return 2
    fns = {name: compiled(12, r) for name, r in VARIANTS.items()}
    report = {"device": device_info()["name"], "repeats": repeats, "variants": list(VARIANTS),
              "flash_backward": {str(T): measure(T, fns, repeats) for T in Ts}}
    if json_path:
        Path(json_path).write_text(json.dumps(report, indent=2))
    print(f"{report['device']}: kernel 12's flash_backward, median ms (IQR); saved vs kernel 12")
    for T, rows in report["flash_backward"].items():
        base = rows["kernel 12"]["median_ms"]
        for name, r in rows.items():
            print(f"  T={T:>5} {name:21} {r['median_ms']:9.3f} ({r['q1_ms']:.3f}-{r['q3_ms']:.3f})"
                  f"  {base - r['median_ms']:+8.3f} ms")
    return 0


if __name__ == "__main__":
    sys.exit(main())
