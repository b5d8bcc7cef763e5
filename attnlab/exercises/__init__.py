"""Exercises: check a student's CUDA kernel and say precisely what is wrong with it.

One checker per exercise of ``notebooks/exercises/``::

    import attnlab.exercises as ex
    result = ex.check_permute(my_kernel)          # my_kernel: the CUDA source, a string

A checker never runs student code in the calling process. It

1. checks the source without a GPU: nvcc compiles it (``attnlab.kernels.nvcc_check``) with
   a few lines appended that make the compiler check the kernel's declaration (its name,
   ``extern "C"``, ``__global__`` and the kind of each argument); a compile error comes
   back with nvcc's message and the line numbered as in the notebook cell;
2. runs the kernel in a subprocess (``python -m attnlab.exercises run JOBDIR``) with a CUDA
   context of its own: an illegal address, which kills a context, or a hang (its process
   group ended after ``timeout`` seconds) cannot harm the notebook's own context;
3. in that subprocess, surrounds every buffer with 64 KiB guard zones of a NaN canary (an
   out-of-bounds write that does not crash is reported as "wrote N floats past the end of
   ..."), fills the outputs with a NaN poison (elements never written show as such) and
   the upper triangle of causal outputs with a marker the kernel must leave alone, and
   runs the kernel three times, with fresh poison and the GPU's shared memory scrambled
   before each run (results that differ point to a race);
4. compares the result with the CPU reference over the whole tensor
   (``attnlab.validate.compare``) and recognises the usual mistakes: causal mask missing,
   scale missing or doubled, the maximum not subtracted (exercise 2 checks with logits as
   large as real ones) or started at 0, rows never written, NaNs, right values in the wrong places
   (a wrong index), and a few known wrong formulas per exercise;
5. when the result is right, times the kernel interleaved with the series' own kernel on
   the same inputs (exercises 4 and 5: kernel 8, or ``beat``, at its best block size on this
   GPU) and says "not resolved" when the interquartile ranges overlap, else the ratio.

A wrong kernel raises ``ExerciseFailed`` (an AssertionError), so a notebook cell, and nbval
running it, fails; ``raises=False`` returns (and prints) the failing ``CheckResult``
instead. A right one prints the verdict and the times and returns a ``CheckResult``.

The solutions switch: with ``ATTNLAB_EXERCISE_SOLUTIONS=1`` every checker checks the
reference solution in ``notebooks/exercises/solutions/`` instead (see
``attnlab.exercises.solutions``); ``use_solution=False`` checks the given source anyway.

The modules, one job each:

- ``spec``: what an exercise is (kernel, arguments, tolerance, launch choices, shapes);
- ``cases``, ``mistakes``: the buffers, launches and expected results of each shape, and
  the known wrong answers;
- ``solutions``: the reference solutions and the switch;
- ``declaration``, ``compile_errors``: reading the student's source (the compiler-checked
  declaration; nvcc's messages numbered as in the cell);
- ``diagnosis``, ``faults``: hints computed on the arrays; guard-zone and CUDA errors;
- ``jobs``, ``runner``, ``memory``, ``timing``: the isolated runner (the job, the child
  process's steps, guarded and poisoned memory, the timing against the reference);
- ``sanitizer``: compute-sanitizer's findings, with the cell's line numbers;
- ``judge``, ``results``: the verdict of a check;
- ``checkers``: the ``check_*`` functions; ``command``: ``python -m attnlab.exercises``.
"""
from ..errors import AttnlabError, InputError, KernelCompileError, NoGPUError
from .checkers import (check, check_beat_kernel, check_kernel7, check_permute,
                       check_softmax_forward, check_tune_kernel8, sweep_kernel8)
from .command import main
from .compile_errors import cell_line_offset, format_compile_error
from .declaration import check_signature, compile_check
from .diagnosis import describe_mismatch, describe_runs, mismatch_mask
from .faults import cuda_error_words, describe_guards
from .jobs import run_job
from .memory import GUARD_FLOATS, IN_GUARD_BITS, OUT_GUARD_BITS, POISON_BITS, UNTOUCHED_BITS
from .results import CheckResult, ExerciseFailed
from .sanitizer import find_sanitizer, sanitizer_findings
from .solutions import (SOLUTIONS_DIR, SOLUTIONS_ENV, solution_config, solution_path,
                        solution_source, use_solutions)
from .spec import DEFAULT_TIMEOUT, EXERCISES, FILENAME, REPEATS, RUNS, Exercise

__all__ = [
    "check", "check_permute", "check_softmax_forward", "check_kernel7", "check_tune_kernel8",
    "check_beat_kernel", "sweep_kernel8", "CheckResult", "ExerciseFailed", "EXERCISES",
    "Exercise", "solution_path", "solution_source", "solution_config", "use_solutions",
    "SOLUTIONS_ENV", "SOLUTIONS_DIR", "FILENAME", "DEFAULT_TIMEOUT", "REPEATS", "RUNS",
    "check_signature", "compile_check", "format_compile_error", "cell_line_offset",
    "describe_mismatch", "describe_runs", "mismatch_mask", "describe_guards",
    "cuda_error_words", "find_sanitizer", "sanitizer_findings", "run_job", "main",
    "POISON_BITS", "UNTOUCHED_BITS", "OUT_GUARD_BITS", "IN_GUARD_BITS", "GUARD_FLOATS",
    "AttnlabError", "InputError", "KernelCompileError", "NoGPUError",
]
