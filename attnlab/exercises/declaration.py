"""Is the student's kernel declared as the checker launches it? The compiler says.

The source is compiled by nvcc (no GPU needed) with a few lines appended that the compiler
checks: a redeclaration ``extern "C" { __global__ decltype(name) name; }``, which fails
unless ``name`` is one ``extern "C" __global__`` function, and a ``static_assert`` per
argument on the kind of each parameter type of ``decltype(&name)`` (a pointer, a 32-bit
integer, a float, ...: const, ``__restrict__`` and the parameter names do not matter, and
neither do macros or comments). The source text is only read to quote the declaration back
in the message, and to refuse a ``#define`` of what the checker passes with ``-D``.
"""
import functools
import re

from ..errors import KernelCompileError
from .compile_errors import entries, format_compile_error, without_file
from .spec import FILENAME, configure

PROBE_FILE = "attnlab-declaration-check"        # the appended lines' name in nvcc's messages
KIND_CODES = {"ptr": 1, "int": 2, "float": 3, "double": 4, "long": 5, "other": 6}
_WHAT = {"ptr": "a pointer", "int": "an int", "float": "a float", "double": "a double",
         "long": "a 64-bit integer", "other": "neither a pointer, a 32-bit int nor a float"}
MAX_ARITY = 32

_PROBE_HEAD = r"""
namespace attnlab_declaration_check {
template <typename attnlab_T> constexpr int kind() {
    return std::is_pointer<attnlab_T>::value ? 1
         : std::is_integral<attnlab_T>::value && sizeof(attnlab_T) == 4 ? 2
         : std::is_same<attnlab_T, float>::value ? 3
         : std::is_same<attnlab_T, double>::value ? 4
         : std::is_integral<attnlab_T>::value && sizeof(attnlab_T) == 8 ? 5 : 6;
}
template <typename attnlab_F> struct params {
    static constexpr int arity = -1;
    static constexpr int kinds[PAD] = {};
};
template <typename... attnlab_A> struct params<void (*)(attnlab_A...)> {
    static constexpr int arity = sizeof...(attnlab_A);
    static constexpr int kinds[sizeof...(attnlab_A) + PAD] = {kind<attnlab_A>()..., 0};
};
"""


def probe(ex):
    """The lines appended to the student's source: the compiler checks the declaration."""
    fn, want = ex.function, [KIND_CODES[k] for k in ex.kinds]
    n = len(want)
    lines = [f'#line 1 "{PROBE_FILE}"',
             f'extern "C" {{ __global__ decltype({fn}) {fn}; }}',
             _PROBE_HEAD.replace("PAD", str(n + 1)),
             f"using P = params<decltype(&{fn})>;",
             'static_assert(P::arity != -1, "attnlab arity ?");',
             f'static_assert(P::arity <= {MAX_ARITY}, "attnlab arity >{MAX_ARITY}");']
    lines += [f'static_assert(P::arity == {n} || P::arity != {k}, "attnlab arity {k}");'
              for k in range(MAX_ARITY + 1) if k != n]
    lines += [f'static_assert(P::kinds[{i}] != {code}, "attnlab argument {i} {kind}");'
              for i, w in enumerate(want) for kind, code in KIND_CODES.items() if code != w]
    return "\n".join(lines + ["}"]) + "\n"


def strip_comments(src):
    """The source with comments blanked out (newlines kept, so line numbers stay)."""
    def blank(m):
        text = m.group(0)
        return text if text.startswith('"') else re.sub(r"[^\n]", " ", text)
    return re.sub(r'//[^\n]*|/\*.*?\*/|"(?:\\.|[^"\\\n])*"', blank, src, flags=re.S)


def redefined_macro(ex, source):
    """A message when the source #defines a macro the checker passes with -D, unguarded."""
    code = strip_comments(source)
    for name in ex.given_defines:
        if re.search(rf"^\s*#\s*define\s+{name}\b", code, re.M) and \
                not re.search(rf"^\s*#\s*if(ndef\s+{name}\b|\s+!\s*defined)", code, re.M):
            return (f"your source #defines {name}, which the checker passes itself "
                    f"(-D{name}=..., from the check's {name.lower()}= argument): the two could "
                    f"disagree with the launch. Remove the #define (or wrap it in #ifndef {name}).")
    return None


@functools.lru_cache(maxsize=64)
def _compile(source, filename, defines):
    """nvcc's messages (KernelCompileError's text) for the source, or None when it compiles."""
    from .. import kernels
    try:
        kernels.nvcc_check(source, filename, dict(defines))
    except KernelCompileError as e:
        return str(e)
    return None


def _checked_compile(ex, source, filename, defines):
    """(nvcc's messages about the source itself or None, the probe's error messages)."""
    text = _compile(f'#include <type_traits>\n#line 1 "{filename}"\n{source}\n{probe(ex)}',
                    filename, tuple(sorted(dict(defines).items())))
    if text is None:
        return None, []
    found = entries(text)
    probe_errors = [m["msg"] for m, _ in found if m["file"] == PROBE_FILE and m["sev"] == "error"]
    if any(m["sev"] == "error" and m["file"] != PROBE_FILE for m, _ in found) or not probe_errors:
        return without_file(text, PROBE_FILE), probe_errors
    return None, probe_errors


def compile_check(ex, source, filename=FILENAME, defines=(), offset=None):
    """Check the declaration and compile with nvcc (no GPU needed): (kind, message), or None.

    kind is "compile" (nvcc's errors in the student's lines, as in the cell) or "signature"
    (the kernel is not declared as the checker launches it)."""
    problem = redefined_macro(ex, source)
    if problem:
        return "signature", problem
    errors, probe_errors = _checked_compile(ex, source, filename, defines)
    if errors:
        return "compile", format_compile_error(errors, source, filename, offset)
    if probe_errors:
        return "signature", declaration_message(ex, source, probe_errors)
    return None


def check_signature(ex, source, filename=FILENAME, defines=None):
    """What is wrong with the kernel's declaration, as a message, or None when it is right
    (or when the source does not compile for another reason: compile_check says that).
    defines: the -D macros (default: those of the exercise's default launch choices)."""
    if defines is None:
        defines = configure(ex, {})[1]
    problem = compile_check(ex, source, filename, defines)
    return problem[1] if problem and problem[0] == "signature" else None


def declaration_message(ex, source, probe_errors):
    """The student-facing message for the probe's errors (the compiler's findings)."""
    fn = ex.function
    said = "\n".join(probe_errors)
    m = re.search(r"declared at line (\d+)", said)
    line, params = _declaration_text(source, fn, int(m.group(1)) if m else None)
    if f'identifier "{fn}" is undefined' in said:
        names = [n for n in re.findall(r"__global__[^(;{]*?(\w+)\s*\(", strip_comments(source))
                 if n != "__launch_bounds__"]
        have = (f"; the kernels in it are: {', '.join(names)}" if names
                else "; it has no __global__ function at all")
        return (f"your source has no __global__ kernel named {fn}{have}.\n"
                f"The checker launches exactly this one:\n    {ex.call}")
    if "cannot determine which instance" in said:
        return (f"your source has more than one function named {fn} (line {line}): C++ overloads "
                f"or a template. The checker launches exactly one, declared as:\n    {ex.call}")
    space = re.search(r"a (__\w+__) function\(\"\w+\"\) redeclared with __global__", said)
    if space:
        return (f"{fn} (line {line}) is a {space.group(1)} function, not a kernel: the checker "
                f"launches a __global__ function, declared as:\n    {ex.call}")
    if "linkage specification is incompatible" in said:
        return (f"{fn} (line {line}) is not declared extern \"C\": without it C++ changes the "
                f"name the compiled kernel gets (name mangling) and the checker cannot find it. "
                f"Write:\n    {ex.call}")
    why = _argument_problems(ex, said, params)
    if why is None:
        return (f"{fn} (line {line}) is not declared as the checker launches it; nvcc says:\n"
                + "\n".join("    " + e for e in probe_errors) + f"\nWrite:\n    {ex.call}")
    shown = ", ".join(params) if params is not None else "..."
    return (f"{fn} (line {line}) takes ({shown or 'nothing'}): {why}.\nThe checker calls it "
            f"with exactly these arguments, in this order:\n    {ex.call}")


def _argument_problems(ex, said, params):
    """'it takes 6 arguments, the checker passes 7' or the arguments of the wrong kind, from
    the static_asserts that failed; None when none did."""
    want = ex.kinds
    arity = re.search(r'"attnlab arity (\d+)"', said)
    if arity:
        k = int(arity.group(1))
        return f"it takes {k} argument{'s' * (k != 1)}, the checker passes {len(want)}"
    why = []
    for i, kind in re.findall(r'"attnlab argument (\d+) (\w+)"', said):
        i = int(i)
        name = ex.signature[i][0]
        arg = (f"argument '{params[i]}'" if params is not None and len(params) == len(want)
               else f"argument {i + 1}")
        why.append(f"{arg} is {_WHAT[kind]}, the checker passes {_WHAT[want[i]]} ({name})")
    return "; ".join(why) or None


def _declaration_text(source, fn, line=None):
    """(line of the declaration of fn, its parameters as written, or None), read from the text
    only to quote it: at ``line`` when the compiler named it, else where __global__ heads it."""
    code = strip_comments(source)
    found = list(re.finditer(rf"\b{re.escape(fn)}\s*\(", code))
    if not found:
        return line or "?", None

    def line_of(m):
        return code.count("\n", 0, m.start()) + 1

    def is_kernel(m):
        start = max(code.rfind(";", 0, m.start()), code.rfind("}", 0, m.start())) + 1
        return "__global__" in code[start:m.start()]
    m = next((m for m in found if line is not None and line_of(m) == line), None) or \
        next((m for m in found if is_kernel(m)), found[0])
    depth, i = 1, m.end()
    while i < len(code) and depth:
        depth += {"(": 1, ")": -1}.get(code[i], 0)
        i += 1
    params = [" ".join(p.split()) for p in _split_params(code[m.end():i - 1])]
    return line_of(m), [p for p in params if p and p != "void"]


def _split_params(text):
    """Split a parameter list at its top-level commas."""
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
