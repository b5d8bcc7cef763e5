"""The cases of an exercise: on one shape, the buffers (inputs, outputs and how the outputs
start), the scalars, the student kernel's launch, the expected results, the known mistakes,
and the series' kernel the student's is timed against."""
import functools
from dataclasses import dataclass, field

from ..launch import ceil_div
from ..problem import SMALL
from . import mistakes
from .spec import SMALL_PERMUTE, timing_shape
from .timing import backward_reference


@dataclass
class Case:
    """One run of an exercise on one shape: buffers, scalars, launch, expected results."""
    label: str
    shape: object             # an attnlab.problem.Shape
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


@functools.lru_cache(maxsize=4)
def _permute_data(shape):
    from ..problem import make_inputs
    from ..reference import split_heads
    inp, _ = make_inputs(*shape.astuple())
    return (inp, *split_heads(inp, shape["NH"]))


def permute_case(shape):
    B, T, C, NH = shape.astuple()
    HS = C // NH
    inp, q, k, v = _permute_data(shape)
    n = B * NH * T * HS
    expected = dict(q=q, k=k, v=v)
    cands = {name: [(expected[o], f"your {name} holds the values that belong in {o}: inside "
                                  f"a row of inp, q starts at offset 0, k at C and v at 2*C")
                    for o in "qkv" if o != name] for name in "qkv"}
    args = ["q", "k", "v", "inp", "B", "N", "NH", "d"]
    grid = (ceil_div(n, 256), 1, 1)
    return Case(shape.label, shape, dict(inp=inp),
                {name: ((B, NH, T, HS), "poison") for name in "qkv"}, expected,
                {name: ("b", "h", "t", "d") for name in "qkv"},
                dict(B=("i", B), N=("i", T), NH=("i", NH), d=("i", HS)), args,
                grid, (256, 1, 1),
                reference=dict(kernel="permute", function="permute_kernel", defines={},
                               grid=grid, block=(256, 1, 1), args=args,
                               label="the series' permute_kernel, block 256"),
                candidates=cands)


def softmax_case(shape, small):
    B, T, C, NH = shape.astuple()
    N = B * NH
    if small:     # validation: realistic logits, junk above the diagonal, the usual mistakes
        preatt, att = mistakes.realistic_preatt(shape), mistakes.realistic_att(shape)
        cands = {"att": mistakes.softmax_candidates(shape)}
    else:         # timing: the series' inputs, as the reference kernel is timed on
        preatt, att = mistakes.problem(shape).preatt, mistakes.causal_expected(shape, "att")
        cands = {}
    return Case(shape.label, shape, dict(preatt=preatt), dict(att=((B, NH, T, T), "causal")),
                dict(att=att), dict(att=("b", "h", "t", "t2")),
                dict(N=("i", N), T=("i", T), scale=("f", mistakes.head_scale(shape))),
                ["att", "preatt", "scale", "N", "T"],
                (ceil_div(N * T, 256), 1, 1), (256, 1, 1),
                reference=dict(kernel="softmax_forward", function="softmax_forward_kernel5",
                               defines={}, grid=(ceil_div(N * T * 32, 256), 1, 1),
                               block=(256, 1, 1), args=["att", "scale", "preatt", "N", "T"],
                               label="the series' softmax_forward_kernel5"),
                candidates=cands, scale=mistakes.head_scale(shape))


def backward_case(shape, small, grid, block, reference):
    """A softmax-backward case (exercises 3-5): dpreatt from datt and att (junk above the
    diagonal), timed against ``reference`` (attnlab.exercises.timing.backward_reference)."""
    p = mistakes.problem(shape)
    B, T, C, NH = shape.astuple()
    cands = {"dpreatt": mistakes.backward_candidates(shape)} if small else {}
    return Case(shape.label, shape, dict(datt=p.datt, att=mistakes.att_with_junk(shape)),
                dict(dpreatt=((B, NH, T, T), "causal")),
                dict(dpreatt=mistakes.causal_expected(shape, "dpreatt")),
                dict(dpreatt=("b", "h", "t", "t2")),
                dict(B=("i", B), T=("i", T), C=("i", C), NH=("i", NH)),
                ["dpreatt", "datt", "att", "B", "T", "C", "NH"],
                tuple(grid), tuple(block), reference=reference, candidates=cands,
                scale=mistakes.head_scale(shape))


def shapes(ex, timing=True):
    """The small shape (always) and the timing shape (when timing) of an exercise."""
    small = SMALL_PERMUTE if ex.key == "e1_permute" else SMALL
    return [small] + ([timing_shape()] if timing else [])


def student_launch(ex, cfg, shape):
    """(grid, block) of the student's softmax-backward kernel (exercises 3-5) at ``shape``
    with launch choices ``cfg``; exercises 1 and 2 have a fixed launch (their cases)."""
    B, T, NH = shape["B"], shape["T"], shape["NH"]
    if ex.key == "e3_kernel7_from_jacobian":
        return (T, B * NH, 1), (cfg["block_size"], 1, 1)
    return (ceil_div(T, cfg["t_per_block"]), B * NH, 1), (cfg["block_size"], 1, 1)


def cases(ex, cfg, timing=True):
    """The small case (always) and the timing case (when timing) of an exercise."""
    out = []
    for i, shape in enumerate(shapes(ex, timing)):
        small = i == 0
        if ex.key == "e1_permute":
            out.append(permute_case(shape))
        elif ex.key == "e2_softmax_forward":
            out.append(softmax_case(shape, small))
        else:
            grid, block = student_launch(ex, cfg, shape)
            if ex.key == "e3_kernel7_from_jacobian":     # kernel 7 at the student's default
                reference = backward_reference(7, block_size=256)
            else:                                         # kernel 8 (or beat) at its best
                reference = backward_reference(8 if ex.key == "e4_tune_kernel8" else cfg["beat"])
            out.append(backward_case(shape, small, grid, block, reference))
    return out
