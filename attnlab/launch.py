"""Launch geometry: the grid, block and compile-time defines of every kernel.

One table, so a notebook can show a student exactly how each softmax-backward
version is launched, and the checks happen before any launch.
"""
from .checks import check_block_size, check_kernel


def ceil_div(a, b):
    return -(-a // b)


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
    defines = {"BLOCK_SIZE": bs} if kernel >= 6 else {}
    return grid + (1,), (bs, 1, 1), defines


def elementwise_launch(n, block_size):
    """(grid, block) for a one-thread-per-element kernel over n elements."""
    bs = check_block_size(block_size)
    return (ceil_div(n, bs), 1, 1), (bs, 1, 1)


def softmax_forward_launch(N, T, block_size=256):
    """(grid, block) for softmax_forward_kernel5: a warp per row of the N·T rows."""
    bs = check_block_size(block_size)
    return (ceil_div(N * T * 32, bs), 1, 1), (bs, 1, 1)
