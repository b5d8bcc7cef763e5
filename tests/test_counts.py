"""attnlab.counts, checked against an independent simulation of the kernels (no GPU).

For tiny shapes, ``simulate`` walks the grid, blocks, warps, lanes and loops of each
kernels/softmax_backward{1..8}.cu exactly as the source writes them, and counts per call:

- bytes requested by global loads, 4 per float a thread loads;
- bytes read from shared memory, 4 per float a thread reads;
- multiply-adds: for kernels 1-6 one per evaluated term of the sum over t2, split into the
  useful ones (the term belongs to a stored output t3 <= t) and all executed ones (kernel 6's
  threads past the row's end run the loop too); for kernels 7-8 one per element in pass 1
  (S = sum att*datt) and one per element in pass 2 (dpreatt = scale*att*(datt - S));
- the dpreatt elements stored.

Two conventions of counts.py's docstring are followed, and said where they apply:
- a load the compiler hoists out of a loop is counted where it is hoisted to (att[t3] in
  kernels 1-2: once per output, not once per term);
- a warp-uniform load (all 32 lanes read the same address: att[t3] in kernel 3, the 8
  values att[t3+k] in kernels 4-5) is counted once per warp ("once per row").
"""
import collections
import math

import pytest

from attnlab import counts
from attnlab.errors import InputError
from attnlab.launch import softmax_backward_launch

WARP = 32
UNROLL = 8          # kernels 4 and 5
T_PER_BLOCK = 4     # kernel 8


def ceil_div(a, b):
    return -(-a // b)


class Sim:
    """What one call of a kernel did, added up as its threads run."""

    def __init__(self):
        self.global_load_bytes = 0
        self.shared_load_bytes = 0
        self.multiply_adds = 0            # useful: terms of a stored output
        self.executed_multiply_adds = 0   # all evaluated terms
        self.stores = collections.Counter()

    def load(self, floats=1):
        self.global_load_bytes += 4 * floats

    def shared(self, floats=1):
        self.shared_load_bytes += 4 * floats

    def fma(self, useful):
        self.executed_multiply_adds += 1
        self.multiply_adds += bool(useful)

    def store(self, bh, t, t3):
        self.stores[(bh, t, t3)] += 1


def _kernel1(s, B, T, NH, bs):
    # grid (ceil_div(T, bs), 1): one thread per t3, looping over every b and h
    for bx in range(ceil_div(T, bs)):
        for tid in range(bs):
            t3 = bx * bs + tid
            if t3 >= T:
                continue
            for b in range(B):
                for h in range(NH):
                    bh = b * NH + h
                    for t in range(t3, T):
                        # att_bth[t3] is written inside the t2 loop, but it does not change
                        # there (and the pointers are __restrict__): the compiler hoists it,
                        # counts.py's convention is once per output.
                        s.load()
                        for t2 in range(t + 1):
                            s.load(2)            # att_bth[t2], datt_bth[t2]
                            s.fma(useful=True)
                        s.store(bh, t, t3)


def _kernel2(s, B, T, NH, bs):
    # grid (ceil_div(T, bs), B*NH): blockIdx.y is (b, h)
    for bh in range(B * NH):
        for bx in range(ceil_div(T, bs)):
            for tid in range(bs):
                t3 = bx * bs + tid
                if t3 >= T:
                    continue
                for t in range(t3, T):
                    s.load()                     # att_bth[t3], hoisted as in kernel 1
                    for t2 in range(t + 1):
                        s.load(2)
                        s.fma(useful=True)
                    s.store(bh, t, t3)


def _kernel3(s, B, T, NH, bs):
    # grid (ceil_div(32*T, bs), B*NH), a warp per t3; warps with t3 >= T exit
    warps = bs // WARP
    for bh in range(B * NH):
        for bx in range(ceil_div(WARP * T, bs)):
            for w in range(warps):
                t3 = bx * warps + w
                if t3 >= T:
                    continue
                for lane in range(WARP):
                    for t in range(t3, T):
                        if lane == 0:
                            # att_at_t3 = att_bth[t3]: all 32 lanes read one address; counted
                            # once per warp (counts.py: "att[t3] once per row")
                            s.load()
                        for t2 in range(lane, t + 1, WARP):
                            s.load(2)
                            s.fma(useful=True)
                        if lane == 0:            # after cg::reduce, lane 0 stores
                            s.store(bh, t, t3)


def _kernel4(s, B, T, NH, bs):
    # grid (ceil_div(4*T, bs), B*NH), a warp per 8 columns t3..t3+7
    warps = bs // WARP
    for bh in range(B * NH):
        for bx in range(ceil_div(4 * T, bs)):
            for w in range(warps):
                t3 = UNROLL * (bx * warps + w)
                if t3 >= T:
                    continue
                for lane in range(WARP):
                    for t in range(t3, T):
                        for k in range(UNROLL):
                            if t < t3 + k:
                                continue         # column above the diagonal: no load
                            if lane == 0:
                                s.load()         # att_bth[t3+k], warp-uniform: once per warp
                        for t2 in range(lane, t + 1, WARP):
                            s.load(2)            # att_bth[t2], datt_bth[t2]
                            for k in range(UNROLL):
                                if t < t3 + k:
                                    continue
                                s.fma(useful=True)
                        k = lane
                        if k < UNROLL and t3 + k <= t:
                            s.store(bh, t, t3 + k)


def _kernel5(s, B, T, NH, bs):
    # same grid as kernel 4; the att[t3+k] loads are clipped, not skipped, and the t2 loop is
    # split in three parts; every part evaluates all 8 columns
    warps = bs // WARP
    for bh in range(B * NH):
        for bx in range(ceil_div(4 * T, bs)):
            for w in range(warps):
                t3 = UNROLL * (bx * warps + w)
                if t3 >= T:
                    continue
                for lane in range(WARP):
                    for t in range(t3, T):
                        for k in range(UNROLL):
                            if lane == 0:
                                s.load()         # att_bth[min(t, t3+k)], warp-uniform

                        def step(t2, t=t):
                            s.load(2)            # p = att_bth[t2] * datt_bth[t2]
                            for k in range(UNROLL):
                                s.fma(useful=t3 + k <= t)

                        t2 = lane
                        while t2 < t3:           # part 1
                            step(t2)
                            t2 += WARP
                        if t2 <= t:              # part 2, the step with the indicator
                            step(t2)
                            t2 += WARP
                        while t2 <= t:           # part 3
                            step(t2)
                            t2 += WARP
                        k = lane
                        if k < UNROLL and t3 + k <= t:
                            s.store(bh, t, t3 + k)


def _kernel6(s, B, T, NH, bs):
    # grid (T, B*NH), a block of BLOCK_SIZE = bs threads per row
    for bh in range(B * NH):
        for t in range(T):
            num_tiles = ceil_div(t + 1, bs)
            for tid in range(bs):
                for t3_tile in range(num_tiles):
                    t3 = t3_tile * bs + tid
                    in_row = t3 <= t
                    if in_row:
                        s.load()                 # at3 = att_bth[t3]
                    for t2_tile in range(num_tiles):
                        t2b = t2_tile * bs
                        t2 = min(t, t2b + tid)
                        assert t2 <= t
                        s.load(2)                # p_s[tid] = att_bth[t2] * datt_bth[t2]
                        end = min(t + 1 - t2b, bs)
                        for i in range(end):     # diagonal tile or not: one read, one FMA
                            s.shared()           # p_s[i]
                            s.fma(useful=in_row)
                    if in_row:
                        s.store(bh, t, t3)


def _reduce_then_scale_row(s, bh, t, bs):
    """One row of kernels 7 and 8 run by a block of ``bs`` threads."""
    for tid in range(bs):                        # pass 1: S = sum att*datt
        for t2 in range(tid, t + 1, bs):
            s.load(2)
            s.fma(useful=True)
    num_warps = bs // WARP
    for tid in range(bs):                        # S = reduce(block_acc[lane] if lane < NUM_WARPS)
        if tid % WARP < num_warps:
            s.shared()
    for tid in range(bs):                        # pass 2: dpreatt = scale*att*(datt - S)
        for t3 in range(tid, t + 1, bs):
            s.load(2)
            s.fma(useful=True)
            s.store(bh, t, t3)


def _kernel7(s, B, T, NH, bs):
    # grid (T, B*NH): a block per row
    for bh in range(B * NH):
        for t in range(T):
            _reduce_then_scale_row(s, bh, t, bs)


def _kernel8(s, B, T, NH, bs):
    # grid (T/4, B*NH): a block per 4 rows, in reverse order
    assert T % T_PER_BLOCK == 0, "kernel 8 requires T % 4 == 0"
    for bh in range(B * NH):
        for bx in range(T // T_PER_BLOCK):
            t0 = T - 1 - T_PER_BLOCK * bx
            for to in range(T_PER_BLOCK):
                _reduce_then_scale_row(s, bh, t0 - to, bs)


KERNELS = {1: _kernel1, 2: _kernel2, 3: _kernel3, 4: _kernel4, 5: _kernel5, 6: _kernel6,
           7: _kernel7, 8: _kernel8}
GRIDS = {  # (grid x, grid y) as the sources' "Launch geometry" comments give them
    1: lambda B, T, NH, bs: (ceil_div(T, bs), 1),
    2: lambda B, T, NH, bs: (ceil_div(T, bs), B * NH),
    3: lambda B, T, NH, bs: (ceil_div(32 * T, bs), B * NH),
    4: lambda B, T, NH, bs: (ceil_div(4 * T, bs), B * NH),
    5: lambda B, T, NH, bs: (ceil_div(4 * T, bs), B * NH),
    6: lambda B, T, NH, bs: (T, B * NH),
    7: lambda B, T, NH, bs: (T, B * NH),
    8: lambda B, T, NH, bs: (T // 4, B * NH),
}

_cache = {}


def simulate(kernel, B, T, NH, bs):
    key = (kernel, B, T, NH, bs)
    if key not in _cache:
        s = Sim()
        KERNELS[kernel](s, B, T, NH, bs)
        _cache[key] = s
    return _cache[key]


def cases():
    for kernel in KERNELS:
        shapes = [(1, 2, T) for T in ((4, 20, 68) if kernel == 8 else (1, 7, 20, 33, 70))]
        shapes.append((2, 1, 20))                # B and NH enter the same way
        for B, NH, T in shapes:
            for bs in (32, 64):
                yield kernel, B, T, NH, bs


CASES = list(cases())

# (kernel, field) where counts.py disagrees with the kernel's source
FIELDS = ("global_load_bytes", "shared_load_bytes", "multiply_adds", "executed_multiply_adds")


def field_cases():
    for field in FIELDS:
        for kernel, B, T, NH, bs in CASES:
            yield pytest.param(field, kernel, B, T, NH, bs,
                               id=f"{field}-k{kernel}-B{B}NH{NH}T{T}-bs{bs}")


@pytest.mark.parametrize("field, kernel, B, T, NH, bs", list(field_cases()))
def test_count_matches_the_simulated_kernel(field, kernel, B, T, NH, bs):
    sim = simulate(kernel, B, T, NH, bs)
    c = counts.count(kernel, B, T, NH, bs)
    assert getattr(c, field) == getattr(sim, field)


@pytest.mark.parametrize("kernel, B, T, NH, bs", CASES)
def test_every_lower_triangle_output_is_stored_once(kernel, B, T, NH, bs):
    sim = simulate(kernel, B, T, NH, bs)
    lower = {(bh, t, t3) for bh in range(B * NH) for t in range(T) for t3 in range(t + 1)}
    assert set(sim.stores) == lower                    # nothing above the diagonal
    assert set(sim.stores.values()) == {1}
    c = counts.count(kernel, B, T, NH, bs)
    assert c.outputs == len(lower) == B * NH * T * (T + 1) // 2
    assert c.dram_bytes == 12 * c.outputs
    # the useful multiply-adds are what the math needs, whatever the kernel
    terms = B * NH * sum((t + 1) ** 2 for t in range(T))
    assert c.multiply_adds == (terms if kernel <= 6 else 2 * c.outputs)


@pytest.mark.parametrize("kernel, B, T, NH, bs", CASES)
def test_simulated_grid_is_the_launched_grid(kernel, B, T, NH, bs):
    """The simulation walks the grid the sources document; attnlab.launch launches that one."""
    grid, block, defines = softmax_backward_launch(kernel, B, T, NH, bs)
    assert grid == GRIDS[kernel](B, T, NH, bs) + (1,)
    assert block == (bs, 1, 1)
    assert defines == ({"BLOCK_SIZE": bs} if kernel >= 6 else {})


def first_att_load_addresses(kernel, T, bs, bh=0):
    """Byte offsets the 32 lanes of warp 0 of the first block ask for in the first warp-wide
    load of att[t2] on row T-1 (T >= 32), as each source indexes it."""
    t = T - 1
    base = bh * T * T * 4
    if kernel in (1, 2):
        # lanes are columns t3 = 0..31, each at its first row t = t3, t2 = 0
        return [base + (t3 * T + 0) * 4 for t3 in range(WARP)]
    # kernels 3-5: lanes are t2 = lane of one row; kernel 6: t2 = min(t, tid) of tile 0;
    # kernels 7-8: t2 = tid
    return [base + (t * T + min(t, lane)) * 4 for lane in range(WARP)]


@pytest.mark.parametrize("kernel", range(1, 9))
def test_sectors_per_request(kernel):
    T = 64                                   # rows start on a 32-byte boundary
    addresses = first_att_load_addresses(kernel, T, 64)
    sectors = len({a // counts.SECTOR for a in addresses})
    c = counts.count(kernel, 1, T, 2, 64)
    assert c.sectors_per_request == sectors == (32 if kernel in (1, 2) else 4)
    assert c.sector_bytes == c.global_load_bytes * sectors * 32 // 128
    assert c.load_bytes == c.global_load_bytes + c.shared_load_bytes
    d = c.as_dict()
    assert d["sector_bytes"] == c.sector_bytes and d["load_bytes"] == c.load_bytes
    assert d["kernel"] == kernel and d["T"] == T


# ------------------------------------------------------------------ the default shape

DEFAULT = dict(B=4, T=1024, NH=12)
DEFAULT_TERMS = 48 * 1024 * 1025 * 2049 // 6   # B*NH * sum_{n=1}^{T} n^2 = 17,205,043,200
DEFAULT_DRAM = 302_284_800


@pytest.mark.parametrize("kernel", range(1, 9))
@pytest.mark.parametrize("bs", (32, 256, 1024))
def test_default_shape_known_values(kernel, bs):
    c = counts.count(kernel, block_size=bs, **DEFAULT)
    assert c.dram_bytes == DEFAULT_DRAM
    assert c.outputs == 4 * 12 * 1024 * 1025 // 2 == DEFAULT_DRAM // 12
    if kernel <= 6:
        assert c.multiply_adds == DEFAULT_TERMS
    else:
        assert c.multiply_adds == c.executed_multiply_adds == 2 * c.outputs
        assert c.global_load_bytes == 16 * c.outputs


def test_kernel6_executes_whole_tiles():
    """Kernel 6's threads past the row's end still run the t2 loop: each of the bs threads
    does t+1 multiply-adds per column tile."""
    c = counts.count(6, block_size=256, **DEFAULT)
    executed = 48 * sum(256 * math.ceil((t + 1) / 256) * (t + 1) for t in range(1024))
    assert c.executed_multiply_adds == executed > c.multiply_adds


# ------------------------------------------------------------------ floors and roof

CEILINGS = {"gpu": "Test GPU", "copy": {"median": 1e12},          # 1 TB/s
            "shared_load": {"median": 2e13},                       # 20 TB/s
            "fma": {"median": 5e13}}                               # 50 T multiply-adds/s


def hand_count(**kw):
    fields = dict(kernel=6, B=1, T=8, NH=1, block_size=32, outputs=250_000_000,
                  dram_bytes=3_000_000_000, multiply_adds=50_000_000_000,
                  executed_multiply_adds=100_000_000_000, global_load_bytes=10_000_000_000,
                  sectors_per_request=4, shared_load_bytes=10_000_000_000)
    return counts.Count(**(fields | kw))


def test_floors_on_hand_made_ceilings():
    f = counts.floors(hand_count(), CEILINGS)
    assert f == pytest.approx({"dram": 3.0,            # 3e9 B / 1e12 B/s = 3 ms
                               "loads": 1.0,           # (1e10 + 1e10) B / 2e13 B/s = 1 ms
                               "multiply_adds": 2.0})  # 1e11 (executed) / 5e13 /s = 2 ms


def test_roof_on_hand_made_ceilings():
    r = counts.roof(hand_count(), 4.0, CEILINGS)
    assert set(r) == {"dram", "loads", "multiply_adds"}
    assert r["dram"]["rate"] == pytest.approx(7.5e11)              # 3e9 B in 4 ms
    assert r["dram"]["fraction"] == pytest.approx(0.75)
    assert r["loads"]["rate"] == pytest.approx(5e12)               # 2e10 B in 4 ms
    assert r["loads"]["fraction"] == pytest.approx(0.25)
    assert r["multiply_adds"]["rate"] == pytest.approx(2.5e13)     # executed, not useful
    assert r["multiply_adds"]["fraction"] == pytest.approx(0.5)


def test_roof_at_the_floor_is_the_whole_ceiling():
    c = hand_count()
    f = counts.floors(c, CEILINGS)
    for k, ms in f.items():
        assert counts.roof(c, ms, CEILINGS)[k]["fraction"] == pytest.approx(1.0)


def test_describe_names_the_highest_floor():
    text = counts.describe(hand_count(), CEILINGS, ms=4.0)
    assert "floors on the measured ceilings of Test GPU" in text
    assert "the highest floor, 3.0000 ms, is the dram one" in text
    assert "measured 4.0000 ms: dram 75.0%, loads 25.0%, multiply-adds 50.0% of ceiling" in text
    assert "(2.00x the useful ones)" in text
    plain = counts.describe(counts.count(7, 1, 8, 1, 32))
    assert "floors" not in plain and "executed" not in plain


def test_fused_flops():
    # 2.5 * 4 * B*NH*T^2*HS / 2 for causal attention: 5 products of 2*T^2*HS over the causal half
    assert counts.fused_flops(4, 1024, 12, 64) == 2.5 * 4 * 4 * 12 * 1024 * 1024 * 64 / 2
    assert counts.fused_flops(1, 64, 1, 64) == counts.FUSED_COUNTED_PRODUCTS * 2 * 64 ** 3 / 2


def test_fused_executed_flops_counts_visited_tile_pairs_whole():
    # T=128: tiles 0 and 1, pairs (0,0), (1,0), (1,1); one 64x64x64 product is 2*64^3 FLOPs
    assert counts.fused_executed_flops(1, 128, 1, 64, products=7) == 3 * 7 * 2 * 64 ** 3
    # a partial last tile counts whole: T=65 is two tiles, as T=128
    assert counts.fused_executed_flops(2, 65, 3, 64, 5) == counts.fused_executed_flops(2, 128, 3, 64, 5)
    # for large T the whole diagonal tiles fade: 5 products -> the counted FLOPs
    ratio = counts.fused_executed_flops(4, 16384, 12, 64, 5) / counts.fused_flops(4, 16384, 12, 64)
    assert ratio == pytest.approx(257 / 256)
    # kernel 9's 7 products: 7/5 of the count, plus the diagonal
    assert counts.fused_executed_flops(4, 1024, 12, 64, 7) / counts.fused_flops(4, 1024, 12, 64) \
        == pytest.approx(7 / 5 * 17 / 16)


@pytest.mark.parametrize("kwargs", [{"products": 0}, {"products": 7.0}, {"tile": -64}])
def test_fused_executed_flops_refuses_bad_counts(kwargs):
    with pytest.raises(ValueError, match=next(iter(kwargs))):
        counts.fused_executed_flops(1, 128, 1, 64, **{"products": 7, **kwargs})


# ------------------------------------------------------------------ bad input

@pytest.mark.parametrize("args, kwargs, name", [
    ((0, 1, 8, 2), {}, "kernel"),
    ((9, 1, 8, 2), {}, "kernel"),
    ((True, 1, 8, 2), {}, "kernel"),
    ((1, 1, 8, 2), {"block_size": 48}, "block_size"),
    ((1, 1, 8, 2), {"block_size": 2048}, "block_size"),
    ((1, 1, 0, 2), {}, "T"),
    ((1, 1, 8.0, 2), {}, "T"),
    ((1, 0, 8, 2), {}, "B"),
    ((1, 1, 8, -2), {}, "NH"),
])
def test_bad_input_names_the_argument(args, kwargs, name):
    with pytest.raises(InputError) as e:
        counts.count(*args, **kwargs)
    assert str(e.value).startswith(f"{name} must ")


def test_kernel8_requires_t_multiple_of_4():
    with pytest.raises(InputError, match="T"):
        counts.count(8, 1, 7, 2, 32)
