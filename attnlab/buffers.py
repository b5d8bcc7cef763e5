"""Device buffers both pipelines use (attention.py's materialized one and fused.py's): named
float32 GPUArrays allocated together after checking they fit, a memset fill, and the
pointers to q, k and v inside one (3, B, NH, T, HS) buffer."""
import numpy as np

from .checks import check_array
from .device import context, free_memory
from .errors import AttnlabError, GPUMemoryError, InputError


def check_fits(need, free, total, what):
    """Raise GPUMemoryError, before allocating, when ``need`` bytes exceed the free memory."""
    if need > free:
        raise GPUMemoryError(
            f"{what} needs {need:,} bytes ({need / 2**30:.2f} GiB) of GPU memory for its "
            f"buffers, but only {free:,} bytes ({free / 2**30:.2f} GiB) of "
            f"{total / 2**30:.2f} GiB are free")


class DeviceBuffers:
    """Named float32 GPUArrays allocated together: ``buf.att``, ``buf.get('att')``...

    Use as a context manager, or call ``free()``, to give the memory back at once instead
    of when the object is collected. Base of attention.AttentionBuffers and fused.FusedBuffers.
    """
    arrays = {}

    def _allocate(self, shapes, what):
        """Allocate every buffer of ``shapes`` after checking they fit in free GPU memory."""
        context()
        need = sum(4 * int(np.prod(s)) for s in shapes.values())
        check_fits(need, *free_memory(), what=what)
        import pycuda.gpuarray as gpuarray
        self.names = tuple(shapes)
        self.arrays = {}
        try:
            for name, shape in shapes.items():
                self.arrays[name] = gpuarray.empty(shape, np.float32)
        except Exception:
            self.free()
            raise

    def __getattr__(self, name):
        arrays = self.__dict__.get("arrays")
        if arrays is not None and name in arrays:
            return arrays[name]
        if arrays == {} and name in self.__dict__.get("names", ()):
            raise AttnlabError(f"these {type(self).__name__} were freed: {name} is gone; "
                               f"allocate new ones")
        raise AttributeError(name)

    def _array(self, name):
        if not self.arrays:
            raise AttnlabError(f"these {type(self).__name__} were freed; allocate new ones")
        if name not in self.arrays:
            raise InputError(f"name must be one of the buffers {sorted(self.arrays)}, got {name!r}")
        return self.arrays[name]

    def get(self, name):
        """A numpy copy of one buffer."""
        return self._array(name).get()

    def set(self, name, host, finite=True):
        """Copy a numpy array of the right shape and dtype into one buffer.

        NaN and Inf are refused unless ``finite=False`` (e.g. to poison an output buffer,
        so that an element a kernel forgets to write shows up as NaN).
        """
        check_array(name, host, self._array(name).shape, finite=finite)
        self.arrays[name].set(host)

    def free(self):
        for a in self.arrays.values():
            a.gpudata.free()
        self.arrays = {}

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.free()


def fill(array, value):
    """Set every float of a GPUArray to value with a driver memset (no kernel to compile)."""
    import pycuda.driver as cuda
    bits = int(np.array(value, np.float32).view(np.uint32))
    cuda.memset_d32(array.gpudata, bits, array.size)


def qkv_pointers(qkvr, B, T, C):
    """Device pointers to q, k, v inside one (3, B, NH, T, HS) buffer."""
    base, n = int(qkvr.gpudata), B * T * C
    return base, base + 4 * n, base + 8 * n
