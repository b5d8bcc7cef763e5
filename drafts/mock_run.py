"""A prepared experiment script's Python, run with PyCUDA and the GPU faked, before it costs device
time (twentieth session): every launch checks its argument count and types against the format its
function was prepared with, and that the compiled source has the kernel it asks for; memory is numpy
zeros, memsets do nothing, compilation returns the source, timings are made up. It catches names,
arguments and control flow, not numbers: a check that compares GPU results passes or fails on zeros.
From the repository root:

    python drafts/mock_run.py . results/h200/experiments/k23_dqwrite_script.py.txt     # OUT: /tmp/mockrun/out
"""
import runpy, sys, types, os, random
import numpy as np
repo, script = sys.argv[1], sys.argv[2]
sys.argv = [script] + sys.argv[3:]
os.chdir(repo); sys.path[:0] = [repo, os.path.join(repo, "benchmarks")]
LAUNCHES = []

class Alloc(int):
    def free(self): pass
_next = [1 << 32]
class GA:
    def __init__(self, shape, dtype=np.float32):
        self.shape = tuple(shape) if isinstance(shape, (tuple, list)) else (shape,)
        self.a = np.zeros(self.shape, dtype); self.size = self.a.size; self.dtype = self.a.dtype
        self.gpudata = Alloc(_next[0]); _next[0] += (4 * self.size + 511) // 256 * 256   # cudaMalloc: 256-byte aligned
    def get(self): return self.a.copy()
    def set(self, h): assert h.shape == self.a.shape, (h.shape, self.a.shape); self.a[...] = h
gpuarray = types.ModuleType("pycuda.gpuarray"); gpuarray.empty = GA; gpuarray.zeros = GA
drv = types.ModuleType("pycuda.driver")
drv.memset_d32 = lambda p, v, n: LAUNCHES.append(("memset", int(p), n))
drv.memset_d2d32 = lambda *a: LAUNCHES.append(("memset2d",))
class Ctx:
    @staticmethod
    def synchronize(): pass
drv.Context = Ctx
drv.function_attribute = types.SimpleNamespace(MAX_DYNAMIC_SHARED_SIZE_BYTES=1, PREFERRED_SHARED_MEMORY_CARVEOUT=2)
pycuda = types.ModuleType("pycuda"); pycuda.driver = drv; pycuda.gpuarray = gpuarray
apc = types.ModuleType("pycuda.autoprimaryctx"); apc.context = None
sys.modules.update({"pycuda": pycuda, "pycuda.driver": drv, "pycuda.gpuarray": gpuarray, "pycuda.autoprimaryctx": apc})

class Fn:
    def __init__(self, name): self.name, self.fmt, self.num_regs, self.local_size_bytes = name, None, 248, 0
    def prepare(self, fmt): self.fmt = fmt; return self
    def set_attribute(self, *a): pass
    def prepared_call(self, grid, block, *args, shared_size=0):
        assert self.fmt is not None, f"{self.name}: not prepared"
        assert len(args) == len(self.fmt), f"{self.name}: {len(args)} args for format {self.fmt!r}"
        for c, a in zip(self.fmt, args):
            if c == "P": assert isinstance(a, (int, np.integer)) and not isinstance(a, bool), (self.name, c, a)
            elif c == "i": assert isinstance(a, (int, np.integer)), (self.name, c, a)
            elif c == "f": assert isinstance(a, (float, np.floating)), (self.name, c, a)
        assert len(grid) == 3 and len(block) == 3, (grid, block)
        LAUNCHES.append((self.name, self.fmt, grid))
class Mod:
    def __init__(self, src): self.src = src
    def get_function(self, name):
        assert f"{name}(" in self.src, f"no {name} in the source"
        return Fn(name)

class CubinMod:                    # drv.module_from_buffer: a cubin's kernel, found by its symbol
    def __init__(self, image): self.image = bytes(image)
    def get_function(self, name):
        assert name.encode() + b"\0" in self.image, f"no {name} in the cubin"
        return Fn(name)
drv.module_from_buffer = CubinMod

from attnlab import device, buffers, kernels, fused, bench
for m in (device, buffers, fused):
    for n, f in (("context", lambda: None), ("require_gpu", lambda: None), ("free_memory", lambda: (140e9, 141e9)),
                 ("l2_cache_bytes", lambda: 60 * 2**20), ("arch", lambda: "sm_90"),
                 ("device_info", lambda: {"name": "FAKE (mock run, no GPU)", "compute_capability": (9, 0)})):
        if hasattr(m, n): setattr(m, n, f)
kernels.compile_source = lambda src, *a, **k: Mod(src)
def get_function(source, name, **defines):
    src = kernels.kernel_source(source) if hasattr(kernels, "kernel_source") else ""
    return Mod(src).get_function(name)
kernels.get_function = get_function
fused.check_supported = lambda *a, **k: None
def interleaved(fns, repeats=20, warmup=2, **kw):
    for _ in range(warmup):
        for f in fns.values(): f()
    out = {}
    for n, f in fns.items():
        f()
        out[n] = bench.Timing.of([random.uniform(0.1, 0.11) for _ in range(repeats)])
    return out
bench.interleaved = interleaved
import ctypes                      # the driver's cuTensorMapEncodeTiled (tma_check's encode_tiled): succeeds
class FakeCuda:                    # and the rest of the driver API by ctypes (k23_pdl: cuLaunchKernelEx ...): succeeds
    def __getattr__(self, name):
        def f(*a):
            if name == "cuCtxGetCurrent":
                a[0]._obj.value = 1      # a current context
            return 0
        f.restype = f.argtypes = None
        return f
_cdll = ctypes.CDLL
ctypes.CDLL = lambda name, *a, **k: FakeCuda() if name.startswith("libcuda") else _cdll(name, *a, **k)
drv.to_device = lambda h: Alloc(_next[0])
drv.mem_alloc = lambda n: Alloc(_next[0])
drv.memcpy_dtoh = lambda h, d: None
compiler = types.ModuleType("pycuda.compiler")   # nvcc is not run: the "cubin" is the source
def _nvcc(src, options=(), arch="sm_90a", include_dirs=(), **k):
    """The real cubin (nvcc runs here, nothing is launched), for code that reads it (attnlab.cubin)."""
    import subprocess, tempfile
    with tempfile.TemporaryDirectory() as d:
        open(f"{d}/k.cu", "w").write(src)
        subprocess.run(["nvcc", "-cubin", f"-arch={arch}", *options, *(f"-I{i}" for i in include_dirs),
                        f"{d}/k.cu", "-o", f"{d}/k.cubin"], check=True)
        return open(f"{d}/k.cubin", "rb").read()
import shutil                                     # a real cubin where nvcc is here (attnlab.cubin reads it); MOCK_NVCC=0: the source
compiler.compile = _nvcc if shutil.which("nvcc") and os.environ.get("MOCK_NVCC") != "0" else lambda src, **k: src.encode()
compiler.SourceModule = lambda src, **k: Mod(src)
drv.CompileError = type("CompileError", (Exception,), {})
sys.modules["pycuda.compiler"] = compiler
os.environ.setdefault("OUT", "/tmp/mockrun/out"); os.makedirs(os.environ["OUT"], exist_ok=True)
try:
    runpy.run_path(script, run_name="__main__")
finally:
    from collections import Counter
    print("launches:", Counter(x[0] for x in LAUNCHES))
