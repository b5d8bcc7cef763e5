"""Faults outside the values: writes into the guard zones, and CUDA errors in plain words."""
from .memory import GUARD_FLOATS


def describe_guards(name, info):
    """'wrote N floats past the end of X' from the child's guard-zone report."""
    out = []
    if info.get("after"):
        far = info["after_far"]
        further = "; maybe further: the checker watches 64 KiB" if far >= GUARD_FLOATS else ""
        out.append(f"your kernel wrote {info['after']} floats past the end of {name} (up to "
                   f"{far} floats beyond its last element{further}): "
                   f"a missing bounds check (if (idx < n)), or an index past the last row")
    if info.get("before"):
        far = info["before_far"]
        out.append(f"your kernel wrote {info['before']} floats before the start of {name} (up to "
                   f"{far} floats before its first element): a negative index?")
    return out


_CUDA_WORDS = [
    ("illegal memory access", "ILLEGAL_ADDRESS",
     "your kernel read or wrote outside the buffers (CUDA_ERROR_ILLEGAL_ADDRESS): an index past "
     "the end of a row or of a tensor, a negative index, or an int index that overflowed"),
    ("global/shared address space", "INVALID_ADDRESS_SPACE",
     "your kernel read or wrote outside the buffers, so far outside that the address is in no "
     "memory space at all (CUDA_ERROR_INVALID_ADDRESS_SPACE): an offset multiplied in twice, "
     "or an int index that overflowed"),
    ("misaligned address", "MISALIGNED_ADDRESS",
     "a load or store was not aligned to its size (CUDA_ERROR_MISALIGNED_ADDRESS): e.g. a float4 "
     "access at an address that is not a multiple of 16 bytes"),
    ("too many resources requested", "LAUNCH_OUT_OF_RESOURCES",
     "the block needs more registers (or shared memory) than an SM can give it "
     "(CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES): use fewer threads per block, or tell the compiler "
     "the block size with __launch_bounds__(BLOCK_SIZE)"),
    ("illegal instruction", "ILLEGAL_INSTRUCTION",
     "the GPU met an illegal instruction (CUDA_ERROR_ILLEGAL_INSTRUCTION): often a corrupted "
     "stack or a jump through a bad pointer"),
    ("device-side assert", "ASSERT", "an assert() in your kernel failed (CUDA_ERROR_ASSERT)"),
    ("unspecified launch failure", "LAUNCH_FAILED",
     "your kernel crashed (CUDA_ERROR_LAUNCH_FAILED): most often an access outside the buffers"),
    ("exceeds", "INVALID_VALUE", "the launch configuration is not allowed"),
    ("invalid argument", "INVALID_VALUE",
     "the launch was refused (CUDA_ERROR_INVALID_VALUE): a block of more than 1024 threads, a "
     "grid dimension of 0, or too much shared memory"),
    ("named symbol not found", "NOT_FOUND",
     "the compiled module has no kernel of that name: is it declared extern \"C\" __global__?"),
    ("out of memory", "OUT_OF_MEMORY", "the GPU ran out of memory (CUDA_ERROR_OUT_OF_MEMORY)"),
    ("no kernel image", "NO_BINARY_FOR_GPU", "the kernel was compiled for another GPU architecture"),
]


def cuda_error_words(text):
    """A CUDA error message from PyCUDA in plain words (the CUDA name kept in brackets)."""
    low = text.lower()
    for needle, name, words in _CUDA_WORDS:
        # PyCUDA's message holds the driver's description or the error's name, by version
        if needle in low or name.lower() in low or name.lower().replace("_", " ") in low:
            return words
    return f"CUDA reported an error: {text}"
