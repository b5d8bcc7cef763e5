"""``python -m attnlab report``: every measurement of the series, once, into results/<gpu>/.

It writes
- ceilings.json: this GPU's launch cost, copy bandwidth, fp32 multiply-add rate and
  shared-memory load rate (attnlab.ceilings);
- kernels.json: for kernels 1-8, the softmax backward alone swept over the block sizes,
  then, at its best block size, the softmax backward alone and the whole attention backward
  (fp32 and TF32 GEMMs) timed with >= 20 repeats (>= 50 below 1 ms), the count
  (attnlab.counts) and the compiler's evidence (attnlab.evidence); for kernel 9, the fused
  backward in fp32 and TF32. Every kernel is validated against the CPU reference first;
- ncu.json: Nsight Compute's DRAM bytes, achieved occupancy and warp stalls of kernels 1-8
  at their best block size, or why ncu could not read them on this machine.
The README's tables (``readme_tables``) and notebooks 03-11 read these files.
"""
import argparse
import json
import re
import sys
import time
from pathlib import Path

from . import attention, bench, ceilings, counts, evidence, fused
from .checks import BLOCK_SIZES, KERNELS, parse_list
from .device import device_info
from .errors import InputError, ValidationError
from .launch import softmax_backward_launch
from .problem import DEFAULT_SHAPE, make_inputs, make_problem
from .validate import TF32_TOLERANCES, TOLERANCES, compare

RESULTS = Path(__file__).resolve().parent.parent / "results"
GRADIENTS = ("datt", "dpreatt", "dinp")


def results_dir(gpu="h200"):
    """results/<gpu>/ of the checkout (the committed H200 results by default)."""
    return RESULTS / gpu


def gpu_folder(name):
    """The results folder name of a GPU: "NVIDIA H200" -> "h200"."""
    slug = re.sub(r"[^a-z0-9]+", "-", name.lower().replace("nvidia", "")).strip("-")
    return slug or "gpu"


def load(name, gpu="h200"):
    """One committed results file, e.g. load("kernels") for results/h200/kernels.json."""
    return json.loads((results_dir(gpu) / f"{name}.json").read_text())


def repeats_for(ms):
    """>= 20 repeats, >= 50 for work under a millisecond."""
    return 50 if ms < 1 else 20


def _log(msg):
    print(msg, file=sys.stderr, flush=True)


def _timing(fn, first_ms):
    return bench.benchmark(fn, repeats=repeats_for(first_ms), warmup=1 if first_ms > 100 else 3)


def _stats(t):
    q1, q3 = t.quartiles_ms
    return {"median_ms": t.median_ms, "q1_ms": q1, "q3_ms": q3, "min_ms": t.min_ms,
            "max_ms": t.max_ms, "repeats": t.repeats}


def validate_kernel(buf, problem, kernel, block_size, tf32):
    """Run the whole backward and compare its three gradients over the whole tensors."""
    buf.poison_gradients()
    attention.backward(buf, kernel, block_size, tf32)
    tol = (TF32_TOLERANCES if tf32 else TOLERANCES)
    checks = {g: compare(buf.get(g), getattr(problem, g), g, tol[g]) for g in GRADIENTS}
    bad = [c.detail() for c in checks.values() if not c.ok]
    if bad:
        raise ValidationError(f"kernel {kernel} does not validate:\n" + "\n".join(bad))
    return {g: c.max_abs_err for g, c in checks.items()}


# Kernel 1 at the default shape: one call takes about 2 s at block size 32 and grows with the
# block size (3.3 s at 128, 6.5 s at 256 on the H200); at 512 and 1024 a call would take over
# 10 s, so the report's sweep stops at 256.
SWEEP_BLOCK_SIZES = {1: (32, 64, 128, 256)}
# ... and its whole backward is timed with fp32 GEMMs only: 20 more calls of 2 s would measure
# the same softmax backward (over 99.9 % of the time) beside GEMMs that take under 1 ms.
NO_TF32_TIMING = {1: "the softmax backward is over 99.9 % of it; timed with fp32 GEMMs only"}


def sweep_softmax(buf, kernel):
    """{block size: median ms} of the softmax backward alone, a quick sweep (1-5 repeats)."""
    out = {}
    for bs in SWEEP_BLOCK_SIZES.get(kernel, BLOCK_SIZES):
        fn = lambda: attention.softmax_backward(buf, kernel, bs)
        one = bench.benchmark(fn, repeats=1, warmup=0 if kernel == 1 else 1)
        if one.median_ms < 50:
            one = bench.benchmark(fn, repeats=5)
        out[bs] = one.median_ms
    return out


def measure_kernel(buf, problem, kernel, ceil):
    """kernels.json's entry for one softmax-backward kernel."""
    _log(f"kernel {kernel}: validating, sweeping")
    errors = validate_kernel(buf, problem, kernel, 256, False)
    sweep = sweep_softmax(buf, kernel)
    bs = min(sweep, key=sweep.get)
    soft = _timing(lambda: attention.softmax_backward(buf, kernel, bs), sweep[bs])
    maths = ("fp32",) if kernel in NO_TF32_TIMING else ("fp32", "tf32")
    whole = {m: _stats(_timing(lambda: attention.backward(buf, kernel, bs, m == "tf32"),
                               sweep[bs])) for m in maths}
    whole.setdefault("tf32", {"not_timed": NO_TF32_TIMING.get(kernel)})
    c = counts.count(kernel, buf.B, buf.T, buf.NH, bs)
    defines_for = lambda b: softmax_backward_launch(kernel, buf.B, buf.T, buf.NH, b)[2]
    name, function = f"softmax_backward{kernel}", f"softmax_autoregressive_backward_kernel{kernel}"
    arch = device_info()["arch"]
    table = evidence.per_block_size(name, function, defines_for, arch)
    attrs = table[bs]["attributes"]
    return {
        "kernel": kernel, "block_size": bs, "sweep_ms": {str(k): v for k, v in sweep.items()},
        "max_abs_err": errors,
        "softmax": _stats(soft), "backward_fp32": whole["fp32"], "backward_tf32": whole["tf32"],
        "count": c.as_dict(), "floors_ms": counts.floors(c, ceil),
        "roof": counts.roof(c, soft.median_ms, ceil),
        "attributes": attrs,
        "occupancy": {str(b): e["occupancy"] | {"registers": e["attributes"]["registers"]}
                      for b, e in table.items()},
        "sass_loops": evidence.sass(name, function, defines_for(bs), arch)[:3],
    }


def measure_fused(shape):
    """kernels.json's entry for kernel 9: the fused backward, fp32 and TF32, validated."""
    out = {"kernel": fused.FUSED_KERNEL, "block_size": fused.THREADS}
    problem = make_problem(**shape)
    for precision in ("fp32", "tf32"):
        tf32 = precision == "tf32"
        if fused.gpu_unsupported_reason(tf32):
            out[f"backward_{precision}"] = {"unsupported": fused.gpu_unsupported_reason(tf32)}
            continue
        with fused.FusedBuffers(**shape) as buf:
            buf.set("inp", problem.inp)
            buf.set("dout", problem.dout)
            fused.fused_forward(buf, tf32)
            fused.fused_backward(buf, tf32)
            tol = fused.FUSED_TOLERANCES[precision]
            check = compare(buf.get("dinp"), problem.dinp, "dinp", tol["dinp"])
            if not check.ok:
                raise ValidationError(f"kernel 9 ({precision}) does not validate: {check.detail()}")
            first = bench.benchmark(lambda: fused.fused_backward(buf, tf32), repeats=3)
            t = _timing(lambda: fused.fused_backward(buf, tf32), first.median_ms)
        out[f"backward_{precision}"] = _stats(t) | {"max_abs_err": check.max_abs_err}
    hs = shape["C"] // shape["NH"]
    out["flops"] = counts.fused_flops(shape["B"], shape["T"], shape["NH"], hs)
    return out


def ncu_target(kernel, block_size):
    """What ncu profiles: one call of a softmax-backward kernel at the default shape."""
    inp, dout = make_inputs(**DEFAULT_SHAPE)
    with attention.AttentionBuffers(**DEFAULT_SHAPE) as buf:
        buf.set("inp", inp)
        buf.set("dout", dout)
        attention.forward(buf)
        # a real datt, made with another kernel (ncu profiles the first launch that matches)
        attention.backward(buf, 7 if kernel == 8 else 8, 256)
        attention.softmax_backward(buf, kernel, block_size)
        import pycuda.driver as cuda
        cuda.Context.synchronize()


def measure_ncu(best, path):
    """ncu.json at ``path``: per kernel, the metrics ncu read, or why it could not (written
    after each kernel, so that an interrupted run keeps what it read; kernels not in ``best``
    keep their entries)."""
    path = Path(path)
    out = json.loads(path.read_text()) if path.is_file() else {}
    for kernel, bs in best.items():
        _log(f"ncu: kernel {kernel} at block size {bs}")
        metrics, why = evidence.ncu_metrics(
            f"softmax_autoregressive_backward_kernel{kernel}$",
            ["-m", "attnlab.report", "--ncu-target", str(kernel), str(bs)])
        out[str(kernel)] = ({"block_size": bs, "metrics": metrics,
                             "stalls": evidence.stall_reasons(metrics, top=6)}
                            if metrics else {"block_size": bs, "unavailable": why})
        if why:
            _log(f"  {why}")
        Path(path).write_text(json.dumps(out, indent=1) + "\n")
    return out


def ncu_step(out, kernel_list=KERNELS):
    """Profile kernels 1-8 (or those listed) at the best block sizes in out/kernels.json."""
    entries = json.loads((Path(out) / "kernels.json").read_text())["kernels"]
    best = {int(k): e["block_size"] for k, e in entries.items() if int(k) in kernel_list}
    return measure_ncu(best, Path(out) / "ncu.json")


def run(out, with_ncu=True, kernel_list=KERNELS):
    """Measure everything and write out/{ceilings,kernels,ncu}.json."""
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    started = time.time()
    d = device_info()
    _log(f"{d['name']}: measuring the ceilings")
    ceil = ceilings.measure()
    (out / "ceilings.json").write_text(json.dumps(ceil, indent=1) + "\n")
    _log(ceilings.describe(ceil))
    problem = make_problem(**DEFAULT_SHAPE, progress=True)
    entries = {}
    with attention.AttentionBuffers(**DEFAULT_SHAPE) as buf:
        buf.set("inp", problem.inp)
        buf.set("dout", problem.dout)
        attention.forward(buf)
        for k in kernel_list:
            entries[str(k)] = measure_kernel(buf, problem, k, ceil)
    entries[str(fused.FUSED_KERNEL)] = measure_fused(DEFAULT_SHAPE)
    device = {k: d[k] for k in ("name", "arch", "sms", "clock_mhz", "driver_version",
                                "cuda_version")}
    report = {"device": device, "shape": DEFAULT_SHAPE, "seed": 0, "kernels": entries,
              "command": "python -m attnlab report", "seconds": round(time.time() - started)}
    (out / "kernels.json").write_text(json.dumps(report, indent=1) + "\n")
    if with_ncu:
        ncu_step(out)
    _log(readme_tables(out))
    return report


# ---------------------------------------------------------------------------- README

def _ms(stats, digits=4):
    return f"{stats['median_ms']:.{digits}g} ({stats['q1_ms']:.{digits}g}–{stats['q3_ms']:.{digits}g})"


def readme_tables(out=None):
    """The README's H200 table, as Markdown, from kernels.json and ceilings.json."""
    out = Path(out) if out else results_dir()
    rep = json.loads((out / "kernels.json").read_text())
    ceil = json.loads((out / "ceilings.json").read_text())
    lines = [
        f"{rep['device']['name']}, B={rep['shape']['B']} T={rep['shape']['T']} "
        f"C={rep['shape']['C']} NH={rep['shape']['NH']}; median ms (interquartile range) at each "
        f"kernel's best block size; % of ceiling for the softmax backward alone "
        f"(copy bandwidth {ceil['copy']['median'] / 1e9:,.0f} GB/s, fp32 "
        f"{ceil['fma']['median'] / 1e12:.1f} T multiply-adds/s, both measured):",
        "",
        "| kernel | block size | softmax backward alone | % of DRAM bandwidth | % of FMA rate "
        "| whole backward, fp32 GEMMs | whole backward, TF32 GEMMs |",
        "|---|---|---|---|---|---|---|",
    ]
    for k in KERNELS:
        e = rep["kernels"][str(k)]
        tf32 = _ms(e["backward_tf32"]) if "median_ms" in e["backward_tf32"] else "not timed"
        lines.append(f"| {k} | {e['block_size']} | {_ms(e['softmax'])} | "
                     f"{100 * e['roof']['dram']['fraction']:.3g}% | "
                     f"{100 * e['roof']['multiply_adds']['fraction']:.3g}% | "
                     f"{_ms(e['backward_fp32'])} | {tf32} |")
    e = rep["kernels"][str(fused.FUSED_KERNEL)]
    cell = {p: _ms(e[f"backward_{p}"]) if "median_ms" in e[f"backward_{p}"] else "not supported"
            for p in ("fp32", "tf32")}
    lines.append(f"| 9 (fused) | {e['block_size']} | – | – | – | {cell['fp32']} | "
                 f"{cell['tf32']} (tensor cores) |")
    llmc = out / "llmc.json"
    if llmc.is_file():
        ms = json.loads(llmc.read_text())["tf32_ms"]
        lines += ["", "llm.c's own binary on an H200 (results/h200/llmc.json), whole backward with "
                  "TF32 GEMMs, ms: " + ", ".join(f"kernel {k} {v}" for k, v in ms.items()) + "."]
    return "\n".join(lines)


FUSED_METHODS = (("k8 fp32", "kernel 8, fp32"), ("k8 tf32", "kernel 8, TF32"),
                 ("fused fp32", "fused fp32"), ("fused tf32", "fused TF32"),
                 ("torch", "PyTorch SDPA"))
LADDER_METHODS = (("fused tf32", "9 TF32"), ("fused10 tf32", "10 TF32"), ("fused11 tf32", "11 TF32"),
                  ("fused12 tf32", "12 TF32"), ("fused13 tf32", "13 TF32"), ("fused14 tf32", "14 TF32"),
                  ("fused15 tf32", "15 TF32"), ("fused16 tf32", "16 TF32"),
                  ("fused17 tf32", "17 TF32"), ("fused19 tf32", "19 TF32"),
                  ("fused20 tf32", "20 TF32"), ("fused21 tf32", "21 TF32"), ("fused22 tf32", "22 TF32"), ("fused23 tf32", "23 TF32"),
                  ("fused24 tf32", "24 TF32"), ("fused25 tf32", "25 TF32"), ("fused26 tf32", "26 TF32"),
                  ("fused27 tf32", "27 TF32"), ("fused28 tf32", "28 TF32"),
                  ("fused29 tf32", "29 TF32"),
                  ("fused fp32", "9 fp32"),
                  ("fused10 fp32", "10 3xTF32"), ("fused11 fp32", "11 3xTF32"),
                  ("fused18 fp32", "18 3xTF32"),
                  ("torch", "PyTorch SDPA fp32"))


def fused_table(out=None, name="fused_vs_torch", methods=FUSED_METHODS):
    """A README table of median ms per T, as Markdown, from benchmarks/fused_vs_torch.py's
    ``name``.json: fused_vs_torch (FUSED_METHODS), or fused_ladder_vs_torch (LADDER_METHODS)."""
    out = Path(out) if out else results_dir()
    rep = json.loads((out / f"{name}.json").read_text())
    lines = ["| T | " + " | ".join(label for _, label in methods) + " |",
             "|---" * (len(methods) + 1) + "|"]
    for T, row in sorted(rep["results"].items(), key=lambda kv: int(kv[0])):
        cells = []
        for m, _ in methods:
            r = row.get(m, {})
            if r.get("status") == "ok":
                cells.append(f"{r['median_ms']:.4g}")
            elif r.get("status") == "does not fit":
                cells.append(f"does not fit ({r['buffer_bytes'] / 2**30:.0f} GiB)")
            else:
                cells.append(r.get("status", "not run"))
        lines.append(f"| {T} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def ladder_table(out=None):
    """The README's table of fused kernels 9-21 and PyTorch, from fused_ladder_vs_torch.json."""
    return fused_table(out, "fused_ladder_vs_torch", LADDER_METHODS)


def add_arguments(p):
    """The options of ``python -m attnlab report``."""
    p.add_argument("--out", default=None,
                   help="folder to write (default results/<this GPU>, e.g. results/h200)")
    p.add_argument("--no-ncu", action="store_true", help="skip the Nsight Compute step")
    p.add_argument("--readme", action="store_true",
                   help="only print the README's table from the files in --out")
    p.add_argument("--ncu-only", action="store_true",
                   help="only the Nsight Compute step, at the block sizes in --out/kernels.json")
    p.add_argument("--kernels", default=",".join(map(str, KERNELS)),
                   help="with --ncu-only: the kernels to profile again (e.g. 8)")


def _require(out, name):
    if not (Path(out) / name).is_file():
        raise InputError(f"--out {out} holds no {name}: run `python -m attnlab report --out "
                         f"{out}` on a GPU first")


def command(args):
    """Run ``report`` with parsed arguments; returns the exit status."""
    kernel_list = parse_list(args.kernels, "--kernels", KERNELS, int)   # before asking the GPU
    if args.out is None:
        args.out = str(results_dir() if args.readme else
                       results_dir(gpu_folder(device_info()["name"])))
    if args.readme:
        _require(args.out, "kernels.json")
        print(readme_tables(args.out))
        for name, table in (("fused_vs_torch", fused_table), ("fused_ladder_vs_torch", ladder_table)):
            if (Path(args.out) / f"{name}.json").is_file():
                print()
                print(table(args.out))
    elif args.ncu_only:
        _require(args.out, "kernels.json")
        ncu_step(args.out, kernel_list)
    else:
        run(args.out, with_ncu=not args.no_ncu)
    return 0


if __name__ == "__main__":          # the child process ncu profiles: --ncu-target KERNEL BS
    p = argparse.ArgumentParser()
    p.add_argument("--ncu-target", nargs=2, type=int, required=True)
    ncu_target(*p.parse_args().ncu_target)
