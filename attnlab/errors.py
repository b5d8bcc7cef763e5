"""The exceptions attnlab raises, each one naming what went wrong and what was expected."""


class AttnlabError(Exception):
    """Base class of every error attnlab raises on purpose."""


class InputError(AttnlabError, ValueError):
    """An argument has the wrong shape, dtype, value or layout."""


class NoGPUError(AttnlabError, RuntimeError):
    """No CUDA GPU (or no PyCUDA) is available for a GPU call."""


class NvccNotFoundError(AttnlabError, RuntimeError):
    """nvcc, needed to compile the kernels, is not on PATH."""


class KernelCompileError(AttnlabError, RuntimeError):
    """nvcc rejected a kernel source; the message carries nvcc's output with file and line."""


class GPUMemoryError(AttnlabError, MemoryError):
    """A problem needs more GPU memory than is free; said before allocating."""


class ValidationError(AttnlabError, AssertionError):
    """A GPU result disagrees with the CPU reference beyond the tolerance."""


class SetupError(AttnlabError, RuntimeError):
    """A piece the GPU path needs (a package, a CUDA library) is missing or unusable; the
    message says which, where attnlab looked, and what to install."""


class UnsupportedGPUError(AttnlabError, RuntimeError):
    """This GPU lacks what a kernel needs (shared memory per block, tensor cores); the message
    says what, and what runs instead. Said before any allocation or launch."""
