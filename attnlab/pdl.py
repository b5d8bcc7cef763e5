"""Programmatic dependent launch (PDL, sm_90): a kernel that may start while the one before it ends.

PyCUDA launches without launch attributes and hands out no CUfunction, so the kernels launched this
way are loaded and launched through the CUDA driver by ctypes: the cubin PyCUDA compiled
(kernels.cubin) is loaded with cuModuleLoadData in PyCUDA's context, and launched with
cuLaunchKernelEx and the attribute PROGRAMMATIC_STREAM_SERIALIZATION on the default stream, where
PyCUDA launches. The arguments are packed as a prepared PyCUDA Function packs them (struct formats
of fused.ARG_FORMATS). kernels/flash_attention24.cu's header says what the kernels do with it.
"""
import ctypes
import struct

from .errors import SetupError
from .libraries import DRIVER

PROGRAMMATIC_STREAM_SERIALIZATION = 6    # CUlaunchAttributeID (cuda.h)
MAX_DYNAMIC_SHARED_SIZE_BYTES = 8        # CUfunction_attribute
LAUNCH_PARAM_BUFFER_POINTER, LAUNCH_PARAM_BUFFER_SIZE, LAUNCH_PARAM_END = 1, 2, 0


class LaunchAttribute(ctypes.Structure):
    """CUlaunchAttribute: an id and a 64-byte value (here an int, 1: on)."""
    _fields_ = [("id", ctypes.c_uint32), ("pad", ctypes.c_char * 4), ("value", ctypes.c_char * 64)]


class LaunchConfig(ctypes.Structure):
    """CUlaunchConfig."""
    _fields_ = [("grid", ctypes.c_uint * 3), ("block", ctypes.c_uint * 3), ("shared", ctypes.c_uint),
                ("stream", ctypes.c_void_p), ("attrs", ctypes.POINTER(LaunchAttribute)),
                ("n_attrs", ctypes.c_uint)]


def driver():
    """The CUDA driver library (libcuda), or SetupError."""
    try:
        return ctypes.CDLL(DRIVER)
    except OSError as e:
        raise SetupError(f"programmatic dependent launch and tensor maps (attnlab.tma) call the CUDA driver "
                         f"directly, and {DRIVER} could not be loaded ({e}): it needs Linux with the NVIDIA driver") from None


def check_status(lib, status, what):
    """SetupError naming the driver call ``what`` unless ``status`` is CUDA_SUCCESS."""
    if status:
        name = ctypes.c_char_p()
        lib.cuGetErrorName(status, ctypes.byref(name))
        raise SetupError(f"{what} failed: {name.value.decode() if name.value else status}")


class DependentKernel:
    """One kernel of a cubin, launched with PDL: ``prepared_call(grid, block, *args, shared_size=0)``
    as a prepared PyCUDA Function is called. The kernel must run ``griddepcontrol.wait`` before it
    reads what the kernel launched before it writes."""

    def __init__(self, cubin, name, arg_format, shared_size=0):
        self.lib, self.name, self.arg_format = driver(), name, arg_format
        context = ctypes.c_void_p()
        check_status(self.lib, self.lib.cuCtxGetCurrent(ctypes.byref(context)), "cuCtxGetCurrent")
        if not context.value:
            raise SetupError(f"no CUDA context is current in this thread to load {name} into "
                             f"(attnlab.device.context() makes PyCUDA's)")
        self._image = ctypes.create_string_buffer(cubin, len(cubin))   # kept while the module lives
        self.module, self.function = ctypes.c_void_p(), ctypes.c_void_p()
        check_status(self.lib, self.lib.cuModuleLoadData(ctypes.byref(self.module), self._image), f"cuModuleLoadData ({name})")
        check_status(self.lib, self.lib.cuModuleGetFunction(ctypes.byref(self.function), self.module, name.encode()),
               f"cuModuleGetFunction ({name})")
        if shared_size > 48 * 1024:      # more than 48 KB of dynamic shared memory is an opt-in
            check_status(self.lib, self.lib.cuFuncSetAttribute(self.function, MAX_DYNAMIC_SHARED_SIZE_BYTES, shared_size),
                   f"cuFuncSetAttribute ({name}, {shared_size} bytes of shared memory)")
        self._attribute = LaunchAttribute(PROGRAMMATIC_STREAM_SERIALIZATION, b"", struct.pack("i", 1))

    def prepared_call(self, grid, block, *args, shared_size=0):
        params = struct.pack(self.arg_format, *args)
        buffer = ctypes.create_string_buffer(params, len(params))   # exactly the parameters' bytes
        size = ctypes.c_size_t(len(params))
        extra = (ctypes.c_void_p * 5)(LAUNCH_PARAM_BUFFER_POINTER, ctypes.addressof(buffer),
                                      LAUNCH_PARAM_BUFFER_SIZE, ctypes.addressof(size), LAUNCH_PARAM_END)
        config = LaunchConfig((ctypes.c_uint * 3)(*grid), (ctypes.c_uint * 3)(*block), shared_size, None,
                              ctypes.pointer(self._attribute), 1)
        check_status(self.lib, self.lib.cuLaunchKernelEx(ctypes.byref(config), self.function, None, extra),
               f"cuLaunchKernelEx ({self.name})")
