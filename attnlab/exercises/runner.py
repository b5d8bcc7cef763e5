"""The isolated runner: ``python -m attnlab.exercises run JOBDIR``, a process of its own.

It reads JOBDIR/job.json (written by attnlab.exercises.jobs), makes a CUDA context of its own,
and for every variant (a set of -D defines) and case (a shape): compiles the student's kernel,
allocates every buffer inside guard zones with the outputs poisoned (attnlab.exercises.memory),
runs the kernel RUNS times with shared memory scrambled before each run, compares, checks the
guard zones and the inputs, and times the kernel against the reference (interleaved). After each
step it rewrites JOBDIR/result.json, so that when the kernel crashes the context or hangs, the
parent still knows how far it got (``phase``).
"""
import contextlib
import json
import os
import sys
from pathlib import Path

import numpy as np

from ..errors import KernelCompileError, NoGPUError
from .diagnosis import close, mismatch_mask
from .memory import IN_GUARD_BITS, OUT_GUARD_BITS, GuardedBuffers, Scrambler, guard_report
from .timing import choose_block_size, reference_launch


def count_bad(got, exp, tol):
    """The number of wrong elements (diagnosis.mismatch_mask), one leading index at a time."""
    return sum(int(mismatch_mask(got[i], np.asarray(exp[i]), tol).sum())
               for i in range(got.shape[0]))


def exit_now(code=0):
    """Leave at once (no CUDA teardown after a crash), with every output written."""
    sys.stdout.flush()
    sys.stderr.flush()
    try:
        import ctypes
        ctypes.CDLL(None).fflush(None)             # the kernel's printf output
    except Exception:
        pass
    os._exit(code)


def arg_types(args):
    """PyCUDA's prepare() string of an argument list: i, f or P each."""
    return "".join("i" if isinstance(a, np.int32) else "f" if isinstance(a, np.float32) else "P"
                   for a in args)


class Runner:
    """One job, step by step; every step that can fail says so in result.json."""

    def __init__(self, jobdir):
        self.jobdir = Path(jobdir)
        self.job = json.loads((self.jobdir / "job.json").read_text())
        self.res = {"phase": "starting", "error": None, "variants": []}
        self.fn = None                # the student's kernel of the current variant
        self.references = {}          # case index -> (label, function that launches it)
        self.reference_outputs = {}   # case index -> {output name: allocation}

    # -------------------------------------------------------------------- result.json
    def save(self):
        tmp = self.jobdir / "result.json.tmp"
        tmp.write_text(json.dumps(self.res))
        os.replace(tmp, self.jobdir / "result.json")

    def phase(self, text):
        self.res["phase"] = text
        self.save()

    def die(self, kind, message):
        self.res["error"] = dict(kind=kind, message=message, phase=self.res["phase"])
        self.save()
        exit_now(0)

    @contextlib.contextmanager
    def cuda_errors(self, prefix=""):
        """A CUDA error inside is the job's end: reported as kind "cuda"."""
        try:
            yield
        except Exception as e:
            self.die("cuda", f"{prefix}{type(e).__name__}: {e}")

    # -------------------------------------------------------------------------- steps
    def run(self):
        """The whole job, then exit."""
        self.open_context()
        if len(self.job["variants"]) > 1:
            self.phase("compiling your kernel's variants")
            prewarm(self.job, self.kernels)
        for vi, var in enumerate(self.job["variants"]):
            vres = {"label": var["label"], "cases": [], "compile_error": None}
            self.res["variants"].append(vres)
            if self.compile(var, vres) is None:
                continue
            for ci, case in enumerate(self.job["cases"]):
                if not self.run_case(vi, ci, case, var, vres):
                    break             # the next cases of this variant would tell nothing new
            if self.job["stop_on_failure"] and not all(c.get("ok") for c in vres["cases"]):
                break
        self.res["done"] = True
        self.phase("done")
        exit_now(0)

    def open_context(self):
        self.phase("creating a CUDA context")
        try:
            from ..device import context
            context()
            import pycuda.driver as cuda
        except NoGPUError as e:
            self.die("nogpu", str(e))
        except Exception as e:
            self.die("context", f"could not create a CUDA context ({type(e).__name__}: {e}); if "
                                f"the GPU is in exclusive-process compute mode, no second process "
                                f"can use it")
        from .. import kernels
        self.cuda, self.kernels = cuda, kernels
        self.memory = GuardedBuffers(cuda)
        self.scramble = Scrambler(cuda, kernels)

    def compile(self, var, vres, options=None):
        """The student's kernel compiled with the variant's defines (self.fn), or None."""
        label = var["label"]
        self.phase(f"compiling your kernel ({label})" if label else "compiling your kernel")
        try:
            mod = self.kernels.compile_source(self.job["source"], self.job["filename"],
                                              var["defines"], extra_options(self.job)
                                              if options is None else options)
        except KernelCompileError as e:
            if len(self.job["variants"]) == 1:
                self.die("compile", str(e))
            vres["compile_error"] = str(e)
            self.save()
            return None
        try:
            self.fn = mod.get_function(self.job["function"])
        except Exception as e:
            self.die("symbol", f"{type(e).__name__}: {e}")
        case0 = self.job["cases"][0]
        self.fn.prepare("".join(case0["scalars"][n][0] if n in case0["scalars"] else "P"
                                for n in case0["args"]))
        return self.fn

    def carveout(self, percent):
        """The correctness runs use all of the SM's memory as shared memory, like the scrambler,
        so that no reconfiguration between the two kernels hides the scrambled values; the
        timing runs use the default (-1), like the reference kernel. False if refused."""
        try:
            self.fn.set_attribute(self.cuda.function_attribute.PREFERRED_SHARED_MEMORY_CARVEOUT,
                                  percent)
            return True
        except Exception:
            return False

    def run_case(self, vi, ci, case, var, vres):
        """Runs, comparisons, guard zones and inputs of one case, then its timing; ok?"""
        cres = {"label": case["label"], "outputs": {}, "guards": {}, "mismatches": {}}
        vres["cases"].append(cres)
        geo = case["launch"][vi]
        self.phase(f"allocating the buffers for {case['label']}")
        args = self.memory.args(ci, case, case["args"])
        runs = case["runs"]
        if runs > 1:
            self.carveout(100)
        ok, run = True, 0
        while run < runs:
            self.phase(f"running your kernel at {case['label']} (run {run + 1} of {runs})")
            ok = self.run_once(vi, ci, case, geo, args, run, runs > 1, cres) and ok
            if run == 0 and runs > 1 and any(cres["mismatches"].values()):
                runs += 2                  # wrong: two more runs, to tell a race apart
            run += 1
        if runs > 1 and not self.carveout(-1):
            # could not restore the default: a fresh module (from PyCUDA's cache) has it
            self.compile(var, vres, options=())
        ok = self.check_inputs(ci, case, cres) and ok
        cres["ok"] = ok
        self.save()
        if ok and case["time"]:
            self.time_case(ci, case, geo, args, cres)
        return ok

    def run_once(self, vi, ci, case, geo, args, run, scramble, cres):
        """One launch on fresh poison; its outputs checked and saved: all right?"""
        if scramble:
            self.scramble(run)
        self.memory.reset_outputs(ci, case)
        with self.cuda_errors():
            self.fn(*args, grid=tuple(geo["grid"]), block=tuple(geo["block"]))
            self.cuda.Context.synchronize()
        ok = True
        for name in case["outputs"]:
            with self.cuda_errors():
                h, g, shape = self.memory.read(ci, name)
            n = h.size - 2 * g
            info = guard_report(h, g, n, OUT_GUARD_BITS)
            if info:
                cres["guards"][name] = info
                ok = False
            out = h[g:g + n].view(np.float32).reshape(shape)
            keep = vi == 0 and (case["save_outputs"] or run == 0)
            if run == 0:
                m = count_bad(out, np.load(case["expected"][name], mmap_mode="r"), case["tol"])
                cres["mismatches"][name] = m
                ok = ok and not m
                keep = keep and (case["save_outputs"] or m)
            elif vi == 0 and case["save_outputs"]:
                first = np.load(cres["outputs"][name][0])
                ok = ok and bool(close(out, first, case["tol"]).all())
            if keep:
                path = self.jobdir / f"out-{ci}-{name}-{run}.npy"
                np.save(path, out)
                cres["outputs"].setdefault(name, []).append(str(path))
        return ok

    def check_inputs(self, ci, case, cres):
        """Did the kernel change an input, or write around one? (only where the case asks)"""
        if not case["check_inputs"]:
            return True
        changed, ok = {}, True
        for name in case["inputs"]:
            with self.cuda_errors():
                h, g, _ = self.memory.read(ci, name)
            tmpl = self.memory.template(ci, name)
            n = h.size - 2 * g
            inner = int((h[g:g + n] != tmpl[g:g + n]).sum())
            if inner:
                changed[name] = inner
            info = guard_report(h, g, n, IN_GUARD_BITS)
            if info:
                cres["guards"][name] = info
            ok = ok and not inner and not info
        if changed:
            cres["inputs_changed"] = changed
        return ok

    def time_case(self, ci, case, geo, args, cres):
        """The student's kernel and the reference, interleaved: their times in cres."""
        from .. import bench
        fns = {}
        ref = self.reference(ci, case)
        if ref:
            cres["reference_label"], fns["reference"] = ref
        grid, block, fn = tuple(geo["grid"]), tuple(geo["block"]), self.fn
        fns = {"yours": lambda: fn.prepared_call(grid, block, *args), **fns}
        self.phase(f"timing your kernel at {case['label']}" +
                   (" against the reference" if ref else ""))
        with self.cuda_errors():
            t = bench.interleaved(fns, repeats=self.job["repeats"], warmup=3)
        cres["times"] = {name: t[name].times_ms for name in t}
        cres["time_ms"] = t["yours"].median_ms
        if ref:
            cres["reference_ms"] = t["reference"].median_ms
        self.save()

    def reference(self, ci, case):
        """(label, launcher) of the case's reference kernel, at its best block size when the
        job asks (chosen once per case), or None when the case has none."""
        spec = case["reference"]
        if spec is None:
            return None
        if ci not in self.references:
            from .. import bench
            shape = case["shape"]
            if spec.get("block_size") == "best":
                self.phase(f"finding kernel {spec['softmax_backward']}'s best block size at "
                           f"{case['label']}")
            else:
                self.phase(f"preparing the reference kernel at {case['label']}")

            def sweep(sizes):
                return {bs: bench.benchmark(self.reference_call(ci, case, reference_launch(
                    spec, shape, bs)), repeats=self.job["repeats"], warmup=3) for bs in sizes}
            with self.cuda_errors("(in the reference kernel) "):
                gpu = self.cuda.Context.get_device().name()
                bs, how = choose_block_size(spec, shape, gpu, sweep) if "softmax_backward" \
                    in spec else (None, None)
                launch = reference_launch(spec, shape, bs, how)
                self.references[ci] = (launch["label"], self.reference_call(ci, case, launch))
        return self.references[ci]

    def reference_call(self, ci, case, launch):
        """A function that launches the reference on the case's inputs and outputs of its own."""
        rfn = self.kernels.get_function(launch["kernel"], launch["function"],
                                        **launch["defines"])
        outs = self.reference_outputs
        if ci not in outs:
            outs[ci] = {n: self.cuda.mem_alloc(4 * int(np.prod(s["shape"])))
                        for n, s in case["outputs"].items()}
        rargs = self.memory.args(ci, case, launch["args"],
                                 {n: np.intp(int(d)) for n, d in outs[ci].items()})
        rfn.prepare(arg_types(rargs))
        grid, block = tuple(launch["grid"]), tuple(launch["block"])
        return lambda: rfn.prepared_call(grid, block, *rargs)


def extra_options(job):
    """-lineinfo when the kernel will run under compute-sanitizer, so it can name the line."""
    return ["-lineinfo"] if job["lineinfo"] else []


def prewarm(job, kernels):
    """Compile all variants at once, in threads, into PyCUDA's cache (errors come later)."""
    try:
        from concurrent.futures import ThreadPoolExecutor

        from pycuda.compiler import compile as pycuda_compile

        from ..device import arch
        a = arch()
        src = kernels.with_line(job["source"], job["filename"])

        def one(defines):
            try:
                pycuda_compile(src, options=kernels.nvcc_options(defines, extra_options(job)),
                               no_extern_c=True, arch=a, include_dirs=[str(kernels.KERNEL_DIR)])
            except Exception:
                pass
        with ThreadPoolExecutor(max(1, min(8, os.cpu_count() or 1))) as pool:
            list(pool.map(one, [v["defines"] for v in job["variants"]]))
    except Exception:
        pass


def main(jobdir):
    """The child's entry point: run the job in ``jobdir`` (never returns)."""
    Runner(jobdir).run()
