"""The GPU: is there one, its CUDA context, and what it is.

PyCUDA is imported only here and only when a GPU call is made, so ``import attnlab``
works on a machine with no GPU and no PyCUDA. attnlab uses the device's *primary*
context (``pycuda.autoprimaryctx``), the one the CUDA runtime and so cuBLAS use too:
kernels launched from PyCUDA and GEMMs run by cuBLAS then share memory and the
default stream, in order.
"""
import functools

from .errors import NoGPUError


@functools.lru_cache(maxsize=None)
def gpu_status():
    """(True, device name) if a CUDA GPU can be used from PyCUDA, else (False, why not)."""
    try:
        import pycuda.driver as cuda
    except ImportError as e:
        return False, f"PyCUDA is not importable ({e}); install attnlab[gpu] on a machine with CUDA"
    except OSError as e:
        return False, f"no CUDA driver ({e})"
    try:
        cuda.init()
        if cuda.Device.count() == 0:
            return False, "the CUDA driver reports no GPU"
        return True, cuda.Device(0).name()
    except Exception as e:  # pycuda raises its own LogicError/RuntimeError subclasses
        return False, f"no usable CUDA GPU ({type(e).__name__}: {e})"


def has_gpu():
    """True when GPU calls can run here."""
    return gpu_status()[0]


def require_gpu(what="this call"):
    """Raise NoGPUError, saying why, unless a GPU can be used."""
    ok, why = gpu_status()
    if not ok:
        raise NoGPUError(f"{what} needs a CUDA GPU: {why}")


def context():
    """The device's primary context, made current (created on first use)."""
    require_gpu()
    import pycuda.autoprimaryctx as primary
    return primary.context


@functools.lru_cache(maxsize=None)
def l2_cache_bytes():
    """GPU 0's L2 cache in bytes: a fixed property of the GPU, read once (calling device_info on
    every kernel-20 launch made each call 1 to 2 ms slower on the H200)."""
    context()
    import pycuda.driver as cuda
    return cuda.Device(0).get_attribute(cuda.device_attribute.L2_CACHE_SIZE)


def device_info():
    """A dict describing GPU 0: name, compute capability, SMs, memory, L2, versions."""
    context()
    import pycuda.driver as cuda
    dev = cuda.Device(0)
    attr = cuda.device_attribute
    free, total = cuda.mem_get_info()
    major, minor = dev.compute_capability()
    return {
        "name": dev.name(),
        "compute_capability": f"{major}.{minor}",
        "arch": f"sm_{major}{minor}",
        "sms": dev.get_attribute(attr.MULTIPROCESSOR_COUNT),
        "memory_total_bytes": total,
        "memory_free_bytes": free,
        "l2_cache_bytes": l2_cache_bytes(),
        "clock_mhz": dev.get_attribute(attr.CLOCK_RATE) // 1000,
        "memory_clock_mhz": dev.get_attribute(attr.MEMORY_CLOCK_RATE) // 1000,
        "memory_bus_bits": dev.get_attribute(attr.GLOBAL_MEMORY_BUS_WIDTH),
        "driver_version": _version(cuda.get_driver_version()),
        "cuda_version": ".".join(str(v) for v in cuda.get_version()),
    }


def _version(v):
    """CUDA's integer version (13000) as text (13.0)."""
    return f"{v // 1000}.{(v % 1000) // 10}"


def arch():
    """The current device's architecture, e.g. 'sm_90'."""
    context()
    import pycuda.driver as cuda
    major, minor = cuda.Device(0).compute_capability()
    return f"sm_{major}{minor}"


def free_memory():
    """(free, total) bytes of GPU memory now."""
    context()
    import pycuda.driver as cuda
    return cuda.mem_get_info()
