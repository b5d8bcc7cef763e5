"""Counting before measuring: what each softmax-backward kernel must move and compute.

``count(kernel, B, T, NH, block_size)`` gives, for one call of the kernel alone:

- the minimum DRAM traffic: the lower triangles of att and datt read once, of dpreatt
  written once (12 bytes per output; the same for every kernel);
- the loads the kernel's threads issue, and where they should be served: global loads
  (L1, L2 or DRAM) and shared-memory loads, in bytes requested, and how many 32-byte
  sectors one warp-wide global load touches (4 when the 32 lanes read 128 consecutive
  bytes, 32 when every lane reads its own row);
- the multiply-adds: kernels 1-6 evaluate dpreatt[t3] = s·Σ_{t2<=t} ... as written, one
  multiply-add ("term") per (t, t3, t2); kernels 7-8 do two per output.

``floors(count, ceilings)`` turns these into the shortest times the measured ceilings allow
(attnlab.ceilings), and ``roof(count, ms, ceilings)`` places a measured time against them.
The load ceiling is measured with 4-byte, conflict-free shared-memory loads (one wavefront
per warp-wide load); a broadcast of a 16-byte load (LDS.128, all lanes one address) delivers
more bytes per wavefront, so a kernel whose SASS uses them can pass "100 %" of that ceiling.
The counts follow the kernels' loops line by line; the notebooks check them against ncu
(results/h200/ncu.json) where it could be read.
"""
from dataclasses import asdict, dataclass

import numpy as np

from .checks import check_block_size, check_int, check_kernel
from .errors import InputError

SECTOR = 32          # bytes: the unit L1 and L2 move
WARP_REQUEST = 128   # bytes one warp-wide 4-byte load asks for


@dataclass(frozen=True)
class Count:
    kernel: int
    B: int
    T: int
    NH: int
    block_size: int
    outputs: int                  # dpreatt elements with t3 <= t
    dram_bytes: int               # minimum: read att, datt and write dpreatt once
    multiply_adds: int            # useful ones: (t+1) per output for 1-6, 2 for 7-8
    executed_multiply_adds: int   # including those of threads past the row's end (kernel 6)
    global_load_bytes: int        # bytes requested by the threads' global loads
    sectors_per_request: int      # 32-byte sectors one warp-wide global load touches
    shared_load_bytes: int        # bytes requested from shared memory

    @property
    def sector_bytes(self):
        """Bytes the global loads move through L1 in whole sectors."""
        return self.global_load_bytes * self.sectors_per_request * SECTOR // WARP_REQUEST

    @property
    def load_bytes(self):
        """All bytes the SM's load path delivers to threads: global + shared."""
        return self.global_load_bytes + self.shared_load_bytes

    def as_dict(self):
        return asdict(self) | {"sector_bytes": self.sector_bytes, "load_bytes": self.load_bytes}


def _rows(T):
    return np.arange(T, dtype=np.int64)          # t = 0 .. T-1; row t has t+1 outputs


def count(kernel, B, T, NH, block_size=256):
    """The Count of one call of softmax-backward kernel ``kernel`` (see the module doc)."""
    kernel = check_kernel(kernel)
    B, T, NH = (check_int(n, v) for n, v in (("B", B), ("T", T), ("NH", NH)))
    bs = check_block_size(block_size)
    if kernel == 8 and T % 4:
        raise InputError(f"T must be a multiple of 4 for kernel 8 (4 rows per block), got {T}")
    bh = B * NH
    t = _rows(T)
    outputs = bh * int((t + 1).sum())
    terms = bh * int(((t + 1) ** 2).sum())
    executed = terms
    shared = 0
    sectors = 4
    if kernel in (1, 2):
        # a thread per column t3: per term att[t2] and datt[t2]; att[t3] once per output.
        # The 32 lanes of a warp are 32 columns, each on its own row: 32 sectors per load.
        glob = 8 * terms + 4 * outputs
        sectors = 32
    elif kernel == 3:
        # a warp per column: lanes read consecutive t2 of one row; att[t3] once per row
        glob = 8 * terms + 4 * outputs
    elif kernel in (4, 5):
        # a warp per 8 columns t3..t3+7, rows t >= t3: one att[t2], datt[t2] per 8 terms.
        # Kernel 4 loads att[t3+k] only for the columns inside the row and skips the others'
        # terms; kernel 5 loads all 8 (clipped into the row) and evaluates all 8 per t2.
        groups = np.arange(0, T, 8, dtype=np.int64)
        per_group = np.array([int((t[g:] + 1).sum()) for g in groups], dtype=np.int64)
        if kernel == 4:
            columns = np.array([int(np.minimum(8, t[g:] - g + 1).sum()) for g in groups])
        else:
            columns = 8 * (T - groups)
            executed = bh * int((8 * per_group).sum())
        glob = bh * int((8 * per_group + 4 * columns).sum())
    elif kernel == 6:
        # a block per row; for each of the row's column tiles, every thread loads one
        # att[t2] and datt[t2] per product tile and reads the whole tile from shared memory
        tiles = -(-(t + 1) // bs)
        glob = bh * int((tiles * tiles * 8 * bs + 4 * (t + 1)).sum())
        shared = bh * int((4 * bs * tiles * (t + 1)).sum())
        executed = bh * int((bs * tiles * (t + 1)).sum())
    else:
        # kernels 7, 8: pass 1 reads att, datt of the row; pass 2 reads them again. The block
        # reduction: lanes j < NUM_WARPS of every warp read block_acc[j], once per row.
        glob = 16 * outputs
        terms = executed = 2 * outputs
        shared = bh * T * 4 * (bs // 32) ** 2
    return Count(kernel, B, T, NH, bs, outputs, 12 * outputs, terms, executed, glob, sectors,
                 shared)


def floors(c, ceilings):
    """Shortest times (ms) the ceilings allow for Count ``c``: DRAM, loads, multiply-adds."""
    return {"dram": c.dram_bytes / ceilings["copy"]["median"] * 1e3,
            "loads": c.load_bytes / ceilings["shared_load"]["median"] * 1e3,
            "multiply_adds": c.executed_multiply_adds / ceilings["fma"]["median"] * 1e3}


def roof(c, ms, ceilings):
    """Rates achieved in ``ms`` milliseconds, and each as a fraction of its ceiling."""
    s = ms * 1e-3
    rates = {"dram": c.dram_bytes / s, "loads": c.load_bytes / s,
             "multiply_adds": c.executed_multiply_adds / s}
    ceiling = {"dram": ceilings["copy"]["median"], "loads": ceilings["shared_load"]["median"],
               "multiply_adds": ceilings["fma"]["median"]}
    return {k: {"rate": rates[k], "fraction": rates[k] / ceiling[k]} for k in rates}


def describe(c, ceilings=None, ms=None):
    """The count, and given the ceilings its floors (and given a measured ``ms`` the roof)."""
    lines = [
        f"kernel {c.kernel}, softmax backward alone, B={c.B} T={c.T} NH={c.NH}, "
        f"block size {c.block_size}:",
        f"  outputs (t3 <= t):                     {c.outputs:>18,}",
        f"  minimum DRAM traffic:                  {c.dram_bytes / 1e6:>15,.1f} MB",
        f"  global loads requested:                {c.global_load_bytes / 1e9:>15,.2f} GB "
        f"({c.sectors_per_request} sectors per warp-wide load: "
        f"{c.sector_bytes / 1e9:,.2f} GB moved in sectors)",
        f"  shared-memory loads requested:         {c.shared_load_bytes / 1e9:>15,.2f} GB",
        f"  multiply-adds (useful):                {c.multiply_adds:>18,}",
    ]
    if c.executed_multiply_adds != c.multiply_adds:
        lines.append(f"  multiply-adds executed:                {c.executed_multiply_adds:>18,} "
                     f"({c.executed_multiply_adds / c.multiply_adds:.2f}x the useful ones)")
    if ceilings is None:
        return "\n".join(lines)
    f = floors(c, ceilings)
    lines.append(f"  floors on the measured ceilings of {ceilings['gpu']}:")
    for k, label in (("dram", "DRAM at copy bandwidth"), ("loads", "loads at shared-load rate"),
                     ("multiply_adds", "multiply-adds at the FMA rate")):
        lines.append(f"    {label:<32} {f[k]:12.4f} ms")
    top = max(f, key=f.get)
    lines.append(f"  the highest floor, {f[top]:.4f} ms, is the {top.replace('_', '-')} one")
    if ms is not None:
        r = roof(c, ms, ceilings)
        lines.append(f"  measured {ms:.4f} ms: " + ", ".join(
            f"{k.replace('_', '-')} {r[k]['fraction']:.1%}" for k in r) + " of ceiling")
    return "\n".join(lines)


FUSED_COUNTED_PRODUCTS = 5   # S (recomputed), dP, dV, dK, dQ: the products fused_flops counts


def fused_flops(B, T, NH, HS):
    """THE FLOP count of the fused causal attention backward, the one the FlashAttention papers
    use and every TFLOP/s of the fused kernels divides by the time: the forward is 4·B·NH·T²·HS
    (two T×T×HS products), halved for causal; the backward is 2.5x that, 5·B·NH·T²·HS, i.e.
    the FUSED_COUNTED_PRODUCTS products over the causal half. What a kernel executes on top of
    it (more products, whole diagonal tiles) is fused_executed_flops."""
    return 2.5 * 4 * B * NH * T * T * HS / 2


def fused_executed_flops(B, T, NH, HS, products, tile=64):
    """FLOPs a fused backward executes: ``products`` tile products of 2·tile·tile·HS on each
    (query, key) tile pair at or below the diagonal, n(n+1)/2 pairs with n = ceil(T/tile), the
    diagonal ones whole. Kernels 9 and 10 do 7 products (S and dP again in the dQ blocks),
    kernels 11-13 FUSED_COUNTED_PRODUCTS; 3xTF32 runs 3 mma per product on top of that."""
    for name, v in (("products", products), ("tile", tile)):
        if not isinstance(v, int) or v < 1:
            raise InputError(f"{name} must be a positive int, got {v!r}")
    n = -(-T // tile)
    return B * NH * n * (n + 1) // 2 * products * 2 * tile * tile * HS


__all__ = ["Count", "count", "floors", "roof", "describe", "fused_flops", "fused_executed_flops",
           "FUSED_COUNTED_PRODUCTS"]
