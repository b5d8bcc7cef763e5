"""Inputs for an attention problem, and the CPU reference results, cached.

The inputs are llm.c's: uniform in [-1, 1), drawn from a seeded generator, so the same
(shape, seed) always gives the same arrays. The CPU reference for a shape and seed is
computed once and kept on disk (``$ATTNLAB_CACHE``, default ``~/.cache/attnlab``), so
every notebook of the series need not recompute it.
"""
import os
import sys
import time
from collections.abc import Mapping
from dataclasses import astuple, dataclass, fields
from pathlib import Path

import numpy as np

from . import reference
from .checks import check_shape, check_int



@dataclass(frozen=True, eq=False)
class Shape(Mapping):
    """A problem's shape: batch B, sequence length T, channels C, heads NH. It reads (and
    compares) as the dict {"B": .., "T": .., "C": .., "NH": ..}, so ``make_problem(**shape)``
    works."""
    B: int
    T: int
    C: int
    NH: int

    def __getitem__(self, key):
        if key not in self.keys():
            raise KeyError(key)
        return getattr(self, key)

    def __iter__(self):
        return iter(("B", "T", "C", "NH"))

    def __len__(self):
        return 4

    def __hash__(self):
        return hash(astuple(self))

    def keys(self):
        return ("B", "T", "C", "NH")

    def astuple(self):
        """(B, T, C, NH)."""
        return astuple(self)

    @property
    def label(self):
        """'B=4 T=1024 C=768 NH=12', as messages and tables print a shape."""
        return " ".join(f"{k}={v}" for k, v in self.items())


DEFAULT = Shape(B=4, T=1024, C=768, NH=12)   # llm.c's shape: timing and validation
# validation: head size 64; T a multiple of 4 (kernels 4-5 handle 8 columns per warp, kernel 8
# 4 rows per block: T % 8 == 4 leaves them a half group) but of no block size and not of 64
# (the fused kernel's tile), so every kernel's last block or tile is partial
SMALL = Shape(B=2, T=260, C=192, NH=3)
DEFAULT_SHAPE = dict(DEFAULT)                 # the same, as a plain dict


@dataclass
class Problem:
    """One attention problem: shape, seed, inputs and CPU reference outputs."""
    B: int
    T: int
    C: int
    NH: int
    seed: int
    inp: np.ndarray       # (B, T, 3C)
    dout: np.ndarray      # (B, T, C)
    out: np.ndarray       # reference forward
    preatt: np.ndarray
    att: np.ndarray
    dinp: np.ndarray      # reference backward
    dpreatt: np.ndarray
    datt: np.ndarray

    @property
    def shape(self):
        return dict(B=self.B, T=self.T, C=self.C, NH=self.NH)


ARRAYS = [f.name for f in fields(Problem) if f.type is np.ndarray or f.type == "np.ndarray"]


def make_inputs(B, T, C, NH, seed=0):
    """(inp, dout), float32 uniform in [-1, 1), from numpy's generator seeded with ``seed``."""
    check_shape(B, T, C, NH, gpu=False)
    rng = np.random.default_rng(check_int("seed", seed, minimum=0))
    inp = rng.uniform(-1.0, 1.0, (B, T, 3 * C)).astype(np.float32)
    dout = rng.uniform(-1.0, 1.0, (B, T, C)).astype(np.float32)
    return inp, dout


def cache_dir():
    return Path(os.environ.get("ATTNLAB_CACHE", Path.home() / ".cache" / "attnlab"))


_memo = {}


def _looks_right(arrays, B, T, C, NH):
    """A cache entry has the shapes of this problem, float32 and finite values."""
    shapes = dict(inp=(B, T, 3 * C), dout=(B, T, C), out=(B, T, C), preatt=(B, NH, T, T),
                  att=(B, NH, T, T), dinp=(B, T, 3 * C), dpreatt=(B, NH, T, T), datt=(B, NH, T, T))
    return all(arrays[n].shape == shapes[n] and arrays[n].dtype == np.float32
               and np.isfinite(arrays[n]).all() for n in ARRAYS)


def make_problem(B=DEFAULT.B, T=DEFAULT.T, C=DEFAULT.C, NH=DEFAULT.NH, seed=0, cache=True, progress=False):
    """The Problem for this shape and seed, from memory, from disk, or computed."""
    B, T, C, NH = check_shape(B, T, C, NH, gpu=False)
    seed = check_int("seed", seed, minimum=0)
    key = (B, T, C, NH, seed)
    if key in _memo:
        return _memo[key]
    path = cache_dir() / f"reference-B{B}-T{T}-C{C}-NH{NH}-seed{seed}.npz"
    arrays = None
    if cache and path.is_file():
        try:
            with np.load(path) as z:
                arrays = {name: z[name] for name in ARRAYS}
            if not _looks_right(arrays, B, T, C, NH):
                arrays = None
        except Exception:
            arrays = None                      # a damaged cache file is recomputed
    if arrays is None:
        t0 = time.perf_counter()
        if progress:
            print(f"computing the CPU reference for B={B} T={T} C={C} NH={NH}...",
                  file=sys.stderr, flush=True)
        inp, dout = make_inputs(B, T, C, NH, seed)
        out, preatt, att = reference.attention_forward(inp, NH)
        dinp, dpreatt, datt = reference.attention_backward(dout, inp, att, NH)
        arrays = dict(inp=inp, dout=dout, out=out, preatt=preatt, att=att,
                      dinp=dinp, dpreatt=dpreatt, datt=datt)
        if progress:
            print(f"  done in {time.perf_counter() - t0:.1f} s", file=sys.stderr, flush=True)
        if cache:
            path.parent.mkdir(parents=True, exist_ok=True)
            tmp = path.with_name(path.stem + f".{os.getpid()}.tmp.npz")
            np.savez(tmp, **arrays)
            os.replace(tmp, path)
    problem = Problem(B, T, C, NH, seed, **arrays)
    _memo[key] = problem
    return problem
