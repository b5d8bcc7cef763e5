#!/usr/bin/env python
"""Causal attention backward, side by side on one GPU, in one process:

  k8 fp32     the materialized pipeline (attnlab.attention, softmax-backward kernel 8), cuBLAS fp32
  k8 tf32     the same with cuBLAS in TF32 tensor-op math
  fused fp32  kernels/flash_attention.cu (fused kernel 9), fp32 on CUDA cores (attnlab.fused)
  fused tf32  the same on TF32 tensor cores
  fused10 fp32  fused backward kernel 10 (kernels/flash_attention10.cu): 3xTF32 on tensor
              cores, fp32-accurate (after kernel 9's fp32 forward)
  fused10 tf32  the same with one TF32 product (after kernel 9's TF32 forward)
  fused11 fp32/tf32  fused backward kernel 11 (kernels/flash_attention11.cu): kernel 10 with dQ
              added by atomics, not bit-identical run to run
  fused12 tf32  fused backward kernel 12 (kernels/flash_attention12.cu): kernel 11 on Hopper's
              warpgroup MMA (wgmma, sm_90 only, TF32 only)
  fused13 tf32  fused backward kernel 13 (kernels/flash_attention13.cu): kernel 12 with ready-made
              query tiles, conflict-free dS stores, float4 atomics, no permutes
  fused14 tf32  fused backward kernel 14 (kernels/flash_attention14.cu): kernel 13 with its query
              tiles copied by the copy engine (cp.async.bulk, mbarriers), a tile ahead
  fused15 tf32  fused backward kernel 15 (kernels/flash_attention15.cu): kernel 14 with dQ added
              by the copy engine (one cp.reduce.async.bulk per query tile) instead of atomics
  fused16 tf32  fused backward kernel 16 (kernels/flash_attention16.cu): kernel 15 with dQ staged
              in the consumed query stage (only thread 0 waits for the copy engine)
  fused17 tf32  fused backward kernel 17 (kernels/flash_attention17.cu): kernel 16 with P^T and
              dS^T rounded to TF32 by cvt.rn (one SASS instruction) instead of cvt.rna (three)
  fused18 fp32  fused backward kernel 18 (kernels/flash_attention18.cu): kernel 17's products in
              3xTF32 (fp32-accurate) on wgmma, 64 keys per block (fp32 only)
  fused19 tf32  fused backward kernel 19 (kernels/flash_attention19.cu): kernel 17 with its two
              warpgroups in ping-pong (one issues its products while the other computes)
  fused20 tf32  fused backward kernel 20 (kernels/flash_attention20.cu): kernel 19 launched a few
              heads at a time, so that their query tiles stay in L2
  fused21 tf32  fused backward kernel 21 (kernels/flash_attention21.cu): kernel 20 with its wgmma
              descriptors built once per tile, not once per product
  fused22 tf32  fused backward kernel 22 (kernels/flash_attention22.cu): kernel 21 whose turn at
              the tensor cores ends at its last issue, without waiting for its products
  torch       torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True) on fp32
              inputs, its backward (torch is only needed here, not by attnlab)

    python benchmarks/fused_vs_torch.py [--T 1024,2048,4096,8192,16384] [--B 4] [--NH 12]
                                        [--HS 64] [--repeats 10] [--json results.json]

Times are GPU times of one backward call (CUDA events, warm-up calls, L2 flushed before each
repeat; torch: the same with torch.cuda.Event), median of --repeats, min and max in the JSON.
The fused methods of one precision are timed interleaved (attnlab.bench.interleaved: A B C A B
C ...), so that they meet the same clock and power state; the others one after another
(attnlab.bench.benchmark). Memory is the GPU memory each method needs at its peak:
for attnlab the bytes of all the buffers a method uses (bytes_needed; fused_bytes_needed + extra_bytes_needed) and, measured,
the drop in free memory when they are allocated; for torch, torch.cuda.max_memory_allocated
over building q, k, v, dout, the forward and one backward (after reset_peak_memory_stats).
The materialized pipeline reports 'does not fit' where its buffers cannot be allocated.

Every method gets the same inputs (uniform in [-1, 1), seeded); the fused dinp is compared
with torch's gradients at every T (max |difference|), since the CPU reference is too slow
there. attnlab takes the device's primary context first; torch (CUDA runtime) then uses that
same context, so both run on the same default stream.
"""
import argparse
import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))   # run from a checkout

import numpy as np

from attnlab import attention, bench, counts, fused
from attnlab.checks import check_int, parse_list
from attnlab.device import context, device_info, free_memory
from attnlab.errors import AttnlabError, GPUMemoryError, InputError

# fused methods: name -> (fused backward kernel, tf32), every kernel of fused.BACKWARDS in each of
# its precisions ("fused" alone is kernel 9)
FUSED_METHODS = {f"fused{'' if k == fused.FUSED_KERNEL else k} {'tf32' if tf32 else 'fp32'}": (k, tf32)
                 for k in fused.FUSED_KERNELS for tf32 in fused.precisions(k)}
METHODS = ("k8 fp32", "k8 tf32", *FUSED_METHODS, "torch")
K8_BLOCK_SIZE = 256
WARMUP = 2
GIB = 2 ** 30


def log(msg):
    print(msg, file=sys.stderr, flush=True)


def int_list(text, name):
    return parse_list(text, name, None, lambda v: check_int(name, int(v)))


def timing_dict(t):
    return {"median_ms": t.median_ms, "min_ms": t.min_ms, "max_ms": t.max_ms,
            "repeats": t.repeats}


def make_data(B, T, C, seed):
    """inp (B, T, 3C) and dout (B, T, C), float32 uniform in [-1, 1)."""
    rng = np.random.default_rng(seed)
    inp = rng.random((B, T, 3 * C), dtype=np.float32) * 2 - 1
    dout = rng.random((B, T, C), dtype=np.float32) * 2 - 1
    return inp, dout


def run_k8(inp, dout, B, T, C, NH, repeats):
    """The materialized backward with kernel 8, fp32 and TF32 cuBLAS, on one set of buffers."""
    need = attention.bytes_needed(B, T, C, NH)
    res = {}
    free_before = free_memory()[0]
    try:
        buf = attention.AttentionBuffers(B, T, C, NH)
    except GPUMemoryError as e:
        log(f"  k8: does not fit ({e})")
        for m in ("k8 fp32", "k8 tf32"):
            res[m] = {"status": "does not fit", "buffer_bytes": need, "reason": str(e)}
        return res
    except Exception as e:                    # pycuda's MemoryError when allocation fails
        log(f"  k8: does not fit (allocation failed: {type(e).__name__}: {e})")
        for m in ("k8 fp32", "k8 tf32"):
            res[m] = {"status": "does not fit", "buffer_bytes": need,
                      "reason": f"{type(e).__name__}: {e}"}
        return res
    measured = free_before - free_memory()[0]
    with buf:
        buf.set("inp", inp)
        buf.set("dout", dout)
        for tf32 in (False, True):
            name = "k8 tf32" if tf32 else "k8 fp32"
            t0 = time.perf_counter()
            attention.forward(buf, K8_BLOCK_SIZE, tf32)
            fn = lambda: attention.backward(buf, 8, K8_BLOCK_SIZE, tf32)
            t = bench.benchmark(fn, repeats=repeats, warmup=WARMUP)
            res[name] = dict(status="ok", buffer_bytes=need, measured_bytes=measured,
                             **timing_dict(t))
            log(f"  {name}: {t.median_ms:10.3f} ms  ({time.perf_counter() - t0:.1f} s)")
    return res


def run_fused(inp, dout, B, T, C, NH, repeats):
    """The fused backward kernels of FUSED_METHODS (those this GPU runs); also returns their
    dinp for the cross-check."""
    need = fused.fused_bytes_needed(B, T, C, NH)
    res, dinps = {}, {}
    free_before = free_memory()[0]
    try:
        buf = fused.FusedBuffers(B, T, C, NH)
    except GPUMemoryError as e:
        for m in FUSED_METHODS:
            res[m] = {"status": "does not fit", "buffer_bytes": need, "reason": str(e)}
        return res, dinps
    measured = free_before - free_memory()[0]
    runs = {}                                 # name -> (kernel, tf32, forward Timing)
    with buf:
        buf.set("inp", inp)
        buf.set("dout", dout)
        for name, (kernel, tf32) in FUSED_METHODS.items():
            why = fused.gpu_unsupported_reason(tf32, kernel)
            if why:
                res[name] = {"status": "unsupported", "reason": why}
                continue
            fused.fused_forward(buf, tf32)
            fused.fused_backward(buf, tf32, kernel)
            dinps[name] = buf.get("dinp")
            forward = bench.benchmark(lambda: fused.fused_forward(buf, tf32), repeats=3, warmup=1)
            runs[name] = (kernel, tf32, forward)
        # each precision's backwards interleaved, after a forward in that precision: a drift of
        # the GPU's clock or power state falls on all of them alike
        for tf32 in (False, True):
            group = {n: (lambda k=k, t=tf32: fused.fused_backward(buf, t, k))
                     for n, (k, t, _) in runs.items() if t == tf32}
            if not group:
                continue
            t0 = time.perf_counter()
            fused.fused_forward(buf, tf32)
            for name, t in bench.interleaved(group, repeats=repeats, warmup=WARMUP).items():
                kernel, _, forward = runs[name]
                res[name] = dict(status="ok", buffer_bytes=need + fused.extra_bytes_needed(B, T, C, NH, kernel),
                                 measured_bytes=measured,
                                 forward_median_ms=forward.median_ms,
                                 tflops=counts.fused_flops(B, T, NH, C // NH) / t.median_ms / 1e9,
                                 **timing_dict(t))
                log(f"  {name}: {t.median_ms:10.3f} ms  (forward {forward.median_ms:.3f} ms)")
            log(f"  ({'TF32' if tf32 else 'fp32'} backwards interleaved: {time.perf_counter() - t0:.1f} s)")
    res = {name: res[name] for name in FUSED_METHODS if name in res}     # the table's order
    return res, dinps


def run_torch(torch, inp, dout, B, T, NH, HS, repeats, l2_bytes, dinps):
    """SDPA backward on fp32 (B, NH, T, HS) inputs, timed with torch.cuda.Event."""
    F = torch.nn.functional
    res = {}
    torch.cuda.empty_cache()
    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats()
    base = torch.cuda.memory_allocated()
    t0 = time.perf_counter()
    try:
        x = torch.from_numpy(inp).cuda().view(B, T, 3, NH, HS)
        q, k, v = (x[:, :, i].transpose(1, 2).contiguous().requires_grad_() for i in range(3))
        del x
        do = torch.from_numpy(dout).cuda().view(B, T, NH, HS).transpose(1, 2).contiguous()
        out = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        backend = out.grad_fn.name() if out.grad_fn is not None else None

        def step():
            return torch.autograd.grad(out, (q, k, v), do, retain_graph=True)

        grads = step()
        torch.cuda.synchronize()
        peak = torch.cuda.max_memory_allocated() - base
        # cross-check: fused dinp against torch's gradients, in the (B, T, 3C) layout
        dinp_t = torch.cat([g.transpose(1, 2).reshape(B, T, NH * HS) for g in grads], dim=-1)
        del grads
        cross = {"max_abs_torch_dinp": float(dinp_t.abs().max())}
        for name, dinp in dinps.items():
            cross[name] = float((torch.from_numpy(dinp).cuda() - dinp_t).abs().max())
        del dinp_t
        flush = torch.empty(max(l2_bytes // 4, 1), dtype=torch.int32, device="cuda")
        for _ in range(WARMUP):
            step()
        torch.cuda.synchronize()
        start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        times = []
        for _ in range(repeats):
            flush.zero_()
            start.record()
            step()
            stop.record()
            stop.synchronize()
            times.append(start.elapsed_time(stop))
        t = np.array(times)
        res = {"status": "ok", "peak_bytes": int(peak), "backend": backend,
               "median_ms": float(np.median(t)), "min_ms": float(t.min()),
               "max_ms": float(t.max()), "repeats": repeats, "cross_check_max_abs_diff": cross}
        log(f"  torch: {res['median_ms']:10.3f} ms  ({backend}; "
            f"{time.perf_counter() - t0:.1f} s)")
        del q, k, v, do, out, flush
    except torch.cuda.OutOfMemoryError as e:
        res = {"status": "does not fit", "reason": str(e).splitlines()[0]}
        log(f"  torch: does not fit")
    torch.cuda.empty_cache()
    return res


def cell(r, key):
    if r is None:
        return "-"
    if r.get("status") != "ok":
        if key == "mem" and r.get("buffer_bytes"):
            return f"no fit: {r['buffer_bytes'] / GIB:.1f} GiB"
        return r.get("status", "-")
    if key == "time":
        return f"{r['median_ms']:.3f} ms"
    n = r.get("peak_bytes", r.get("buffer_bytes"))
    return f"{n / GIB:.2f} GiB"


def print_tables(report):
    Ts = list(report["results"])
    w = 19
    for title, key in (("backward time (median)", "time"), ("peak GPU memory", "mem")):
        print(f"\n{title}, B={report['shape']['B']} NH={report['shape']['NH']} "
              f"HS={report['shape']['HS']} on {report['device']['name']}")
        print(f"{'T':>6} | " + " | ".join(f"{m:>{w}}" for m in METHODS))
        for T in Ts:
            row = report["results"][T]
            print(f"{T:>6} | " + " | ".join(f"{cell(row.get(m), key):>{w}}" for m in METHODS))
    t = report["torch"]
    if t.get("available"):
        backends = sorted({r["torch"].get("backend") for r in report["results"].values()
                           if r.get("torch", {}).get("backend")})
        print(f"torch {t['version']}: SDPA backward via {', '.join(backends) or '?'}; "
              f"torch.backends.cuda.matmul.allow_tf32 = {t['matmul_allow_tf32']}, "
              f"float32 matmul precision '{t['float32_matmul_precision']}'")
    print("memory: attnlab = its buffers (bytes_needed / fused_bytes_needed); torch = "
          "max_memory_allocated over inputs, forward and one backward")
    print("\nfused dinp vs torch gradients (max |difference|; max |torch dinp|):")
    for T in Ts:
        cc = report["results"][T].get("torch", {}).get("cross_check_max_abs_diff")
        if cc:
            print(f"{T:>6} | " + " | ".join(f"{m} {cc.get(m, float('nan')):.3g}"
                                           for m in FUSED_METHODS)
                  + f" | max {cc['max_abs_torch_dinp']:.3g}")
    print("\ntargets:")
    for line in report["targets"]:
        print("  " + line)


def targets(report):
    lines = []
    res = report["results"]

    def ms(T, m):
        r = res.get(T, {}).get(m, {})
        return r.get("median_ms") if r.get("status") == "ok" else None

    if 1024 in res:
        a, b = ms(1024, "k8 fp32"), ms(1024, "fused tf32")
        if a and b:
            lines.append(f"T=1024: fused tf32 is {a / b:.2f}x faster than k8 fp32 "
                         f"(target >= 3x): {'PASS' if a / b >= 3 else 'FAIL'}")
    for T in res:
        a, b = ms(T, "fused tf32"), ms(T, "torch")
        if a and b:
            lines.append(f"T={T}: fused tf32 / torch = {a / b:.2f} (target <= 1.5): "
                         f"{'PASS' if a / b <= 1.5 else 'FAIL'}")
    def speed_targets(methods, label, max_ms_1024, min_tflops_16384):
        for m in methods:
            a = ms(1024, m)
            if a:
                lines.append(f"T=1024: {m} {a:.3f} ms ({label} <= {max_ms_1024} ms): "
                             f"{'PASS' if a <= max_ms_1024 else 'FAIL'}")
            r = res.get(16384, {}).get(m, {})
            if r.get("status") == "ok":
                lines.append(f"T=16384: {m} {r['tflops']:.1f} TFLOP/s ({label} >= {min_tflops_16384}): "
                             f"{'PASS' if r['tflops'] >= min_tflops_16384 else 'FAIL'}")

    # issue #14's targets for the Hopper-speed kernels; issue #23's: TF32 >= 265 TFLOP/s at
    # T=16384 and <= 0.11 ms at T=1024, 3xTF32 at <= 0.5x PyTorch fp32's time at every T
    speed_targets(("fused10 tf32", "fused11 tf32", "fused12 tf32", "fused13 tf32"), "target", 0.17, 160)
    speed_targets([m for m, (k, tf32) in FUSED_METHODS.items() if tf32 and k >= 13], "#23 target", 0.11, 265)
    def torch_ratio_targets(methods, label, met):
        for m in methods:
            for T in res:
                a, b = ms(T, m), ms(T, "torch")
                if a and b:
                    lines.append(f"T={T}: {m} (3xTF32) / torch fp32 = {a / b:.2f} ({label}): "
                                 f"{'PASS' if met(a / b) else 'FAIL'}")

    torch_ratio_targets(("fused11 fp32", "fused18 fp32"), "#23 target <= 0.5", lambda r: r <= 0.5)
    torch_ratio_targets(("fused10 fp32", "fused11 fp32", "fused18 fp32"), "target < 1", lambda r: r < 1)
    return lines


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--T", default="1024,2048,4096,8192,16384", help="comma-separated T values")
    p.add_argument("--B", type=int, default=4)
    p.add_argument("--NH", type=int, default=12)
    p.add_argument("--HS", type=int, default=64)
    p.add_argument("--repeats", type=int, default=10)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--json", default=None, help="write the results to this JSON file")
    p.add_argument("--no-torch", action="store_true", help="skip torch")
    args = p.parse_args(argv)
    Ts = int_list(args.T, "--T")
    B, NH, HS = (check_int(n, v) for n, v in (("--B", args.B), ("--NH", args.NH), ("--HS", args.HS)))
    repeats = check_int("--repeats", args.repeats)
    C = NH * HS
    for T in Ts:
        fused.check_fused_shape(B, T, C, NH)
    context()                                    # attnlab's primary context before torch
    device = device_info()
    torch = None
    torch_info = {"available": False}
    if not args.no_torch:
        try:
            import torch as _torch
            torch = _torch
            torch_info = {
                "available": True, "version": torch.__version__,
                "matmul_allow_tf32": bool(torch.backends.cuda.matmul.allow_tf32),
                "cudnn_allow_tf32": bool(torch.backends.cudnn.allow_tf32),
                "float32_matmul_precision": torch.get_float32_matmul_precision(),
                "flash_sdp_enabled": bool(torch.backends.cuda.flash_sdp_enabled()),
                "mem_efficient_sdp_enabled": bool(torch.backends.cuda.mem_efficient_sdp_enabled()),
                "math_sdp_enabled": bool(torch.backends.cuda.math_sdp_enabled()),
            }
        except ImportError as e:
            torch_info = {"available": False, "reason": str(e)}
            log(f"torch is not importable ({e}): the torch column is skipped")
    report = {"device": {k: device[k] for k in ("name", "arch", "sms", "driver_version",
                                               "cuda_version", "memory_total_bytes")},
              "shape": {"B": B, "NH": NH, "HS": HS, "C": C}, "repeats": repeats,
              "k8_block_size": K8_BLOCK_SIZE, "seed": args.seed, "torch": torch_info,
              "results": {}, "targets": []}
    log(f"{device['name']}: B={B} NH={NH} HS={HS}, T in {Ts}, {repeats} repeats; "
        f"torch {torch_info}")
    t_start = time.perf_counter()
    for T in Ts:
        log(f"T={T}:")
        if torch is not None:
            torch.cuda.empty_cache()             # give torch's cached blocks back first
        inp, dout = make_data(B, T, C, args.seed)
        row = {}
        row.update(run_k8(inp, dout, B, T, C, NH, repeats))
        fres, dinps = run_fused(inp, dout, B, T, C, NH, repeats)
        row.update(fres)
        if torch is not None:
            row["torch"] = run_torch(torch, inp, dout, B, T, NH, HS, repeats,
                                     device["l2_cache_bytes"], dinps)
        report["results"][T] = row
        report["targets"] = targets(report)
        report["elapsed_s"] = time.perf_counter() - t_start
        if args.json:
            Path(args.json).write_text(json.dumps(report, indent=2))
    print_tables(report)
    print(f"\n(total {time.perf_counter() - t_start:.0f} s)")
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except InputError as e:
        print(f"fused_vs_torch: {e}", file=sys.stderr)
        sys.exit(2)
    except AttnlabError as e:
        print(f"fused_vs_torch: {type(e).__name__}: {e}", file=sys.stderr)
        sys.exit(1)
