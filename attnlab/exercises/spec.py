"""What an exercise is: the kernel the checker launches and its arguments, the tolerance, the
launch choices a student makes (checked here), and the shapes it is checked and timed at."""
import os
from dataclasses import dataclass

from ..checks import check_block_size, check_int, check_shape
from ..errors import InputError
from ..problem import DEFAULT, Shape

FILENAME = "your_kernel.cu"          # what nvcc calls the student's source in its messages
DEFAULT_TIMEOUT = 30                 # seconds for one check's subprocess
SANITIZER_TIMEOUT = 180
REPEATS = 20                         # timed runs of each kernel, interleaved
RUNS = 3                             # runs at the small shape, each with fresh poison

# exercise 1's small shape: B*NH*T*HS not a multiple of 256 either (attnlab.problem.SMALL is
# the other exercises' small shape: T a multiple of 4 but of no block size)
SMALL_PERMUTE = Shape(B=2, T=251, C=192, NH=3)
TIMING_SHAPE_ENV = "ATTNLAB_EXERCISE_TIMING_SHAPE"


def timing_shape():
    """attnlab.problem.DEFAULT, or the shape in ATTNLAB_EXERCISE_TIMING_SHAPE="B,T,C,NH" (a GPU
    with less memory, say)."""
    text = os.environ.get(TIMING_SHAPE_ENV, "").strip()
    if not text:
        return DEFAULT
    try:
        B, T, C, NH = (int(v) for v in text.split(","))
    except ValueError:
        raise InputError(f"{TIMING_SHAPE_ENV} must be four integers B,T,C,NH, got "
                         f"{text!r}") from None
    return Shape(*check_shape(B, T, C, NH))


@dataclass(frozen=True)
class Exercise:
    key: str                  # notebook stem, and the solution's file name
    title: str
    function: str             # the extern "C" kernel the checker launches
    signature: tuple          # ((name, "ptr" | "cptr" | "int" | "float"), ...) in launch order
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

    @property
    def given_defines(self):
        """The macros the checker passes with -D (from the launch choices): BLOCK_SIZE, ..."""
        names = {"block_size": "BLOCK_SIZE", "t_per_block": "T_PER_BLOCK"}
        return [names[k] for k, _ in self.config if k in names]


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


def exercise(key):
    """The Exercise called ``key``, or an InputError listing them."""
    if key not in EXERCISES:
        raise InputError(f"no exercise {key!r}; there are {sorted(EXERCISES)}")
    return EXERCISES[key]


def configure(ex, given):
    """The student's launch choices, checked: (config, defines)."""
    cfg = dict(ex.config)
    unknown = set(given) - set(cfg)
    if unknown:
        raise InputError(f"{ex.key} takes no option {sorted(unknown)}; it takes "
                         f"{sorted(cfg) or 'none'}")
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
                         f"{timing_shape().label}), got {cfg['beat']!r}")
    return cfg, defines


def variant_label(cfg):
    """'block_size=256, t_per_block=4': the launch choices of one compiled variant."""
    return ", ".join(f"{k}={v}" for k, v in cfg.items() if k != "beat")
