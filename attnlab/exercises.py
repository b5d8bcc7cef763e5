"""Exercises: check a student's CUDA kernel and say precisely what is wrong with it.

One checker per exercise of ``notebooks/exercises/``::

    import attnlab.exercises as ex
    result = ex.check_permute(my_kernel)          # my_kernel: the CUDA source, a string

A checker never runs student code in the calling process. It

1. checks the source without a GPU: the kernel's name, ``extern "C"`` and argument list,
   then compiles it with nvcc (``attnlab.kernels.nvcc_check``); a compile error comes back
   with nvcc's message and the line numbered as in the notebook cell;
2. runs the kernel in a subprocess (``python -m attnlab.exercises run JOBDIR``) with a CUDA
   context of its own: an illegal address, which kills a context, or a hang (killed after
   ``timeout`` seconds) cannot harm the notebook's own context;
3. in that subprocess, surrounds every buffer with 64 KiB guard zones of a NaN canary (an
   out-of-bounds write that does not crash is reported as "wrote N floats past the end of
   ..."), fills the outputs with a NaN poison (elements never written show as such), and
   runs the kernel three times, with fresh poison and the GPU's shared memory scrambled
   before each run (results that differ point to a race);
4. compares the result with the CPU reference over the whole tensor
   (``attnlab.validate.compare``) and recognises the usual mistakes: causal mask missing,
   scale missing or doubled, rows never written, NaNs, right values in the wrong places
   (a wrong index), and a few known wrong formulas per exercise;
5. when the result is right, times the kernel against the series' own kernel on the same
   inputs (``attnlab.bench.benchmark``) and reports the ratio.

A wrong kernel raises ``ExerciseFailed`` (an AssertionError), so a notebook cell, and nbval
running it, fails; a right one prints the verdict and the times and returns a
``CheckResult``.

Reference solutions live in ``notebooks/exercises/solutions/<exercise>.cu``. With the
environment variable ``ATTNLAB_EXERCISE_SOLUTIONS=1`` every checker checks the solution
instead of the source it is given and says so in one line: this is how nbval runs the
exercise notebooks (``notebooks/exercises/conftest.py`` sets it) so they cannot rot.
"""
import argparse
import atexit
import functools
import hashlib
import itertools
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from .checks import check_block_size, check_int
from .errors import AttnlabError, InputError, KernelCompileError, NoGPUError
from .validate import FLT_EPSILON, compare

ROOT = Path(__file__).resolve().parent.parent
_saved = {}                          # arrays already written for the subprocess: id -> path
SOLUTIONS_DIR = Path(os.environ.get("ATTNLAB_EXERCISE_SOLUTIONS_DIR",
                                    ROOT / "notebooks" / "exercises" / "solutions"))
SOLUTIONS_ENV = "ATTNLAB_EXERCISE_SOLUTIONS"
FILENAME = "your_kernel.cu"          # what nvcc calls the student's source in its messages
DEFAULT_TIMEOUT = 30                 # seconds for one check's subprocess
SANITIZER_TIMEOUT = 180
REPEATS = 20
RUNS = 3                             # runs at the small shape, each with fresh poison

# Bit patterns, all quiet NaNs with their own payload. The GPU's arithmetic never makes
# these (a NaN it computes is 0x7fffffff), so each says where a value came from.
POISON_BITS = 0x7FC0DEAD             # output elements before the kernel runs
OUT_GUARD_BITS = 0x7FC0FEED          # the guard zones around each output
IN_GUARD_BITS = 0x7FC0BEAD           # the guard zones around each input
GUARD_FLOATS = 16384                 # 64 KiB before and after every buffer

SMALL = dict(B=2, T=260, C=192, NH=3)            # T a multiple of 4 but of no block size
SMALL_PERMUTE = dict(B=2, T=251, C=192, NH=3)    # B*NH*T*HS not a multiple of 256 either
TIMING = dict(B=4, T=1024, C=768, NH=12)         # the series' default shape


def _timing_shape():
    """TIMING, or the shape in ATTNLAB_EXERCISE_TIMING_SHAPE="B,T,C,NH" (e.g. a small GPU)."""
    text = os.environ.get("ATTNLAB_EXERCISE_TIMING_SHAPE", "").strip()
    if not text:
        return TIMING
    try:
        B, T, C, NH = (int(v) for v in text.split(","))
    except ValueError:
        raise InputError(f"ATTNLAB_EXERCISE_TIMING_SHAPE must be four integers B,T,C,NH, got "
                         f"{text!r}") from None
    from .checks import check_shape
    check_shape(B, T, C, NH)
    return dict(B=B, T=T, C=C, NH=NH)


ATT_JUNK = 0.5          # what the backward exercises put in att's upper triangle (t2 > t)


class ExerciseFailed(AttnlabError, AssertionError):
    """The student's kernel does not compile, crashed, hung, or computed a wrong result.

    ``str(e)`` is the whole report; ``e.result`` the CheckResult. In a notebook the report
    is shown without a Python traceback (the traceback would be about the checker).
    """

    def __init__(self, message, result=None):
        super().__init__(message)
        self.result = result

    def _render_traceback_(self):           # IPython shows this instead of a traceback
        lines = str(self).splitlines() or [""]
        return [f"\x1b[1;31mExerciseFailed\x1b[0m: \x1b[1m{lines[0]}\x1b[0m"] + lines[1:]


@dataclass
class CheckResult:
    """What a checker found. ``kind`` is one of: ok, compile, signature, crash, timeout,
    out_of_bounds, input_modified, race, wrong."""
    exercise: str
    ok: bool
    kind: str
    message: str
    solution: bool = False               # the reference solution was checked instead
    timing: dict = None                  # yours_ms, reference_ms, ratio, reference, shape
    sanitizer: str = None                # compute-sanitizer's findings, when it ran

    def __str__(self):
        return self.message

    def __repr__(self):
        extra = ""
        if self.timing:
            extra = f", {self.timing['yours_ms']:.4f} ms vs {self.timing['reference_ms']:.4f} ms"
        return f"CheckResult({self.exercise}: {self.kind}{extra})"


# ------------------------------------------------------------------------------------------
# The exercises: what each kernel is called, takes, and is compared against.

@dataclass(frozen=True)
class Exercise:
    key: str                  # notebook stem, and the solution's file name
    title: str
    function: str             # the extern "C" kernel the checker launches
    signature: tuple          # ((name, "ptr" | "int" | "float"), ...) in launch order
    tol: float
    config: tuple = ()        # ((name, default), ...) the student chooses (block size, ...)

    @property
    def call(self):
        """The kernel's expected declaration, as text."""
        text = {"ptr": "float*", "cptr": "const float*", "int": "int", "float": "float"}
        args = ", ".join(f"{text[k]} {n}" for n, k in self.signature)
        return f'extern "C" __global__ void {self.function}({args})'

    @property
    def kinds(self):
        """The argument kinds the declaration is checked against (const or not)."""
        return [{"cptr": "ptr"}.get(k, k) for _, k in self.signature]


_BACKWARD_SIG = (("dpreatt", "ptr"), ("datt", "cptr"), ("att", "cptr"),
                 ("B", "int"), ("T", "int"), ("C", "int"), ("NH", "int"))

EXERCISES = {e.key: e for e in (
    Exercise("e1_permute", "Exercise 1, the permute kernel", "permute_kernel",
             (("q", "ptr"), ("k", "ptr"), ("v", "ptr"), ("inp", "cptr"),
              ("B", "int"), ("N", "int"), ("NH", "int"), ("d", "int")), 0.0),
    Exercise("e2_softmax_forward", "Exercise 2, a naive causal softmax", "softmax_forward",
             (("att", "ptr"), ("preatt", "cptr"), ("scale", "float"), ("N", "int"), ("T", "int")),
             1e-3),
    Exercise("e3_kernel7_from_jacobian", "Exercise 3, kernel 7 from the softmax Jacobian",
             "softmax_autoregressive_backward_kernel7", _BACKWARD_SIG, 1e-3,
             (("block_size", 256),)),
    Exercise("e4_tune_kernel8", "Exercise 4, tuning kernel 8",
             "softmax_autoregressive_backward_kernel8", _BACKWARD_SIG, 1e-3,
             (("block_size", 256), ("t_per_block", 4))),
    Exercise("e5_beat_kernel", "Exercise 5, beat kernel 8", "my_softmax_backward",
             _BACKWARD_SIG, 1e-3, (("block_size", 256), ("t_per_block", 1), ("beat", 8))),
)}


def ceil_div(a, b):
    return -(-a // b)


def shape_label(shape):
    return " ".join(f"{k}={shape[k]}" for k in ("B", "T", "C", "NH"))


@dataclass
class Case:
    """One run of an exercise on one shape: buffers, scalars, launch, expected results."""
    label: str
    shape: dict
    inputs: dict              # name -> float32 array
    outputs: dict             # name -> (shape, "poison" | "causal")
    expected: dict            # name -> float32 array
    axes: dict                # name -> coordinate names
    scalars: dict             # name -> ("i" | "f", value)
    args: list                # the student kernel's arguments, by name
    grid: tuple
    block: tuple
    reference: dict = None    # the series' kernel to time against (same inputs)
    candidates: dict = field(default_factory=dict)   # name -> [(array, hint)], known mistakes
    scale: float = None


def _problem(shape):
    from .problem import make_problem
    return make_problem(**shape, progress=True)


def _label(shape):
    return shape_label(shape)


@functools.lru_cache(maxsize=4)
def _permute_data(shape_items):
    from .problem import make_inputs
    from .reference import split_heads
    shape = dict(shape_items)
    inp, _ = make_inputs(shape["B"], shape["T"], shape["C"], shape["NH"])
    return (inp, *split_heads(inp, shape["NH"]))


def _permute_case(shape):
    B, T, C, NH = (shape[k] for k in ("B", "T", "C", "NH"))
    HS = C // NH
    inp, q, k, v = _permute_data(tuple(sorted(shape.items())))
    n = B * NH * T * HS
    outputs = {name: ((B, NH, T, HS), "poison") for name in "qkv"}
    expected = dict(q=q, k=k, v=v)
    cands = {}
    for name in "qkv":
        cands[name] = [(expected[o], f"your {name} holds the values that belong in {o}: inside "
                        f"a row of inp, q starts at offset 0, k at C and v at 2*C")
                       for o in "qkv" if o != name]
    return Case(_label(shape), shape, dict(inp=inp), outputs, expected,
                {name: ("b", "h", "t", "d") for name in "qkv"},
                dict(B=("i", B), N=("i", T), NH=("i", NH), d=("i", HS)),
                ["q", "k", "v", "inp", "B", "N", "NH", "d"],
                (ceil_div(n, 256), 1, 1), (256, 1, 1),
                reference=dict(kernel="permute", function="permute_kernel", defines={},
                               grid=(ceil_div(n, 256), 1, 1), block=(256, 1, 1),
                               args=["q", "k", "v", "inp", "B", "N", "NH", "d"],
                               label="the series' permute_kernel, block 256"),
                candidates=cands)


def _softmax(preatt, s, causal=True):
    """Softmax of s*preatt over t2 <= t (or the whole row), in float64; 0 where masked."""
    x = preatt.astype(np.float64) * s
    T = x.shape[-1]
    if causal:
        mask = np.tril(np.ones((T, T), bool))
        x = np.where(mask, x, -np.inf)
    e = np.exp(x - x.max(axis=-1, keepdims=True))
    return (e / e.sum(axis=-1, keepdims=True)).astype(np.float32)


@functools.lru_cache(maxsize=2)
def _softmax_candidates(shape_items):
    p = _problem(dict(shape_items))
    scale = float(np.float32(1.0 / np.sqrt(p.C // p.NH)))
    return [
        (_softmax(p.preatt, 1.0), "your result is softmax(preatt), not softmax(scale * preatt): "
                                  "multiply the scores by scale before exp"),
        (_softmax(p.preatt, 1.0 / scale), "you divided by scale instead of multiplying "
                                               "by it: scale is already 1/sqrt(HS)"),
        (_softmax(p.preatt, scale, causal=False),
         "your softmax runs over the whole row (t2 = 0..T-1): the causal mask is missing; "
         "row t has only the columns t2 <= t (max, sum and output)"),
    ]


def _softmax_case(shape, small):
    p = _problem(shape)
    B, T, C, NH = (shape[k] for k in ("B", "T", "C", "NH"))
    N = B * NH
    scale = float(np.float32(1.0 / np.sqrt(C // NH)))
    cands = {"att": _softmax_candidates(tuple(sorted(shape.items())))} if small else {}
    ref_grid = (ceil_div(N * T * 32, 256), 1, 1)
    return Case(_label(shape), shape, dict(preatt=p.preatt), dict(att=((B, NH, T, T), "causal")),
                dict(att=p.att), dict(att=("b", "h", "t", "t2")),
                dict(N=("i", N), T=("i", T), scale=("f", scale)),
                ["att", "preatt", "scale", "N", "T"],
                (ceil_div(N * T, 256), 1, 1), (256, 1, 1),
                reference=dict(kernel="softmax_forward", function="softmax_forward_kernel5",
                               defines={}, grid=ref_grid, block=(256, 1, 1),
                               args=["att", "scale", "preatt", "N", "T"],
                               label="the series' softmax_forward_kernel5"),
                candidates=cands, scale=scale)


@functools.lru_cache(maxsize=4)
def _att_with_junk(shape_items):
    p = _problem(dict(shape_items))
    T = p.T
    att = p.att.copy()
    att[..., ~np.tril(np.ones((T, T), bool))] = ATT_JUNK
    return att


@functools.lru_cache(maxsize=2)
def _backward_candidates(shape_items):
    """Known wrong formulas for dpreatt, in float64, each with what it tells the student."""
    p = _problem(dict(shape_items))
    att_junk = _att_with_junk(shape_items)
    scale = float(np.float32(1.0 / np.sqrt(p.C // p.NH)))
    att = p.att.astype(np.float64)
    junk = att_junk.astype(np.float64)
    datt = p.datt.astype(np.float64)
    T = p.T
    lower = np.tril(np.ones((T, T), bool))
    S = (att * datt).sum(-1, keepdims=True)
    S_full = (junk * datt).sum(-1, keepdims=True)
    S_before = (np.where(np.tril(np.ones((T, T), bool), -1), att, 0) * datt).sum(-1, keepdims=True)
    keep = lambda x: np.where(lower, x, 0).astype(np.float32)  # noqa: E731
    return [
        ((scale * junk * (datt - S_full)).astype(np.float32),
         "the causal mask is missing everywhere: S sums over the whole row and you write every "
         "column; row t has only the columns t2 <= t (the checker fills att above the diagonal "
         f"with {ATT_JUNK}, so reading or writing there shows)"),
        (keep(scale * att * (datt - S_full)),
         "your sum S = sum att[t2]*datt[t2] runs over the whole row: it must stop at t2 = t "
         "(the entries t2 > t are not part of the softmax; the checker fills att there with "
         f"{ATT_JUNK})"),
        (keep(scale * att * (datt - S_before)),
         "your sum S stops one short: it must include t2 = t (t2 <= t, not t2 < t)"),
        (keep(scale * (datt - S)),
         "the factor att[t3] is missing: dpreatt[t3] = scale * att[t3] * (datt[t3] - S)"),
        (keep(scale * att * datt),
         "the '- S' is missing: dpreatt[t3] = scale * att[t3] * (datt[t3] - S), "
         "S = sum_{t2 <= t} att[t2] * datt[t2]"),
        (keep(scale * att * (datt - att.sum(-1, keepdims=True))),
         "your S sums att[t2] alone: it is S = sum_{t2 <= t} att[t2] * datt[t2]"),
    ]


def _backward_case(shape, small, grid, block, ref_kernel):
    p = _problem(shape)
    B, T, C, NH = (shape[k] for k in ("B", "T", "C", "NH"))
    scale = float(np.float32(1.0 / np.sqrt(C // NH)))
    att = _att_with_junk(tuple(sorted(shape.items())))
    cands = {"dpreatt": _backward_candidates(tuple(sorted(shape.items())))} if small else {}
    ref = dict(kernel=f"softmax_backward{ref_kernel}",
               function=f"softmax_autoregressive_backward_kernel{ref_kernel}",
               defines={"BLOCK_SIZE": 256} if ref_kernel >= 6 else {},
               grid=_library_backward_grid(ref_kernel, B, T, NH), block=(256, 1, 1),
               args=["dpreatt", "datt", "att", "B", "T", "C", "NH"],
               label=f"kernel {ref_kernel}, block 256")
    return Case(_label(shape), shape, dict(datt=p.datt, att=att),
                dict(dpreatt=((B, NH, T, T), "causal")), dict(dpreatt=p.dpreatt),
                dict(dpreatt=("b", "h", "t", "t2")),
                dict(B=("i", B), T=("i", T), C=("i", C), NH=("i", NH)),
                ["dpreatt", "datt", "att", "B", "T", "C", "NH"],
                tuple(grid), tuple(block), reference=ref, candidates=cands, scale=scale)


def _library_backward_grid(kernel, B, T, NH):
    from .launch import softmax_backward_launch
    return softmax_backward_launch(kernel, B, T, NH, 256)[0]


def _config(ex, given):
    """The student's launch choices, checked; (config, defines)."""
    cfg = dict(ex.config)
    unknown = set(given) - set(cfg)
    if unknown:
        raise InputError(f"{ex.key} takes no option {sorted(unknown)}; it takes {sorted(cfg) or 'none'}")
    cfg.update({k: v for k, v in given.items() if v is not None})
    defines = {}
    if "block_size" in cfg:
        cfg["block_size"] = check_block_size(cfg["block_size"])
        defines["BLOCK_SIZE"] = cfg["block_size"]
    if "t_per_block" in cfg:
        cfg["t_per_block"] = check_int("t_per_block", cfg["t_per_block"])
        if cfg["t_per_block"] > 1024:
            raise InputError(f"t_per_block must be at most 1024, got {cfg['t_per_block']}")
        defines["T_PER_BLOCK"] = cfg["t_per_block"]
    if "beat" in cfg and cfg["beat"] not in (6, 7, 8):
        raise InputError(f"beat must be 6, 7 or 8 (the kernels fast enough to time at "
                         f"{shape_label(_timing_shape())}), got {cfg['beat']!r}")
    return cfg, defines


def _cases(ex, cfg, timing=True):
    """The small case (always) and the timing case (when timing) of an exercise."""
    shapes = [SMALL_PERMUTE if ex.key == "e1_permute" else SMALL] + ([_timing_shape()] if timing else [])
    out = []
    for i, shape in enumerate(shapes):
        small = i == 0
        B, T, NH = shape["B"], shape["T"], shape["NH"]
        if ex.key == "e1_permute":
            out.append(_permute_case(shape))
        elif ex.key == "e2_softmax_forward":
            out.append(_softmax_case(shape, small))
        elif ex.key == "e3_kernel7_from_jacobian":
            out.append(_backward_case(shape, small, (T, B * NH, 1), (cfg["block_size"], 1, 1), 7))
        else:
            ref = 8 if ex.key == "e4_tune_kernel8" else cfg["beat"]
            out.append(_backward_case(shape, small, (ceil_div(T, cfg["t_per_block"]), B * NH, 1),
                                      (cfg["block_size"], 1, 1), ref))
    return out


# ------------------------------------------------------------------------------------------
# Before any GPU: the source itself.

def solution_path(key):
    return SOLUTIONS_DIR / f"{key}.cu"


def solution_source(key):
    """The reference solution of an exercise (a string)."""
    return solution_path(key).read_text()


def solution_config(source):
    """The launch choices a solution states in a line ``// attnlab-exercise-config: a=1 b=2``."""
    m = re.search(r"attnlab-exercise-config:([^\n]*)", source)
    if not m:
        return {}
    return {k: int(v) for k, v in re.findall(r"(\w+)\s*=\s*(\d+)", m.group(1))}


def use_solutions():
    """True when ATTNLAB_EXERCISE_SOLUTIONS asks for the reference solutions."""
    return os.environ.get(SOLUTIONS_ENV, "").strip().lower() not in ("", "0", "false", "no", "off")


def _resolve(ex, source, given):
    """(source, config given, filename, substituted?) after the solutions switch."""
    if use_solutions():
        path = solution_path(ex.key)
        sol = path.read_text()
        given = dict(given, **solution_config(sol))
        try:
            shown = path.relative_to(ROOT)
        except ValueError:
            shown = path
        print(f"{SOLUTIONS_ENV} is set: checking the reference solution {shown}, "
              f"not the kernel in this notebook.", flush=True)
        return sol, given, path.name, True
    return source, given, FILENAME, False


def _strip_comments(src):
    """The source with comments blanked out (newlines kept, so line numbers stay)."""
    def blank(m):
        return re.sub(r"[^\n]", " ", m.group(0))
    return re.sub(r'//[^\n]*|/\*.*?\*/|"(?:\\.|[^"\\\n])*"', lambda m: m.group(0)
                  if m.group(0).startswith('"') else blank(m), src, flags=re.S)


def _param_kind(text):
    t = text.strip()
    if "*" in t or "[" in t:
        return "ptr"
    if re.search(r"\bdouble\b", t):
        return "double"
    if re.search(r"\bfloat\b", t):
        return "float"
    if re.search(r"\b(long|size_t|int64_t|uint64_t|ptrdiff_t)\b", t):
        return "long"
    if re.search(r"\b(int|unsigned|int32_t|uint32_t)\b", t):
        return "int"
    return "?"


def check_signature(ex, source, filename=FILENAME):
    """Problems with the kernel's declaration, as a message, or None when it looks right."""
    code = _strip_comments(source)
    line_of = lambda pos: code.count("\n", 0, pos) + 1  # noqa: E731
    found = [m for m in re.finditer(rf"\b{re.escape(ex.function)}\s*\(", code)]
    decl = None
    for m in found:
        start = max(code.rfind(";", 0, m.start()), code.rfind("}", 0, m.start())) + 1
        head = code[start:m.start()]
        if "__global__" in head:
            decl = (m, head)
            break
    if decl is None:
        names = re.findall(r"__global__[^(;{]*?(\w+)\s*\(", code)
        names = [n for n in names if n != "__launch_bounds__"]
        have = (f"; the kernels in it are: {', '.join(names)}" if names
                else "; it has no __global__ function at all")
        return (f"your source has no __global__ kernel named {ex.function}{have}.\n"
                f"The checker launches exactly this one:\n    {ex.call}")
    for name in _given_defines(ex):
        if re.search(rf"^\s*#\s*define\s+{name}\b", code, re.M) and \
                not re.search(rf"^\s*#\s*if(ndef\s+{name}\b|\s+!\s*defined)", code, re.M):
            return (f"your source #defines {name}, which the checker passes itself "
                    f"(-D{name}=..., from the check's {name.lower()}= argument): the two could "
                    f"disagree with the launch. Remove the #define (or wrap it in #ifndef {name}).")
    m, head = decl
    in_block = re.search(r'extern\s+"C"\s*\{', code[:m.start()]) is not None
    if not re.search(r'extern\s+"C"', head) and not in_block:
        return (f"{ex.function} (line {line_of(m.start())}) is not declared extern \"C\": "
                f"without it C++ changes the name the compiled kernel gets (name mangling) and "
                f"the checker cannot find it. Write:\n    {ex.call}")
    depth, i = 1, m.end()
    while i < len(code) and depth:
        depth += {"(": 1, ")": -1}.get(code[i], 0)
        i += 1
    params = [p for p in _split_params(code[m.end():i - 1]) if p.strip() and p.strip() != "void"]
    kinds = [_param_kind(p) for p in params]
    want = ex.kinds
    if kinds == want or "?" in kinds and len(kinds) == len(want):
        return None
    shown = ", ".join(" ".join(p.split()) for p in params) or "nothing"
    why = []
    if len(kinds) != len(want):
        why.append(f"it takes {len(kinds)} argument{'s' * (len(kinds) != 1)}, the checker passes {len(want)}")
    else:
        for (name, _), w, k, p in zip(ex.signature, want, kinds, params):
            if k != w and k != "?":
                what = {"ptr": "a pointer", "int": "an int", "float": "a float",
                        "double": "a double", "long": "a 64-bit integer"}
                why.append(f"argument '{' '.join(p.split())}' is {what.get(k, k)}, the checker "
                           f"passes {what[w]} ({name})")
    return (f"{ex.function} (line {line_of(m.start())}) takes ({shown}): " + "; ".join(why) +
            f".\nThe checker calls it with exactly these arguments, in this order:\n    {ex.call}")


def _given_defines(ex):
    names = {"block_size": "BLOCK_SIZE", "t_per_block": "T_PER_BLOCK"}
    return [names[k] for k, _ in ex.config if k in names]


def _split_params(text):
    out, depth, cur = [], 0, []
    for ch in text:
        if ch in "(<[":
            depth += 1
        elif ch in ")>]":
            depth -= 1
        if ch == "," and depth == 0:
            out.append("".join(cur))
            cur = []
        else:
            cur.append(ch)
    out.append("".join(cur))
    return out


def cell_line_offset(source, history=None):
    """How many lines of the notebook cell come before ``source``, or None if not found.

    The cell is looked up in IPython's input history (``history``: the cells' texts, newest
    last; by default the running IPython's). Line n of the source is line n + offset of
    that cell, which is what Jupyter shows when line numbers are on.
    """
    if not source.strip():
        return None
    if history is None:
        try:
            from IPython import get_ipython
            ip = get_ipython()
            history = list(ip.history_manager.input_hist_raw) if ip is not None else []
        except Exception:
            history = []
    for cell in reversed(list(history)):
        i = cell.find(source)
        if i >= 0:
            return cell.count("\n", 0, i)
    return None


# nvcc's front end writes "file(12): error: ...", its preprocessor (gcc) "file:12:5: error: ..."
_ENTRY = re.compile(r"^(?P<file>.*?)\((?P<line>\d+)\): (?P<sev>error|warning)(?: #[\w-]+)?: (?P<msg>.*)$")
_ENTRY_GCC = re.compile(r"^(?P<file>.*?):(?P<line>\d+):(?P<col>\d+): (?P<sev>fatal error|error|warning): "
                        r"(?P<msg>.*)$")


def _entry(line):
    m = _ENTRY.match(line.strip()) or _ENTRY_GCC.match(line.strip())
    if not m:
        return None
    d = m.groupdict()
    d["sev"] = "error" if "error" in d["sev"] else "warning"
    d["col"] = int(d["col"]) if d.get("col") else None
    return d


def format_compile_error(nvcc_text, source, filename=FILENAME, offset=None, max_errors=3):
    """nvcc's output turned into a short report about the student's own lines.

    Keeps the first ``max_errors`` errors (warnings are counted, not shown). For an error
    in ``filename`` it shows the line number as in the cell (line + ``offset`` when the
    cell is known), the source line, and nvcc's caret under the right column.
    """
    src_lines = source.splitlines()
    lines = nvcc_text.splitlines()
    entries, i = [], 0
    while i < len(lines):
        m = _entry(lines[i])
        if not m:
            i += 1
            continue
        follow = []
        i += 1
        while i < len(lines) and not _entry(lines[i]) and \
                (lines[i].startswith(" ") or lines[i].strip().startswith("^")):
            follow.append(lines[i])
            i += 1
        entries.append((m, follow))
    errors = [(m, f) for m, f in entries if m["sev"] == "error"]
    n_warn = sum(1 for m, _ in entries if m["sev"] == "warning")
    where = ("line numbers as in the cell where your kernel is written" if offset is not None
             else "line numbers count from the first line of your kernel's source"
             if Path(filename).name == FILENAME else f"line numbers as in {filename}")
    out = [f"your kernel does not compile. nvcc says ({where}):"]
    if not errors:
        other = [ln for ln in lines[1:] if ln.strip()] or lines
        out += ["  " + ln for ln in other[:12]]
        return "\n".join(out)
    for m, follow in errors[:max_errors]:
        line = int(m["line"])
        ours = Path(m["file"]).name == Path(filename).name
        if not ours:
            out.append(f"  {m['file']}({line}): error: {m['msg']}")
            out += ["  " + f for f in follow[:2]]
            continue
        shown = line + (offset or 0)
        out.append(f"  line {shown}: error: {m['msg']}")
        src = src_lines[line - 1] if 0 < line <= len(src_lines) else None
        if src is None:
            continue
        out.append(f"  {shown:>5} | {src.rstrip()}")
        if m["col"] is not None:                        # the preprocessor gives the column
            col = m["col"] - 1 if 0 < m["col"] <= len(src) + 1 else None
        else:
            echo = next((f for f in follow if f.strip() and set(f.strip()) != {"^"}), None)
            caret = next((f for f in follow if f.strip() == "^"), None)
            col = _caret_column(src, echo, caret)
        if col is not None:
            out.append(f"  {'':>5} | {' ' * col}^")
        if m["msg"].startswith("expected a \";\"") and line > 1:
            out.append(f"  {'':>5}   (nvcc reports a missing ';' where the next statement starts: "
                       f"look at the end of line {shown - 1})")
    if len(errors) > max_errors:
        out.append(f"  ... and {len(errors) - max_errors} more error(s): fix the first one first, "
                   f"the others often follow from it")
    if n_warn:
        out.append(f"  ({n_warn} warning(s) not shown)")
    return "\n".join(out)


def _caret_column(src, echo, caret):
    """The column in the student's line of the token nvcc's caret points at, or None.

    nvcc echoes the line after the preprocessor (BLOCK_SIZE already replaced by 256, say),
    so the column is found by the token under the caret, not by counting.
    """
    if echo is None or caret is None:
        return None
    at = caret.index("^")
    shift = (len(src) - len(src.lstrip())) - (len(echo) - len(echo.lstrip()))
    if echo.strip() == src.strip():
        col = at + shift
        return col if 0 <= col <= len(src) else None
    m = re.match(r"\w+|\S", echo[at:]) if at < len(echo) else None
    if not m:
        return None
    spots = [i.start() for i in re.finditer(re.escape(m.group()), src)]
    if not spots:
        return None
    return min(spots, key=lambda i: abs(i - (at + shift)))


@functools.lru_cache(maxsize=64)
def _nvcc_check_cached(source, filename, defines):
    from . import kernels
    return kernels.nvcc_check(source, filename, defines)


def compile_check(ex, source, filename=FILENAME, defines=(), offset=None):
    """Check the declaration and compile with nvcc (no GPU needed): a message, or None."""
    problem = check_signature(ex, source, filename)
    if problem:
        return "signature", problem
    try:
        _nvcc_check_cached(source, filename, tuple(sorted(dict(defines).items())))
    except KernelCompileError as e:
        return "compile", format_compile_error(str(e), source, filename, offset)
    return None


# ------------------------------------------------------------------------------------------
# Reading results: hints by pattern. Plain numpy, no GPU (tested on synthetic arrays).

def _bits(a):
    return np.ascontiguousarray(a, dtype=np.float32).view(np.uint32)


def mismatch_mask(got, expected, tol):
    """llm.c's rule, elementwise: True where got is wrong (a NaN is always wrong)."""
    exp = expected.astype(np.float64)
    err = np.abs(got.astype(np.float64) - exp)
    return (~(err <= tol + np.abs(exp) * FLT_EPSILON)) & np.isfinite(exp)


def _close(a, b, tol):
    """Elementwise a ≈ b by the same rule, for arrays of any values (NaN == NaN)."""
    a = a.astype(np.float64)
    b = b.astype(np.float64)
    both_nan = np.isnan(a) & np.isnan(b)
    return both_nan | (np.abs(a - b) <= tol + np.abs(b) * FLT_EPSILON)


def _first_true(mask, k):
    """Flat indices of the first k True elements, without materializing all of them."""
    flat = mask.reshape(-1)
    out, step = [], 1 << 20
    for s in range(0, flat.size, step):
        idx = np.flatnonzero(flat[s:s + step])
        out.extend((idx[:k - len(out)] + s).tolist())
        if len(out) >= k:
            break
    return out


def _coords(shape, flat, axes):
    return ", ".join(f"{a}={int(i)}" for a, i in zip(axes, np.unravel_index(flat, shape)))


def _fmt(v):
    return "NaN" if np.isnan(v) else f"{v:.6g}"


def _ranges(mask, axes):
    """Where the True elements of mask lie, per axis: '0..259 (all)' or a sub-range."""
    parts = []
    for d, a in enumerate(axes):
        hit = mask.any(axis=tuple(i for i in range(mask.ndim) if i != d))
        idx = np.flatnonzero(hit)
        n = mask.shape[d]
        if idx.size == n:
            parts.append(f"{a} all of 0..{n - 1}")
        elif idx.size == 1:
            parts.append(f"{a}={idx[0]} only (of 0..{n - 1})")
        elif idx[-1] - idx[0] + 1 == idx.size:
            parts.append(f"{a} {idx[0]}..{idx[-1]} (of 0..{n - 1})")
        else:
            shown = ", ".join(str(i) for i in idx[:6]) + (", ..." if idx.size > 6 else "")
            parts.append(f"{a} in {{{shown}}} ({idx.size} of {n})")
    return "; ".join(parts)


def _list(values, limit=8):
    values = [int(v) for v in values]
    if len(values) > 2 and values == list(range(values[0], values[-1] + 1)):
        return f"{values[0]}..{values[-1]}"
    s = ", ".join(str(v) for v in values[:limit])
    return s + (", ..." if len(values) > limit else "")


def describe_mismatch(name, got, expected, axes, tol, *, causal=False, scale=None,
                      candidates=(), poisoned=None, layouts=True, first=5):
    """(number wrong, report lines, hints) for one output tensor.

    poisoned: True where the checker put the NaN poison before the run (default: all
    elements, or the lower triangle when causal). candidates: [(array, hint)] of known
    wrong answers; layouts: also try every other order of the axes (wrong index).
    """
    got = np.asarray(got, np.float32)
    expected = np.asarray(expected, np.float32)
    T = got.shape[-1]
    lower = np.tril(np.ones((T, T), bool)) if causal else None
    if poisoned is None:
        poisoned = np.broadcast_to(lower, got.shape) if causal else np.ones(got.shape, bool)
    report = compare(got, expected, name, tol)
    if report.ok:
        return 0, [], []
    bad = mismatch_mask(got, expected, tol)
    n_bad = int(bad.sum())
    unwritten = (_bits(got) == POISON_BITS) & poisoned
    n_unwritten = int(unwritten.sum())
    rule = "must be exact" if tol == 0 else f"allowed error {tol:g} + |expected|*FLT_EPSILON"
    err = np.where(bad & np.isfinite(got), np.abs(got.astype(np.float64) - expected), -1.0)
    worst = int(np.argmax(err))
    largest = f", largest error {err.flat[worst]:.3g}" if err.flat[worst] >= 0 else ""
    lines = [f"{name}: {n_bad} of {got.size} elements wrong ({rule}){largest}"]
    lines.append("  first wrong elements, in memory order:")
    for i in _first_true(bad, first):
        g = got.flat[i]
        what = "never written" if unwritten.flat[i] else _fmt(g)
        lines.append(f"    ({_coords(got.shape, i, axes)}): expected {_fmt(expected.flat[i])}, got {what}")
    if largest and worst not in _first_true(bad, first):
        lines.append(f"  largest error at ({_coords(got.shape, worst, axes)}): expected "
                     f"{_fmt(expected.flat[worst])}, got {_fmt(got.flat[worst])}")
    lines.append(f"  the wrong elements lie at: {_ranges(bad, axes)}")

    hints = []
    # elements never written
    if n_unwritten:
        if n_unwritten == int(poisoned.sum()):
            hints.append(f"nothing of {name} was written (every element still holds the NaN the "
                         f"checker filled it with): did the kernel do anything? Check the guard "
                         f"that lets threads through (if (idx < n)) and the pointer you write to")
        else:
            hints.append(_unwritten_hint(name, unwritten, poisoned, axes, causal))
    # NaN computed by the kernel (not poison)
    nan_made = np.isnan(got) & ~unwritten & np.isfinite(expected)
    if nan_made.any():
        hints.append(f"{int(nan_made.sum())} elements of {name} are NaN that your kernel "
                     f"computed (first at ({_coords(got.shape, _first_true(nan_made, 1)[0], axes)})): "
                     f"from 0/0, inf - inf, exp of a huge number, or a read outside an input "
                     f"(the checker surrounds every input with NaN)")
    inf_made = np.isinf(got) & np.isfinite(expected)
    if inf_made.any():
        hints.append(f"{int(inf_made.sum())} elements are +-inf: a division by 0 or an exp that "
                     f"overflowed (subtract the row's maximum before exp)")
    # causal mask
    if causal:
        upper_bad = bad & ~lower
        if upper_bad.any():
            only = "all the wrong elements are" if not (bad & lower).any() else \
                f"{int(upper_bad.sum())} of the wrong elements are"
            hints.append(f"{only} above the diagonal (t2 > t), where {name} must stay 0: your "
                         f"kernel wrote there. The causal mask is missing: row t has only the "
                         f"columns t2 <= t")
        diag = np.eye(T, dtype=bool)
        if (bad & lower).any() and not (bad & lower & ~diag).any() and not n_unwritten:
            hints.append("only the diagonal (t2 == t) is wrong: an off-by-one in a loop bound "
                         "(t2 < t where it should be t2 <= t)?")
    # whole rows of zeros
    if got.ndim >= 2:
        zero_rows = (got == 0).all(-1) & (np.abs(expected) > tol).any(-1)
        if zero_rows.any():
            hints.append(f"{int(zero_rows.sum())} whole rows of {name} are 0 where they should not "
                         f"be (first: {_coords(got.shape[:-1], _first_true(zero_rows, 1)[0], axes[:-1])})")
    # a constant factor
    hint = _factor_hint(got, expected, bad, tol, scale)
    if hint:
        hints.append(hint)
    # right values, wrong places
    if layouts and n_bad and got.ndim > 1:
        hint = _layout_hint(name, got, expected, bad, unwritten, axes, tol)
        if hint:
            hints.append(hint)
    # known mistakes of this exercise
    for cand, text in candidates:
        sel = bad & ~unwritten
        if sel.sum() and _close(got[sel], cand[sel], tol).mean() >= 0.99:
            hints.append(text)
    return n_bad, lines, hints


def _unwritten_hint(name, unwritten, poisoned, axes, causal):
    n = int(unwritten.sum())
    rows_all = (unwritten | ~poisoned).all(-1) & poisoned.any(-1)     # whole rows missing
    text = f"{n} elements of {name} were never written (they still hold the checker's NaN)"
    if rows_all.any() and int(unwritten[rows_all].sum()) == n:
        lead = rows_all.reshape(-1, rows_all.shape[-1]) if rows_all.ndim > 1 else rows_all[None]
        if rows_all.ndim > 1 and (lead == lead[0]).all():
            ts = np.flatnonzero(lead[0])
            text += (f": whole rows, the same in every ({', '.join(axes[:-2])}): "
                     f"{axes[-2]} = {_list(ts)}. Does every row get a block (or warp, or thread)? "
                     f"Check the grid arithmetic and the loop over rows")
        else:
            first = _first_true(rows_all, 1)[0]
            text += (f": {int(rows_all.sum())} whole rows, first "
                     f"({_coords(rows_all.shape, first, axes[:-1])})")
        return text
    if causal:
        T = unwritten.shape[-1]
        diag = np.eye(T, dtype=bool)
        if not (unwritten & ~diag).any():
            return text + (": only the diagonal t2 == t: a loop that stops at t2 < t instead "
                           "of t2 <= t?")
        last_cols = unwritten.any(axis=tuple(range(unwritten.ndim - 1)))
        cols = np.flatnonzero(last_cols)
        if cols.size and cols[0] > 0 and (unwritten.sum(axis=-1) > 0).mean() > 0.5:
            text += (": at the end of the rows (columns from "
                     f"{cols[0]} on): does a loop stop before t2 = t, or cover only one "
                     "blockDim.x-wide tile of the row?")
            return text
    return text + f"; they lie at: {_ranges(unwritten, axes)}"


def _factor_hint(got, expected, bad, tol, scale):
    sel = bad & np.isfinite(got)             # wrong by more than tol: c*expected must explain it
    if sel.sum() < max(3, 0.5 * bad.sum()):
        return None
    g = got[sel].astype(np.float64)
    e = expected[sel].astype(np.float64)
    factors = [(-1.0, "every wrong value has the wrong sign: a subtraction the wrong way round?")]
    if scale:
        hs = round(1 / scale ** 2)
        factors += [
            (1 / scale, f"every wrong value is 1/scale = sqrt(HS) = {1 / scale:g} times too large: "
                        f"the scale is missing (multiply by scale = 1/sqrt(HS) = {scale:g}, HS = {hs})"),
            (scale, f"every wrong value is scale = {scale:g} times too small: the scale is applied "
                    f"twice?"),
            (-1 / scale, "every wrong value is -sqrt(HS) times the expected one: scale missing and "
                         "sign flipped"),
        ]
    for c, text in factors:
        if _close(g, c * e, tol).mean() >= 0.99:
            return text
    big = np.abs(e) > 10 * tol + 1e-6
    if big.sum() < 3:
        return None
    r = g[big] / e[big]
    med = float(np.median(r))
    if med not in (0.0, 1.0) and np.isfinite(med) and (np.abs(r - med) <= 1e-3 * abs(med)).mean() >= 0.99:
        return f"every wrong value is {med:.4g} times the expected one: a missing or extra factor"
    return None


def _layout_hint(name, got, expected, bad, unwritten, axes, tol):
    written = ~unwritten
    if written.sum() < 0.25 * got.size:
        return None
    g = got.reshape(-1)
    w = written.reshape(-1)
    for perm in itertools.permutations(range(got.ndim)):
        if perm == tuple(range(got.ndim)):
            continue
        cand = np.ascontiguousarray(expected.transpose(perm)).reshape(-1)
        if _close(g[w], cand[w], tol).all():
            order = ", ".join(axes[p] for p in perm)
            want = ", ".join(axes)
            extra = ""
            if perm[:-2] == tuple(range(got.ndim - 2)) and perm[-2:] == (got.ndim - 1, got.ndim - 2):
                extra = f" (transposed: row and column swapped, you wrote [{axes[-1]}][{axes[-2]}])"
            return (f"your {name} holds the right values in the wrong places: they are laid out "
                    f"in the order ({order}) instead of ({want}){extra}. Check the index "
                    f"arithmetic of the element you write (or read)")
    return None


def describe_runs(name, runs, axes, tol):
    """Lines that say whether repeated runs with the same inputs gave different results."""
    first = np.asarray(runs[0], np.float32)
    for k, other in enumerate(runs[1:], start=2):
        other = np.asarray(other, np.float32)
        same = _close(other, first, tol) | (np.isnan(other) & np.isnan(first))
        differ = ~same
        if differ.any():
            i = _first_true(differ, 1)[0]
            return [f"{name}: results differ between run 1 and run {k} with the same inputs in "
                    f"{int(differ.sum())} elements (first at ({_coords(first.shape, i, axes)}): "
                    f"{_fmt(first.flat[i])} then {_fmt(other.flat[i])}); they lie at: "
                    f"{_ranges(differ, axes)}",
                    "hint: a race: some threads read memory (shared memory, most often) before "
                    "other threads have finished writing it, or write what others still read. "
                    "A missing __syncthreads() (block.sync())?"]
    return []


def describe_guards(name, info):
    """'wrote N floats past the end of X' from the child's guard-zone report."""
    out = []
    if info.get("after"):
        far = info["after_far"]
        out.append(f"your kernel wrote {info['after']} floats past the end of {name} (up to "
                   f"{far} floats beyond its last element{'; maybe further: the checker watches 64 KiB' if far >= GUARD_FLOATS else ''}): "
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


# ------------------------------------------------------------------------------------------
# Running the kernel in a subprocess.

_input_dir = None
_INPUTS_PREFIX = "attnlab-exercise-inputs-"


def _alive(pid):
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:
        return True                     # someone else's process: alive
    return True


def _shared_dir():
    """A directory for the input files of this process's checks, named by its PID.

    Removed at exit; and since a Jupyter kernel is often killed rather than exited, each
    process also removes the directories of processes that are gone.
    """
    global _input_dir
    if _input_dir is None or not Path(_input_dir).is_dir():
        tmp = Path(tempfile.gettempdir())
        for old in tmp.glob(_INPUTS_PREFIX + "*"):
            pid = old.name[len(_INPUTS_PREFIX):]
            if pid.isdigit() and int(pid) != os.getpid() and not _alive(int(pid)):
                shutil.rmtree(old, ignore_errors=True)
        path = tmp / f"{_INPUTS_PREFIX}{os.getpid()}"
        path.mkdir(exist_ok=True)
        _input_dir = str(path)
        _saved.clear()
        atexit.register(shutil.rmtree, _input_dir, True)
    return Path(_input_dir)


def _save_array(a):
    """Write a to the shared directory once (keyed by content) and return its path."""
    key = (id(a), a.shape, a.dtype.str)
    hit = _saved.get(key)
    if hit and hit[0] is a and Path(hit[1]).is_file():
        return hit[1]
    digest = hashlib.sha1(np.ascontiguousarray(a[..., :64]).tobytes()).hexdigest()[:12]
    path = str(_shared_dir() / f"{digest}-{'x'.join(map(str, a.shape))}-{len(_saved)}.npy")
    np.save(path, np.ascontiguousarray(a))
    _saved[key] = (a, path)
    return path


def _job(ex, source, filename, cases, variants, *, runs=RUNS, timing=True, guard=True,
         lineinfo=False, stop_on_failure=True, repeats=REPEATS):
    """The job description the subprocess reads (json + the arrays as .npy files)."""
    jcases = []
    for i, c in enumerate(cases):
        jcases.append(dict(
            label=c.label,
            runs=runs if i == 0 else 1,
            guard=guard,
            save_outputs=i == 0,
            check_inputs=i == 0,
            inputs={n: _save_array(a) for n, a in c.inputs.items()},
            outputs={n: dict(shape=list(s), init=init) for n, (s, init) in c.outputs.items()},
            expected={n: _save_array(a) for n, a in c.expected.items()},
            tol=ex.tol,
            scalars={n: list(v) for n, v in c.scalars.items()},
            args=c.args,
            launch=[dict(grid=list(v["grids"][i]), block=list(v["blocks"][i])) for v in variants],
            time=timing and i == len(cases) - 1 and i > 0,
            reference=dict(c.reference, grid=list(c.reference["grid"]),
                           block=list(c.reference["block"])) if c.reference else None,
        ))
    return dict(source=source, filename=filename, function=ex.function, lineinfo=lineinfo,
                variants=[dict(label=v["label"], defines=v["defines"]) for v in variants],
                cases=jcases, stop_on_failure=stop_on_failure, repeats=repeats)


def _child_env():
    env = dict(os.environ)
    env["PYTHONPATH"] = str(ROOT) + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    env.pop(SOLUTIONS_ENV, None)
    return env


@dataclass
class ChildOutcome:
    result: dict              # what the child wrote (result.json), possibly partial
    timed_out: bool
    returncode: int
    stdout: str
    stderr: str
    seconds: float
    jobdir: Path
    sanitizer_log: str = ""


# compute-sanitizer's options per tool (no leak check: the subprocess exits without freeing)
_SANITIZER_TOOL_OPTIONS = {
    "memcheck": ("--show-backtrace", "device"),
    "racecheck": ("--racecheck-report", "analysis", "--show-backtrace", "device"),
}


def find_sanitizer():
    """compute-sanitizer's path (as attnlab.sanitize finds it), or None."""
    try:
        from .sanitize import find_sanitizer as find
        return find()
    except Exception:
        return shutil.which("compute-sanitizer")


def _sanitizer_options():
    """The options attnlab.sanitize gives every tool (found to work on the H200), if any."""
    try:
        from .sanitize import COMMON_OPTIONS
        return list(COMMON_OPTIONS)
    except Exception:
        return ["--target-processes", "application-only", "--launch-timeout", "120"]


def run_job(job, timeout, sanitizer_tool=None):
    """Run one job in a fresh subprocess; kill it (and its children) after ``timeout`` s.

    With ``sanitizer_tool``, the subprocess runs under compute-sanitizer; its report (the
    lines starting with =========) is in the outcome's ``sanitizer_log``.
    """
    jobdir = Path(tempfile.mkdtemp(prefix="attnlab-exercise-"))
    (jobdir / "job.json").write_text(json.dumps(job))
    cmd = [sys.executable, "-m", "attnlab.exercises", "run", str(jobdir)]
    if sanitizer_tool:
        cmd = [find_sanitizer(), "--tool", sanitizer_tool, *_sanitizer_options(),
               *_SANITIZER_TOOL_OPTIONS[sanitizer_tool]] + cmd
    t0 = time.perf_counter()
    with open(jobdir / "stdout.txt", "wb") as out, open(jobdir / "stderr.txt", "wb") as err:
        proc = subprocess.Popen(cmd, stdout=out, stderr=err, env=_child_env(), cwd=str(jobdir),
                                start_new_session=True)
        timed_out = False
        try:
            rc = proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            timed_out = True
            try:
                os.killpg(proc.pid, signal.SIGKILL)      # the child's own process group
            except ProcessLookupError:
                pass
            rc = proc.wait()
    seconds = time.perf_counter() - t0
    try:
        result = json.loads((jobdir / "result.json").read_text())
    except (OSError, ValueError):
        result = {}
    read = lambda p: p.read_text(errors="replace") if p.is_file() else ""  # noqa: E731
    stdout, stderr = read(jobdir / "stdout.txt"), read(jobdir / "stderr.txt")
    log = ""
    if sanitizer_tool:
        log = "\n".join(ln for ln in (stdout + "\n" + stderr).splitlines() if ln.startswith("====="))
        stdout = "\n".join(ln for ln in stdout.splitlines() if not ln.startswith("====="))
    return ChildOutcome(result, timed_out, rc, stdout, stderr, seconds, jobdir, log)


def _cleanup(outcome):
    if not os.environ.get("ATTNLAB_EXERCISE_KEEP"):
        shutil.rmtree(outcome.jobdir, ignore_errors=True)


def _tail(text, n=15):
    lines = [ln for ln in text.splitlines() if ln.strip()]
    return "\n".join("    " + ln for ln in lines[-n:])


def _map_lines(text, filename, offset):
    """'your_kernel.cu:17' -> 'your_kernel.cu:17 (cell line 20)' in sanitizer output."""
    if offset is None:
        return text
    return re.sub(rf"{re.escape(filename)}:(\d+)",
                  lambda m: f"{m.group(0)} (cell line {int(m.group(1)) + offset})", text)


def sanitizer_findings(log, filename=FILENAME, offset=None, limit=14):
    """The lines of a compute-sanitizer log that say what happened and where."""
    keep = []
    for ln in log.splitlines():
        if not ln.startswith("="):
            continue                           # not compute-sanitizer's
        s = re.sub(r"^=+\s?", "", ln).rstrip()
        if not s.strip():
            continue
        if re.search(r"Saved host backtrace|Host Frame|COMPUTE-SANITIZER", s):
            continue
        if re.search(r"Invalid|Race reported|Error|Warning|Hazard|hazard|Address|at .*0x|"
                     r"by thread|in block", s) and \
                not re.search(r"ERROR SUMMARY: 0 errors|RACECHECK SUMMARY: 0 hazards", s):
            keep.append("    " + s.strip())
        if len(keep) >= limit:
            break
    return _map_lines("\n".join(keep), filename, offset)


def _run_sanitizer(ex, source, filename, cases, variants, tool, offset):
    """(text for the report, whether it found an error), or (None, False) without the tool."""
    if not find_sanitizer():
        return None, False
    job = _job(ex, source, filename, cases[:1], variants[:1], runs=1, timing=False, guard=False,
               lineinfo=True)
    outcome = run_job(job, SANITIZER_TIMEOUT, sanitizer_tool=tool)
    _cleanup(outcome)
    if outcome.timed_out:
        return f"  (compute-sanitizer --tool {tool} did not finish in {SANITIZER_TIMEOUT} s)", False
    found = sanitizer_findings(outcome.sanitizer_log, filename, offset)
    if not found:
        return f"  compute-sanitizer --tool {tool} found nothing to report.", False
    error = re.search(r"Invalid|Race reported|Error", found) is not None
    return f"  compute-sanitizer --tool {tool} says:\n{found}", error


# ------------------------------------------------------------------------------------------
# The checkers.

def _finish(ex, kind, lines, *, solution=False, timing=None, sanitizer=None, quiet=False):
    ok = kind == "ok"
    verdict = {"ok": "OK", "compile": "DOES NOT COMPILE", "signature": "WRONG DECLARATION",
               "crash": "CRASHED", "timeout": "DID NOT FINISH", "out_of_bounds": "WROTE OUT OF BOUNDS",
               "input_modified": "CHANGED ITS INPUT", "race": "RACE (results differ between runs)",
               "wrong": "WRONG RESULT"}[kind]
    message = "\n".join([f"{ex.title}: {verdict}"] + lines)
    result = CheckResult(ex.key, ok, kind, message, solution, timing, sanitizer)
    if not ok:
        raise ExerciseFailed(message, result)
    if not quiet:
        print(message, flush=True)
    return result


def _indent(text):
    return ["  " + ln for ln in text.splitlines()]


def _and(names):
    names = list(names)
    return names[0] if len(names) == 1 else ", ".join(names[:-1]) + " and " + names[-1]


def _ratio_words(yours, ref):
    r = yours / ref
    if r >= 1.005:
        return f"{r:.2f}x slower"
    if r <= 1 / 1.005:
        return f"{1 / r:.2f}x faster"
    return "the same speed"


def check(key, source, *, timeout=DEFAULT_TIMEOUT, sanitize=None, timing=True, quiet=False,
          **config):
    """Check ``source`` (CUDA C, a string) for exercise ``key``; see the module docstring.

    timeout: seconds for the subprocess (compile, runs, timing) before it is killed;
    sanitize: None = run compute-sanitizer only to explain a crash or a race, True = always
    (slow), False = never; timing: also validate at B=4 T=1024 C=768 NH=12 and time the
    kernel there against the series' kernel; config: the exercise's launch choices
    (block_size, t_per_block, beat). Raises ExerciseFailed when the kernel is wrong.
    """
    if key not in EXERCISES:
        raise InputError(f"no exercise {key!r}; there are {sorted(EXERCISES)}")
    ex = EXERCISES[key]
    if not isinstance(source, str):
        raise InputError(f"the kernel source must be a string (the CUDA C code), got "
                         f"{type(source).__name__}")
    source, config, filename, substituted = _resolve(ex, source, config)
    cfg, defines = _config(ex, config)
    offset = None if substituted else cell_line_offset(source)
    problem = compile_check(ex, source, filename, defines, offset)
    if problem:
        kind, text = problem
        _finish(ex, kind, _indent(text), solution=substituted)
    cases = _cases(ex, cfg, timing)
    variant = dict(label=", ".join(f"{k}={v}" for k, v in cfg.items() if k != "beat"),
                   defines=defines, grids=[c.grid for c in cases], blocks=[c.block for c in cases])
    job = _job(ex, source, filename, cases, [variant], timing=timing)
    outcome = run_job(job, timeout)
    try:
        return _judge(ex, source, filename, cases, [variant], outcome, offset, timeout, sanitize,
                      substituted, quiet, cfg)
    finally:
        _cleanup(outcome)


def _printed(outcome):
    text = outcome.stdout.strip()
    if not text:
        return []
    lines = text.splitlines()
    more = f" (last 15 of {len(lines)} lines)" if len(lines) > 15 else ""
    return [f"  your kernel printed{more}:", _tail(text)]


def _judge(ex, source, filename, cases, variants, outcome, offset, timeout, sanitize,
           substituted, quiet, cfg):
    res = outcome.result
    err = res.get("error")
    context_note = ("  (the kernel ran in a separate process: your notebook's own GPU context is "
                    "unharmed; fix the kernel and check again)")
    lines = []
    if not res.get("phase") and not outcome.timed_out and outcome.returncode != 0:
        raise AttnlabError(f"the checker's subprocess failed to start (exit status "
                           f"{outcome.returncode}):\n{_tail(outcome.stderr)}")
    if outcome.timed_out:
        phase = res.get("phase", "starting")
        if phase.startswith(("running your kernel", "timing your kernel")):
            lines.append(f"  your kernel did not finish in {timeout:g} s (while {phase}): an "
                         f"infinite loop (a loop variable that never advances?), or threads "
                         f"waiting at a __syncthreads() that other threads never reach? The "
                         f"checker stopped it.")
        else:
            lines.append(f"  the check did not finish in {timeout:g} s, while {phase} (before "
                         f"your kernel ran): is the machine busy? Try again with a longer "
                         f"timeout=.")
        lines.append(context_note)
        return _finish(ex, "timeout", lines + _printed(outcome), solution=substituted)
    if err:
        kind = err["kind"]
        if kind == "nogpu":
            raise NoGPUError(err["message"])
        if kind == "compile":
            _finish(ex, "compile", _indent(format_compile_error(err["message"], source, filename,
                                                                offset)), solution=substituted)
        if kind == "symbol":
            _finish(ex, "signature", [f"  the compiled module has no kernel named {ex.function}: "
                                      f"declare it as\n    {ex.call}"], solution=substituted)
        if kind == "cuda":
            lines += [f"  {cuda_error_words(err['message'])}.",
                      f"  It happened while {err.get('phase', '?')}; CUDA said: {err['message']}",
                      context_note]
            found = None
            if sanitize is not False:
                found, _ = _run_sanitizer(ex, source, filename, cases, variants, "memcheck", offset)
                if found:
                    lines.append(found)
            return _finish(ex, "crash", lines + _printed(outcome), solution=substituted,
                           sanitizer=found)
        raise AttnlabError(f"the checker's subprocess failed while {err.get('phase')}: "
                           f"{err['message']}")
    if outcome.returncode != 0 or not res.get("variants"):
        sig = -outcome.returncode if outcome.returncode < 0 else None
        how = f"was killed by signal {sig}" if sig else f"exited with status {outcome.returncode}"
        lines += [f"  the process running your kernel {how} while {res.get('phase', 'starting')}.",
                  _tail(outcome.stderr), context_note]
        return _finish(ex, "crash", lines + _printed(outcome), solution=substituted)

    v = res["variants"][0]
    c0, r0 = cases[0], v["cases"][0]
    kinds = []
    # guard zones and inputs (outputs with the same overrun are named together)
    groups = {}
    for name, info in r0.get("guards", {}).items():
        groups.setdefault(tuple(sorted(info.items())), []).append(name)
    for info, names in groups.items():
        text = describe_guards(_and(names), dict(info))
        if text:
            kinds.append("out_of_bounds")
            lines += ["  " + t for t in text]
    for name, info in r0.get("inputs_changed", {}).items():
        kinds.append("input_modified")
        lines.append(f"  your kernel changed {info} elements of its input {name}, which it may "
                     f"only read: is the argument order right ({ex.call})?")
    # repeated runs
    outs = {name: [np.load(p) for p in files] for name, files in r0.get("outputs", {}).items()}
    for name, runs in outs.items():
        text = describe_runs(name, runs, c0.axes[name], ex.tol)
        if text:
            kinds.append("race")
            lines += ["  " + t for t in text]
    # the result itself: every detail for the first wrong output, the count and hints for others
    wrong = False
    for name, runs in outs.items():
        causal = c0.outputs[name][1] == "causal"
        n_bad, text, hints = describe_mismatch(name, runs[0], c0.expected[name], c0.axes[name],
                                               ex.tol, causal=causal, scale=c0.scale,
                                               candidates=c0.candidates.get(name, ()))
        if n_bad:
            if not wrong:
                lines.append(f"  at {c0.label}:")
                lines += ["  " + t for t in text]
            else:
                lines.append("  " + text[0])
            lines += [f"  hint: {h}" for h in hints]
            wrong = True
    if wrong:
        kinds.append("wrong")
    # compute-sanitizer: to explain a race (automatic), or on request for everything
    results_right = not kinds
    found = []
    uses_shared = "__shared__" in _strip_comments(source)
    if uses_shared and (sanitize is True or (sanitize is None and "race" in kinds)):
        text, error = _run_sanitizer(ex, source, filename, cases, variants, "racecheck", offset)
        found.append(text)
        if error:
            kinds.append("race")
    if sanitize is True:
        text, error = _run_sanitizer(ex, source, filename, cases, variants, "memcheck", offset)
        found.append(text)
        if error:
            kinds.append("out_of_bounds")
    sanitizer = "\n".join(t for t in found if t) or None
    if kinds:
        if results_right:
            lines.append(f"  the results were right in {RUNS} runs, but compute-sanitizer found "
                         f"a problem that may show another time:")
        if sanitizer:
            lines.append(sanitizer)
        order = ["out_of_bounds", "input_modified", "race", "wrong"]
        kind = min(kinds, key=order.index)
        return _finish(ex, kind, lines + _printed(outcome), solution=substituted,
                       sanitizer=sanitizer)

    n_runs = len(next(iter(outs.values()))) if outs else 0
    rule = ("exactly equal" if ex.tol == 0 else
            f"within {ex.tol:g} + |expected|*FLT_EPSILON")
    lines.append(f"  {_and(c0.expected)}: right at {c0.label}: every element {rule}, the same "
                 f"in {n_runs} runs, nothing written outside the outputs")
    timing = None
    if len(cases) > 1:
        c1, r1 = cases[1], v["cases"][1] if len(v["cases"]) > 1 else {}
        bad_big = {n: m for n, m in r1.get("mismatches", {}).items() if m}
        for name, info in r1.get("guards", {}).items():
            text = describe_guards(name, info)
            if text:
                lines += [f"  at {c1.label}:"] + ["  " + t for t in text]
                return _finish(ex, "out_of_bounds", lines, solution=substituted)
        if bad_big:
            lines.append(f"  but at {c1.label}:")
            for name in bad_big:
                got = np.load(r1["outputs"][name][0])
                causal = c1.outputs[name][1] == "causal"
                n_bad, text, hints = describe_mismatch(name, got, c1.expected[name], c1.axes[name],
                                                       ex.tol, causal=causal, scale=c1.scale,
                                                       layouts=False)
                lines += ["  " + t for t in text] + [f"  hint: {h}" for h in hints]
            lines.append("  hint: right at the small shape but wrong at this one: a size written "
                         "into the kernel (use T, C, NH, blockDim), an int index that overflows, "
                         "or a loop that covers only part of a longer row?")
            return _finish(ex, "wrong", lines + _printed(outcome), solution=substituted)
        if "time_ms" in r1:
            yours, ref = r1["time_ms"], r1["reference_ms"]
            label = c1.reference["label"]
            timing = dict(yours_ms=yours, reference_ms=ref, ratio=yours / ref, reference=label,
                          shape=c1.label)
            lines.append(f"  right at {c1.label} too")
            who = "the solution" if substituted else "your kernel"
            lines.append(f"  time at {c1.label} (median of {REPEATS}, L2 flushed): {who} "
                         f"{yours:.4f} ms, reference ({label}) {ref:.4f} ms: "
                         f"{_ratio_words(yours, ref)}")
    if sanitizer:
        lines.append(sanitizer)
    return _finish(ex, "ok", lines + _printed(outcome), solution=substituted, timing=timing,
                   quiet=quiet, sanitizer=sanitizer)


def check_permute(source, **kw):
    """Exercise 1: ``permute_kernel`` splits inp (B, N, 3C) into q, k, v (B, NH, N, d)."""
    return check("e1_permute", source, **kw)


def check_softmax_forward(source, **kw):
    """Exercise 2: ``softmax_forward`` computes att from preatt, one thread per row."""
    return check("e2_softmax_forward", source, **kw)


def check_kernel7(source, *, block_size=256, **kw):
    """Exercise 3: softmax backward kernel 7, derived from the softmax Jacobian."""
    return check("e3_kernel7_from_jacobian", source, block_size=block_size, **kw)


def check_tune_kernel8(source, *, block_size=256, t_per_block=4, **kw):
    """Exercise 4: kernel 8 with your BLOCK_SIZE and T_PER_BLOCK."""
    return check("e4_tune_kernel8", source, block_size=block_size, t_per_block=t_per_block, **kw)


def check_beat_kernel(source, *, block_size=256, t_per_block=1, beat=8, **kw):
    """Exercise 5: any softmax backward kernel; timed against kernel ``beat`` (6, 7 or 8)."""
    return check("e5_beat_kernel", source, block_size=block_size, t_per_block=t_per_block,
                 beat=beat, **kw)


def sweep_kernel8(source, *, block_sizes=(128, 256, 512, 1024), t_per_blocks=(1, 2, 4, 8),
                  timeout=None, quiet=False):
    """Time exercise 4's kernel for every (block_size, t_per_block); return {(bs, tpb): ms}.

    Each variant is first checked at the small shape (a wrong one is shown as 'wrong',
    not timed), then timed at B=4 T=1024 C=768 NH=12 against kernel 8 (block 256, 4 rows
    per block). Compiling many variants takes a while the first time (they are cached).
    """
    ex = EXERCISES["e4_tune_kernel8"]
    source, given, filename, substituted = _resolve(ex, source, {})
    configs = [(bs, tpb) for bs in block_sizes for tpb in t_per_blocks]
    if not configs:
        raise InputError("sweep_kernel8 needs at least one block size and one t_per_block")
    variants, cases = [], None
    offset = None if substituted else cell_line_offset(source)
    for bs, tpb in configs:
        cfg, defines = _config(ex, dict(block_size=bs, t_per_block=tpb))
        if cases is None:
            problem = compile_check(ex, source, filename, defines, offset)
            if problem:
                _finish(ex, problem[0], _indent(problem[1]), solution=substituted)
            cases = _cases(ex, cfg, timing=True)
        grids = [(ceil_div(c.shape["T"], tpb), c.shape["B"] * c.shape["NH"], 1) for c in cases]
        variants.append(dict(label=f"block_size={bs}, t_per_block={tpb}", defines=defines,
                             grids=grids, blocks=[(bs, 1, 1)] * len(cases)))
    job = _job(ex, source, filename, cases, variants, runs=1, timing=True, stop_on_failure=False)
    timeout = timeout or 60 + 10 * len(configs)
    outcome = run_job(job, timeout)
    try:
        res = outcome.result
        if outcome.timed_out or res.get("error") or not res.get("variants"):
            # explain with a normal check of the first variant that failed
            _judge(ex, source, filename, cases, variants[:1], outcome, offset, timeout, False,
                   substituted, True, {})
        table, lines = {}, []
        for (bs, tpb), v in zip(configs, res["variants"]):
            if v.get("compile_error"):
                _finish(ex, "compile", _indent(format_compile_error(v["compile_error"], source,
                                                                    filename, offset)),
                        solution=substituted)
            r1 = v["cases"][1] if len(v["cases"]) > 1 else {}
            table[(bs, tpb)] = r1.get("time_ms")
        ref = next((v["cases"][1].get("reference_ms") for v in res["variants"]
                    if len(v["cases"]) > 1 and v["cases"][1].get("reference_ms")), None)
        width = max(8, max(len(str(t)) for t in t_per_blocks) + 2)
        lines.append(f"kernel 8 sweep at {cases[1].label}: median ms of {REPEATS} (L2 flushed); "
                     f"'wrong' = a wrong result (checked at {cases[0].label} and at this shape), "
                     f"not timed")
        lines.append(f"{'block_size':>10} | " + " ".join(f"{f'tpb={t}':>{width}}" for t in t_per_blocks))
        for bs in block_sizes:
            cells = []
            for tpb in t_per_blocks:
                ms = table.get((bs, tpb))
                cells.append(f"{ms:>{width}.4f}" if ms is not None else f"{'wrong':>{width}}")
            lines.append(f"{bs:>10} | " + " ".join(cells))
        timed = {k: ms for k, ms in table.items() if ms is not None}
        if ref:
            lines.append(f"reference (kernel 8, block 256, T_PER_BLOCK 4): {ref:.4f} ms")
        if timed:
            (bs, tpb), ms = min(timed.items(), key=lambda kv: kv[1])
            words = _ratio_words(ms, ref) if ref else ""
            vs = (f", {words} {'as' if words == 'the same speed' else 'than'} the reference"
                  if ref else "")
            lines.append(f"fastest: block_size={bs}, t_per_block={tpb}: {ms:.4f} ms{vs}")
        else:
            lines.append("no variant computed the right result: run check_tune_kernel8 on one of "
                         "them to see why")
        if not quiet:
            print("\n".join(lines), flush=True)
        return table
    finally:
        _cleanup(outcome)


# ------------------------------------------------------------------------------------------
# The subprocess: python -m attnlab.exercises run JOBDIR

def _exit_now(code=0):
    sys.stdout.flush()
    sys.stderr.flush()
    try:
        import ctypes
        ctypes.CDLL(None).fflush(None)             # the kernel's printf output
    except Exception:
        pass
    os._exit(code)


def _child(jobdir):
    jobdir = Path(jobdir)
    job = json.loads((jobdir / "job.json").read_text())
    res = {"phase": "starting", "error": None, "variants": []}

    def save():
        tmp = jobdir / "result.json.tmp"
        tmp.write_text(json.dumps(res))
        os.replace(tmp, jobdir / "result.json")

    def phase(text):
        res["phase"] = text
        save()

    def die(kind, message):
        res["error"] = dict(kind=kind, message=message, phase=res["phase"])
        save()
        _exit_now(0)

    phase("creating a CUDA context")
    try:
        from .device import context
        context()
        import pycuda.driver as cuda
    except NoGPUError as e:
        die("nogpu", str(e))
    except Exception as e:
        die("context", f"could not create a CUDA context ({type(e).__name__}: {e}); if the GPU "
                       f"is in exclusive-process compute mode, no second process can use it")
    from . import bench, kernels

    G = GUARD_FLOATS
    bufs = {}            # (case index, name) -> (device allocation, guard floats, host template)

    def host_template(n, body_bits, guard_bits, g):
        h = np.empty(n + 2 * g, np.uint32)
        h[:g] = guard_bits
        h[g + n:] = guard_bits
        h[g:g + n] = body_bits
        return h

    def output_init(shape, init):
        n = int(np.prod(shape))
        body = np.full(n, POISON_BITS, np.uint32)
        if init == "causal":
            T = shape[-1]
            upper = ~np.tril(np.ones((T, T), bool))
            body.reshape(shape)[..., upper] = 0          # 0.0f: the upper triangle stays 0
        return body

    def buffer(ci, case, name):
        key = (ci, name)
        if key in bufs:
            return bufs[key]
        g = G if case["guard"] else 0
        if name in case["inputs"]:
            a = np.load(case["inputs"][name])
            tmpl = host_template(a.size, a.view(np.uint32).reshape(-1), IN_GUARD_BITS, g)
            shape = a.shape
        else:
            spec = case["outputs"][name]
            shape = tuple(spec["shape"])
            tmpl = host_template(int(np.prod(shape)), output_init(shape, spec["init"]),
                                 OUT_GUARD_BITS, g)
        dev = cuda.mem_alloc(tmpl.nbytes)
        cuda.memcpy_htod(dev, tmpl)
        bufs[key] = (dev, g, tmpl, shape)
        return bufs[key]

    def args_for(ci, case, names, out_override=None):
        out = []
        for n in names:
            if n in case["scalars"]:
                t, val = case["scalars"][n]
                out.append(np.int32(val) if t == "i" else np.float32(val))
            elif out_override is not None and n in out_override:
                out.append(out_override[n])
            else:
                dev, g, _, _ = buffer(ci, case, n)
                out.append(np.intp(int(dev) + 4 * g))
        return out

    def launch(fn, grid, block, args):
        try:
            fn(*args, grid=tuple(grid), block=tuple(block))
            cuda.Context.synchronize()
        except Exception as e:
            die("cuda", f"{type(e).__name__}: {e}")

    def read(ci, case, name):
        dev, g, tmpl, shape = bufs[(ci, name)]
        h = np.empty_like(tmpl)
        try:
            cuda.memcpy_dtoh(h, dev)
        except Exception as e:
            die("cuda", f"{type(e).__name__}: {e}")
        return h, g, shape

    def reset_outputs(ci, case):
        for name in case["outputs"]:
            dev, _, tmpl, _ = buffer(ci, case, name)
            cuda.memcpy_htod(dev, tmpl)

    scrambler = []

    def scramble(run):
        """Fill every SM's shared memory with a value that differs from run to run.

        A kernel that reads shared memory before it is written (a race) then reads
        different leftovers in each run, and its results differ between runs. Best effort:
        any failure here only makes that detection weaker.
        """
        if scrambler and scrambler[0] is None:
            return                       # it failed once: do without
        try:
            if not scrambler:
                mod = kernels.compile_source(_SCRAMBLE_SRC, "attnlab_scramble.cu")
                f = mod.get_function("attnlab_scramble_shared")
                dev = cuda.Context.get_device()
                attr = cuda.device_attribute
                nbytes = 48 * 1024
                try:
                    optin = dev.get_attribute(attr.MAX_SHARED_MEMORY_PER_BLOCK_OPTIN)
                    f.set_attribute(cuda.function_attribute.MAX_DYNAMIC_SHARED_SIZE_BYTES, optin)
                    nbytes = optin
                except Exception:
                    pass
                scrambler.extend([f, nbytes, 2 * dev.get_attribute(attr.MULTIPROCESSOR_COUNT)])
            f, nbytes, blocks = scrambler
            f(np.float32(1000.0 * (run + 1)), np.int32(nbytes // 4), grid=(blocks, 1, 1),
              block=(1024, 1, 1), shared=nbytes)
            cuda.Context.synchronize()
        except Exception:
            scrambler[:] = [None]

    # compile every variant first (in parallel when there are several: pycuda caches them)
    if len(job["variants"]) > 1:
        phase("compiling your kernel's variants")
        _prewarm(job, kernels)
    ref_ms = {}
    for vi, var in enumerate(job["variants"]):
        vres = {"label": var["label"], "cases": [], "compile_error": None}
        res["variants"].append(vres)
        phase(f"compiling your kernel ({var['label']})" if var["label"] else "compiling your kernel")
        try:
            mod = kernels.compile_source(job["source"], job["filename"], var["defines"],
                                         _extra_options(job))
        except KernelCompileError as e:
            if len(job["variants"]) == 1:
                die("compile", str(e))
            vres["compile_error"] = str(e)
            save()
            continue
        try:
            fn = mod.get_function(job["function"])
        except Exception as e:
            die("symbol", f"{type(e).__name__}: {e}")
        case0 = job["cases"][0]
        fn.prepare("".join(case0["scalars"][n][0] if n in case0["scalars"] else "P"
                           for n in case0["args"]))

        def carveout(percent):
            # the correctness runs use all of the SM's memory as shared memory, like the
            # scrambler, so that no reconfiguration between the two kernels hides the scrambled
            # values; the timing runs use the default (-1), like the reference kernel
            try:
                fn.set_attribute(cuda.function_attribute.PREFERRED_SHARED_MEMORY_CARVEOUT, percent)
                return True
            except Exception:
                return False
        for ci, case in enumerate(job["cases"]):
            cres = {"label": case["label"], "outputs": {}, "guards": {}, "mismatches": {}}
            vres["cases"].append(cres)
            geo = case["launch"][vi]
            phase(f"allocating the buffers for {case['label']}")
            args = args_for(ci, case, case["args"])
            ok = True
            runs = case["runs"]
            if runs > 1:
                carveout(100)
            run = 0
            while run < runs:
                phase(f"running your kernel at {case['label']} (run {run + 1} of {runs})")
                if runs > 1:
                    scramble(run)
                reset_outputs(ci, case)
                launch(fn, geo["grid"], geo["block"], args)
                for name in case["outputs"]:
                    h, g, shape = read(ci, case, name)
                    n = h.size - 2 * g
                    info = _guard_report(h, g, n, OUT_GUARD_BITS)
                    if info:
                        cres["guards"][name] = info
                        ok = False
                    out = h[g:g + n].view(np.float32).reshape(shape)
                    if case["save_outputs"] and vi == 0:
                        path = jobdir / f"out-{ci}-{name}-{run}.npy"
                        np.save(path, out)
                        cres["outputs"].setdefault(name, []).append(str(path))
                    if run == 0:
                        exp = np.load(case["expected"][name], mmap_mode="r")
                        m = _count_bad(out, exp, case["tol"])
                        cres["mismatches"][name] = m
                        if m:
                            ok = False
                            if runs > 1 and runs == case["runs"]:
                                runs += 2       # wrong: two more runs, to tell a race apart
                            if not case["save_outputs"] and vi == 0:
                                path = jobdir / f"out-{ci}-{name}-0.npy"
                                np.save(path, out)
                                cres["outputs"][name] = [str(path)]
                    elif case["save_outputs"]:
                        first = np.load(cres["outputs"][name][0])
                        if not (_close(out, first, case["tol"]) | (np.isnan(out) & np.isnan(first))).all():
                            ok = False
                run += 1
            if runs > 1 and not carveout(-1):
                # could not restore the default: a fresh module (from PyCUDA's cache) has it
                mod = kernels.compile_source(job["source"], job["filename"], var["defines"])
                fn = mod.get_function(job["function"])
                fn.prepare("".join(case0["scalars"][n][0] if n in case0["scalars"] else "P"
                                   for n in case0["args"]))
            if case["check_inputs"]:
                changed = {}
                for name in case["inputs"]:
                    h, g, shape = read(ci, case, name)
                    _, _, tmpl, _ = bufs[(ci, name)]
                    n = h.size - 2 * g
                    inner = int((h[g:g + n] != tmpl[g:g + n]).sum())
                    if inner:
                        changed[name] = inner
                        ok = False
                    info = _guard_report(h, g, n, IN_GUARD_BITS)
                    if info:
                        cres["guards"][name] = info
                        ok = False
                if changed:
                    cres["inputs_changed"] = changed
            cres["ok"] = ok
            save()
            if not ok:
                break               # the next cases of this variant would tell nothing new
            if case["time"]:
                phase(f"timing your kernel at {case['label']}")
                grid, block = tuple(geo["grid"]), tuple(geo["block"])
                try:
                    t = bench.benchmark(lambda: fn.prepared_call(grid, block, *args),
                                        repeats=job["repeats"], warmup=3)
                except Exception as e:
                    die("cuda", f"{type(e).__name__}: {e}")
                cres["time_ms"] = t.median_ms
                ref = case["reference"]
                if ref and ci not in ref_ms:
                    phase(f"timing the reference kernel at {case['label']}")
                    try:
                        rfn = kernels.get_function(ref["kernel"], ref["function"], **ref["defines"])
                        routs = {n: cuda.mem_alloc(4 * int(np.prod(s["shape"])))
                                 for n, s in case["outputs"].items()}
                        rargs = args_for(ci, case, ref["args"],
                                         {n: np.intp(int(d)) for n, d in routs.items()})
                        rfn.prepare("".join("i" if isinstance(a, np.int32) else "f"
                                            if isinstance(a, np.float32) else "P" for a in rargs))
                        rg, rb = tuple(ref["grid"]), tuple(ref["block"])
                        ref_ms[ci] = bench.benchmark(lambda: rfn.prepared_call(rg, rb, *rargs),
                                                     repeats=job["repeats"], warmup=3).median_ms
                        for d in routs.values():
                            d.free()
                    except Exception as e:
                        die("cuda", f"(in the reference kernel) {type(e).__name__}: {e}")
                if ci in ref_ms:
                    cres["reference_ms"] = ref_ms[ci]
                save()
        if job["stop_on_failure"] and not all(c.get("ok") for c in vres["cases"]):
            break
    res["done"] = True
    phase("done")
    _exit_now(0)


_SCRAMBLE_SRC = r"""
extern "C" __global__ void attnlab_scramble_shared(float value, int n) {
    extern __shared__ float buf[];
    volatile float* v = buf;             // volatile: the stores must not be optimized away
    for (int i = threadIdx.x; i < n; i += blockDim.x) {
        v[i] = value + (float)(i % 97);
    }
}
"""


def _guard_report(h, g, n, bits):
    if not g:
        return None
    before = np.flatnonzero(h[:g] != bits)
    after = np.flatnonzero(h[g + n:] != bits)
    if not before.size and not after.size:
        return None
    info = {"before": int(before.size), "after": int(after.size)}
    if before.size:
        info["before_far"] = int(g - before[0])
    if after.size:
        info["after_far"] = int(after[-1] + 1)
    return info


def _count_bad(got, exp, tol):
    n = 0
    for i in range(got.shape[0]):
        n += int(mismatch_mask(got[i], np.asarray(exp[i]), tol).sum())
    return n


def _extra_options(job):
    """-lineinfo when the kernel will run under compute-sanitizer, so it can name the line."""
    return ["-lineinfo"] if job["lineinfo"] else []


def _prewarm(job, kernels):
    """Compile all variants at once, in threads, into PyCUDA's cache (errors come later)."""
    try:
        from concurrent.futures import ThreadPoolExecutor

        from pycuda.compiler import compile as pycuda_compile

        from .device import arch
        a = arch()
        src = kernels.with_line(job["source"], job["filename"])

        def one(defines):
            try:
                pycuda_compile(src, options=kernels.nvcc_options(defines, _extra_options(job)),
                               no_extern_c=True, arch=a, include_dirs=[str(kernels.KERNEL_DIR)])
            except Exception:
                pass
        with ThreadPoolExecutor(max(1, min(8, os.cpu_count() or 1))) as pool:
            list(pool.map(one, [v["defines"] for v in job["variants"]]))
    except Exception:
        pass


# ------------------------------------------------------------------------------------------
# Command line

def main(argv=None):
    p = argparse.ArgumentParser(prog="python -m attnlab.exercises",
                                description="check an exercise kernel from a file")
    sub = p.add_subparsers(dest="command", required=True)
    r = sub.add_parser("run", help="(internal) run a job directory")
    r.add_argument("jobdir")
    c = sub.add_parser("check", help="check a .cu file for an exercise")
    c.add_argument("exercise", choices=sorted(EXERCISES))
    c.add_argument("file")
    c.add_argument("--block-size", type=int)
    c.add_argument("--t-per-block", type=int)
    c.add_argument("--beat", type=int)
    c.add_argument("--timeout", type=float, default=DEFAULT_TIMEOUT)
    args = p.parse_args(argv)
    if args.command == "run":
        _child(args.jobdir)
        return 0
    ex = EXERCISES[args.exercise]
    cfg = {k: getattr(args, k) for k, _ in ex.config if getattr(args, k, None) is not None}
    try:
        check(args.exercise, Path(args.file).read_text(), timeout=args.timeout, **cfg)
    except ExerciseFailed as e:
        print(e)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
