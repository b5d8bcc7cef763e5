"""``python -m attnlab``: device info, and llm.c's main() for the forward and backward passes.

    python -m attnlab env
    python -m attnlab info
    python -m attnlab forward [--B 4 --T 1024 --C 768 --NH 12] [--tf32] [--json]
    python -m attnlab backward N [...] [--repeats 10] [--block-sizes 32,64,...]
    python -m attnlab sanitize [--tools memcheck,...] [--shapes default,small] [--kernels 1,...]
    python -m attnlab report [--out results/<gpu>]

forward / backward N do what llm.c's main does: compute the CPU reference, run the GPU
forward and validate it over whole tensors, run the backward with kernel N and validate it,
then time every block size (a fused kernel, 9 and later: its one block size). Every argument
is checked before any GPU work. Progress goes to stderr; the result goes to stdout (a table,
or one JSON object with --json). The exit statuses are EXIT_STATUSES below; ``backward
--help`` lists every kernel (attnlab.support).
"""
import argparse
import json
import sys
import traceback

from .checks import BLOCK_SIZES, KERNELS, check_int, check_kernel, check_shape, parse_block_sizes
from .errors import (GPUMemoryError, InputError, NoGPUError, NvccNotFoundError, SetupError,
                     UnsupportedGPUError, ValidationError)
from .fused import FUSED_KERNELS, TF32_ONLY
from .support import kernel_lines
from .validate import TF32_TOLERANCES, TOLERANCES, compare

EXIT_STATUSES = """\
exit status:
  0  everything ran, and every result validated
  1  a result was wrong (validation failed; sanitize: a sanitizer reported errors)
  2  could not run here: bad arguments, no GPU, too little free GPU memory, a missing piece
     (nvcc, scikit-cuda, cuBLAS) or a GPU without what a kernel needs; the message says which
  3  internal error: a bug in attnlab, not in your input; the message says how to report it"""
CANNOT_RUN = (InputError, NoGPUError, GPUMemoryError, NvccNotFoundError, SetupError,
              UnsupportedGPUError)
REPORT = ("attnlab: internal error (a bug in attnlab, not in your input). Please report it on "
          "attnlab's issue tracker (README, 'Reporting a bug') with the traceback above and the "
          "output of `python -m attnlab env`.")


def _progress(msg):
    print(msg, file=sys.stderr, flush=True)


def parser():
    p = argparse.ArgumentParser(prog="python -m attnlab", description=__doc__.split("\n")[0],
                                epilog=EXIT_STATUSES,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="command", required=True)
    sub.add_parser("env", help="check what the GPU path needs (GPU, driver, nvcc, PyCUDA, "
                               "scikit-cuda's cuBLAS) and say what to do for each missing piece")
    sub.add_parser("info", help="describe the GPU")
    common = argparse.ArgumentParser(add_help=False)
    for name, default in (("B", 4), ("T", 1024), ("C", 768), ("NH", 12)):
        common.add_argument(f"--{name}", type=int, default=default)
    common.add_argument("--seed", type=int, default=0, help="seed of the random inputs")
    common.add_argument("--repeats", type=int, default=10, help="timed repeats per block size")
    common.add_argument("--warmup", type=int, default=2,
                        help="untimed calls before the repeats of each block size")
    common.add_argument("--block-sizes", default=None,
                        help=f"comma-separated block sizes to time, each a power of two in "
                             f"32..1024 (default: all, {','.join(map(str, BLOCK_SIZES))}); kernels "
                             f"1-8 and forward only")
    common.add_argument("--tf32", action="store_true",
                        help="run the cuBLAS GEMMs in TF32 tensor-op math (llm.c's setting)")
    common.add_argument("--json", action="store_true", help="print one JSON object on stdout")
    sub.add_parser("forward", parents=[common], help="validate and time the forward pass")
    b = sub.add_parser("backward", parents=[common], help="validate and time backward kernel N",
                       epilog="\n".join(kernel_lines()),
                       formatter_class=argparse.RawDescriptionHelpFormatter)
    b.add_argument("kernel", type=int, help=f"the backward kernel, {KERNELS[0]}-"
                                            f"{FUSED_KERNELS[-1]} (listed below)")
    from .sanitize import add_arguments as sanitize_arguments
    sanitize_arguments(sub.add_parser(
        "sanitize", help="run every kernel under compute-sanitizer (memcheck, racecheck, "
                         "initcheck, synccheck); see attnlab/sanitize.py"))
    from .report import add_arguments as report_arguments
    report_arguments(sub.add_parser(
        "report", help="measure the series once (ceilings, kernels 1-9, compiler evidence, "
                       "ncu) into results/<gpu>/; see attnlab/report.py"))
    return p


def check_backward_kernel(kernel):
    """``backward N``: N is a softmax-backward kernel or a fused one."""
    if kernel not in KERNELS + FUSED_KERNELS:
        raise InputError(f"kernel must be {KERNELS[0]}-{FUSED_KERNELS[-1]} ({KERNELS[0]}-{KERNELS[-1]}: "
                         f"the softmax-backward kernels, {FUSED_KERNELS[0]}-{FUSED_KERNELS[-1]}: "
                         f"the fused backward), got {kernel}")
    return kernel


def info():
    from .device import device_info
    d = device_info()
    gib = 2 ** 30
    print(f"{d['name']}: compute capability {d['compute_capability']} ({d['arch']}), "
          f"{d['sms']} SMs, {d['memory_total_bytes'] / gib:.1f} GiB "
          f"({d['memory_free_bytes'] / gib:.1f} GiB free), L2 {d['l2_cache_bytes'] / 2**20:.0f} MiB, "
          f"driver API {d['driver_version']}, CUDA {d['cuda_version']}")
    return 0


def run(args):
    """forward, backward 1-8 or a fused backward (9 and later): validate, then time; returns
    (result dict, {name: Report}, exit status)."""
    if args.command == "backward" and check_backward_kernel(args.kernel) in FUSED_KERNELS:
        return _run_fused(args)
    return _run_pipeline(args)


def _run_pipeline(args):
    """The materialized pipeline (attnlab.attention): forward, or backward with kernel 1-8."""
    B, T, C, NH = check_shape(args.B, args.T, args.C, args.NH)
    kernel = check_kernel(args.kernel) if args.command == "backward" else None
    repeats = check_int("--repeats", args.repeats)
    warmup = check_int("--warmup", args.warmup, minimum=0)
    check_int("--seed", args.seed, minimum=0)
    block_sizes = (list(BLOCK_SIZES) if args.block_sizes is None
                   else parse_block_sizes(args.block_sizes))
    from . import attention, bench, problem
    from .buffers import check_fits
    from .device import device_info
    device = device_info()
    backward = args.command == "backward"
    # before the CPU reference (slow at big shapes): will the buffers fit on the GPU?
    check_fits(attention.bytes_needed(B, T, C, NH, backward), device["memory_free_bytes"],
               device["memory_total_bytes"], f"B={B} T={T} C={C} NH={NH}")
    _progress(f"{device['name']}: B={B} T={T} C={C} NH={NH}, "
              f"{'TF32' if args.tf32 else 'fp32'} GEMMs")
    ref = problem.make_problem(B, T, C, NH, args.seed, progress=True)
    tolerances = TF32_TOLERANCES if args.tf32 else TOLERANCES
    checks, timings = {}, {}
    with attention.AttentionBuffers(B, T, C, NH, backward=backward) as buf:
        buf.set("inp", ref.inp)
        attention.forward(buf, 256, args.tf32)
        names = ["preatt", "att", "out"]
        if backward:
            buf.set("dout", ref.dout)
            _progress(f"running backward kernel {kernel} once to validate it...")
            attention.backward(buf, kernel, 256, args.tf32)
            names += ["datt", "dpreatt", "dinp"]
        for name in names:
            checks[name] = compare(buf.get(name), getattr(ref, name), name, tolerances[name])
            _progress(checks[name].detail())
        for bs in block_sizes if all(r.ok for r in checks.values()) else ():
            _progress(f"timing block size {bs}...")
            if backward:
                fn = lambda bs=bs: attention.backward(buf, kernel, bs, args.tf32)  # noqa: E731
            else:
                fn = lambda bs=bs: attention.forward(buf, bs, args.tf32)  # noqa: E731
            timings[bs] = bench.benchmark(fn, repeats=repeats, warmup=warmup)
    math = "tf32" if args.tf32 else "fp32"
    return _result(args, device, kernel, math, checks, timings, warmup=warmup)


def _run_fused(args):
    """``backward 9`` and later: the fused kernels (attnlab.fused) with that backward, validated
    on out and dinp, then the backward timed; --tf32 selects the TF32 variant (kernel 12 has
    no other). Each has one block size (fused.BACKWARD_THREADS): --block-sizes is refused."""
    from . import bench, fused
    from .device import device_info
    from .problem import make_problem
    B, T, C, NH = fused.check_fused_shape(args.B, args.T, args.C, args.NH)
    repeats = check_int("--repeats", args.repeats)
    warmup = check_int("--warmup", args.warmup, minimum=0)
    check_int("--seed", args.seed, minimum=0)
    kernel = args.kernel
    if args.block_sizes is not None:
        raise InputError(f"--block-sizes does not apply to backward {kernel}: a fused kernel runs "
                         f"with one block size ({fused.BACKWARD_THREADS[kernel]} threads); got "
                         f"--block-sizes {args.block_sizes!r}")
    if kernel in TF32_ONLY and not args.tf32:
        raise InputError(f"backward {kernel} runs in TF32 only: add --tf32 (python -m attnlab "
                         f"backward {kernel} --tf32); for fp32 accuracy use backward 18 or 11 (3xTF32)")
    if kernel in fused.FP32_ONLY and args.tf32:
        raise InputError(f"backward {kernel} is fp32-accurate only (3xTF32): drop --tf32 (python "
                         f"-m attnlab backward {kernel}); for TF32 use backward {fused.TF32_CHOICE} --tf32")
    tf32 = fused.check_precision(bool(args.tf32), kernel)
    fused.check_supported(tf32, kernel)
    device = device_info()
    math = "tf32" if tf32 else "fp32"
    _progress(f"{device['name']}: B={B} T={T} C={C} NH={NH}, fused kernel {kernel}, {math}")
    problem = make_problem(B, T, C, NH, args.seed, progress=True)
    checks, timings = {}, {}
    with fused.FusedBuffers(B, T, C, NH) as buf:
        buf.set("inp", problem.inp)
        buf.set("dout", problem.dout)
        fused.fused_forward(buf, tf32)
        fused.fused_backward(buf, tf32, kernel)
        for name in ("out", "dinp"):
            checks[name] = compare(buf.get(name), getattr(problem, name), name,
                                   fused.FUSED_TOLERANCES[math][name])
            _progress(checks[name].detail())
        if all(r.ok for r in checks.values()):
            timings[fused.BACKWARD_THREADS[kernel]] = bench.benchmark(
                lambda: fused.fused_backward(buf, tf32, kernel), repeats=repeats, warmup=warmup)
    return _result(args, device, kernel, math, checks, timings, warmup=warmup, fused=True,
                   memory_bytes=fused.fused_bytes_needed(B, T, C, NH)
                   + fused.extra_bytes_needed(B, T, C, NH, kernel))


def _result(args, device, kernel, math, checks, timings, **extra):
    """The JSON result of forward and backward N, with its reports and exit status."""
    from .bench import best
    ok = all(r.ok for r in checks.values())
    result = {
        "command": args.command, "kernel": kernel,
        "device": {k: device[k] for k in ("name", "arch", "sms", "driver_version", "cuda_version")},
        "shape": dict(B=args.B, T=args.T, C=args.C, NH=args.NH), "seed": args.seed,
        "gemm_math": math, "repeats": args.repeats, **extra,
        "validation": {n: {"ok": r.ok, "mismatches": r.mismatches, "checked": r.checked,
                           "max_abs_err": r.max_abs_err, "tol": r.tol} for n, r in checks.items()},
        "valid": ok,
        "timings_ms": {str(bs): {"median": t.median_ms, "min": t.min_ms, "max": t.max_ms}
                       for bs, t in timings.items()},
    }
    if timings:
        bs, t = best(timings)
        result["best"] = {"block_size": bs, "median_ms": t.median_ms}
    return result, checks, 0 if ok else 1


def print_table(result, checks):
    what = f"backward kernel {result['kernel']}" if result["kernel"] else "forward"
    s = result["shape"]
    math = (f"fused, {result['gemm_math']}" if result.get("fused")
            else f"{result['gemm_math']} GEMMs")
    print(f"{what} on {result['device']['name']}, B={s['B']} T={s['T']} C={s['C']} NH={s['NH']}, "
          f"{math}")
    for r in checks.values():
        print(r.detail())
    if not result["valid"]:
        print("validation FAILED: not timed")
        return
    print(f"{'block_size':>10} | {'median ms':>10} | {'min ms':>10} | {'max ms':>10}")
    for bs, t in result["timings_ms"].items():
        print(f"{bs:>10} | {t['median']:10.4f} | {t['min']:10.4f} | {t['max']:10.4f}")
    b = result["best"]
    print(f"best: block size {b['block_size']}, {b['median_ms']:.4f} ms (median of "
          f"{result['repeats']})")


def main(argv=None):
    """The command line; returns its exit status (EXIT_STATUSES)."""
    args = parser().parse_args(argv)
    try:
        return _command(args)
    except CANNOT_RUN as e:
        print(f"attnlab: {e}", file=sys.stderr)
        return 2
    except ValidationError as e:
        print(f"attnlab: {e}", file=sys.stderr)
        return 1
    except Exception:                  # anything else is attnlab's bug: say so, and how to report
        traceback.print_exc()
        print(REPORT, file=sys.stderr)
        return 3


def _command(args):
    if args.command == "sanitize":
        from .sanitize import run as sanitize
        return sanitize(args)
    if args.command == "env":
        from .environment import report
        return 0 if report() else 2
    if args.command == "info":
        return info()
    if args.command == "report":
        from .report import command
        return command(args)
    result, checks, status = run(args)
    if args.json:
        print(json.dumps(result, indent=2))
    else:
        print_table(result, checks)
    return status
