"""The exercise checkers (attnlab.exercises).

Without a GPU: the declaration and compile-error path (nvcc only; line numbers as in the
notebook cell), the hints on synthetic arrays, the guard, race and crash reports, the
solutions switch, and the notebooks' structure.

On a GPU (marked ``gpu``): every checker passes its reference solution; every planted wrong
kernel in tests/planted/ fails with the right message; an illegal address and a hang are
reported as such and leave the calling process's CUDA context usable (a check that passes
follows each); the kernel-8 sweep; and the notebooks' skeletons fail as they should.
"""
import json
import re
import shutil
from pathlib import Path

import numpy as np
import pytest

from attnlab import exercises as ex
from attnlab.device import has_gpu

ROOT = Path(__file__).resolve().parent.parent
PLANTED = Path(__file__).resolve().parent / "planted"
NOTEBOOKS = ROOT / "notebooks" / "exercises"
needs_nvcc = pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc is not on PATH")
CHECKERS = {"e1_permute": "check_permute", "e2_softmax_forward": "check_softmax_forward",
            "e3_kernel7_from_jacobian": "check_kernel7", "e4_tune_kernel8": "check_tune_kernel8",
            "e5_beat_kernel": "check_beat_kernel"}
E3 = ex.EXERCISES["e3_kernel7_from_jacobian"]


@pytest.fixture(autouse=True)
def own_kernels(monkeypatch):
    """Check the kernels given, never the solutions (notebooks/exercises/conftest.py sets the
    switch only around its own notebooks, but a user may have it in the environment)."""
    monkeypatch.delenv(ex.SOLUTIONS_ENV, raising=False)


def planted(name):
    return (PLANTED / name).read_text()


def notebook(key):
    nbformat = pytest.importorskip("nbformat", reason="reading the exercise notebooks needs "
                                                      "nbformat (the [notebooks] extra)")
    return nbformat.read(NOTEBOOKS / f"{key}.ipynb", as_version=4)


def skeleton(key):
    """The my_kernel string of an exercise notebook, and the text of its cell."""
    cell = next(c for c in notebook(key).cells
                if c.cell_type == "code" and c.source.startswith("my_kernel = r"))
    ns = {}
    exec(cell.source, ns)
    return ns["my_kernel"], cell.source


# ---------------------------------------------------------------------------- structure

def test_five_exercises_each_with_notebook_solution_and_checker():
    assert set(ex.EXERCISES) == set(CHECKERS)
    for key, fn in CHECKERS.items():
        assert callable(getattr(ex, fn))
        assert ex.solution_path(key).is_file(), key
        nb = notebook(key)
        src, cell = skeleton(key)
        assert ex.EXERCISES[key].function in src
        assert 'extern "C"' in src
        checks = [c for c in nb.cells if c.cell_type == "code" and f"ex.{fn}(my_kernel" in c.source]
        assert len(checks) == 1, f"{key}: one call of ex.{fn}"
        # the check prints times, which vary: nbval must not compare its output; it still
        # fails the notebook on a wrong kernel, because the check raises
        assert "nbval-ignore-output" in checks[0].metadata.get("tags", [])
        for c in nb.cells:
            if c.cell_type == "code":
                assert not c.get("outputs"), f"{key}: committed without outputs"
                printing = c.source.startswith(("result =", "table =", "ex.", "print"))
                if printing:
                    assert "nbval-ignore-output" in c.metadata.get("tags", []), c.source


def test_the_skeleton_cell_starts_with_the_string_so_lines_match_the_cell():
    for key in CHECKERS:
        src, cell = skeleton(key)
        assert ex.cell_line_offset(src, ["import x", cell, "ex.check(my_kernel)"]) == 0


def test_solution_config_line_is_read():
    assert ex.solution_config("// attnlab-exercise-config: block_size=256 t_per_block=8\n") == \
        {"block_size": 256, "t_per_block": 8}
    assert ex.solution_config("// nothing here") == {}
    assert ex.solution_config(ex.solution_source("e5_beat_kernel")) == \
        {"block_size": 256, "t_per_block": 8}


def test_solutions_switch_substitutes_the_solution_and_says_so(monkeypatch, capsys):
    e = ex.EXERCISES["e5_beat_kernel"]
    monkeypatch.setenv(ex.SOLUTIONS_ENV, "1")
    src, given, filename, sub = ex._resolve(e, "student's kernel", {"block_size": 64})
    assert sub and src == ex.solution_source("e5_beat_kernel")
    assert given == {"block_size": 256, "t_per_block": 8}       # the solution's own choices
    assert filename == "e5_beat_kernel.cu"
    out = capsys.readouterr().out
    assert out == ("ATTNLAB_EXERCISE_SOLUTIONS is set: checking the reference solution "
                   "notebooks/exercises/solutions/e5_beat_kernel.cu, not the kernel in this "
                   "notebook.\n")
    for off in ("0", "", "false", "no"):
        monkeypatch.setenv(ex.SOLUTIONS_ENV, off)
        assert not ex.use_solutions()


def test_notebook_conftest_sets_the_switch_only_around_its_own_items():
    import importlib.util
    spec = importlib.util.spec_from_file_location("exercises_conftest", NOTEBOOKS / "conftest.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    import os

    class Item:
        def __init__(self, path):
            self.path = path
    seen = []
    for path, expect in ((NOTEBOOKS / "e1_permute.ipynb", "1"), (ROOT / "tests" / "x.py", None)):
        gen = mod.pytest_runtest_setup(Item(path))        # a hookwrapper: a generator
        next(gen)
        seen.append(os.environ.get(ex.SOLUTIONS_ENV))
        with pytest.raises(StopIteration):
            next(gen)
        assert ex.SOLUTIONS_ENV not in os.environ
        assert seen[-1] == expect


def test_config_is_checked():
    with pytest.raises(ex.InputError, match="block_size"):
        ex._config(ex.EXERCISES["e3_kernel7_from_jacobian"], {"block_size": 100})
    with pytest.raises(ex.InputError, match="beat must be 6, 7 or 8"):
        ex._config(ex.EXERCISES["e5_beat_kernel"], {"beat": 2})
    with pytest.raises(ex.InputError, match="takes no option"):
        ex._config(ex.EXERCISES["e1_permute"], {"block_size": 256})
    cfg, defines = ex._config(ex.EXERCISES["e4_tune_kernel8"], {"t_per_block": 8})
    assert defines == {"BLOCK_SIZE": 256, "T_PER_BLOCK": 8}


def test_timing_shape_can_be_changed(monkeypatch):
    monkeypatch.delenv("ATTNLAB_EXERCISE_TIMING_SHAPE", raising=False)
    assert ex._timing_shape() == ex.TIMING
    monkeypatch.setenv("ATTNLAB_EXERCISE_TIMING_SHAPE", "2,512,192,3")
    assert ex._timing_shape() == dict(B=2, T=512, C=192, NH=3)
    monkeypatch.setenv("ATTNLAB_EXERCISE_TIMING_SHAPE", "2,511,192,3")
    with pytest.raises(ex.InputError, match="multiple of 4"):
        ex._timing_shape()


# ---------------------------------------------------------------- declaration and compile

def test_declaration_without_extern_c_is_explained():
    msg = ex.check_signature(E3, planted("e3_no_extern_c.cu"))
    assert 'is not declared extern "C"' in msg and "mangling" in msg
    assert E3.call in msg


def test_declaration_with_another_name_lists_the_kernels_found():
    msg = ex.check_signature(E3, 'extern "C" __global__ void kernel7(float* a) {}')
    assert "no __global__ kernel named softmax_autoregressive_backward_kernel7" in msg
    assert "kernel7" in msg


@pytest.mark.parametrize("params, says", [
    ("float* a, const float* b, const float* c, int B, int T, int C",
     "it takes 6 arguments, the checker passes 7"),
    ("float* a, const float* b, const float* c, int B, double T, int C, int NH",
     "argument 'double T' is a double, the checker passes an int (T)"),
    ("float* a, const float* b, float c, int B, int T, int C, int NH",
     "argument 'float c' is a float, the checker passes a pointer (att)"),
    ("float* a, const float* b, const float* c, int B, size_t T, int C, int NH",
     "is a 64-bit integer"),
])
def test_declaration_with_wrong_arguments_is_explained(params, says):
    src = f'// a comment\nextern "C" __global__ void softmax_autoregressive_backward_kernel7({params}) {{}}'
    msg = ex.check_signature(E3, src)
    assert says in msg
    assert "(line 2)" in msg


def test_right_declarations_pass():
    for key in CHECKERS:
        assert ex.check_signature(ex.EXERCISES[key], ex.solution_source(key)) is None
    src = ('extern "C" {\n__global__ void __launch_bounds__(256)\nsoftmax_autoregressive_backward_kernel7('
           'float* __restrict__ d, const float* __restrict__ a, const float* b, const int B, int T, '
           'int C, int NH) {}\n}')
    assert ex.check_signature(E3, src) is None


def test_signature_problem_raises_before_any_gpu():
    with pytest.raises(ex.ExerciseFailed) as e:
        ex.check_kernel7(planted("e3_no_extern_c.cu"))
    assert e.value.result.kind == "signature"
    assert str(e.value).startswith("Exercise 3, kernel 7 from the softmax Jacobian: WRONG DECLARATION")


NVCC_OUTPUT = """nvcc could not compile your_kernel.cu:
your_kernel.cu(12): error: identifier "blok" is undefined
          s += att[row + t2] * datt[row + blok];
                                          ^
your_kernel.cu(15): error: expected a ";"
      for (int t3 = threadIdx.x; t3 <= t; t3 += 256) {
      ^
your_kernel.cu(18): warning #12-D: parsing restarts here after previous syntax error
  }
  ^
"""


def test_compile_error_is_formatted_with_the_students_lines():
    src = planted("e3_compile_error.cu")
    text = ex.format_compile_error(NVCC_OUTPUT, src)
    lines = text.splitlines()
    assert lines[0].startswith("your kernel does not compile. nvcc says (line numbers count "
                               "from the first line of your kernel's source)")
    i = lines.index('  line 12: error: identifier "blok" is undefined')
    assert lines[i + 1] == "     12 |         s += att[row + t2] * datt[row + blok];"
    assert lines[i + 2].index("^") == lines[i + 1].index("blok")        # caret under blok
    j = lines.index('  line 15: error: expected a ";"')
    # nvcc echoes the preprocessed line (BLOCK_SIZE -> 256): the caret is placed by token
    assert lines[j + 1] == "     15 |     for (int t3 = threadIdx.x; t3 <= t; t3 += BLOCK_SIZE) {"
    assert lines[j + 2].index("^") == lines[j + 1].index("for")
    assert "look at the end of line 14" in lines[j + 3]
    assert "(1 warning(s) not shown)" in text


def test_compile_error_lines_follow_the_cell():
    src = planted("e3_compile_error.cu")
    cell = "# my cell\nmy_kernel = r'''" + src + "'''"
    offset = ex.cell_line_offset(src, ["print(1)", cell, "ex.check_kernel7(my_kernel)"])
    assert offset == 1
    text = ex.format_compile_error(NVCC_OUTPUT, src, offset=offset)
    assert "line numbers as in the cell" in text
    assert '  line 13: error: identifier "blok" is undefined' in text
    assert "     13 |         s += att[row + t2] * datt[row + blok];" in text
    assert "look at the end of line 15" in text


def test_preprocessor_errors_are_formatted_too():
    """nvcc's preprocessor (gcc) writes file:line:col, the front end file(line)."""
    src = '// my kernel\n#include "nothere.h"\n'
    text = ex.format_compile_error("nvcc could not compile your_kernel.cu:\n"
                                   "your_kernel.cu:2:10: fatal error: nothere.h: No such file or "
                                   "directory", src, offset=4)
    assert "  line 6: error: nothere.h: No such file or directory" in text
    assert '      6 | #include "nothere.h"' in text
    assert "        |          ^" in text


def test_defining_what_the_checker_passes_is_refused():
    e4 = ex.EXERCISES["e4_tune_kernel8"]
    src = ex.solution_source("e4_tune_kernel8")
    msg = ex.check_signature(e4, "#define T_PER_BLOCK 2\n" + src)
    assert "your source #defines T_PER_BLOCK, which the checker passes itself" in msg
    assert ex.check_signature(e4, "#ifndef T_PER_BLOCK\n#define T_PER_BLOCK 2\n#endif\n" + src) is None


def test_compile_error_keeps_the_first_three_errors():
    src = "\n".join(f"line{i}" for i in range(1, 9))
    out = "".join(f"your_kernel.cu({i}): error: bad {i}\n" for i in range(1, 6))
    text = ex.format_compile_error(out, src)
    assert "line 3: error: bad 3" in text and "line 4:" not in text
    assert "... and 2 more error(s)" in text


def test_compile_error_elsewhere_and_without_file_line_is_shown_as_is():
    text = ex.format_compile_error("nvcc could not compile your_kernel.cu:\n"
                                   "ptxas error   : Entry function 'k' uses too much shared data "
                                   "(0x10000 bytes, 0xc000 max)", "x")
    assert "too much shared data" in text
    text = ex.format_compile_error("/usr/include/x.h(3): error: oops\n", "x")
    assert "/usr/include/x.h(3): error: oops" in text


@needs_nvcc
def test_compile_error_through_the_checker_without_gpu():
    """The whole compile path runs with nvcc alone: no GPU, no PyCUDA."""
    with pytest.raises(ex.ExerciseFailed) as e:
        ex.check_kernel7(planted("e3_compile_error.cu"))
    msg = str(e.value)
    assert e.value.result.kind == "compile" and not e.value.result.ok
    assert msg.startswith("Exercise 3, kernel 7 from the softmax Jacobian: DOES NOT COMPILE")
    assert 'line 12: error: identifier "blok" is undefined' in msg
    assert "12 |         s += att[row + t2] * datt[row + blok];" in msg
    assert 'line 15: error: expected a ";"' in msg


@needs_nvcc
def test_compile_error_lines_from_the_ipython_history(monkeypatch):
    """In a notebook the checker finds the cell that holds the source in IPython's history."""
    IPython = pytest.importorskip("IPython")
    src = planted("e3_compile_error.cu")

    class Shell:
        class history_manager:
            input_hist_raw = ["", "import attnlab.exercises as ex",
                              "# three\n# lines\n# first\nmy_kernel = r'''" + src + "'''",
                              "result = ex.check_kernel7(my_kernel)"]
    monkeypatch.setattr(IPython, "get_ipython", lambda: Shell)
    with pytest.raises(ex.ExerciseFailed) as e:
        ex.check_kernel7(src)
    assert 'line 15: error: identifier "blok" is undefined' in str(e.value)
    assert "line numbers as in the cell" in str(e.value)


def test_exercise_failed_renders_without_a_traceback_in_ipython():
    e = ex.ExerciseFailed("Title: WRONG\n  detail")
    stb = e._render_traceback_()
    assert "ExerciseFailed" in stb[0] and "Title: WRONG" in stb[0]
    assert stb[1:] == ["  detail"]
    assert isinstance(e, AssertionError) and isinstance(e, ex.AttnlabError)


@needs_nvcc
@pytest.mark.parametrize("key", sorted(CHECKERS))
def test_solutions_compile_for_sm90(key):
    e = ex.EXERCISES[key]
    src = ex.solution_source(key)
    cfg, defines = ex._config(e, ex.solution_config(src))
    assert ex.compile_check(e, src, f"{key}.cu", defines) is None


@needs_nvcc
def test_kernel8_solution_compiles_for_other_configurations():
    e = ex.EXERCISES["e4_tune_kernel8"]
    for bs, tpb in ((32, 1), (128, 8), (1024, 16), (256, 3)):     # one warp .. 32 warps
        _, defines = ex._config(e, dict(block_size=bs, t_per_block=tpb))
        assert ex.compile_check(e, ex.solution_source("e4_tune_kernel8"), "s.cu", defines) is None


@needs_nvcc
@pytest.mark.parametrize("key", sorted(CHECKERS))
def test_skeletons_compile(key):
    """A student starts from a kernel that compiles (and is wrong: see the GPU tests)."""
    e = ex.EXERCISES[key]
    src, _ = skeleton(key)
    _, defines = ex._config(e, {})
    assert ex.compile_check(e, src, ex.FILENAME, defines) is None


PLANTED_EXERCISE = {"e1": "e1_permute", "e2": "e2_softmax_forward", "e3": "e3_kernel7_from_jacobian",
                    "e4": "e4_tune_kernel8", "e5": "e5_beat_kernel"}


@needs_nvcc
@pytest.mark.parametrize("name", sorted(p.name for p in PLANTED.glob("*.cu")
                                        if p.stem not in ("e3_compile_error", "e3_no_extern_c")))
def test_planted_kernels_compile(name):
    e = ex.EXERCISES[PLANTED_EXERCISE[name[:2]]]
    _, defines = ex._config(e, {})
    assert ex.compile_check(e, planted(name), ex.FILENAME, defines) is None


# ------------------------------------------------------------------ hints, on numpy arrays

AX4 = ("b", "h", "t", "t2")
T = 16


def causal_pair(seed=0):
    """(expected, got) like a correct causal result: lower triangle values, upper zeros."""
    rng = np.random.default_rng(seed)
    lower = np.tril(np.ones((T, T), bool))
    exp = np.where(lower, rng.uniform(-1, 1, (2, 3, T, T)), 0).astype(np.float32)
    return exp, exp.copy()


def poison(shape):
    return np.full(shape, ex.POISON_BITS, np.uint32).view(np.float32)


def hints_for(got, exp, **kw):
    kw.setdefault("causal", True)
    n, lines, hints = ex.describe_mismatch("dpreatt", got, exp, AX4, 1e-3, **kw)
    return n, "\n".join(lines), "\n".join(hints)


def test_right_result_has_no_report():
    exp, got = causal_pair()
    assert hints_for(got, exp) == (0, "", "")


def test_count_first_elements_and_where():
    exp, got = causal_pair()
    got[1, 2, 5, 3] += 0.5
    got[0, 1, 9, 0] -= 0.25
    n, lines, _ = hints_for(got, exp)
    assert n == 2
    assert f"dpreatt: 2 of {got.size} elements wrong (allowed error 0.001" in lines
    first = lines.index("(b=0, h=1, t=9, t2=0)")
    assert first < lines.index("(b=1, h=2, t=5, t2=3)"), "memory order"
    assert f"expected {exp[0, 1, 9, 0]:.6g}, got {got[0, 1, 9, 0]:.6g}" in lines
    assert "the wrong elements lie at: b all of 0..1; h 1..2 (of 0..2); t in {5, 9} (2 of 16)" in lines


def test_upper_triangle_written_means_the_causal_mask_is_missing():
    exp, got = causal_pair()
    upper = ~np.tril(np.ones((T, T), bool))
    got[..., upper] = 0.3
    _, _, hints = hints_for(got, exp)
    assert "all the wrong elements are above the diagonal (t2 > t)" in hints
    assert "The causal mask is missing" in hints


@pytest.mark.parametrize("factor, says", [
    (8.0, "the scale is missing"),
    (0.125, "the scale is applied twice"),
    (-1.0, "the wrong sign"),
    (3.0, "every wrong value is 3 times the expected one"),
])
def test_a_constant_factor_is_recognised(factor, says):
    exp, _ = causal_pair()
    exp *= 4      # values well above the tolerance
    got = (exp * factor).astype(np.float32)
    _, _, hints = hints_for(got, exp, scale=0.125)
    assert says in hints


def test_rows_never_written_are_named():
    exp, got = causal_pair()
    got[:, :, :4, :] = np.where(np.tril(np.ones((T, T), bool))[:4], poison((2, 3, 4, T)), 0)
    n, lines, hints = hints_for(got, exp)
    assert "got never written" in lines
    assert "were never written (they still hold the checker's NaN): whole rows, the same in " \
           "every (b, h): t = 0..3" in hints


def test_nothing_written_is_said_so():
    exp, _ = causal_pair()
    got = np.where(np.tril(np.ones((T, T), bool)), poison(exp.shape), 0).astype(np.float32)
    _, _, hints = hints_for(got, exp)
    assert "nothing of dpreatt was written" in hints


def test_diagonal_never_written_is_an_off_by_one():
    exp, got = causal_pair()
    idx = np.arange(T)
    got[..., idx, idx] = poison((2, 3, T))
    _, _, hints = hints_for(got, exp)
    assert "only the diagonal t2 == t" in hints and "t2 <= t" in hints


def test_nans_the_kernel_computed_are_told_from_unwritten_ones():
    exp, got = causal_pair()
    got[0, 0, 3, 1] = np.nan           # a NaN from arithmetic: not the poison's bits
    _, _, hints = hints_for(got, exp)
    assert "1 elements of dpreatt are NaN that your kernel computed (first at (b=0, h=0, t=3, t2=1))" in hints
    assert "never written" not in hints


def test_transposed_result_is_recognised():
    exp, _ = causal_pair()
    got = np.where(np.tril(np.ones((T, T), bool)), poison(exp.shape), 0).astype(np.float32)
    tr = exp.swapaxes(-1, -2)
    upper_or_diag = np.triu(np.ones((T, T), bool))
    got = np.where(upper_or_diag, tr, got).astype(np.float32)
    _, _, hints = hints_for(got, exp)
    assert "right values in the wrong places" in hints and "transposed" in hints


def test_wrong_layout_is_named():
    rng = np.random.default_rng(1)
    q = rng.uniform(-1, 1, (2, 3, 5, 4)).astype(np.float32)        # (b, h, t, d)
    got = np.ascontiguousarray(q.transpose(0, 2, 1, 3)).reshape(q.shape)   # written (b, t, h, d)
    n, lines, hints = ex.describe_mismatch("q", got, q, ("b", "h", "t", "d"), 0.0)
    assert n > 0
    assert "your q holds the right values in the wrong places: they are laid out in the order " \
           "(b, t, h, d) instead of (b, h, t, d)" in "\n".join(hints)


def test_known_mistakes_are_matched():
    exp, _ = causal_pair()
    other = causal_pair(seed=5)[0]
    _, _, hints = hints_for(other.copy(), exp, candidates=[(other, "you computed the other thing")])
    assert "you computed the other thing" in hints
    _, _, hints = hints_for(other * 2, exp, candidates=[(other, "you computed the other thing")])
    assert "you computed the other thing" not in hints


def test_backward_candidates_recognise_the_usual_formula_mistakes():
    shape = tuple(sorted(ex.SMALL.items()))
    cands = ex._backward_candidates(shape)
    p = ex._problem(ex.SMALL)
    for cand, text in cands:
        n, lines, hints = ex.describe_mismatch("dpreatt", cand, p.dpreatt, AX4, 1e-3,
                                               causal=True, scale=0.125, candidates=cands)
        assert n > 0 and text in hints, text


def test_runs_that_differ_point_to_a_race():
    exp, got = causal_pair()
    other = got.copy()
    other[1, 0, 7, 2] += 0.01
    text = "\n".join(ex.describe_runs("dpreatt", [got, got, other], AX4, 1e-3))
    assert "results differ between run 1 and run 3 with the same inputs in 1 elements " \
           "(first at (b=1, h=0, t=7, t2=2)" in text
    assert "a race" in text and "__syncthreads()" in text
    assert ex.describe_runs("dpreatt", [got, got.copy()], AX4, 1e-3) == []
    nan = np.full_like(got, np.nan)
    assert ex.describe_runs("dpreatt", [nan, nan.copy()], AX4, 1e-3) == []


def test_guard_zone_reports():
    assert ex.describe_guards("q", {"before": 0, "after": 128, "after_far": 128}) == [
        "your kernel wrote 128 floats past the end of q (up to 128 floats beyond its last "
        "element): a missing bounds check (if (idx < n)), or an index past the last row"]
    text = ex.describe_guards("dpreatt", {"before": 3, "after": 0, "before_far": 260})[0]
    assert "wrote 3 floats before the start of dpreatt (up to 260 floats before" in text
    assert ex.describe_guards("q", {"before": 0, "after": 0}) == []


def test_guard_report_of_the_child():
    g, n = 8, 10
    h = np.full(n + 2 * g, ex.OUT_GUARD_BITS, np.uint32)
    assert ex._guard_report(h, g, n, ex.OUT_GUARD_BITS) is None
    h[g + n + 2] = 0
    h[g - 3] = 0
    assert ex._guard_report(h, g, n, ex.OUT_GUARD_BITS) == {
        "before": 1, "after": 1, "before_far": 3, "after_far": 3}


@pytest.mark.parametrize("cuda_says, words", [
    ("cuCtxSynchronize failed: an illegal memory access was encountered",
     "your kernel read or wrote outside the buffers (CUDA_ERROR_ILLEGAL_ADDRESS)"),
    # what the H200 said for tests/planted/e3_illegal_address.cu (stores gigabytes past dpreatt)
    ("LogicError: cuCtxSynchronize failed: operation not supported on global/shared address space",
     "your kernel read or wrote outside the buffers, so far outside that the address is in no "
     "memory space at all (CUDA_ERROR_INVALID_ADDRESS_SPACE)"),
    ("cuLaunchKernel failed: too many resources requested for launch",
     "CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES"),
    ("cuCtxSynchronize failed: misaligned address", "CUDA_ERROR_MISALIGNED_ADDRESS"),
    ("cuLaunchKernel failed: invalid argument", "CUDA_ERROR_INVALID_VALUE"),
    ("something new", "CUDA reported an error: something new"),
])
def test_cuda_errors_in_plain_words(cuda_says, words):
    assert words in ex.cuda_error_words(cuda_says)


def test_sanitizer_findings_name_the_cell_line():
    log = """========= COMPUTE-SANITIZER
========= Invalid __global__ write of size 4 bytes
=========     at softmax_autoregressive_backward_kernel7+0x2b0 in your_kernel.cu:37
=========     by thread (5,0,0) in block (1,0,0)
=========     Address 0x7f0000000000 is out of bounds
=========     Saved host backtrace up to driver entry point at kernel launch time
=========         Host Frame: [0x2dd3c5] in libcuda.so.1
=========
========= ERROR SUMMARY: 1 error
"""
    text = ex.sanitizer_findings(log, offset=2)
    assert "Invalid __global__ write of size 4 bytes" in text
    assert "your_kernel.cu:37 (cell line 39)" in text
    assert "by thread (5,0,0) in block (1,0,0)" in text
    assert "Host Frame" not in text and "backtrace" not in text
    race = """========= Error: Race reported between Write access at k+0x1a0 in your_kernel.cu:30
=========     and Read access at k+0x1f0 in your_kernel.cu:33 [248 hazards]
========= RACECHECK SUMMARY: 1 hazard displayed (1 error, 0 warnings)"""
    text = ex.sanitizer_findings(race)
    assert "Race reported between Write access" in text and "your_kernel.cu:33" in text


def test_speed_in_words():
    assert ex._ratio_words(0.123, 0.100) == "1.23x slower"
    assert ex._ratio_words(0.080, 0.100) == "1.25x faster"
    assert ex._ratio_words(0.1001, 0.100) == "the same speed"


def test_input_files_of_dead_processes_are_removed(monkeypatch, tmp_path):
    import subprocess
    import sys
    monkeypatch.setattr(ex.tempfile, "gettempdir", lambda: str(tmp_path))
    monkeypatch.setattr(ex, "_input_dir", None)
    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait()
    stale = tmp_path / f"{ex._INPUTS_PREFIX}{gone.pid}"
    stale.mkdir()
    (stale / "old.npy").write_bytes(b"x")
    mine = ex._shared_dir()
    assert mine == tmp_path / f"{ex._INPUTS_PREFIX}{__import__('os').getpid()}" and mine.is_dir()
    assert not stale.exists()
    a = np.ones((2, 3), np.float32)
    assert ex._save_array(a) == ex._save_array(a)          # written once
    monkeypatch.setattr(ex, "_input_dir", None)             # (the next test gets a fresh one)


@pytest.mark.skipif(has_gpu(), reason="this machine has a GPU")
@needs_nvcc
def test_without_gpu_the_subprocess_says_so():
    """The subprocess path runs up to the context: a clear NoGPUError, nothing else."""
    with pytest.raises(ex.NoGPUError, match="needs a CUDA GPU"):
        ex.check_permute(ex.solution_source("e1_permute"), timing=False)


# ------------------------------------------------------------------------------- on a GPU

gpu = pytest.mark.gpu


def config_of(key):
    return ex.solution_config(ex.solution_source(key))


@gpu
@pytest.mark.parametrize("key", sorted(CHECKERS))
def test_every_solution_passes_and_is_timed(key):
    r = ex.check(key, ex.solution_source(key), quiet=True, **config_of(key))
    assert r.ok and r.kind == "ok" and not r.solution
    assert "right at B=2" in r.message and "right at B=4 T=1024 C=768 NH=12 too" in r.message
    assert r.timing["yours_ms"] > 0 and r.timing["reference_ms"] > 0
    assert re.search(r"reference \(.*\) \d+\.\d{4} ms: (\d+\.\d\dx (slower|faster)|the same speed)",
                     r.message)


@gpu
def test_solution_switch_on_a_gpu(monkeypatch, capsys):
    monkeypatch.setenv(ex.SOLUTIONS_ENV, "1")
    r = ex.check_kernel7("this is not even CUDA", timing=False)
    assert r.ok and r.solution
    assert "checking the reference solution" in capsys.readouterr().out


# (file, exercise options, kind, phrases the message must contain)
PLANTED_CASES = [
    ("e1_wrong_index.cu", {}, "wrong",
     ["q: 96000 of 96384 elements wrong", "(b=0, h=0, t=1, d=0)",
      "your q holds the right values in the wrong places", "(b, t, h, d) instead of (b, h, t, d)"]),
    ("e1_out_of_bounds.cu", {}, "out_of_bounds",
     ["your kernel wrote 128 floats past the end of q, k and v"]),
    ("e2_missing_mask.cu", {}, "wrong",
     ["above the diagonal (t2 > t)", "The causal mask is missing",
      "your softmax runs over the whole row"]),
    ("e2_missing_scale.cu", {}, "wrong", ["softmax(preatt), not softmax(scale * preatt)"]),
    ("e3_missing_scale.cu", {}, "wrong",
     ["8 times too large: the scale is missing"]),
    ("e3_missing_mask.cu", {}, "wrong",
     ["above the diagonal (t2 > t), where dpreatt must stay 0", "causal mask"]),
    ("e3_race.cu", {}, "race",
     ["results differ between run 1 and run", "a race", "__syncthreads()"]),
    ("e4_rows_not_written.cu", {"t_per_block": 4}, "wrong",
     ["were never written", "whole rows, the same in every (b, h): t = 0..255"]),
]


@gpu
@pytest.mark.parametrize("name, options, kind, phrases", PLANTED_CASES,
                         ids=[c[0] for c in PLANTED_CASES])
def test_planted_kernel_fails_with_the_right_message(name, options, kind, phrases):
    key = PLANTED_EXERCISE[name[:2]]
    with pytest.raises(ex.ExerciseFailed) as e:
        ex.check(key, planted(name), timing=False, sanitize=False, **options)
    msg = str(e.value)
    assert e.value.result.kind == kind, msg
    for phrase in phrases:
        assert phrase in msg, f"{phrase!r} not in:\n{msg}"


def parent_context_array():
    """A buffer in this process's own CUDA context (the checks must leave it usable)."""
    import pycuda.gpuarray as gpuarray

    from attnlab.device import context
    context()
    return gpuarray.to_gpu(np.arange(1024, dtype=np.float32))


def parent_context_still_works(a):
    import pycuda.driver as cuda
    cuda.Context.synchronize()
    assert np.array_equal((a * 2).get(), 2 * np.arange(1024, dtype=np.float32))


@gpu
def test_illegal_address_is_reported_and_the_next_check_passes():
    a = parent_context_array()
    with pytest.raises(ex.ExerciseFailed) as e:
        ex.check_kernel7(planted("e3_illegal_address.cu"), timing=False, sanitize=False)
    msg = str(e.value)
    assert e.value.result.kind == "crash"
    # far out of bounds: CUDA_ERROR_INVALID_ADDRESS_SPACE on the H200 (ILLEGAL_ADDRESS when nearer)
    assert "your kernel read or wrote outside the buffers" in msg and "(CUDA_ERROR_" in msg, msg
    assert "your notebook's own GPU context is unharmed" in msg, msg
    parent_context_still_works(a)
    assert ex.check_kernel7(ex.solution_source("e3_kernel7_from_jacobian"), timing=False,
                            quiet=True).ok
    parent_context_still_works(a)


@gpu
def test_hang_is_stopped_and_the_next_check_passes():
    a = parent_context_array()
    with pytest.raises(ex.ExerciseFailed) as e:
        ex.check_kernel7(planted("e3_hang.cu"), timing=False, timeout=20)
    msg = str(e.value)
    assert e.value.result.kind == "timeout"
    assert "your kernel did not finish in 20 s (while running your kernel at B=2 T=260 C=192 NH=3" in msg
    assert "threads waiting at a __syncthreads()" in msg
    parent_context_still_works(a)
    assert ex.check_kernel7(ex.solution_source("e3_kernel7_from_jacobian"), timing=False,
                            quiet=True).ok
    parent_context_still_works(a)


@gpu
@pytest.mark.skipif(ex.find_sanitizer() is None, reason="no compute-sanitizer")
def test_compute_sanitizer_names_the_line_of_a_crash_and_of_a_race():
    with pytest.raises(ex.ExerciseFailed) as e:
        ex.check_kernel7(planted("e3_illegal_address.cu"), timing=False)     # sanitize=None: auto
    assert "compute-sanitizer --tool memcheck says:" in str(e.value), str(e.value)
    assert "Invalid __global__ write" in str(e.value)
    assert "your_kernel.cu:" in e.value.result.sanitizer
    with pytest.raises(ex.ExerciseFailed) as e:
        ex.check_kernel7(planted("e3_race.cu"), timing=False)
    assert e.value.result.kind == "race"
    assert "compute-sanitizer --tool racecheck" in str(e.value), str(e.value)


@gpu
def test_sweep_of_kernel8():
    table = ex.sweep_kernel8(ex.solution_source("e4_tune_kernel8"), block_sizes=(128, 256),
                             t_per_blocks=(1, 8), quiet=True)
    assert set(table) == {(128, 1), (128, 8), (256, 1), (256, 8)}
    assert all(ms is not None and ms > 0 for ms in table.values())
    wrong = ex.sweep_kernel8(planted("e4_rows_not_written.cu"), block_sizes=(256,),
                             t_per_blocks=(4,), quiet=True)
    assert wrong == {(256, 4): None}


SKELETON_KINDS = {"e1_permute": "out_of_bounds", "e2_softmax_forward": "wrong",
                  "e3_kernel7_from_jacobian": "wrong", "e4_tune_kernel8": "wrong",
                  "e5_beat_kernel": "wrong"}


@gpu
@pytest.mark.parametrize("key", sorted(CHECKERS))
def test_notebook_skeletons_fail_until_completed(key):
    src, _ = skeleton(key)
    with pytest.raises(ex.ExerciseFailed) as e:
        ex.check(key, src, timing=False, sanitize=False)
    assert e.value.result.kind == SKELETON_KINDS[key], str(e.value)
