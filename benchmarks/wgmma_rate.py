#!/usr/bin/env python
"""Hopper's warpgroup MMA on TF32 operands (kernels/wgmma_tf32.cuh, sm_90a): check its layouts
against numpy, then measure its rate next to mma.sync's (ceilings.mma_tf32_rate) -- the roof of
fused backward kernel 12.

    python benchmarks/wgmma_rate.py [--json FILE]   # sm_90 only (the sm_90a target)

The check multiplies two 64 x 64 matrices of TF32 values three ways (A from shared memory, A
from registers, and N = 32 from the second half of B) and prints the largest difference from
numpy's float64 product. The rate: 16 blocks per SM, each one warpgroup running WGMMA_TILES
64 x N x 64 products (8 wgmma m64nNk8 each) into one accumulator: N = 64 with A from shared
memory and from registers, and N = 32 with A from shared memory (kernels 12-14's dQ).
"""
import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))   # run from a checkout

import numpy as np

from attnlab import bench, ceilings, kernels
from attnlab.device import context, device_info

WGMMA_TILES = 1024


def tf32(x):
    """x (float32) rounded to TF32 (10 mantissa bits), to nearest."""
    u = np.asarray(x, np.float32).view(np.uint32).astype(np.uint64)
    return ((u + 0x1000) & 0xFFFFE000).astype(np.uint32).view(np.float32)


def check():
    """The largest |gpu - numpy| of each of wgmma_check's three products."""
    import pycuda.gpuarray as gpuarray
    rng = np.random.default_rng(0)
    a, b = (tf32(rng.uniform(-1, 1, (64, 64)).astype(np.float32)) for _ in range(2))
    out = gpuarray.zeros((3, 64, 64), np.float32)
    kernels.get_function("wgmma_check", "wgmma_check")(
        out.gpudata, gpuarray.to_gpu(a).gpudata, gpuarray.to_gpu(b).gpudata,
        grid=(1, 1, 1), block=(128, 1, 1))
    got = out.get()
    ref = a.astype(np.float64) @ b.astype(np.float64).T
    half = np.zeros_like(ref)
    half[:, :32] = ref[:, 32:]
    return {name: float(np.abs(got[i] - r).max())
            for i, (name, r) in enumerate((("ss", ref), ("rs", ref), ("ss n32", half)))}


# wgmma_rate's modes: name in the report -> (mode, N)
MODES = {"shared memory": (0, 64), "registers": (1, 64), "shared memory, N=32": (2, 32)}


def rate(mode, n):
    import pycuda.driver as cuda
    fn = kernels.get_function("wgmma_check", "wgmma_rate")
    blocks = 16 * device_info()["sms"]
    out = cuda.mem_alloc(blocks * 128 * 4)
    t = bench.benchmark(lambda: fn(out, np.int32(WGMMA_TILES), np.int32(mode),
                                   grid=(blocks, 1, 1), block=(128, 1, 1)),
                        repeats=20, flush_l2=False)
    flops = blocks * WGMMA_TILES * 2 * 64 * n * 64
    q1, q3 = t.quartiles_ms
    return flops / t.median_ms / 1e9, flops / q3 / 1e9, flops / q1 / 1e9


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--json", default=None)
    args = p.parse_args(argv)
    context()
    d = device_info()
    if d["arch"] != "sm_90":
        print(f"wgmma needs sm_90 (the sm_90a target); this GPU is {d['arch']}")
        return 2
    errors = check()
    print("wgmma check, max |gpu - float64| over 64 x 64: "
          + ", ".join(f"{k} {v:.2e}" for k, v in errors.items()))
    report = {"device": d["name"], "check_max_abs_err": errors, "wgmma_tflops": {}}
    for where, (mode, n) in MODES.items():
        med, lo, hi = rate(mode, n)
        report["wgmma_tflops"][where] = {"median": med, "from_q3": lo, "to_q1": hi}
        print(f"wgmma m64n{n}k8 TF32, A from {where.split(',')[0]}: {med:.1f} TFLOP/s (IQR {lo:.1f}-{hi:.1f})")
    mma = ceilings.mma_tf32_rate()
    report["mma_sync_tflops"] = {k: mma[k] / 1e12 for k in ("median", "from_q3", "to_q1")}
    print(f"mma.sync m16n8k8 TF32: {mma['median'] / 1e12:.1f} TFLOP/s, in the same run")
    if args.json:
        Path(args.json).write_text(json.dumps(report, indent=2))
    return 0 if max(errors.values()) < 1e-3 else 1


if __name__ == "__main__":
    sys.exit(main())
