#!/usr/bin/env python
"""The fused backward kernels (9, 10, ...) in both precisions, checked and timed in one run:
the numbers notebook 13 teaches from.

    python benchmarks/fused_ladder.py [--T 1024,4096,16384] [--repeats 20] [--json FILE]
                                      [--methods "k13 tf32,k14 tf32"] [--sustained SECONDS]

1. Accuracy, at the small shape (B=2 T=260 C=192 NH=3) and the default one (B=4 T=1024 C=768
   NH=12): out and dinp of every method against the CPU reference at the fused tolerances,
   the max |error| of dinp against a float64 reference, and two runs compared bit for bit.
2. Speed, at B=4 NH=12 HS=64 for each T: the backward alone (fused_backward: its permutes,
   the preprocess and flash_backward), all methods interleaved on one set of buffers
   (attnlab.bench.interleaved: CUDA events, warm-up, L2 flushed before each call), median and
   quartiles, TFLOP/s as the FlashAttention papers count them (counts.fused_flops) and the
   fraction of the H200's dense TF32 tensor rate.
   With --sustained SECONDS, also back to back (attnlab.bench.sustained: each method for SECONDS,
   in turns, two rounds, no L2 flush): median and quartiles of its windows, the energy per
   call, the SM clock, the power and how often the power cap held the clock down (NVML).
3. The compiler's evidence for each flash_backward: registers, local memory, static shared
   memory, and the blocks per SM that registers and shared memory allow.
"""
import argparse
import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))   # run from a checkout

import numpy as np

from attnlab import bench, ceilings, counts, fused, reference
from attnlab.checks import check_int, parse_list
from attnlab.device import context, device_info
from attnlab.errors import InputError
from attnlab.problem import DEFAULT, SMALL, make_problem
from attnlab.validate import compare

# (name, fused backward kernel, tf32): every kernel of fused.BACKWARDS in each of its precisions;
# "fp32" is kernel 9's CUDA-core variant and the others' 3xTF32 (fp32-accurate on tensor cores),
# "tf32" one TF32 product.
METHODS = tuple((f"k{k} {'tf32' if tf32 else 'fp32'}", k, tf32)
                for k in fused.FUSED_KERNELS for tf32 in fused.precisions(k))
# Tensor-core flops a method executes per counted flop (counts.fused_flops, FlashAttention's
# count: 5 products): the deterministic kernels do 7 tile products (S and dP again in the dQ
# blocks), and 3xTF32 does 3 mma per product. None: CUDA cores (kernel 9's fp32). (The whole
# diagonal tiles, 1/n more, are left out here; counts.fused_executed_flops counts them.)
_K = counts.FUSED_COUNTED_PRODUCTS
EXECUTED_PER_COUNTED = {name: None if (k, tf32) == (fused.FUSED_KERNEL, False) else
                        (1 if tf32 else 3) * (7 if fused.DETERMINISTIC[k] else _K) / _K
                        for name, k, tf32 in METHODS}
TF32_DENSE_TFLOPS = 494.7   # H100/H200 SXM datasheet, dense TF32 (wgmma); a lead, not measured


def log(msg):
    print(msg, file=sys.stderr, flush=True)


def run(problem, kernel, tf32):
    with fused.FusedBuffers(problem.B, problem.T, problem.C, problem.NH) as buf:
        buf.set("inp", problem.inp)
        buf.set("dout", problem.dout)
        fused.fused_forward(buf, tf32)
        fused.fused_backward(buf, tf32, kernel)
        first = buf.get("out"), buf.get("dinp")
        fused.fused_backward(buf, tf32, kernel)
        return first, buf.get("dinp")


def accuracy(shape, methods):
    problem = make_problem(**shape, progress=True)
    dinp64 = reference.dinp_float64(problem.dout, problem.inp, problem.NH)
    rows = {}
    for name, kernel, tf32 in methods:
        (out, dinp), again = run(problem, kernel, tf32)
        tol = fused.FUSED_TOLERANCES["tf32" if tf32 else "fp32"]
        reps = {n: compare(got, getattr(problem, n), n, tol[n]) for n, got in
                (("out", out), ("dinp", dinp))}
        rows[name] = {"valid": all(r.ok for r in reps.values()),
                      "max_abs_err": {n: r.max_abs_err for n, r in reps.items()},
                      "dinp_err_vs_float64": float(np.abs(dinp - dinp64).max()),
                      "bit_identical": bool(np.array_equal(dinp.view(np.uint32),
                                                           again.view(np.uint32))),
                      "max_run_to_run_diff": float(np.abs(dinp - again).max())}
        log(f"  {name}: {rows[name]}")
    return rows


def evidence(kernel, tf32):
    import pycuda.driver as cuda
    fn = fused._function("flash_backward", tf32, kernel)
    A = cuda.function_attribute
    regs = fn.get_attribute(A.NUM_REGS)
    smem = fused.shared_memory_bytes("flash_backward", tf32, kernel)
    dev, D = cuda.Device(0), cuda.device_attribute
    # registers are allocated per warp in units of 256 (8 per thread)
    by_regs = dev.get_attribute(D.MAX_REGISTERS_PER_MULTIPROCESSOR) // (
        fused.BACKWARD_THREADS[kernel] * ((regs + 7) // 8 * 8))
    by_smem = dev.get_attribute(D.MAX_SHARED_MEMORY_PER_MULTIPROCESSOR) // (smem + 1024)
    return {"registers": regs, "local_bytes": fn.get_attribute(A.LOCAL_SIZE_BYTES),
            "dynamic_shared_bytes": smem, "blocks_per_sm_registers": by_regs,
            "blocks_per_sm_shared": by_smem, "blocks_per_sm": min(by_regs, by_smem)}


def speed(T, repeats, mma_roof, methods, seconds=None):
    B, NH, C = DEFAULT.B, DEFAULT.NH, DEFAULT.C
    inp = np.random.default_rng(0).uniform(-1, 1, (B, T, 3 * C)).astype(np.float32)
    dout = np.random.default_rng(1).uniform(-1, 1, (B, T, C)).astype(np.float32)
    flops = counts.fused_flops(B, T, NH, C // NH)
    with fused.FusedBuffers(B, T, C, NH) as buf:
        buf.set("inp", inp)
        buf.set("dout", dout)
        fused.fused_forward(buf, False)
        fns = {name: (lambda k=kernel, t=tf32: fused.fused_backward(buf, t, k))
               for name, kernel, tf32 in methods}
        timings = bench.interleaved(fns, repeats=repeats, warmup=2)
        # windows of at least 10 calls and about 50 ms of the slowest method, so that the waits
        # between windows (the host reads the events) are a small part of each block
        held = seconds and bench.sustained(fns, seconds=seconds, rounds=2,
                                           window=max(10, round(50 / max(t.median_ms for t in timings.values()))))
    rows = {}
    for name, t in timings.items():
        q1, q3 = t.quartiles_ms
        tflops = flops / (t.median_ms * 1e-3) / 1e12
        per = EXECUTED_PER_COUNTED[name]
        rows[name] = {"median_ms": t.median_ms, "q1_ms": float(q1), "q3_ms": float(q3),
                      "tflops": tflops, "fraction_of_tf32_rate": tflops / TF32_DENSE_TFLOPS,
                      "executed_mma_tflops": per and tflops * per,
                      "fraction_of_mma_roof": per and tflops * per * 1e12 / mma_roof}
        if held:
            s = held[name]
            rows[name]["sustained"] = {"median_ms": s.median_ms, "q1_ms": s.quartiles_ms[0], "q3_ms": s.quartiles_ms[1],
                                       "tflops": flops / (s.median_ms * 1e-3) / 1e12, "calls": s.calls,
                                       "joules_per_call": s.joules_per_call, "sm_mhz": s.sm_mhz,
                                       "power_w": s.power_w, "power_capped": s.power_capped,
                                       "seconds_per_block": seconds}
    return rows


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--T", default="1024,4096,16384")
    p.add_argument("--repeats", type=int, default=20)
    p.add_argument("--json", default=None)
    p.add_argument("--skip-accuracy", action="store_true")
    p.add_argument("--sustained", type=float, default=None, metavar="SECONDS",
                   help="also run the methods back to back, SECONDS each, in turns, two rounds")
    p.add_argument("--methods", default=",".join(m[0] for m in METHODS),
                   help="comma-separated method names (default: all)")
    args = p.parse_args(argv)
    known = {m[0]: m for m in METHODS}
    try:
        methods = [known[n] for n in parse_list(args.methods, "--methods", tuple(known))]
    except InputError as e:
        p.error(str(e))
    Ts = parse_list(args.T, "--T", None, lambda v: check_int("--T", int(v)))
    repeats = check_int("--repeats", args.repeats)
    if args.sustained is not None and not args.sustained > 0:
        p.error(f"--sustained must be a number of seconds > 0, got {args.sustained}")
    context()
    mma = ceilings.mma_tf32_rate()
    report = {"device": device_info()["name"], "methods": [m[0] for m in methods],
              "mma_tf32_roof": mma, "executed_per_counted": EXECUTED_PER_COUNTED,
              "tf32_dense_tflops": TF32_DENSE_TFLOPS, "repeats": repeats,
              "evidence": {name: evidence(k, t) for name, k, t in methods},
              "accuracy": {}, "speed": {}}
    t0 = time.perf_counter()
    if not args.skip_accuracy:
        for label, shape in (("small", SMALL), ("default", DEFAULT)):
            log(f"accuracy at {label} {dict(shape)}")
            report["accuracy"][label] = accuracy(dict(shape), methods)
    for T in Ts:
        log(f"speed at T={T}")
        report["speed"][str(T)] = speed(T, repeats, mma["median"], methods, args.sustained)
        if args.json:
            Path(args.json).write_text(json.dumps(report, indent=2))
    report["elapsed_s"] = time.perf_counter() - t0
    if args.json:
        Path(args.json).write_text(json.dumps(report, indent=2))
    print(f"\n{report['device']}: mma.sync TF32 roof {mma['median'] / 1e12:.1f} TFLOP/s "
          f"(IQR {mma['from_q3'] / 1e12:.1f}-{mma['to_q1'] / 1e12:.1f})")
    print("compiler evidence (flash_backward)")
    for name, e in report["evidence"].items():
        print(f"  {name:9} {e['registers']} registers, {e['local_bytes']} B local, "
              f"{e['dynamic_shared_bytes']} B shared -> {e['blocks_per_sm']} blocks/SM")
    for label, rows in report["accuracy"].items():
        print(f"accuracy, {label} shape: max |err| out / dinp vs reference; dinp vs float64")
        for name, r in rows.items():
            print(f"  {name:9} {'ok ' if r['valid'] else 'BAD'} {r['max_abs_err']['out']:.2e} / "
                  f"{r['max_abs_err']['dinp']:.2e}; {r['dinp_err_vs_float64']:.2e}; "
                  f"{'bit-identical' if r['bit_identical'] else 'runs differ by up to %.1e' % r['max_run_to_run_diff']}")
    print("backward, median ms (IQR), TFLOP/s, % of dense TF32; executed mma TFLOP/s, % of roof")
    for T, rows in report["speed"].items():
        for name, r in rows.items():
            roof = (f"{r['executed_mma_tflops']:6.1f} {100 * r['fraction_of_mma_roof']:5.1f} %"
                    if r["executed_mma_tflops"] else "")
            print(f"  T={T:>5} {name:9} {r['median_ms']:9.3f} ({r['q1_ms']:.3f}-{r['q3_ms']:.3f}) "
                  f"{r['tflops']:6.1f} {100 * r['fraction_of_tf32_rate']:5.1f} %  {roof}")
    if args.sustained:
        print("back to back: median ms (IQR of windows), TFLOP/s; what NVML said")
        for T, rows in report["speed"].items():
            for name, r in rows.items():
                s = r["sustained"]
                nvml = bench.nvml_text(s["joules_per_call"], s["sm_mhz"], s["power_w"], s["power_capped"])
                print(f"  T={T:>5} {name:9} {s['median_ms']:9.3f} ({s['q1_ms']:.3f}-{s['q3_ms']:.3f}) "
                      f"{s['tflops']:6.1f} TFLOP/s{nvml or '; NVML not read'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
