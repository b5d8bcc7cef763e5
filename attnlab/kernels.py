"""Finding, compiling and caching the CUDA sources in ``kernels/``.

The sources live in ``kernels/`` at the top of the repository; an installed attnlab (a wheel,
``pip install .``) carries them as ``attnlab/cuda/`` (pyproject.toml maps the one onto the
other), so they are found from any working directory.

Each ``kernels/NAME.cu`` is compiled at run time by PyCUDA's ``SourceModule`` with
``-O3 --use_fast_math`` for the device's own architecture, once per process for each
set of ``-D`` defines (kernels 6–8 take their block size as ``-DBLOCK_SIZE=N``, a
compile-time constant). The sources mark their kernels ``extern "C"`` themselves
(``no_extern_c=True``), so they can include ``cooperative_groups.h``.

A ``#line`` directive makes nvcc name the real file in its messages, so a compile
error points at ``kernels/NAME.cu`` and the line as you see it in your editor.
"""
import functools
import os
import re
import shutil
import subprocess
import tempfile
from pathlib import Path

from .errors import InputError, KernelCompileError, NvccNotFoundError



def _kernel_dir():
    """$ATTNLAB_KERNELS, else attnlab/cuda/ of an installed package, else the checkout's kernels/."""
    if os.environ.get("ATTNLAB_KERNELS"):
        return Path(os.environ["ATTNLAB_KERNELS"])
    package = Path(__file__).resolve().parent
    installed = package / "cuda"
    return installed if installed.is_dir() else package.parent / "kernels"


KERNEL_DIR = _kernel_dir()
NVCC_OPTIONS = ("-O3", "--use_fast_math")
# Sources that use instructions of one architecture only (wgmma: sm_90a), compiled for the
# device's architecture-specific target, which runs on that architecture and no other.
ARCH_SPECIFIC = ("wgmma_check", "flash_attention12", "flash_attention13", "flash_attention14",
                 "flash_attention15", "flash_attention16",
                 "flash_attention17", "flash_attention18", "flash_attention19",
                 "flash_attention20", "flash_attention21", "flash_attention22",
                 "flash_attention23", "flash_attention24", "flash_attention25",
                 "flash_attention26", "flash_attention27", "flash_attention28",
                 "flash_attention29")


def kernel_path(name):
    """The path of kernels/NAME.cu, or an InputError listing the ones there are."""
    path = KERNEL_DIR / f"{name}.cu"
    if not path.is_file():
        have = sorted(p.stem for p in KERNEL_DIR.glob("*.cu"))
        raise InputError(f"no kernel source {path} (name={name!r}); sources in {KERNEL_DIR}: {have}")
    return path


def kernel_source(name):
    """The text of kernels/NAME.cu, e.g. to show it in a notebook."""
    return kernel_path(name).read_text()


def require_nvcc():
    """The path of nvcc, or NvccNotFoundError."""
    nvcc = shutil.which("nvcc")
    if nvcc is None:
        raise NvccNotFoundError("nvcc is not on PATH: the kernels are compiled at run time; "
                                "install the CUDA toolkit and add its bin/ to PATH (PATH is "
                                f"{os.environ.get('PATH', '')!r})")
    return nvcc


def nvcc_options(defines=(), options=()):
    """nvcc's options for a source: ours, the -D defines (sorted), then any extra options.

    Every compile goes through this, so PyCUDA's disk cache sees the same options for
    the same source (e.g. the exercises compile variants ahead, in threads).
    """
    return (list(NVCC_OPTIONS) + [f"-D{k}={v}" for k, v in sorted(_defines(defines).items())]
            + list(options))


def _defines(defines):
    """defines as a dict {NAME: value}; a dict or (name, value) pairs are accepted."""
    try:
        d = dict(defines)
    except (TypeError, ValueError):
        raise InputError(f"defines must be a dict or (name, value) pairs, e.g. "
                         f"{{'BLOCK_SIZE': 256}}, got {defines!r}") from None
    for k in d:
        if not isinstance(k, str) or not re.fullmatch(r"[A-Za-z_]\w*", k):
            raise InputError(f"defines: each name must be a C identifier, got {k!r} in {defines!r}")
    return d


def with_line(source, filename):
    return f'#line 1 "{filename}"\n{source}'


def _check_source(source, filename, defines=()):
    """source must be CUDA C text, filename a name for it, defines a dict (checked before any
    CUDA call)."""
    _defines(defines)
    if not isinstance(source, str):
        raise InputError(f"source must be a str of CUDA C, got {type(source).__name__} "
                         f"{str(source)[:60]!r}")
    if not isinstance(filename, (str, os.PathLike)):
        raise InputError(f"filename must be a str (the name nvcc's messages use), got "
                         f"{type(filename).__name__} {filename!r}")


_KERNEL_DECL = re.compile(r'extern\s+"C"\s+__global__\s+void\s+'
                          r'(?:__launch_bounds__\s*\([^)]*\)\s*)?(\w+)\s*\(')


def kernel_names(source):
    """The names of the ``extern "C" __global__`` kernels declared in CUDA source text."""
    return _KERNEL_DECL.findall(source)


def compile_source(source, filename="kernel.cu", defines=(), options=(), specific=False):
    """Compile CUDA source with SourceModule for this GPU; return the module.

    ``options`` are extra nvcc options (e.g. ``["-lineinfo"]`` for compute-sanitizer);
    ``specific``: for the architecture-specific target (sm_90a on sm_90).
    Compile errors raise KernelCompileError with nvcc's message, lines numbered as
    in ``source`` and the file called ``filename``.
    """
    return _compile(source, filename, defines, options, specific, cubin_only=False)


def _compile(source, filename, defines, options, specific, cubin_only):
    """compile_source's work: a SourceModule, or (cubin_only) the bytes of the cubin it would load
    (PyCUDA's compile, with the same arguments: the same disk cache entry)."""
    _check_source(source, filename, defines)
    from .device import arch, context
    context()
    require_nvcc()
    from pycuda.compiler import SourceModule, compile as nvcc_compile
    from pycuda.driver import CompileError
    try:
        return (nvcc_compile if cubin_only else SourceModule)(
            with_line(source, filename), options=nvcc_options(defines, options), no_extern_c=True,
            arch=arch() + ("a" if specific else ""), include_dirs=[str(KERNEL_DIR)])
    except CompileError as e:
        raise KernelCompileError(format_nvcc_error(filename, e.stderr or str(e))) from None


@functools.lru_cache(maxsize=None)
def _module(name, defines):
    path = kernel_path(name)
    return compile_source(path.read_text(), str(path), defines, specific=name in ARCH_SPECIFIC)


def load(name, **defines):
    """The compiled module of kernels/NAME.cu (cached per process and defines)."""
    return _module(name, tuple(sorted(defines.items())))


@functools.lru_cache(maxsize=None)
def _cubin(name, defines):
    path = kernel_path(name)
    return _compile(path.read_text(), str(path), defines, (), name in ARCH_SPECIFIC, cubin_only=True)


def cubin(name, **defines):
    """The cubin (bytes) of kernels/NAME.cu as load() compiles it, for a launch PyCUDA cannot make
    (attnlab.pdl)."""
    return _cubin(name, tuple(sorted(defines.items())))


def get_function(name, function, **defines):
    """One kernel (a pycuda Function) from kernels/NAME.cu.

    A name the module does not have raises InputError listing the kernels it has.
    """
    module = load(name, **defines)
    try:
        return module.get_function(function)
    except Exception as e:          # pycuda's LogicError: cuModuleGetFunction, symbol not found
        have = kernel_names(kernel_source(name))
        if function in have:
            raise
        raise InputError(f"function={function!r} is not a kernel of {kernel_path(name)}; its "
                         f"extern \"C\" kernels are {have}") from e


def format_nvcc_error(filename, stderr):
    """nvcc's output cut to the lines that matter: errors and warnings with file(line)."""
    text = stderr.decode() if isinstance(stderr, bytes) else str(stderr)
    keep = [ln for ln in text.splitlines()
            if re.search(r"\(\d+\): (error|warning)|error:|^\s+\S|\^", ln)]
    body = "\n".join(keep) if keep else text.strip()
    return f"nvcc could not compile {filename}:\n{body}"


def nvcc_check(source, filename="kernel.cu", defines=(), arch="sm_90"):
    """Compile CUDA source to a cubin with nvcc, without a GPU; raise KernelCompileError.

    Uses the same options and include path as the GPU path, so what passes here
    compiles there too. Returns nvcc's warnings (text, possibly empty).
    """
    _check_source(source, filename, defines)
    if not isinstance(arch, str) or not re.fullmatch(r"sm_\d{2,3}[af]?", arch):
        raise InputError(f"arch must name a GPU architecture like 'sm_90', got {arch!r}")
    nvcc = require_nvcc()
    with tempfile.TemporaryDirectory() as tmp:
        src = Path(tmp) / "kernel.cu"
        src.write_text(with_line(source, filename))
        cmd = [nvcc, "-cubin", f"-arch={arch}", *nvcc_options(defines), f"-I{KERNEL_DIR}",
               "-o", str(Path(tmp) / "kernel.cubin"), str(src)]
        proc = subprocess.run(cmd, capture_output=True, text=True)
    if proc.returncode != 0:
        raise KernelCompileError(format_nvcc_error(filename, proc.stderr + proc.stdout))
    return proc.stderr
