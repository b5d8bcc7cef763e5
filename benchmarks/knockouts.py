"""What the knock-out benchmarks (fused_k12_costs.py, fused_copies.py) share: a fused backward
kernel's source with flash_wgmma.cuh inlined (so that it can be changed too) and texts replaced,
and that variant's flash_backward compiled for sm_90a and prepared to launch like the kernel.
The files in kernels/ are untouched; the variants compute wrong results on purpose."""
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))   # run from a checkout

from attnlab import fused, kernels

HEADER = "flash_wgmma.cuh"


def variant_source(kernel, replacements):
    """kernels/flash_attention<kernel>.cu with flash_wgmma.cuh inlined and each (old, new)
    replaced; each old text must occur exactly once (else the kernel changed under the
    benchmark, and the knock-out would silently measure nothing)."""
    header = (kernels.KERNEL_DIR / HEADER).read_text().replace("#pragma once", "")
    src = kernels.kernel_source(f"flash_attention{kernel}").replace(f'#include "{HEADER}"', header)
    for old, new in replacements:
        if src.count(old) != 1:
            raise AssertionError(f"{old!r} occurs {src.count(old)} times in kernel {kernel}'s source")
        src = src.replace(old, new)
    return src


def compiled(kernel, replacements):
    """The variant's flash_backward, prepared with the kernel's arguments and allowed its
    shared memory (needs a GPU that runs it: sm_90)."""
    import pycuda.driver as cuda
    module = kernels.compile_source(variant_source(kernel, replacements),
                                    f"flash_attention{kernel}_variant.cu",
                                    {"HEAD_SIZE": 64, "TF32": 1}, specific=True)
    fn = module.get_function("flash_backward")
    fn.prepare(fused.backward_arg_format(kernel))
    fn.set_attribute(cuda.function_attribute.MAX_DYNAMIC_SHARED_SIZE_BYTES,
                     fused.shared_memory_bytes("flash_backward", True, kernel))
    return fn
