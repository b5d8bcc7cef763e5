"""The exercise checkers (attnlab.exercises).

Without a GPU: the declaration and compile-error path (nvcc only; line numbers as in the
notebook cell), the hints on synthetic arrays, the guard, race and crash reports, the
solutions switch, and the notebooks' structure.

On a GPU (marked ``gpu``): every checker passes its reference solution; every planted wrong
kernel (tests/planted_bugs.py: a solution with one line changed) fails with the right message;
an illegal address and a hang are reported as such and leave the calling process's CUDA context
usable (a check that passes follows each); the kernel-8 sweep; and the notebooks' skeletons
fail as they should.
"""
import json
import re
import shutil
from pathlib import Path

import numpy as np
import pytest

from attnlab import exercises as ex
from attnlab import bench
from attnlab.device import has_gpu
from attnlab.exercises import cases as exercise_cases
from attnlab.exercises import jobs, memory, mistakes, solutions, spec, timing
from attnlab.problem import DEFAULT, SMALL
from planted_bugs import BUGS, planted

ROOT = Path(__file__).resolve().parent.parent
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
                printing = c.source.startswith(("result =", "table =", "ex.", "print"))
                if printing:
                    assert "nbval-ignore-output" in c.metadata.get("tags", []), c.source


def _printed(cell):
    assert not [o for o in cell.get("outputs", []) if o.output_type == "error"], cell.source
    return "".join(o.get("text", "") for o in cell.get("outputs", []))


@pytest.mark.parametrize("key", CHECKERS)
def test_each_notebook_is_committed_with_a_passing_and_a_failing_check(key):
    """The stored outputs (an H200 run) show a reader without a GPU what the checker says:
    the check cell on the reference solution (OK), and the one-line-wrong kernel (WRONG)."""
    fn = CHECKERS[key]
    cells = [c for c in notebook(key).cells if c.cell_type == "code"]
    title = ex.EXERCISES[key].title
    own = next(c for c in cells if f"ex.{fn}(my_kernel" in c.source)
    assert f"{title}: OK" in _printed(own)
    wrong = next(c for c in cells if f"ex.{fn}(wrong_kernel" in c.source)
    assert f"{title}: WRONG RESULT" in _printed(wrong)
    for c in cells:
        _printed(c)                       # no cell of the run raised


def test_the_skeleton_cell_starts_with_the_string_so_lines_match_the_cell():
    for key in CHECKERS:
        src, cell = skeleton(key)
        assert ex.cell_line_offset(src, ["import x", cell, "ex.check(my_kernel)"]) == 0


# what each notebook's last cell does to the solution, and what the check must then say
WRONG_KERNEL_SAYS = {
    "e1_permute": ["your k holds the values that belong in v"],
    "e2_softmax_forward": ["softmax(preatt), not softmax(scale * preatt)"],
    "e3_kernel7_from_jacobian": ["runs over the whole row: it must stop at t2 = t"],
    "e4_tune_kernel8": ["whole rows, the same in every (b, h): t = 0..191"],
    "e5_beat_kernel": ["only the diagonal t2 == t", "your sum S stops one short"],
}


def checker_section(key):
    """The code cell of the notebook's last section, "What the checker says"."""
    cells = notebook(key).cells
    assert cells[-2].cell_type == "markdown"
    assert cells[-2].source.startswith("## What the checker says"), key
    assert cells[-1].cell_type == "code"
    return cells[-1]


@needs_nvcc
@pytest.mark.parametrize("key", sorted(CHECKERS))
def test_each_notebook_ends_with_a_wrong_kernel_checked_without_raising(key):
    """One line of the solution changed, checked with raises=False (nbval then passes on the
    report) and use_solution=False (ATTNLAB_EXERCISE_SOLUTIONS must not replace it)."""
    cell = checker_section(key)
    assert "nbval-ignore-output" in cell.metadata.get("tags", [])
    calls = []

    class Exercises:             # attnlab.exercises, with the checker recording its call
        def __getattr__(self, name):
            if name != CHECKERS[key]:
                return getattr(ex, name)

            def checker(source, **kw):
                calls.append((source, kw))
                return ex.CheckResult(key, False, "wrong", "")
            return checker
    exec(cell.source, {"ex": Exercises()})
    (source, kw), = calls
    assert kw["use_solution"] is False and kw["raises"] is False and kw["timing"] is False
    solution = ex.solution_source(key).splitlines()
    assert len(source.splitlines()) == len(solution)
    assert sum(a != b for a, b in zip(solution, source.splitlines())) == 1
    e = ex.EXERCISES[key]
    _, defines = spec.configure(e, {k: v for k, v in kw.items() if k in dict(e.config)})
    assert ex.compile_check(e, source, ex.FILENAME, defines) is None


def test_solution_config_line_is_read():
    assert ex.solution_config("// attnlab-exercise-config: block_size=256 t_per_block=8\n") == \
        {"block_size": 256, "t_per_block": 8}
    assert ex.solution_config("// nothing here") == {}
    assert ex.solution_config(ex.solution_source("e5_beat_kernel")) == \
        {"block_size": 256, "t_per_block": 8}


def test_solutions_switch_substitutes_the_solution_and_says_so(monkeypatch, capsys):
    e = ex.EXERCISES["e5_beat_kernel"]
    monkeypatch.setenv(ex.SOLUTIONS_ENV, "1")
    src, given, filename, sub = solutions.resolve(e, "student's kernel", {"block_size": 64})
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


def test_use_solution_decides_whatever_the_switch_says(monkeypatch, capsys):
    e = ex.EXERCISES["e3_kernel7_from_jacobian"]
    monkeypatch.setenv(ex.SOLUTIONS_ENV, "1")
    assert solutions.resolve(e, "mine", {}, use_solution=False) == ("mine", {}, ex.FILENAME, False)
    assert capsys.readouterr().out == ""
    monkeypatch.delenv(ex.SOLUTIONS_ENV)
    src, _, _, sub = solutions.resolve(e, "mine", {}, use_solution=True)
    assert sub and src == ex.solution_source(e.key)
    assert capsys.readouterr().out.startswith("use_solution=True: checking the reference solution")


@needs_nvcc
def test_a_failing_check_can_return_its_report_instead_of_raising(monkeypatch, capsys):
    monkeypatch.setenv(ex.SOLUTIONS_ENV, "1")          # as in the notebooks' nbval run
    wrong = 'extern "C" __global__ void kernel7(float* a) {}'          # another name
    r = ex.check_kernel7(wrong, use_solution=False, raises=False)
    assert not r.ok and r.kind == "signature" and not r.solution
    out = capsys.readouterr().out
    assert out == r.message + "\n"
    assert out.startswith("Exercise 3, kernel 7 from the softmax Jacobian: WRONG DECLARATION")
    r = ex.check_kernel7(wrong, use_solution=False, raises=False, quiet=True)
    assert not r.ok and capsys.readouterr().out == ""


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
        spec.configure(ex.EXERCISES["e3_kernel7_from_jacobian"], {"block_size": 100})
    with pytest.raises(ex.InputError, match="beat must be 6, 7 or 8"):
        spec.configure(ex.EXERCISES["e5_beat_kernel"], {"beat": 2})
    with pytest.raises(ex.InputError, match="takes no option"):
        spec.configure(ex.EXERCISES["e1_permute"], {"block_size": 256})
    cfg, defines = spec.configure(ex.EXERCISES["e4_tune_kernel8"], {"t_per_block": 8})
    assert defines == {"BLOCK_SIZE": 256, "T_PER_BLOCK": 8}


def test_timing_shape_can_be_changed(monkeypatch):
    monkeypatch.delenv("ATTNLAB_EXERCISE_TIMING_SHAPE", raising=False)
    assert spec.timing_shape() == DEFAULT
    monkeypatch.setenv("ATTNLAB_EXERCISE_TIMING_SHAPE", "2,512,192,3")
    assert spec.timing_shape() == dict(B=2, T=512, C=192, NH=3)
    monkeypatch.setenv("ATTNLAB_EXERCISE_TIMING_SHAPE", "2,511,192,3")
    with pytest.raises(ex.InputError, match="multiple of 4"):
        spec.timing_shape()


# ---------------------------------------------------------------- declaration and compile

@needs_nvcc
def test_declaration_without_extern_c_is_explained():
    msg = ex.check_signature(E3, planted("e3_no_extern_c.cu"))
    assert 'is not declared extern "C"' in msg and "mangling" in msg
    assert E3.call in msg


@needs_nvcc
def test_declaration_with_another_name_lists_the_kernels_found():
    msg = ex.check_signature(E3, 'extern "C" __global__ void kernel7(float* a) {}')
    assert "no __global__ kernel named softmax_autoregressive_backward_kernel7" in msg
    assert "kernel7" in msg


@needs_nvcc
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


@needs_nvcc
def test_the_compiler_checks_the_declaration_not_a_parse_of_its_text():
    """Types through a typedef or a macro are what the compiler says they are; a __device__
    function or overloads are named as such; the student's macros do not disturb the check."""
    head = 'extern "C" __global__ void softmax_autoregressive_backward_kernel7('
    src = (f"typedef double real;\n{head}float* d, const float* a, const float* b, int B, "
           f"real T, int C, int NH) {{}}")
    assert "argument 'real T' is a double, the checker passes an int (T)" in \
        ex.check_signature(E3, src)
    src = (f"#define T 1024\n#define ARGS float* d, const float* a, const float* b, int B, "
           f"int TT, int C, int NH\n{head}ARGS) {{}}")
    assert ex.check_signature(E3, src) is None
    src = f"{head}float* d, const float* a, const float* b, int B, short T, int C, int NH) {{}}"
    assert "argument 'short T' is neither a pointer, a 32-bit int nor a float" in \
        ex.check_signature(E3, src)
    msg = ex.check_signature(E3, "__device__ void softmax_autoregressive_backward_kernel7("
                                 "float* d) {}")
    assert "(line 1) is a __device__ function, not a kernel" in msg and E3.call in msg
    msg = ex.check_signature(E3, "__global__ void softmax_autoregressive_backward_kernel7(float* d) {}\n"
                                 "__global__ void softmax_autoregressive_backward_kernel7(int* d) {}")
    assert "more than one function named softmax_autoregressive_backward_kernel7" in msg


@needs_nvcc
def test_right_declarations_pass():
    for key in CHECKERS:
        assert ex.check_signature(ex.EXERCISES[key], ex.solution_source(key)) is None
    src = ('extern "C" {\n__global__ void __launch_bounds__(256)\nsoftmax_autoregressive_backward_kernel7('
           'float* __restrict__ d, const float* __restrict__ a, const float* b, const int B, int T, '
           'int C, int NH) {}\n}')
    assert ex.check_signature(E3, src) is None


@needs_nvcc
def test_signature_problem_raises_before_any_gpu():
    with pytest.raises(ex.ExerciseFailed) as e:
        ex.check_kernel7(planted("e3_no_extern_c.cu"))
    assert e.value.result.kind == "signature"
    assert str(e.value).startswith("Exercise 3, kernel 7 from the softmax Jacobian: WRONG DECLARATION")


# what nvcc 13.0 says for planted("e3_compile_error.cu"): the ';' missing at the end of line 39
NVCC_OUTPUT = """nvcc could not compile your_kernel.cu:
your_kernel.cu(40): error: expected a ";"
      float S = lane < (256 / 32) ? warp_sums[lane] : 0.0f;
      ^
your_kernel.cu(42): error: identifier "S" is undefined
          S += __shfl_xor_sync(0xffffffffu, S, offset);
          ^
your_kernel.cu(46): error: identifier "S" is undefined
          dpreatt_row[t3] = scale * att_row[t3] * (datt_row[t3] - S);
                                                                  ^
your_kernel.cu(17): warning #550-D: variable "warp_sums" was set but never used
      __attribute__((shared)) float warp_sums[(256 / 32)];
                                    ^
"""


def test_compile_error_is_formatted_with_the_students_lines():
    src = planted("e3_compile_error.cu")
    text = ex.format_compile_error(NVCC_OUTPUT, src)
    lines = text.splitlines()
    assert lines[0].startswith("your kernel does not compile. nvcc says (line numbers count "
                               "from the first line of your kernel's source)")
    j = lines.index('  line 40: error: expected a ";"')
    # nvcc echoes the preprocessed line (NUM_WARPS -> (256 / 32)): the caret is placed by token
    assert lines[j + 1] == "     40 |     float S = lane < NUM_WARPS ? warp_sums[lane] : 0.0f;"
    assert lines[j + 2].index("^") == lines[j + 1].index("float")
    assert "look at the end of line 39" in lines[j + 3]
    i = lines.index('  line 42: error: identifier "S" is undefined')
    assert lines[i + 1] == "     42 |         S += __shfl_xor_sync(0xffffffffu, S, offset);"
    assert lines[i + 2].index("^") == lines[i + 1].index("S +=")        # caret under the S
    k = lines.index('  line 46: error: identifier "S" is undefined')
    assert lines[k + 2].index("^") == lines[k + 1].rindex("S")           # the last S of the line
    assert "(1 warning(s) not shown)" in text


def test_compile_error_lines_follow_the_cell():
    src = planted("e3_compile_error.cu")
    cell = "# my cell\nmy_kernel = r'''" + src + "'''"
    offset = ex.cell_line_offset(src, ["print(1)", cell, "ex.check_kernel7(my_kernel)"])
    assert offset == 1
    text = ex.format_compile_error(NVCC_OUTPUT, src, offset=offset)
    assert "line numbers as in the cell" in text
    assert '  line 43: error: identifier "S" is undefined' in text
    assert "     43 |         S += __shfl_xor_sync(0xffffffffu, S, offset);" in text
    assert "look at the end of line 40" in text


def test_preprocessor_errors_are_formatted_too():
    """nvcc's preprocessor (gcc) writes file:line:col, the front end file(line)."""
    src = '// my kernel\n#include "nothere.h"\n'
    text = ex.format_compile_error("nvcc could not compile your_kernel.cu:\n"
                                   "your_kernel.cu:2:10: fatal error: nothere.h: No such file or "
                                   "directory", src, offset=4)
    assert "  line 6: error: nothere.h: No such file or directory" in text
    assert '      6 | #include "nothere.h"' in text
    assert "        |          ^" in text


@needs_nvcc
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
    assert 'line 40: error: expected a ";"' in msg
    assert "40 |     float S = lane < NUM_WARPS ? warp_sums[lane] : 0.0f;" in msg
    assert "look at the end of line 39" in msg
    assert 'line 42: error: identifier "S" is undefined' in msg
    assert "42 |         S += __shfl_xor_sync(0xffffffffu, S, offset);" in msg


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
    assert 'line 43: error: expected a ";"' in str(e.value)
    assert 'line 45: error: identifier "S" is undefined' in str(e.value)
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
    cfg, defines = spec.configure(e, ex.solution_config(src))
    assert ex.compile_check(e, src, f"{key}.cu", defines) is None


@needs_nvcc
def test_kernel8_solution_compiles_for_other_configurations():
    e = ex.EXERCISES["e4_tune_kernel8"]
    for bs, tpb in ((32, 1), (128, 8), (1024, 16), (256, 3)):     # one warp .. 32 warps
        _, defines = spec.configure(e, dict(block_size=bs, t_per_block=tpb))
        assert ex.compile_check(e, ex.solution_source("e4_tune_kernel8"), "s.cu", defines) is None


@needs_nvcc
@pytest.mark.parametrize("key", sorted(CHECKERS))
def test_skeletons_compile(key):
    """A student starts from a kernel that compiles (and is wrong: see the GPU tests)."""
    e = ex.EXERCISES[key]
    src, _ = skeleton(key)
    _, defines = spec.configure(e, {})
    assert ex.compile_check(e, src, ex.FILENAME, defines) is None


@needs_nvcc
@pytest.mark.parametrize("name", sorted(n for n in BUGS
                                        if n not in ("e3_compile_error.cu", "e3_no_extern_c.cu")))
def test_planted_kernels_compile(name):
    e = ex.EXERCISES[BUGS[name][0]]
    _, defines = spec.configure(e, {})
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
    cands = mistakes.backward_candidates(SMALL)
    p = mistakes.problem(SMALL)
    for cand, text in cands:
        n, lines, hints = ex.describe_mismatch("dpreatt", cand, p.dpreatt, AX4, 1e-3,
                                               causal=True, scale=0.125, candidates=cands)
        assert n > 0 and text in hints, text
        # and no other known mistake: each explains the result only where it agrees with it
        assert [t for _, t in cands if t in hints] == [text]


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
    assert memory.guard_report(h, g, n, ex.OUT_GUARD_BITS) is None
    h[g + n + 2] = 0
    h[g - 3] = 0
    assert memory.guard_report(h, g, n, ex.OUT_GUARD_BITS) == {
        "before": 1, "after": 1, "before_far": 3, "after_far": 3}


@pytest.mark.parametrize("cuda_says, words", [
    ("cuCtxSynchronize failed: an illegal memory access was encountered",
     "your kernel read or wrote outside the buffers (CUDA_ERROR_ILLEGAL_ADDRESS)"),
    # what the H200 said for planted("e3_illegal_address.cu") (stores gigabytes past dpreatt)
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


def fake_timing(median, spread=0.002, n=20):
    """A Timing of n repeats around ``median`` ms, quartiles about median -+ spread/2."""
    return bench.Timing.of(np.linspace(median - spread, median + spread, n))


def test_speed_verdict_within_noise_when_the_quartile_ranges_overlap():
    yours, ref = fake_timing(0.100), fake_timing(0.1008)
    assert timing.verdict(yours, ref) == "not resolved"
    line = timing.describe_time("your kernel", yours, ref, "kernel 8, block 128", "B=4 T=1024")
    (y1, y3), (r1, r3) = yours.quartiles_ms, ref.quartiles_ms
    assert (f"your kernel 0.1000 ms (IQR {y1:.4f}-{y3:.4f}), reference (kernel 8, block 128) "
            f"0.1008 ms (IQR {r1:.4f}-{r3:.4f}): not resolved") in line
    assert line.startswith("time at B=4 T=1024 (median of 20, interleaved with the reference")


def test_speed_verdict_outside_the_noise_is_a_ratio_with_its_range():
    ref = fake_timing(0.100)
    faster, slower = fake_timing(0.080), fake_timing(0.125)
    ratio, low, high = bench.speedup(ref, faster)             # ref / yours: > 1 is faster
    assert timing.verdict(faster, ref) == f"{ratio:.2f}x faster (range {low:.2f}-{high:.2f}x)"
    assert timing.verdict(faster, ref).startswith("1.25x faster (range 1.2")
    assert timing.verdict(slower, ref).startswith("1.25x slower (range 1.2")
    line = timing.describe_time("the solution", slower, ref, "kernel 7, block 256", "B=4")
    assert line.endswith("the solution 0.1250 ms, reference (kernel 7, block 256) 0.1000 ms: "
                         + timing.verdict(slower, ref))
    summary = timing.timing_summary(slower, ref, "kernel 7, block 256", "B=4")
    assert summary["ratio"] == pytest.approx(1.25) and summary["verdict"].startswith("1.25x slower")
    assert summary["yours_iqr_ms"] == slower.quartiles_ms


def test_the_reference_of_exercises_4_and_5_is_kernel_8_at_its_best_block_size():
    for key, kernel in (("e4_tune_kernel8", 8), ("e5_beat_kernel", 8), ("e3_kernel7_from_jacobian", 7)):
        cfg, _ = spec.configure(ex.EXERCISES[key], {})
        ref = exercise_cases.cases(ex.EXERCISES[key], cfg, timing=False)[0].reference
        assert ref["softmax_backward"] == kernel
        assert ref["block_size"] == (256 if key.startswith("e3") else "best")
    cfg, _ = spec.configure(ex.EXERCISES["e5_beat_kernel"], {"beat": 6})
    assert exercise_cases.cases(ex.EXERCISES["e5_beat_kernel"], cfg, timing=False)[0] \
        .reference["softmax_backward"] == 6
    # the committed results: kernel 8's best block size on the H200, at the default shape
    from attnlab import report
    committed = timing.committed_best(8)
    data = report.load("kernels")
    assert committed == dict(gpu=data["device"]["name"], shape=data["shape"],
                             block_size=data["kernels"]["8"]["block_size"],
                             source="results/h200/kernels.json")


def test_best_block_size_comes_from_the_committed_results_only_on_their_gpu_and_shape():
    ref = timing.backward_reference(8)
    ref["committed"] = dict(gpu="NVIDIA H200", shape=dict(DEFAULT), block_size=128,
                            source="results/h200/kernels.json")
    swept = []

    def sweep(sizes):
        swept.append(list(sizes))
        return {bs: fake_timing(0.1 if bs != 64 else 0.05) for bs in sizes}
    assert timing.choose_block_size(ref, dict(DEFAULT), "NVIDIA H200", sweep) == (
        128, "its best on the NVIDIA H200 in results/h200/kernels.json")
    assert swept == []
    bs, how = timing.choose_block_size(ref, dict(DEFAULT), "NVIDIA A100-SXM4-80GB", sweep)
    assert (bs, how) == (64, "the fastest on this GPU of block sizes 32-1024, swept now")
    assert swept == [[32, 64, 128, 256, 512, 1024]]
    bs, _ = timing.choose_block_size(ref, dict(SMALL), "NVIDIA H200", sweep)     # another shape
    assert bs == 64 and len(swept) == 2
    fixed = timing.backward_reference(7, block_size=256)
    assert timing.choose_block_size(fixed, dict(DEFAULT), "NVIDIA H200", sweep) == (256, None)
    launch = timing.reference_launch(ref, dict(DEFAULT), 128)
    assert launch["kernel"] == "softmax_backward8" and launch["defines"] == {"BLOCK_SIZE": 128}
    assert launch["grid"] == (1024 // 4, 4 * 12, 1) and launch["block"] == (128, 1, 1)
    assert launch["label"] == "kernel 8, block 128"
    assert timing.reference_launch(ref, dict(DEFAULT), 64, "how")["label"] == \
        "kernel 8 at block size 64, how"


def test_input_files_of_dead_processes_are_removed(monkeypatch, tmp_path):
    import subprocess
    import sys
    monkeypatch.setattr(jobs.tempfile, "gettempdir", lambda: str(tmp_path))
    monkeypatch.setattr(jobs, "_inputs", None)
    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait()
    stale = tmp_path / f"{jobs.INPUTS_PREFIX}{gone.pid}-abc123"
    stale.mkdir()
    (stale / "old.npy").write_bytes(b"x")
    mine = jobs.shared_dir()
    assert mine.parent == tmp_path and mine.is_dir()
    assert mine.name.startswith(f"{jobs.INPUTS_PREFIX}{__import__('os').getpid()}-")
    assert not stale.exists()
    a = np.ones((2, 3), np.float32)
    assert jobs.save_array(a) == jobs.save_array(a)        # written once
    monkeypatch.setattr(jobs, "_inputs", None)              # (the next test gets a fresh one)


def child_report(tmp_path, case, runs, times=None):
    """What the child writes to result.json after the small case (``runs``: the dpreatt of
    each run) and, with ``times``, after the timing case."""
    paths = []
    for i, out in enumerate(runs):
        paths.append(str(tmp_path / f"out-0-dpreatt-{i}.npy"))
        np.save(paths[-1], out)
    small = dict(label=case.label, outputs={"dpreatt": paths}, guards={}, ok=True,
                 mismatches={"dpreatt": int(ex.mismatch_mask(runs[0], case.expected["dpreatt"],
                                                             1e-3).sum())})
    big = dict(label="B=4 T=1024 C=768 NH=12", outputs={}, guards={}, mismatches={"dpreatt": 0},
               ok=True, times=times, time_ms=float(np.median(times["yours"])),
               reference_ms=float(np.median(times["reference"])),
               reference_label="kernel 8 at block size 128, its best on the NVIDIA H200 in "
                               "results/h200/kernels.json") if times else None
    return dict(phase="done", done=True, error=None, variants=[
        dict(label="block_size=256, t_per_block=4", compile_error=None,
             cases=[small] + ([big] if big else []))])


def judged(tmp_path, result=None, timed=True, outcome=None, **kw):
    """The verdict on a child's report (or a whole ChildOutcome) for exercise 4's cases."""
    from dataclasses import replace

    from attnlab.exercises.judge import Attempt, judge
    e = ex.EXERCISES["e4_tune_kernel8"]
    cfg, defines = spec.configure(e, {})
    small = exercise_cases.cases(e, cfg, timing=False)[0]
    cases = [small, replace(small, label="B=4 T=1024 C=768 NH=12")][:2 if timed else 1]
    outcome = outcome or jobs.ChildOutcome(result, False, 0, "", "", 1.0, tmp_path, ["python"])
    attempt = Attempt(e, "kernel source", cases=cases, outcome=outcome, sanitize=False,
                      quiet=True, variants=[dict(label="", defines=defines, grids=[], blocks=[])],
                      **kw)
    return judge(attempt)


def test_the_verdict_reads_the_childs_report_and_times(tmp_path):
    e4 = ex.EXERCISES["e4_tune_kernel8"]
    small = exercise_cases.cases(e4, spec.configure(e4, {})[0], timing=False)[0]
    right = small.expected["dpreatt"]
    same = list(np.linspace(0.099, 0.101, 20))
    r = judged(tmp_path, child_report(tmp_path, small, [right] * 3,
                                      dict(yours=same, reference=same)))
    assert r.ok and r.kind == "ok" and r.timing["verdict"] == "not resolved"
    assert "dpreatt: right at B=2 T=260 C=192 NH=3: every element within 0.001" in r.message
    assert "the same in 3 runs" in r.message and "right at B=4 T=1024 C=768 NH=12 too" in r.message
    assert ("reference (kernel 8 at block size 128, its best on the NVIDIA H200 in "
            "results/h200/kernels.json) 0.1000 ms (IQR 0.0995-0.1005): not resolved") in r.message
    faster = [t * 0.8 for t in same]
    r = judged(tmp_path, child_report(tmp_path, small, [right] * 3,
                                      dict(yours=faster, reference=same)))
    assert r.timing["verdict"].startswith("1.25x faster (range 1.2")
    assert r.timing["ratio"] == pytest.approx(0.8)
    other = right.copy()
    other[0, 0, 5, 3] += 0.5                               # run 2 differs from run 1
    with pytest.raises(ex.ExerciseFailed) as e:
        judged(tmp_path, child_report(tmp_path, small, [right, other, right]), timed=False)
    assert e.value.result.kind == "race" and "differ between run 1 and run 2" in str(e.value)
    r = judged(tmp_path, child_report(tmp_path, small, [other] * 3), timed=False, raises=False)
    assert r.kind == "wrong" and "dpreatt: 1 of 405600 elements wrong" in r.message


def test_a_child_that_hangs_is_stopped_and_said_to(tmp_path):
    import sys
    hang = [sys.executable, "-c", "import time; time.sleep(60)"]     # before the child's args
    outcome = jobs.run_job({"x": 1}, 1, tmp_path, prefix=hang)
    assert outcome.timed_out and outcome.seconds < 30 and outcome.result == {}
    with pytest.raises(ex.ExerciseFailed) as e:
        judged(tmp_path, outcome=outcome, timed=False, timeout=1)
    assert e.value.result.kind == "timeout"
    assert "the check did not finish in 1 s, while starting (before your kernel ran)" in \
        str(e.value)


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
    assert re.search(r"interleaved with the reference.*reference \(.*\) \d+\.\d{4} ms"
                     r"( \(IQR \d+\.\d{4}-\d+\.\d{4}\))?: "
                     r"(\d+\.\d\dx (slower|faster) \(range \d+\.\d\d-\d+\.\d\dx\)|not resolved)",
                     r.message), r.message
    assert r.timing["verdict"] in r.message
    if key in ("e4_tune_kernel8", "e5_beat_kernel"):      # kernel 8 at its best block size
        assert re.search(r"reference \(kernel 8 at block size \d+, (its best on the NVIDIA H200 "
                         r"in results/h200/kernels.json|the fastest on this GPU)", r.message), r.message


@gpu
def test_solution_switch_on_a_gpu(monkeypatch, capsys):
    monkeypatch.setenv(ex.SOLUTIONS_ENV, "1")
    r = ex.check_kernel7("this is not even CUDA", timing=False)
    assert r.ok and r.solution
    assert "checking the reference solution" in capsys.readouterr().out


# (planted case, exercise options, kind, phrases the message must contain)
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
    ("e2_no_max.cu", {}, "wrong", ["exp overflows: without the row's maximum m",
                                   "NaN that your kernel computed"]),
    ("e2_max_from_0.cu", {}, "wrong", ["your maximum starts at 0"]),
    ("e2_writes_above_diagonal.cu", {}, "wrong",
     ["(b=0, h=0, t=0, t2=1): expected left alone, got 0",
      "all the wrong elements are above the diagonal (t2 > t), which your kernel must leave alone"]),
    ("e3_writes_above_diagonal.cu", {}, "wrong",
     ["(b=0, h=0, t=0, t2=1): expected left alone, got 0",
      "all the wrong elements are above the diagonal (t2 > t), which your kernel must leave alone"]),
    ("e3_missing_scale.cu", {}, "wrong",
     ["8 times too large: the scale is missing"]),
    ("e3_missing_mask.cu", {}, "wrong",
     ["above the diagonal (t2 > t), which your kernel must leave alone", "causal mask"]),
    ("e3_race.cu", {}, "race",
     ["results differ between run 1 and run", "a race", "__syncthreads()"]),
    ("e4_rows_not_written.cu", {"t_per_block": 4}, "wrong",
     ["were never written", "whole rows, the same in every (b, h): t = 0..255"]),
]


@gpu
@pytest.mark.parametrize("name, options, kind, phrases", PLANTED_CASES,
                         ids=[c[0] for c in PLANTED_CASES])
def test_planted_kernel_fails_with_the_right_message(name, options, kind, phrases):
    key = BUGS[name][0]
    with pytest.raises(ex.ExerciseFailed) as e:
        ex.check(key, planted(name), timing=False, sanitize=False, **options)
    msg = str(e.value)
    assert e.value.result.kind == kind, msg
    for phrase in phrases:
        assert phrase in msg, f"{phrase!r} not in:\n{msg}"


@gpu
@pytest.mark.parametrize("key", sorted(CHECKERS))
def test_the_notebooks_wrong_kernel_fails_without_raising_even_with_the_switch(
        key, monkeypatch, capsys):
    monkeypatch.setenv(ex.SOLUTIONS_ENV, "1")          # as in the notebooks' nbval run
    ns = {"ex": ex}
    exec(checker_section(key).source, ns)              # the cell asserts the kind itself
    out = capsys.readouterr().out
    assert out.startswith(f"{ex.EXERCISES[key].title}: WRONG RESULT"), out
    assert "checking the reference solution" not in out
    for phrase in WRONG_KERNEL_SAYS[key]:
        assert phrase in out, f"{phrase!r} not in:\n{out}"


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
def test_sweep_of_kernel8(capsys):
    table = ex.sweep_kernel8(ex.solution_source("e4_tune_kernel8"), block_sizes=(128, 256),
                             t_per_blocks=(1, 8))
    out = capsys.readouterr().out
    assert re.search(r"^reference \(kernel 8 at block size \d+, (its best|the fastest) on .*; "
                     r"4 rows per block\): \d+\.\d{4} ms \(IQR", out, re.M), out
    assert re.search(r"^fastest: block_size=\d+, t_per_block=\d+: \d+\.\d{4} ms, "
                     r"(not resolved against the reference|\d+\.\d\dx (faster|slower) \(range)", out, re.M), out
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


# ------------------------------------------------- what the checkers must not let through (#24)

def solution_softmax_float32(x, scale):
    """The reference solution's arithmetic (notebooks/exercises/solutions/e2_softmax_forward.cu)
    in float32: max over t2 <= t from -FLT_MAX, expf(scale * (x - max)), the sum, times 1/sum."""
    T = x.shape[-1]
    lower = np.tril(np.ones((T, T), bool))
    m = np.where(lower, x, np.float32(-3.4028235e38)).max(-1, keepdims=True)
    with np.errstate(over="ignore"):                    # above the diagonal: discarded
        e = np.where(lower, np.exp(np.float32(scale) * (x - m), dtype=np.float32), np.float32(0))
    return (e * (np.float32(1) / e.sum(-1, keepdims=True, dtype=np.float32))).astype(np.float32)


def test_exercise_2_checks_logits_as_large_as_real_ones():
    """At the validation shape, exp(scale * x) overflows to inf on every even row and
    underflows to 0 on every odd row (so a softmax without the max, or with the max started
    at 0, gives NaN), while the solution's float32 arithmetic stays within the tolerance."""
    x = mistakes.realistic_preatt(SMALL)
    scale = mistakes.head_scale(SMALL)
    T = SMALL["T"]
    lower = np.tril(np.ones((T, T), bool))
    assert x.dtype == np.float32 and (x[..., ~lower] == mistakes.PREATT_JUNK).all()
    with np.errstate(over="ignore"):
        e = np.exp(np.float32(scale) * x, dtype=np.float32)
    rows = np.where(lower, e, np.nan)
    assert np.isinf(np.nanmax(rows[:, :, 0::2], -1)).all()          # every even row overflows
    assert (np.nanmax(rows[:, :, 1::2], -1) == 0).all()             # every odd row underflows
    expected = mistakes.realistic_att(SMALL)
    got = solution_softmax_float32(x, scale)
    got.view(np.uint32)[..., ~lower] = memory.UNTOUCHED_BITS       # the solution leaves them
    assert not ex.mismatch_mask(got, expected, 1e-3).any()
    assert np.isfinite(got[..., lower]).all()


@pytest.mark.parametrize("mistake, phrase", [
    ("no_scale", "softmax(preatt), not softmax(scale * preatt)"),
    ("divided_by_scale", "you divided by scale instead of multiplying"),
    ("no_max", "exp overflows: without the row's maximum m"),
    ("max_from_0", "your maximum starts at 0"),
    ("no_division", "without the division by their sum"),
    ("writes_0_above", "which your kernel must leave alone"),
])
def test_exercise_2_names_each_usual_mistake(mistake, phrase):
    x = mistakes.realistic_preatt(SMALL)
    scale = mistakes.head_scale(SMALL)
    T = SMALL["T"]
    upper = ~np.tril(np.ones((T, T), bool))
    expected = mistakes.realistic_att(SMALL)
    if mistake == "writes_0_above":
        got = solution_softmax_float32(x, scale)              # right below, 0 written above
    else:
        got = {"no_scale": solution_softmax_float32(x, 1.0),
               "divided_by_scale": solution_softmax_float32(x, 1.0 / scale),
               "no_max": mistakes._float32_softmax(x, scale, None),
               "max_from_0": mistakes._float32_softmax(x, scale, 0.0),
               "no_division": mistakes.softmax_candidates(SMALL)[-1][0]}[mistake].copy()
        got.view(np.uint32)[..., upper] = memory.UNTOUCHED_BITS
    n, lines, hints = ex.describe_mismatch("att", got, expected, AX4, 1e-3, causal=True,
                                           scale=scale,
                                           candidates=mistakes.softmax_candidates(SMALL))
    assert n > 0
    assert any(phrase in h for h in hints), (phrase, hints)
    if mistake == "writes_0_above":
        assert n == int(upper.sum()) * 2 * 3
        assert "(b=0, h=0, t=0, t2=1): expected left alone, got 0" in "\n".join(lines)


def test_causal_outputs_start_with_the_marker_above_the_diagonal_and_must_keep_it():
    shape = (2, 3, 5, 5)
    bits = memory.output_init(shape, "causal").reshape(shape)
    upper = ~np.tril(np.ones((5, 5), bool))
    assert (bits[..., upper] == memory.UNTOUCHED_BITS).all()
    assert (bits[..., ~upper] == memory.POISON_BITS).all()
    expected = memory.leave_alone_above_diagonal(np.ones(shape, np.float32))
    got = bits.view(np.float32).copy()
    got[..., ~upper] = 1.0                                    # right, and the marker kept
    assert not ex.mismatch_mask(got, expected, 0.0).any()
    got[0, 0, 1, 3] = 0.0                                     # one write above the diagonal
    assert np.flatnonzero(ex.mismatch_mask(got, expected, 0.0)).tolist() == [8]
