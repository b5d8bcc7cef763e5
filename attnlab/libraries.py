"""Finding the CUDA libraries scikit-cuda loads, and importing ``skcuda.cublas`` from them.

scikit-cuda 0.5.3 loads its libraries by name with ``ctypes``: ``libcublas.so`` and
``libcudart.so``, then versioned names up to CUDA 10 (never ``.so.12`` or ``.so.13``), and the
driver as ``libcuda.so``. So it misses a toolkit whose ``lib64/`` is not on the loader's path,
CUDA from pip wheels (``nvidia-cublas-cu12`` and CUDA 13's ``nvidia-cublas`` ship only
``libcublas.so.12`` / ``libcublas.so.13``) and a driver installed without its ``libcuda.so``
link. attnlab looks for each library itself, in this order:

1. ``$CUDA_HOME``, then ``$CUDA_PATH`` (a toolkit you chose);
2. the CUDA root that ``nvcc`` on ``PATH`` belongs to (the toolkit that compiles the kernels);
3. ``/usr/local/cuda``;
4. the ``nvidia`` wheels' folders on ``sys.path`` (``nvidia/cu13/lib``, ``nvidia/cublas/lib``...);
5. the dynamic loader's own search (``LD_LIBRARY_PATH``, the ld.so cache);

and, while ``skcuda.cublas`` is imported, hands scikit-cuda's ``ctypes`` loads the files it
found. scikit-cuda's own bindings then run on them: there is no second cuBLAS wrapper.
"""
import contextlib
import ctypes
import importlib.util
import os
import re
import shutil
import subprocess
import sys
import warnings
from pathlib import Path

from .errors import SetupError

# the names each library goes by, newest first; the first one found in a folder is taken
NAMES = {
    "cublas": ("libcublas.so", "libcublas.so.13", "libcublas.so.12"),
    "cudart": ("libcudart.so", "libcudart.so.13", "libcudart.so.12"),
}
WHEEL_FOLDERS = {                      # where pip's nvidia-* wheels put them, under site-packages
    "cublas": ("nvidia/cu13/lib", "nvidia/cublas/lib"),
    "cudart": ("nvidia/cu13/lib", "nvidia/cuda_runtime/lib"),
}
DRIVER = "libcuda.so.1"                # the driver's soname: every driver install has it
DEFAULT_CUDA_ROOT = "/usr/local/cuda"


def cuda_roots():
    """[(where it came from, CUDA root)] in search order: $CUDA_HOME, $CUDA_PATH, nvcc's, the default."""
    roots = [(f"${var}", Path(os.environ[var])) for var in ("CUDA_HOME", "CUDA_PATH")
             if os.environ.get(var)]
    nvcc = shutil.which("nvcc")
    if nvcc:
        roots.append(("nvcc on PATH", nvcc_root(nvcc)))
    roots.append(("default", Path(DEFAULT_CUDA_ROOT)))
    return roots


def nvcc_root(nvcc):
    """The CUDA root of an nvcc: its own TOP (nvcc may be a wrapper script elsewhere), else
    the folder above its bin/."""
    try:
        proc = subprocess.run([nvcc, "-dryrun", "-E", "-x", "cu", os.devnull],
                              capture_output=True, text=True, timeout=30)
        top = re.search(r"^#\$ TOP=(.+)$", proc.stdout + proc.stderr, re.M)
    except (OSError, subprocess.TimeoutExpired):
        top = None
    return Path(top.group(1).strip()).resolve() if top else Path(nvcc).resolve().parent.parent


def search_folders(library):
    """[(where it came from, folder)] to look in for ``library`` ('cublas' or 'cudart')."""
    folders = []
    for origin, root in cuda_roots():
        for sub in ("lib64", "lib", *sorted(str(p.relative_to(root))
                                            for p in root.glob("targets/*/lib"))):
            folders.append((origin, root / sub))
    for entry in sys.path:
        if entry and Path(entry).is_dir():
            folders += [("nvidia wheel", Path(entry) / sub) for sub in WHEEL_FOLDERS[library]]
    seen, unique = set(), []
    for origin, folder in folders:
        if folder.resolve() not in seen:
            seen.add(folder.resolve())
            unique.append((origin, folder))
    return unique


def _loadable(name):
    """True when the dynamic loader finds ``name`` on its own."""
    try:
        ctypes.CDLL(name)
    except OSError:
        return False
    return True


def find_library(library):
    """The file to load for ``library`` ('cublas' or 'cudart'): a path, or a bare name that the
    loader finds itself; SetupError listing every place looked in when there is none."""
    if library not in NAMES:
        raise ValueError(f"library must be one of {sorted(NAMES)}, got {library!r}")
    folders = search_folders(library)
    for _, folder in folders:
        for name in NAMES[library]:
            if (folder / name).is_file():
                return str(folder / name)
    for name in NAMES[library]:
        if _loadable(name):
            return name
    looked = "\n".join(f"  {folder}  ({origin})" for origin, folder in folders)
    raise SetupError(
        f"{NAMES[library][0]} (CUDA's {library}) was not found. Looked for "
        f"{', '.join(NAMES[library])} in:\n{looked}\n  and the dynamic loader's path "
        f"(LD_LIBRARY_PATH, ldconfig).\nInstall the CUDA toolkit (and set CUDA_HOME to its root, "
        f"or put its nvcc on PATH), or pip install nvidia-cublas-cu12 nvidia-cuda-runtime-cu12 "
        f"(CUDA 12) / nvidia-cublas nvidia-cuda-runtime (CUDA 13).")


@contextlib.contextmanager
def _ctypes_loads_redirected(files):
    """While inside, ``ctypes.cdll.LoadLibrary('libNAME.so...')`` loads ``files[NAME]``."""
    loader, original = ctypes.cdll, ctypes.cdll.LoadLibrary

    def load(name):
        for library, file in files.items():
            if str(name).startswith(f"lib{library}.so"):
                return original(file)
        return original(name)

    loader.LoadLibrary = load
    try:
        yield
    finally:
        del loader.LoadLibrary         # the class's own method shows through again


def _load_cublas_lt_beside(cublas):
    """Load cublasLt from cuBLAS's own folder first: libcublas needs it, and the loader would
    look for it on its own path only (the toolkit's lib64/ may not be on it)."""
    folder = Path(cublas).parent
    for name in ("libcublasLt.so", "libcublasLt.so.13", "libcublasLt.so.12"):
        if os.sep in cublas and (folder / name).is_file():
            ctypes.CDLL(str(folder / name))
            return


# What to do when scikit-cuda, or the pkg_resources it imports, is not installed
NOT_INSTALLED = {
    "skcuda": "scikit-cuda is not installed: pip install 'attnlab[gpu]' (or pip install "
              "scikit-cuda 'setuptools<82')",
    "pkg_resources": "scikit-cuda 0.5.3 imports pkg_resources when it loads (skcuda/version.py), "
                     "and this Python has none: setuptools 82 removed it, and Python 3.12+ "
                     "virtual environments start without setuptools. pip install "
                     "'setuptools<82' (pip install 'attnlab[gpu]' asks for it).",
}


def skcuda_not_installed():
    """(module, what to do) for the first of scikit-cuda and its pkg_resources that is not
    installed, or None; found without importing them (scikit-cuda's import loads CUDA)."""
    for module, fix in NOT_INSTALLED.items():
        if importlib.util.find_spec(module) is None:
            return module, fix
    return None


def import_skcuda_cublas():
    """``skcuda.cublas``, loaded from the libraries find_library chose (and the driver's
    soname): SetupError saying what to install when a piece is missing."""
    if "skcuda.cublas" in sys.modules:
        return sys.modules["skcuda.cublas"]
    files = {"cublas": find_library("cublas"), "cudart": find_library("cudart"), "cuda": DRIVER}
    try:
        _load_cublas_lt_beside(files["cublas"])
        with warnings.catch_warnings(), _ctypes_loads_redirected(files):
            warnings.simplefilter("ignore")  # pkg_resources' and escape-sequence warnings
            from skcuda import cublas
    except ModuleNotFoundError as e:
        if e.name in NOT_INSTALLED:
            raise SetupError(NOT_INSTALLED[e.name]) from None
        raise
    except OSError as e:               # a file found above that the loader could not load
        raise SetupError(f"scikit-cuda could not load the CUDA libraries {files}: {e}") from None
    return cublas
