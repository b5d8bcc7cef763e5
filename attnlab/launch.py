"""Launch geometry: the grid, block and compile-time defines of every kernel.

One table, so a notebook can show a student exactly how each softmax-backward
version is launched, and the checks happen before any launch.
"""
from .checks import check_block_size, check_kernel


PER_BLOCK_SIZE_KERNELS = (6, 7, 8)   # compiled once per block size (-DBLOCK_SIZE=...)


def ceil_div(a, b):
    """The smallest integer >= a / b (for positive b): how many blocks of b cover a."""
    return -(-a // b)


def compiled_per_block_size(kernel):
    """True for the softmax-backward kernels whose source takes -DBLOCK_SIZE (6-8): each block
    size is its own compiled module."""
    return kernel in PER_BLOCK_SIZE_KERNELS


def block_size_defines(kernel, block_size):
    """The compile-time defines of softmax-backward ``kernel`` at ``block_size``."""
    return {"BLOCK_SIZE": block_size} if compiled_per_block_size(kernel) else {}


def softmax_backward_launch(kernel, B, T, NH, block_size):
    """(grid, block, defines) for softmax_autoregressive_backward_kernel<kernel>."""
    kernel = check_kernel(kernel)
    bs = check_block_size(block_size)
    rows = B * NH                       # one (b, h) pair per row of blocks, from kernel 2 on
    grid = {
        1: (ceil_div(T, bs), 1),        # a thread per t3, looping over every (b, h)
        2: (ceil_div(T, bs), rows),     # a thread per (t3, b, h)
        3: (ceil_div(32 * T, bs), rows),    # a warp per t3
        4: (ceil_div(4 * T, bs), rows),     # a warp per 8 values of t3
        5: (ceil_div(4 * T, bs), rows),
        6: (T, rows),                   # a block per row t
        7: (T, rows),
        8: (T // 4, rows),              # a block per 4 rows
    }[kernel]
    return grid + (1,), (bs, 1, 1), block_size_defines(kernel, bs)


def elementwise_launch(n, block_size):
    """(grid, block) for a one-thread-per-element kernel over n elements."""
    bs = check_block_size(block_size)
    return (ceil_div(n, bs), 1, 1), (bs, 1, 1)


def softmax_forward_launch(N, T, block_size=256):
    """(grid, block) for softmax_forward_kernel5: a warp per row of the N·T rows."""
    bs = check_block_size(block_size)
    return (ceil_div(N * T * 32, bs), 1, 1), (bs, 1, 1)
