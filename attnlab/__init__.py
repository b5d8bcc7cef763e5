"""attnlab: causal self-attention on the GPU, step by step, with PyCUDA.

Works without a GPU for the CPU parts (``attnlab.reference``, ``attnlab.validate``,
``attnlab.problem``); GPU calls import PyCUDA when first used and raise
``attnlab.errors.NoGPUError`` with the reason when there is no GPU.
"""
from .checks import BLOCK_SIZES, KERNELS
from .device import device_info, has_gpu, require_gpu
from .errors import (AttnlabError, GPUMemoryError, InputError, KernelCompileError,
                     NoGPUError, NvccNotFoundError, SetupError, UnsupportedGPUError,
                     ValidationError)
from .problem import DEFAULT_SHAPE, make_inputs, make_problem
from .reference import attention_backward, attention_forward
from .validate import compare, validate

__version__ = "0.1.0"
