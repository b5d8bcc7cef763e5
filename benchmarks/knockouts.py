"""What the knock-out benchmarks (fused_k12_costs.py, fused_copies.py, fused_dq.py) share: a fused
backward kernel's source with its headers inlined (so that they can be changed too) and texts
replaced, that variant's flash_backward compiled for sm_90a and prepared to launch like the
kernel, the timing of TILED variants' flash_backward alone, and the SASS opcodes of a kernel.
The files in kernels/ are untouched; the variants compute wrong results on purpose."""
import argparse
import re
import shutil
import subprocess
import sys
import tempfile
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))   # run from a checkout

import numpy as np

from attnlab import bench, fused, kernels
from attnlab.buffers import qkv_pointers
from attnlab.checks import check_int, parse_list
from attnlab.problem import DEFAULT


def arguments(doc, argv=None, T="1024,4096,16384"):
    """(Ts, repeats, json path or None) from a knock-out benchmark's command line: --T, --repeats,
    --json; ``doc``: the script's docstring (its first line is the description)."""
    p = argparse.ArgumentParser(description=doc.split("\n")[0])
    p.add_argument("--T", default=T)
    p.add_argument("--repeats", type=int, default=10)
    p.add_argument("--json", default=None)
    args = p.parse_args(argv)
    Ts = parse_list(args.T, "--T", None, lambda v: check_int("--T", int(v)))
    return Ts, check_int("--repeats", args.repeats), args.json

# Inlined where the kernel includes them, without their includes of each other (so a kernel must
# include flash_wgmma.cuh itself, as every wgmma kernel does).
HEADERS = ("copy_engine.cuh", "flash_wgmma.cuh")


def variant_source(kernel, replacements):
    """kernels/flash_attention<kernel>.cu with HEADERS inlined (where it includes them) and each
    (old, new) replaced; each old text must occur exactly once (else the kernel changed under
    the benchmark, and the knock-out would silently measure nothing)."""
    src = kernels.kernel_source(f"flash_attention{kernel}")
    for name in HEADERS:
        text = (kernels.KERNEL_DIR / name).read_text().replace("#pragma once", "")
        for other in HEADERS:
            text = text.replace(f'#include "{other}"\n', "")
        src = src.replace(f'#include "{name}"', text)
    for old, new in replacements:
        if src.count(old) != 1:
            raise AssertionError(f"{old!r} occurs {src.count(old)} times in kernel {kernel}'s source")
        src = src.replace(old, new)
    return src


def compiled(kernel, replacements):
    """The variant's flash_backward, prepared with the kernel's arguments and allowed its
    shared memory (needs a GPU that runs it: sm_90), in the kernel's precision."""
    import pycuda.driver as cuda
    tf32 = fused.precisions(kernel)[-1]        # TF32 kernels: TF32; kernel 18: its 3xTF32
    module = kernels.compile_source(variant_source(kernel, replacements),
                                    f"flash_attention{kernel}_variant.cu",
                                    {"HEAD_SIZE": 64, "TF32": int(tf32)}, specific=True)
    fn = module.get_function("flash_backward")
    fn.prepare(fused.backward_arg_format(kernel))
    fn.set_attribute(cuda.function_attribute.MAX_DYNAMIC_SHARED_SIZE_BYTES,
                     fused.shared_memory_bytes("flash_backward", tf32, kernel))
    return fn


def measure_tiled(T, variants, repeats):
    """{name: median and quartiles (ms)} of each variant's flash_backward alone at B=4 NH=12
    HS=64 and this T, interleaved (attnlab.bench.interleaved: CUDA events, L2 flushed); variants
    is {name: (kernel, compiled function)} of TILED kernels. The query tiles and D are prepared
    once before; dq (dinp's columns, or DQ_TILED kernels' dq_tiles) is zeroed before each call."""
    import pycuda.driver as cuda
    B, C, NH = DEFAULT.B, DEFAULT.C, DEFAULT.NH
    rng = np.random.default_rng(0)
    with fused.FusedBuffers(B, T, C, NH) as buf:
        buf.set("inp", rng.uniform(-1, 1, (B, T, 3 * C)).astype(np.float32))
        buf.set("dout", rng.uniform(-1, 1, (B, T, C)).astype(np.float32))
        fused.fused_forward(buf, True)
        fused.fused_backward(buf, True, 13)      # the query tiles and D, as the backward makes them
        q, k, v = qkv_pointers(buf.qkvr, B, T, C)
        tiles = int(buf.kernel_buffers(13)["tiles"].gpudata)
        lse, D, dinp = int(buf.lse.gpudata), int(buf.D.gpudata), int(buf.dinp.gpudata)
        dq_tiles = (buf.kernel_buffers(fused.DQ_TILED[0])["dq_tiles"]
                    if any(kernel in fused.DQ_TILED for kernel, _ in variants.values()) else None)

        def launch(kernel, fn):
            grid, block, shared = fused.fused_launch(B, T, NH, True, kernel)["flash_backward"]
            args = (tiles, k, v, lse, D, T, NH, np.float32(1 / 8))
            if kernel in fused.DQ_TILED:
                cuda.memset_d32(int(dq_tiles.gpudata), 0, dq_tiles.size)
                fn.prepared_call(grid, block, dinp, int(dq_tiles.gpudata), *args, shared_size=shared)
            else:
                cuda.memset_d2d32(dinp, 4 * 3 * C, 0, C, B * T)
                fn.prepared_call(grid, block, dinp, *args, shared_size=shared)
        timings = bench.interleaved({n: (lambda k=k, f=f: launch(k, f)) for n, (k, f) in variants.items()},
                                    repeats=repeats, warmup=2)
    return {n: {"median_ms": t.median_ms, "q1_ms": float(t.quartiles_ms[0]),
                "q3_ms": float(t.quartiles_ms[1])} for n, t in timings.items()}


def sass_counts(kernel, ops=None, replacements=()):
    """{opcode: count} of each of ``ops`` in kernel ``kernel``'s flash_backward SASS (sm_90a;
    an opcode counts its variants, BAR.SYNC includes BAR.SYNC.DEFER_BLOCKING; ops=None: every
    opcode as it is spelled), or None without cuobjdump. With ``replacements``, of that variant
    (variant_source) instead of the kernel's file."""
    cuobjdump = shutil.which("cuobjdump")
    if cuobjdump is None:
        return None
    with tempfile.TemporaryDirectory() as tmp:
        cubin, source = Path(tmp) / "k.cubin", kernels.kernel_path(f"flash_attention{kernel}")
        if replacements:
            source = Path(tmp) / "variant.cu"
            source.write_text(variant_source(kernel, replacements))
        subprocess.run([kernels.require_nvcc(), "-cubin", "-gencode=arch=compute_90a,code=sm_90a",
                        *kernels.nvcc_options({"HEAD_SIZE": 64, "TF32": int(fused.precisions(kernel)[-1])}),
                        f"-I{kernels.KERNEL_DIR}", "-o", str(cubin), str(source)],
                       check=True, capture_output=True)
        sass = subprocess.run([cuobjdump, "-sass", "-fun", "flash_backward", str(cubin)],
                              check=True, capture_output=True, text=True).stdout
    found = Counter(m.group(1) for m in re.finditer(r"/\*[0-9a-f]{4,}\*/\s+(?:@!?U?P\w+\s+)?([A-Z][A-Z0-9_.]*)", sass))
    if ops is None:
        return dict(found)
    return {op: sum(n for o, n in found.items() if o == op or o.startswith(op + ".")) for op in ops}
