"""Fused causal attention (FlashAttention-2 style): no T×T buffer, forward and backward.

Forward:  inp (B,T,3C) --permute--> q,k,v (B,NH,T,HS) --flash_forward--> o (B,NH,T,HS)
          and lse (B,NH,T) --unpermute--> out (B,T,C)
Backward: dout (B,T,C) --unpermute_backward--> do (B,NH,T,HS)
          --flash_backward_preprocess--> D = rowsum(do ∘ o) (B,NH,T)
          --flash_backward--> dq, dk, dv (B,NH,T,HS) --permute_backward--> dinp (B,T,3C)
          (from kernel 13 on, TILED: dout, q, o --flash_backward_prep--> query tiles and D
          --flash_backward--> dinp (B,T,3C), without the permutes; from 15, DQ_TILED, add dQ into
          dq_tiles, which --flash_backward_dq--> writes into dinp; from 24, PDL, launch the last two
          by programmatic dependent launch: attnlab.pdl; from 25, PREP_ZEROES, their prep zeroes
          dq_tiles instead of a memset; from 26, KV_MAPS, take K and V, and from 27, Q_MAPS, Q too,
          as tensor maps: attnlab.tma; DQ_WARPGROUP, from 29, computes dQ in a warpgroup of its own.
          The tables, derived from BACKWARDS, say which kernels are which.)

Every buffer grows like T: at B=4 NH=12 T=16384, where the materialized pipeline would need
four 51.5 GB T×T tensors, these take 3.2 GB in all. The kernels (kernels/flash_attention.cu,
whose header explains the algorithm) recompute each tile of the attention matrix from q, k
and the per-row log-sum-exp ``lse`` instead of storing it. They come in two precisions:
``tf32=False`` (fp32 FMAs on CUDA cores) and ``tf32=True`` (TF32 tensor cores, sm_80 and
newer, with the looser tolerances in FUSED_TOLERANCES). Head size 64 only.

Backward kernels 9 and 10 are deterministic: no atomics, each gradient element has one
writer, so the same inputs give bit-identical dinp run after run; from kernel 11 on they add dQ
with atomics or bulk reductions into a buffer zeroed first (DETERMINISTIC). Kernels 10 and 11 also
run fp32-accurate on tensor cores (3xTF32); from 12 on they run on Hopper's wgmma (WGMMA_KERNELS), in
TF32 only but for kernel 18, which runs in 3xTF32 only (precisions()). Like attention.py,
every call is idempotent: nothing needs clearing between calls.
"""
import functools
import sys
from functools import partial
from typing import NamedTuple

import numpy as np

from . import kernels
from .buffers import DeviceBuffers, check_fits, qkv_pointers
from .checks import MAX_INT32, check_array, check_int, check_kernel, check_qkv, check_shape, check_tf32
from .device import context, free_memory, l2_cache_bytes
from .errors import InputError, SetupError, UnsupportedGPUError
from .launch import ceil_div, elementwise_launch

SOURCE = "flash_attention"           # kernels/flash_attention.cu
HEAD_SIZES = (64,)                   # what the kernels are written for (-DHEAD_SIZE)
FUSED_KERNEL = 9                     # its number next to the softmax-backward kernels 1-8
TF32 = (True,)                       # the precisions a kernel runs in: TF32 only
FP32 = (False,)                      # fp32-accurate only
BOTH = (False, True)


class Backward(NamedTuple):
    """One fused backward kernel: what the launch, the buffers, the checks and the help read.

    Kernel 9 is flash_attention.cu's flash_backward; each later one is its own file with the same
    flash_backward signature (the forward and the preprocess kernel stay kernel 9's)."""
    source: str               # kernels/<source>.cu
    own_rows: int             # the rows (queries or keys) a block owns
    threads: int              # threads per flash_backward block
    about: str                # the kernel in a phrase (python -m attnlab backward --help; attnlab.support)
    deterministic: bool = False   # bit-identical run after run (no atomics or bulk reductions)
    precisions: tuple = BOTH  # its tf32 settings
    wgmma: bool = False       # on Hopper's wgmma: sm_90 only, built for sm_90a (kernels.ARCH_SPECIFIC)
    # reads Q and dO as ready-made query tiles (the "tiles" buffer), which a flash_backward_prep
    # writes first (with D, from dout as it lies), and writes dinp directly: no do, no dqkvr
    tiled: bool = False
    # adds dQ into its own buffer, dq_tiles (one 64 x 64 tile per (b, h) and query tile, in the order
    # the threads hold it; by the copy engine's bulk reductions, kernels 23 and 24 by float4 reductions), which
    # its flash_backward_dq writes into dinp
    dq_tiled: bool = False
    # the mbarriers it keeps in shared memory when the copy engine brings its query tiles (kernels
    # 14-17: Q/dO stage 0 and 1, Q^T/dO^T, and kernel 15's dQ read; kernel 18: Q, dO, Q^T/dO^T;
    # kernel 19: Q/dO and Q^T/dO^T stages 0 and 1, each landed and read by both warpgroups);
    # 0: no copy engine
    mbarriers: int = 0
    # brings its own flash_backward_prep (as many threads as its backward), whose query tiles
    # hold each layout twice, as a TF32 high and low part (3xTF32): 8 layouts, not 4
    split_tiles: bool = False
    # two warpgroups in ping-pong, each with its own dQ^T (K^T from registers, so no K^T tile; kernel
    # 29: dQ^T in a warpgroup of its own), Q^T and dO^T in two stages, and lse and D per warpgroup in
    # two stages
    pingpong: bool = False
    # launched heads_at_once heads at a time, so that their query and dQ tiles stay in L2: the grid
    # is (G, key tiles, B*NH / G), not (B*NH, key tiles)
    grouped: bool = False
    # how the partial sums of dQ are added, in no fixed order (why a kernel that is not deterministic
    # differs run to run; python -m attnlab backward --help says it)
    dq_adds: str = "atomics"
    # flash_backward and flash_backward_dq launched by programmatic dependent launch (attnlab.pdl):
    # each may start while the kernel before it ends (its own flash_backward_prep lets flash_backward start)
    pdl: bool = False
    # its flash_backward_prep zeroes dq_tiles (its last argument), so the call has no memset
    prep_zeroes: bool = False
    # its flash_backward copies K and V by the copy engine from two tensor maps (attnlab.tma), which
    # it takes as kernel parameters where the others take the pointers k and v
    kv_maps: bool = False
    # and Q from q by a third map: its query tiles hold three layouts (dO, Q^T, dO^T), not four
    q_map: bool = False
    # a warpgroup of its own computes dQ^T for all the block's keys (kernel 29): flash_backward has 128
    # threads more than its keys' warpgroups, its flash_backward_prep and flash_backward_dq 128 fewer
    dq_warpgroup: bool = False


_COPY_ENGINE = dict(precisions=TF32, wgmma=True, tiled=True, mbarriers=3)
_BULK = dict(dq_tiled=True, dq_adds="bulk reductions")   # dQ added into dq_tiles by the copy engine
BACKWARDS = {
    9: Backward(SOURCE, 64, 128, "FlashAttention-2 style, 64 rows per block", deterministic=True),
    10: Backward("flash_attention10", 128, 128, "128 rows per block, 32 per warp", deterministic=True),
    11: Backward("flash_attention11", 128, 128, "kernel 10 with dQ added by atomics (5 tile products instead of 7)"),
    12: Backward("flash_attention12", 128, 256, "on Hopper's warpgroup MMA (wgmma)", precisions=TF32, wgmma=True),
    13: Backward("flash_attention13", 128, 256,
                 "kernel 12 reading Q and dO as ready-made tiles and writing dinp directly",
                 precisions=TF32, wgmma=True, tiled=True),
    14: Backward("flash_attention14", 128, 256,
                 "kernel 13 with its query tiles copied by the copy engine (cp.async.bulk), a tile ahead",
                 **_COPY_ENGINE),
    15: Backward("flash_attention15", 128, 256,
                 "kernel 14 with dQ added by the copy engine's bulk reduction instead of atomics",
                 **_BULK, **{**_COPY_ENGINE, "mbarriers": 4}),
    16: Backward("flash_attention16", 128, 256,
                 "kernel 15 with dQ staged in the consumed query stage: only thread 0 waits for the copy engine",
                 **_BULK, **_COPY_ENGINE),
    17: Backward("flash_attention17", 128, 256,
                 "kernel 16 with P^T and dS^T rounded by cvt.rn (one instruction) instead of cvt.rna (three)",
                 **_BULK, **_COPY_ENGINE),
    18: Backward("flash_attention18", 64, 128,
                 "kernel 17's products in 3xTF32 (fp32-accurate) on wgmma, 64 keys per block",
                 **_BULK, split_tiles=True, **{**_COPY_ENGINE, "precisions": FP32}),
    19: Backward("flash_attention19", 128, 256,
                 "kernel 17 with its two warpgroups in ping-pong: one issues its products while the other computes",
                 **_BULK, pingpong=True, **{**_COPY_ENGINE, "mbarriers": 8}),
    20: Backward("flash_attention20", 128, 256,
                 "kernel 19 launched a few heads at a time, so that their query tiles stay in L2",
                 **_BULK, pingpong=True, grouped=True, **{**_COPY_ENGINE, "mbarriers": 8}),
    21: Backward("flash_attention21", 128, 256,
                 "kernel 20 with its wgmma descriptors built once per tile, not once per product",
                 **_BULK, pingpong=True, grouped=True, **{**_COPY_ENGINE, "mbarriers": 8}),
    22: Backward("flash_attention22", 128, 256,
                 "kernel 21 whose turn at the tensor cores ends at its last issue, without waiting for its products",
                 **_BULK, pingpong=True, grouped=True, **{**_COPY_ENGINE, "mbarriers": 8}),
    23: Backward("flash_attention23", 128, 256,
                 "kernel 22 adding dQ from registers by float4 reductions, not through shared memory and the copy engine",
                 dq_tiled=True, dq_adds="float4 reductions", pingpong=True, grouped=True, **{**_COPY_ENGINE, "mbarriers": 8}),
    24: Backward("flash_attention24", 128, 256,
                 "kernel 23's three kernels chained by programmatic dependent launch: each starts while the one before it ends",
                 dq_tiled=True, dq_adds="float4 reductions", pingpong=True, grouped=True, pdl=True,
                 **{**_COPY_ENGINE, "mbarriers": 8}),
    25: Backward("flash_attention25", 128, 256,
                 "kernel 24 whose prep zeroes dq_tiles: three launches, no memset",
                 dq_tiled=True, dq_adds="float4 reductions", pingpong=True, grouped=True, pdl=True, prep_zeroes=True,
                 **{**_COPY_ENGINE, "mbarriers": 8}),
    26: Backward("flash_attention26", 128, 256,
                 "kernel 25 whose blocks copy K and V by tensor map at their start, while they set up",
                 dq_tiled=True, dq_adds="float4 reductions", pingpong=True, grouped=True, pdl=True, prep_zeroes=True,
                 kv_maps=True, **{**_COPY_ENGINE, "mbarriers": 9}),
    27: Backward("flash_attention27", 128, 256,
                 "kernel 26 whose blocks copy Q from q by tensor map too: the prep writes three layouts, not four",
                 dq_tiled=True, dq_adds="float4 reductions", pingpong=True, grouped=True, pdl=True, prep_zeroes=True,
                 kv_maps=True, q_map=True, **{**_COPY_ENGINE, "mbarriers": 9}),
    28: Backward("flash_attention28", 128, 256,
                 "kernel 27 whose blocks write dK and dV as whole rows, through shared memory",
                 dq_tiled=True, dq_adds="float4 reductions", pingpong=True, grouped=True, pdl=True, prep_zeroes=True,
                 kv_maps=True, q_map=True, **{**_COPY_ENGINE, "mbarriers": 9}),
    29: Backward("flash_attention29", 128, 384,
                 "kernel 28 with a third warpgroup that computes dQ^T for all 128 keys: half the adds",
                 dq_tiled=True, dq_adds="float4 reductions", pingpong=True, grouped=True, pdl=True, prep_zeroes=True,
                 kv_maps=True, q_map=True, dq_warpgroup=True, **{**_COPY_ENGINE, "mbarriers": 9}),
}
# The record's fields as tables, by kernel number (what the rest of attnlab reads).
FUSED_KERNELS = tuple(BACKWARDS)
BACKWARD_SOURCES = {k: b.source for k, b in BACKWARDS.items()}
OWN_ROWS = {k: b.own_rows for k, b in BACKWARDS.items()}
BACKWARD_THREADS = {k: b.threads for k, b in BACKWARDS.items()}
PASS_THREADS = {k: b.threads - 128 * b.dq_warpgroup for k, b in BACKWARDS.items()}   # its prep and dq pass
ABOUT = {k: b.about for k, b in BACKWARDS.items()}
DETERMINISTIC = {k: b.deterministic for k, b in BACKWARDS.items()}
WGMMA_KERNELS = tuple(k for k, b in BACKWARDS.items() if b.wgmma)
TF32_ONLY = tuple(k for k, b in BACKWARDS.items() if b.precisions == TF32)
FP32_ONLY = tuple(k for k, b in BACKWARDS.items() if b.precisions == FP32)
TILED = tuple(k for k, b in BACKWARDS.items() if b.tiled)
DQ_TILED = tuple(k for k, b in BACKWARDS.items() if b.dq_tiled)
MBARRIERS = {k: b.mbarriers for k, b in BACKWARDS.items() if b.mbarriers}
SPLIT_TILES = tuple(k for k, b in BACKWARDS.items() if b.split_tiles)
PINGPONG = tuple(k for k, b in BACKWARDS.items() if b.pingpong)
GROUPED = tuple(k for k, b in BACKWARDS.items() if b.grouped)
PDL = tuple(k for k, b in BACKWARDS.items() if b.pdl)
PREP_ZEROES = tuple(k for k, b in BACKWARDS.items() if b.prep_zeroes)
KV_MAPS = tuple(k for k, b in BACKWARDS.items() if b.kv_maps)
Q_MAPS = tuple(k for k, b in BACKWARDS.items() if b.q_map)
DQ_WARPGROUP = tuple(k for k, b in BACKWARDS.items() if b.dq_warpgroup)
# the TF32 kernel the refusals point to (kernel 18's #error says the same): kernel 17. Kernel 19 is
# faster in bursts from T=2048 to 8192, but kernel 17 is a hair faster at T=1024
# (fused_ladder_19.json) and, its flash_backward back to back at the power cap, at T=16384
# (notebook 19's Evidence)
TF32_CHOICE = 17
PREP_SOURCE, PREP_THREADS = "flash_attention13", 256   # flash_backward_prep of TILED kernels not in SPLIT_TILES

# Launch geometry, as in kernels/flash_attention.cu: tiles of 64 rows, 4 warps per block; in
# shared memory a tile row is padded to 72 floats.
TILE = 64
THREADS = 128
TILE_FLOATS = TILE * 72
PREPROCESS_THREADS = 256             # half a warp per row: 16 rows per block
PREPROCESS_ROWS = 16
MAX_GRID_Y = 65535

# Stated tolerances: an element passes when |gpu - ref| <= tol + |ref|*FLT_EPSILON (validate.py).
# - fp32: the seed's 1e-3. The fused kernels only sum in another order than numpy: run through
#   a CPU emulation of the kernel source (threads, barriers, shuffles), the max errors were
#   1.5e-7 (out) and 2.4e-6 (dinp) at B=2 T=260 C=192 NH=3, 1.8e-7 and 4.3e-6 at the default
#   shape B=4 T=1024 C=768 NH=12.
# - tf32: every product rounds its inputs (q, k, v, do, and P and dS on their way into the
#   next product) to TF32's 10-bit mantissa, a relative error up to 2^-11 ~ 4.9e-4 per operand;
#   the softmax statistics and every sum stay fp32. With the default inputs (uniform in
#   [-1, 1)) |out| < 1 and |dinp| reaches ~2.3, so errors of several 1e-4 are expected: the
#   emulation (mma.sync modelled after the PTX fragment layouts) gave out 3.1e-4 / dinp 6.3e-4
#   at the small shape and 3.7e-4 / 7.4e-4 at the default shape -- as the cuBLAS TF32 pipeline
#   measured on the H200 (validate.py: 4.3e-4 / 7.5e-4). Same tolerances as that pipeline's
#   validate.TF32_TOLERANCES: ~5x above what is expected.
FUSED_TOLERANCES = {
    "fp32": {"out": 1e-3, "dinp": 1e-3},
    "tf32": {"out": 2e-3, "dinp": 5e-3},
}

FUSED_BUFFERS = {"inp": "B T 3C", "qkvr": "3 B NH T HS", "o": "B NH T HS", "lse": "B NH T",
                 "out": "B T C", "dout": "B T C", "D": "B NH T", "dinp": "B T 3C"}
FORWARD_ONLY = ("inp", "qkvr", "o", "lse", "out")
# The buffers only some backward kernels use, allocated by FusedBuffers.kernel_buffers on a
# kernel's first backward: the pipeline's permuted dO and (dq, dk, dv) for kernels 9-12; the
# query tiles (query_tiles_shape) for the TILED ones.
PIPELINE_BUFFERS = {"do": "B NH T HS", "dqkvr": "3 B NH T HS"}


# ---------------------------------------------------------------------------------------------
# Checks and geometry (no GPU needed)

def check_head_size(B, T, C, NH):
    """The fused kernels are built for one head size: HS = C / NH must be in HEAD_SIZES. The
    refusal says what the materialized pipeline, which takes any head size, would need."""
    HS = C // NH
    if HS not in HEAD_SIZES:
        from .attention import bytes_needed
        need = bytes_needed(B, T, C, NH)
        square = ("" if T * T <= MAX_INT32 else
                  f"; and T*T = {T * T:,} is above its 32-bit limit of {MAX_INT32:,}")
        raise InputError(f"the fused attention kernels support head size HS = C / NH in "
                         f"{list(HEAD_SIZES)} only, got HS = {C} / {NH} = {HS}. The materialized "
                         f"pipeline (attnlab.attention, kernels 1-8) takes any head size but "
                         f"keeps four B*NH*T*T float buffers: at B={B} T={T} C={C} NH={NH} it "
                         f"needs {need / 2**30:.2f} GiB of GPU memory{square}")
    return HS


def check_fused_shape(B, T, C, NH):
    """check_shape's rules for the GPU without the T x T ones (any T >= 1: the fused kernels
    mask their rows), plus HS = 64 and the fused launch's grid limit."""
    B, T, C, NH = check_shape(B, T, C, NH, square=False)     # no T x T buffer here
    check_head_size(B, T, C, NH)
    if 2 * n_tiles(T) > MAX_GRID_Y:
        raise InputError(f"T must be at most {MAX_GRID_Y // 2 * TILE} for the fused backward "
                         f"(2*ceil(T/{TILE}) rows of blocks, at most {MAX_GRID_Y}), got T={T}")
    return B, T, C, NH


def n_tiles(T):
    """Tiles of 64 rows (queries or keys) covering T rows; the last one may be partial."""
    return ceil_div(T, TILE)


def shared_memory_bytes(kernel, tf32, version=FUSED_KERNEL):
    """Dynamic shared memory of one block of ``flash_forward`` or ``flash_backward`` (of fused
    kernel ``version``).

    forward: the q, k, v tiles; backward: 4 tiles (own and current: k, v, q, do) and the lse
    and D of one query tile. Kernel 9's fp32 variant adds a per-warp scratch for P and dS (16
    rows, padded by 4 floats): 64 wide in the forward, 32 in the backward (half tiles). Kernel
    10's own tiles are 128 rows, the others 64, and it keeps lse and D of 128 rows; kernel 11
    owns 128 keys, takes 32 queries at a time and keeps their dS^T (128 x 40 floats); kernel 12
    keeps K, V and K^T of 128 keys, Q, dO and their transposes of 64 queries, and dS (64 x 128),
    unpadded (wgmma's layout); kernel 19 (PINGPONG) no K^T, two stages of all four query layouts,
    and lse and D per warpgroup in two stages.
    """
    tf32 = check_tf32(tf32)
    check_fused_kernel(version)
    if kernel == "flash_forward":
        floats = 3 * TILE_FLOATS + (0 if tf32 else 4 * 16 * (TILE + 4))
    elif kernel == "flash_backward" and version == 9:
        floats = 4 * TILE_FLOATS + 2 * TILE + (0 if tf32 else 4 * 16 * (TILE // 2 + 4))
    elif kernel == "flash_backward" and version == 10:
        own = OWN_ROWS[version]
        floats = 2 * (own + TILE) * (TILE_FLOATS // TILE) + 2 * own
    elif kernel == "flash_backward" and version in PINGPONG:   # K, V; Q, dO, Q^T, dO^T x 2; dS; lse, D
        own, other = OWN_ROWS[version], TILE
        floats = 2 * own * HEAD_SIZES[0] + 8 * other * HEAD_SIZES[0] + other * own + 8 * other + 2 * MBARRIERS[version]
    elif kernel == "flash_backward" and version in SPLIT_TILES:   # K, V, K^T, Q, dO, Q^T, dO^T: hi and lo
        floats = 14 * TILE * HEAD_SIZES[0] + 2 * TILE + 2 * MBARRIERS[version]
    elif kernel == "flash_backward" and version in WGMMA_KERNELS:
        own, other = OWN_ROWS[version], TILE
        floats = 3 * own * HEAD_SIZES[0] + 4 * other * HEAD_SIZES[0] + other * own + 2 * other
        if version in MBARRIERS:   # a second stage of Q and dO, and the 8-byte mbarriers
            floats += 2 * other * HEAD_SIZES[0] + 2 * MBARRIERS[version]
    elif kernel == "flash_backward":    # 11: sK, sV; sQ, sdO of 32 rows; lse, D; dS^T
        own, other = OWN_ROWS[version], TILE // 2
        floats = 2 * (own + other) * (TILE_FLOATS // TILE) + 2 * other + own * (other + 8)
    else:
        raise InputError(f"kernel must be 'flash_forward' or 'flash_backward', got {kernel!r}")
    return 4 * floats


def check_fused_kernel(version):
    """A fused backward kernel's number (an int, not 13.0 or "13"): one of FUSED_KERNELS."""
    return check_kernel(version, FUSED_KERNELS, "the fused backward kernel")


def precisions(version):
    """The tf32 settings fused backward kernel ``version`` has: (False, True); (True,) if TF32
    only (TF32_ONLY); (False,) if fp32-accurate only (FP32_ONLY)."""
    return BACKWARDS[check_fused_kernel(version)].precisions


def check_precision(tf32, version):
    """tf32 as check_tf32, and one that fused backward kernel ``version`` runs in."""
    if check_fused_kernel(version) in TF32_ONLY and not check_tf32(tf32):
        raise InputError(f"tf32=False: fused backward kernel {version} runs in TF32 only "
                         f"(tf32=True, --tf32); for fp32 accuracy use kernel 18 or 11 (3xTF32)")
    if version in FP32_ONLY and check_tf32(tf32):
        raise InputError(f"tf32=True: fused backward kernel {version} is fp32-accurate only "
                         f"(3xTF32: tf32=False, no --tf32); for TF32 use kernel {TF32_CHOICE}")
    return check_tf32(tf32)


def prep_of(version):
    """(source, threads per block) of TILED kernel ``version``'s flash_backward_prep: kernel 13's,
    or the SPLIT_TILES and PDL kernels' own, with PASS_THREADS (as many as their flash_backward but
    for kernel 29)."""
    if check_fused_kernel(version) not in TILED:
        raise InputError(f"fused backward kernel {version} has no flash_backward_prep: only the "
                         f"TILED kernels {list(TILED)} read query tiles")
    if version in SPLIT_TILES or version in PDL:
        return BACKWARD_SOURCES[version], PASS_THREADS[version]
    return PREP_SOURCE, PREP_THREADS


def reread_bytes_per_head(T, kernel=GROUPED[0]):
    """The bytes every block of one (b, h) reads or adds into, in DQ_TILED kernel ``kernel``: its
    own buffers (kernel_buffer_shapes: the query tiles and the dQ tiles) and lse and D (T floats
    each)."""
    own = kernel_buffer_shapes(1, T, HEAD_SIZES[0], 1, kernel)
    return 4 * int(sum(np.prod(shape) for shape in own.values()) + 2 * T)


def heads_at_once(B, T, NH, l2_bytes):
    """G, the heads a GROUPED kernel runs at once: the most whose reread_bytes_per_head fit in
    ``l2_bytes`` (the L2 cache), rounded down to a divisor of B*NH (groups of one size), at least 1."""
    return _heads_at_once(B, T, NH, check_int("l2_bytes", l2_bytes, minimum=0))


@functools.lru_cache(maxsize=None)
def _heads_at_once(B, T, NH, l2_bytes):
    # remembered per shape: worked out on each call, kernel 22's plan took 24.9 us of Python on an
    # H100's host, remembered 7.9 (results/h100/experiments/k22_host.txt). fused_backward now asks
    # once per buffers and kernel (backward_launches); knockouts.measure_tiled still asks before each launch
    fit = max(1, l2_bytes // reread_bytes_per_head(T))
    return max(g for g in range(1, min(fit, B * NH) + 1) if B * NH % g == 0)


def fused_launch(B, T, NH, tf32, version=FUSED_KERNEL, l2_bytes=None):
    """{kernel name: (grid, block, shared bytes)} for the three fused kernels (the backward of
    fused kernel ``version``: a dK/dV block and a dQ block per tile of OWN_ROWS[version] rows;
    kernel 11: one block per 128 keys, which also adds dQ; TILED kernels add flash_backward_prep and
    DQ_TILED ones flash_backward_dq). GROUPED kernels launch heads_at_once(B, T, NH, l2_bytes)
    heads at a time (``l2_bytes``: GPU 0's L2 cache, device.l2_cache_bytes, where None)."""
    BH, nt = B * NH, n_tiles(T)
    per_head = ceil_div(T, OWN_ROWS[check_fused_kernel(version)]) * (2 if DETERMINISTIC[version] else 1)
    backward_grid = (BH, per_head, 1)
    if version in GROUPED:
        if l2_bytes is None:
            l2_bytes = l2_cache_bytes()
        G = heads_at_once(B, T, NH, l2_bytes)
        backward_grid = (G, per_head, BH // G)
    launch = {
        "flash_forward": ((BH, nt, 1), (THREADS, 1, 1), shared_memory_bytes("flash_forward", tf32)),
        "flash_backward_preprocess": ((ceil_div(BH * T, PREPROCESS_ROWS), 1, 1),
                                      (PREPROCESS_THREADS, 1, 1), 0),
        "flash_backward": (backward_grid, (BACKWARD_THREADS[version], 1, 1),
                           shared_memory_bytes("flash_backward", tf32, version)),
    }
    if version in TILED:   # one block per 64-query tile
        launch["flash_backward_prep"] = ((BH, nt, 1), (prep_of(version)[1], 1, 1), 0)
    if version in DQ_TILED:
        launch["flash_backward_dq"] = ((BH, nt, 1), (PASS_THREADS[version], 1, 1), 0)
    return launch


def _shapes(specs, B, T, C, NH):
    dims = {"B": B, "T": T, "C": C, "3C": 3 * C, "NH": NH, "HS": C // NH, "3": 3}
    return {n: tuple(dims[d] for d in spec.split()) for n, spec in specs.items()}


def fused_buffer_shapes(B, T, C, NH, backward=True):
    """The shape of every buffer the fused forward (and every backward kernel) uses."""
    return {n: s for n, s in _shapes(FUSED_BUFFERS, B, T, C, NH).items()
            if backward or n in FORWARD_ONLY}


def kernel_buffer_shapes(B, T, C, NH, kernel):
    """The buffers backward kernel ``kernel`` uses on top of fused_buffer_shapes: the query
    tiles (TILED kernels) or the pipeline's do and dqkvr (the others)."""
    if check_fused_kernel(kernel) not in TILED:
        return _shapes(PIPELINE_BUFFERS, B, T, C, NH)
    shapes = {tiles_name(kernel): query_tiles_shape(B, T, NH, kernel)}
    if kernel in DQ_TILED:
        shapes["dq_tiles"] = (B * NH, n_tiles(T), TILE * HEAD_SIZES[0])
    return shapes


def tiles_name(kernel):
    """The name of TILED kernel ``kernel``'s query-tile buffer: "tiles", "split_tiles" for the
    SPLIT_TILES kernels or "three_layout_tiles" for the Q_MAPS ones (other sizes: one FusedBuffers
    can hold all three)."""
    return "split_tiles" if kernel in SPLIT_TILES else "three_layout_tiles" if kernel in Q_MAPS else "tiles"


def query_tiles_shape(B, T, NH, kernel=13):
    """The query tiles of the TILED kernel ``kernel``: per (b, h) and tile of 64 queries, Q and
    dO in the four layouts of kernels/flash_attention13.cu (64 x 64 floats each); SPLIT_TILES
    kernels: each layout as a high and a low part, 8 in all; Q_MAPS kernels: dO, Q^T and dO^T (Q
    comes from q itself)."""
    layouts = 8 if kernel in SPLIT_TILES else 3 if kernel in Q_MAPS else 4
    return (B * NH, n_tiles(T), layouts * TILE * HEAD_SIZES[0])


def extra_bytes_needed(B, T, C, NH, kernel):
    """GPU bytes backward kernel ``kernel`` needs on top of fused_bytes_needed
    (kernel_buffer_shapes)."""
    return sum(4 * int(np.prod(s)) for s in kernel_buffer_shapes(B, T, C, NH, kernel).values())


def fused_bytes_needed(B, T, C, NH, backward=True):
    """GPU bytes for all the fused buffers of this shape (float32): linear in T."""
    return sum(4 * int(np.prod(s)) for s in fused_buffer_shapes(B, T, C, NH, backward).values())


def unsupported_reason(tf32, compute_capability, shared_per_block_optin, version=FUSED_KERNEL):
    """Why the fused kernels (with backward kernel ``version``) cannot run on a GPU of this
    compute capability (major, minor) and opt-in shared memory per block, or None when they can."""
    arch = "sm_{}{}".format(*compute_capability)
    if check_fused_kernel(version) in WGMMA_KERNELS and tuple(compute_capability) != (9, 0):
        return (f"fused backward kernel {version} runs on Hopper's warpgroup MMA (wgmma), which "
                f"only compute capability 9.0 has (sm_90a); this GPU is {arch}: use kernel 11, "
                f"or kernel {FUSED_KERNEL}")
    if version != FUSED_KERNEL and tuple(compute_capability) < (8, 0):
        return (f"fused backward kernel {version} runs on TF32 tensor cores in both precisions "
                f"(compute capability 8.0 or newer); this GPU is {arch}: use kernel "
                f"{FUSED_KERNEL}")
    if check_tf32(tf32) and tuple(compute_capability) < (8, 0):
        return (f"tf32=True needs TF32 tensor cores (compute capability 8.0 or newer); this GPU is "
                f"{arch}: use tf32=False")
    need = max(shared_memory_bytes(name, tf32, version)
               for name in ("flash_forward", "flash_backward"))
    if need > shared_per_block_optin:
        instead = ("the materialized pipeline (attnlab.attention, kernels 1-8)"
                   if version == FUSED_KERNEL else f"fused kernel {FUSED_KERNEL}")
        return (f"the fused {'TF32' if tf32 else 'fp32'} kernels need {need:,} bytes of shared "
                f"memory per block (flash_backward of kernel {version}), and this GPU ({arch}) "
                f"allows {shared_per_block_optin:,}: use {instead} instead")
    return None


def gpu_unsupported_reason(tf32, version=FUSED_KERNEL):
    """unsupported_reason for GPU 0 (None: the fused kernels run here)."""
    context()
    import pycuda.driver as cuda
    dev = cuda.Device(0)
    return unsupported_reason(tf32, dev.compute_capability(), dev.get_attribute(
        cuda.device_attribute.MAX_SHARED_MEMORY_PER_BLOCK_OPTIN), version)


def check_supported(tf32, version=FUSED_KERNEL):
    """UnsupportedGPUError, before any allocation or launch, unless the fused kernels run here."""
    why = gpu_unsupported_reason(tf32, version)
    if why:
        raise UnsupportedGPUError(why)


# ---------------------------------------------------------------------------------------------
# Buffers

class FusedBuffers(DeviceBuffers):
    """Every device buffer of one fused attention problem, allocated once (all O(T)).

    ``buf.inp``, ``buf.lse``, ``buf.dinp``... are pycuda GPUArrays; ``buf.get('lse')`` copies one
    back to numpy. Use as a context manager, or call ``free()``. Fill ``inp`` and ``dout`` with
    ``set``: fused_forward and fused_backward refuse buffers that do not hold what they read.
    They also keep each backward kernel's launches once worked out (``launches``, backward_launches).
    """

    def __init__(self, B, T, C, NH, backward=True):
        self.B, self.T, self.C, self.NH = check_fused_shape(B, T, C, NH)
        self.HS = C // NH
        self.backward = bool(backward)
        self._allocate(fused_buffer_shapes(B, T, C, NH, backward),
                       f"fused attention at B={B} T={T} C={C} NH={NH} (all O(T), no T*T buffer)")
        # what the buffers hold: "inp" and "dout" once set, "forward" once fused_forward has
        # run on the inp they hold (the backward reads its qkvr, o and lse)
        self.holds = set()
        # fused_backward's launches on these buffers, by (kernel, tf32): backward_launches
        self.launches = {}

    def free(self):
        self.launches = {}
        super().free()

    def set(self, name, host, finite=True):
        """DeviceBuffers.set; a new ``inp`` also means the forward's results are out of date."""
        super().set(name, host, finite)
        self.holds.add(name)
        if name == "inp":
            self.holds.discard("forward")

    def require(self, what, *needs):
        """InputError, before any launch, unless the buffers hold each of ``needs``."""
        self._array("inp")     # raises if these buffers were freed
        how = {"inp": "call buf.set('inp', inp) first",
               "dout": "call buf.set('dout', dout) first",
               "forward": "call fused_forward(buf) first: these buffers hold no forward result "
                          "for the inp they hold (qkvr, o and lse would be read uninitialised "
                          "or stale)"}
        for need in needs:
            if need not in self.holds:
                raise InputError(f"{what} needs {'the forward' if need == 'forward' else 'buf.' + need}: "
                                 f"{how[need]}")

    def kernel_buffers(self, kernel):
        """{name: GPUArray} of the buffers backward kernel ``kernel`` uses on top of the others
        (kernel_buffer_shapes), allocated on its first call (after checking they fit) and freed
        with the rest: a kernel that does not use a buffer never has it allocated."""
        self._array("dinp")     # raises if these buffers were freed
        shapes = kernel_buffer_shapes(self.B, self.T, self.C, self.NH, kernel)
        missing = {n: s for n, s in shapes.items() if n not in self.arrays}
        if missing:
            import pycuda.gpuarray as gpuarray
            need = sum(4 * int(np.prod(s)) for s in missing.values())
            check_fits(need, *free_memory(), what=f"fused backward kernel {kernel}'s "
                       f"{' and '.join(missing)} at B={self.B} T={self.T} C={self.C} NH={self.NH}")
            for n, s in missing.items():
                self.arrays[n] = gpuarray.empty(s, np.float32)
        return {n: self.arrays[n] for n in shapes}


# ---------------------------------------------------------------------------------------------
# Kernels

# The argument types of every kernel launched here (struct format: P pointer, i int, f float).
# A prepared pycuda Function packs its arguments in one call, which keeps the Python time
# between the launches of one pass small next to the GPU time being measured.
ARG_FORMATS = {
    "flash_forward": "PPPPPif",                 # o, lse, q, k, v, T, scale
    "flash_backward_preprocess": "PPPi",        # D, o, do, rows
    "flash_backward": "PPPPPPPPPif",            # dq, dk, dv, q, k, v, do, lse, D, T, scale
    "flash_backward_tiled": "PPPPPPiif",        # dinp, tiles, k, v, lse, D, T, NH, scale
    "flash_backward_dq_tiled": "PPPPPPPiif",    # dinp, dq_tiles, tiles, k, v, lse, D, T, NH, scale
    # dinp, dq_tiles, tiles, lse, D, T, NH, scale, then the maps of k and v (128 bytes each) at offsets
    # 112 and 240, where ptxas puts a 64-byte aligned parameter (attnlab.cubin; _dependent checks it)
    "flash_backward_kv_maps": "PPPPPiif60x128s128s",
    "flash_backward_kvq_maps": "PPPPPiif60x128s128s128s",   # the same, then q's map at 368 (Q_MAPS kernels)
    "flash_backward_prep": "PPPPPii",           # tiles, D, q, dout, o, T, NH
    "flash_backward_prep_zeroes": "PPPPPiiP",   # the same, then dq_tiles (PREP_ZEROES kernels)
    "flash_backward_dq": "PPii",                # dinp, dq_tiles, T, NH
    "permute_kernel": "PPPPiiii",               # q, k, v, inp, B, T, NH, HS
    "unpermute_kernel": "PPiiii",               # vaccum, out, B, T, NH, HS
    "unpermute_backward_kernel": "PPiiii",      # dinp, dout, B, T, NH, HS
    "permute_backward_kernel": "PPPPiiii",      # dinp, dq, dk, dv, B, T, NH, HS
}


def backward_arg_format(version):
    """flash_backward's argument format for fused backward kernel ``version``."""
    return ARG_FORMATS["flash_backward_kvq_maps" if version in Q_MAPS else
                       "flash_backward_kv_maps" if version in KV_MAPS else
                       "flash_backward_dq_tiled" if version in DQ_TILED else
                       "flash_backward_tiled" if version in TILED else "flash_backward"]


def _arg_format(name, version):
    """The argument format of kernel ``name`` (flash_backward: of fused kernel ``version``)."""
    if name == "flash_backward_prep" and version in PREP_ZEROES:
        return ARG_FORMATS["flash_backward_prep_zeroes"]
    return backward_arg_format(version) if name == "flash_backward" else ARG_FORMATS[name]


@functools.lru_cache(maxsize=None)
def _function(name, tf32=False, version=FUSED_KERNEL):
    """A kernel of flash_attention.cu (``flash_backward``: of fused kernel ``version``'s file;
    or of permute.cu), prepared, and allowed the dynamic shared memory it needs (over 48 KB is
    an opt-in)."""
    import pycuda.driver as cuda
    if name in ARG_FORMATS and name.startswith(("permute", "unpermute")):
        fn = kernels.get_function("permute", name)
        fn.prepare(ARG_FORMATS[name])
        return fn
    check_supported(tf32, version)
    if name == "flash_backward_prep":
        source = prep_of(version)[0]
    elif name in ("flash_backward", "flash_backward_dq"):
        source = BACKWARD_SOURCES[version]
    else:
        source = SOURCE
    fn = kernels.get_function(source, name, HEAD_SIZE=64, TF32=int(tf32))
    fn.prepare(_arg_format(name, version))
    if name in ("flash_forward", "flash_backward"):
        need = shared_memory_bytes(name, tf32, version)
        if need > 48 * 1024:
            if not hasattr(fn, "set_attribute"):
                raise SetupError(f"{name} needs {need} bytes of dynamic shared memory (more than "
                                 f"48 KB needs cuFuncSetAttribute): this PyCUDA has no "
                                 f"Function.set_attribute; install pycuda >= 2024.1")
            fn.set_attribute(cuda.function_attribute.MAX_DYNAMIC_SHARED_SIZE_BYTES, need)
        # prefer shared memory over L1 for these kernels, so that the blocks per SM their
        # __launch_bounds__ assume all fit (a hint; not in every PyCUDA's enum)
        carveout = getattr(cuda.function_attribute, "PREFERRED_SHARED_MEMORY_CARVEOUT", None)
        if carveout is not None and hasattr(fn, "set_attribute"):
            fn.set_attribute(carveout, 100)
    return fn


@functools.lru_cache(maxsize=None)
def _dependent(name, tf32, version):
    """flash_backward or flash_backward_dq of PDL kernel ``version``, launched by programmatic
    dependent launch (attnlab.pdl: a DependentKernel, called as a prepared Function is), its
    argument format checked against the cubin's parameter layout first (attnlab.cubin)."""
    from . import cubin, pdl
    check_supported(tf32, version)
    shared = shared_memory_bytes(name, tf32, version) if name == "flash_backward" else 0
    image, arg_format = kernels.cubin(BACKWARD_SOURCES[version], HEAD_SIZE=64, TF32=int(tf32)), _arg_format(name, version)
    cubin.check_format(image, name, arg_format)
    return pdl.DependentKernel(image, name, arg_format, shared)


def tensor_maps(buf, kernel):
    """The tensor maps (attnlab.tma) KV_MAPS kernel ``kernel`` takes: of k and v, and of q for the
    Q_MAPS kernels; each (B*NH, T, HS) of buf's qkvr, in boxes of 64 rows x 32 dims with the
    128-byte swizzle, zeros past T."""
    from . import tma
    B, T, C, NH, HS = buf.B, buf.T, buf.C, buf.NH, buf.HS
    q, k, v = qkv_pointers(buf.qkvr, B, T, C)
    return tuple(tma.tiled_map(x, (B * NH, T, HS), (4 * T * HS, 4 * HS, 4), (1, 64, 32), 128)
                 for x in ((k, v, q) if kernel in Q_MAPS else (k, v)))


def _scale(HS):
    return np.float32(1.0 / np.sqrt(HS))   # the reference's scale, in float32


def _permute_launch(name, n, *args):
    """One of permute.cu's kernels, one thread per element of the n-element tensors, as a call
    without arguments."""
    grid, block = elementwise_launch(n, 256)
    return partial(_function(name).prepared_call, grid, block, *args)


def fused_forward(buf, tf32=False):
    """Forward on ``buf``: reads inp; writes qkvr, o, lse, out."""
    tf32 = check_tf32(tf32)
    buf.require("fused_forward", "inp")
    B, T, C, NH, HS = buf.B, buf.T, buf.C, buf.NH, buf.HS
    q, k, v = qkv_pointers(buf.qkvr, B, T, C)
    dims = (B, T, NH, HS)
    _permute_launch("permute_kernel", B * T * C, q, k, v, int(buf.inp.gpudata), *dims)()
    grid, block, shared = fused_launch(B, T, NH, tf32)["flash_forward"]
    _function("flash_forward", tf32).prepared_call(
        grid, block, int(buf.o.gpudata), int(buf.lse.gpudata), q, k, v, T, _scale(HS),
        shared_size=shared)
    _permute_launch("unpermute_kernel", B * T * C, int(buf.o.gpudata), int(buf.out.gpudata), *dims)()
    buf.holds.add("forward")


def fused_backward(buf, tf32=False, kernel=FUSED_KERNEL):
    """Backward on ``buf`` after ``fused_forward``, with fused backward kernel ``kernel`` (one of
    FUSED_KERNELS): reads dout, qkvr, o, lse; writes do, D, dqkvr, dinp (TILED kernels: the
    query tiles, D and dinp). The kernel's own buffers are allocated on its first call, and its
    launches worked out then (backward_launches)."""
    tf32 = check_precision(tf32, kernel)
    if not buf.backward:
        raise InputError("these FusedBuffers were allocated with backward=False")
    buf.require("fused_backward", "forward", "dout")
    launches = buf.launches.get((kernel, tf32))
    if launches is None:
        launches = buf.launches[(kernel, tf32)] = backward_launches(buf, tf32, kernel)
    for launch in launches:
        launch()


def backward_launches(buf, tf32, kernel):
    """fused_backward's launches on ``buf``, in order, each a call without arguments. FusedBuffers
    keep them per kernel and precision (their pointers do not change), so that a backward spends
    its Python on the launches alone: at T=1024 the GPU would otherwise wait for the Python that
    works out each launch (k22_host: 25 us of it on an H100's host, before the first launch)."""
    import pycuda.driver as cuda
    B, T, C, NH, HS = buf.B, buf.T, buf.C, buf.NH, buf.HS
    q, k, v = qkv_pointers(buf.qkvr, B, T, C)
    own = buf.kernel_buffers(kernel)
    o, lse, D = (int(buf.arrays[n].gpudata) for n in ("o", "lse", "D"))
    dout, dinp = int(buf.dout.gpudata), int(buf.dinp.gpudata)
    dims = (B, T, NH, HS)
    launch = fused_launch(B, T, NH, tf32, kernel)
    grid, block, shared = launch["flash_backward"]
    after = _dependent if kernel in PDL else _function    # how flash_backward and flash_backward_dq launch
    back = after("flash_backward", tf32, kernel).prepared_call
    if kernel in TILED:
        tiles = int(own[tiles_name(kernel)].gpudata)
        pgrid, pblock, _ = launch["flash_backward_prep"]
        prep = partial(_function("flash_backward_prep", tf32, kernel).prepared_call,
                       pgrid, pblock, tiles, D, q, dout, o, T, NH)
        args = ((tiles, lse, D, T, NH, _scale(HS), *tensor_maps(buf, kernel)) if kernel in KV_MAPS else
                (tiles, k, v, lse, D, T, NH, _scale(HS)))
        if kernel in DQ_TILED:   # dQ is added into dq_tiles, then written into dinp
            dq_tiles = int(own["dq_tiles"].gpudata)
            dgrid, dblock, _ = launch["flash_backward_dq"]
            zero_then_prep = ((partial(prep, dq_tiles),) if kernel in PREP_ZEROES else
                              (partial(cuda.memset_d32, dq_tiles, 0, own["dq_tiles"].size), prep))
            return (*zero_then_prep,
                    partial(back, grid, block, dinp, dq_tiles, *args, shared_size=shared),
                    partial(after("flash_backward_dq", tf32, kernel).prepared_call,
                            dgrid, dblock, dinp, dq_tiles, T, NH))
        return (partial(cuda.memset_d2d32, dinp, 4 * 3 * C, 0, C, B * T),   # dinp's dq columns: atomics add there
                prep, partial(back, grid, block, dinp, *args, shared_size=shared))
    do = int(own["do"].gpudata)
    dq, dk, dv = qkv_pointers(own["dqkvr"], B, T, C)
    pgrid, pblock, _ = launch["flash_backward_preprocess"]
    zero_dq = () if DETERMINISTIC[kernel] else (partial(cuda.memset_d32, dq, 0, B * NH * T * HS),)  # atomics add there
    return (_permute_launch("unpermute_backward_kernel", B * T * C, do, dout, *dims),
            partial(_function("flash_backward_preprocess", tf32).prepared_call, pgrid, pblock, D, o, do, B * NH * T),
            *zero_dq,
            partial(back, grid, block, dq, dk, dv, q, k, v, do, lse, D, T, _scale(HS), shared_size=shared),
            _permute_launch("permute_backward_kernel", B * T * C, dinp, dq, dk, dv, *dims))


def _checked_inputs(inp, n_head, tf32, kernel=FUSED_KERNEL):
    B, T, C, NH = check_qkv(inp, n_head, square=False)
    check_fused_shape(B, T, C, NH)
    check_precision(tf32, kernel)
    return B, T, C, NH


def gpu_fused_forward(inp, n_head, tf32=False):
    """numpy in, numpy out: ``out`` (B, T, C) of the fused forward."""
    B, T, C, NH = _checked_inputs(inp, n_head, tf32)
    check_supported(tf32)
    with FusedBuffers(B, T, C, NH, backward=False) as buf:
        buf.set("inp", inp)
        fused_forward(buf, tf32)
        return buf.get("out")


def gpu_fused_backward(dout, inp, n_head, tf32=False, kernel=FUSED_KERNEL):
    """numpy in, numpy out: ``dinp`` (B, T, 3C) of the fused backward with backward kernel
    ``kernel`` (runs the forward first)."""
    B, T, C, NH = _checked_inputs(inp, n_head, tf32, kernel)
    check_array("dout", dout, (B, T, C))
    check_supported(tf32, kernel)
    with FusedBuffers(B, T, C, NH) as buf:
        buf.set("inp", inp)
        buf.set("dout", dout)
        fused_forward(buf, tf32)
        fused_backward(buf, tf32, kernel)
        return buf.get("dinp")


# ---------------------------------------------------------------------------------------------
# compute-sanitizer's extra steps

def sanitize_steps(B, T, C, NH):
    """Run the fused forward and every fused backward kernel once at this shape, in each
    precision this GPU runs them (kernel 9: fp32, and TF32 on sm_80+; later kernels on sm_80+
    with the shared memory they need), for attnlab.sanitize; returns the kernel sources run
    ([] when HS is not 64 or this GPU runs none, saying why on stderr)."""
    try:
        check_fused_shape(B, T, C, NH)
    except InputError:
        return []
    from .problem import make_inputs
    inp, dout = make_inputs(B, T, C, NH, seed=0)
    variants = []
    for kernel in FUSED_KERNELS:
        for tf32 in precisions(kernel):
            why = gpu_unsupported_reason(tf32, kernel)
            if why:
                print(f"attnlab.fused: kernel {kernel} not run under the sanitizer: {why}",
                      file=sys.stderr)
            else:
                variants.append((kernel, tf32))
    if not variants:
        return []
    with FusedBuffers(B, T, C, NH) as buf:
        buf.set("inp", inp)
        buf.set("dout", dout)
        for kernel, tf32 in variants:
            fused_forward(buf, tf32)
            fused_backward(buf, tf32, kernel)
            for name in ("out", "dinp"):
                if not np.isfinite(buf.get(name)).all():
                    raise AssertionError(f"fused kernel {kernel} {'tf32' if tf32 else 'fp32'} "
                                         f"wrote NaN/Inf into {name} at B={B} T={T} C={C} NH={NH}")
    return sorted({SOURCE, "permute"} | {BACKWARD_SOURCES[k] for k, _ in variants})
