"""Does this machine have what the GPU path needs? One line per piece, and what to do if not.

``python -m attnlab env`` and the first cell of notebook 00 call ``report()``. The pieces, in
the order they depend on each other: the NVIDIA driver and a GPU (asked through the driver
library itself, so they are reported even without PyCUDA), ``nvcc`` (the kernels are compiled
at run time, for this GPU, by a toolkit the driver can run), PyCUDA, and scikit-cuda with the
cuBLAS that ``attnlab.libraries`` finds for it.
"""
import ctypes
import importlib.metadata
import platform
import re
import shutil
import sys
from dataclasses import dataclass

from . import libraries, processes
from .errors import SetupError

COLAB_GPU = "on Colab: Runtime > Change runtime type > a GPU"
MIN_COMPUTE_CAPABILITY = (7, 5)        # what the series is compiled and checked for (sm_75)


@dataclass
class Check:
    """One piece: its name, whether it is usable, what was found (or why not), what to do."""
    name: str
    ok: bool
    found: str
    fix: str = ""


def _driver():
    """(the driver library, its CUDA version as (major, minor)), or (None, why not)."""
    try:
        lib = ctypes.CDLL(libraries.DRIVER)
    except OSError as e:
        return None, str(e)
    v = ctypes.c_int()
    if lib.cuDriverGetVersion(ctypes.byref(v)) != 0:
        return None, "cuDriverGetVersion failed"
    return lib, (v.value // 1000, v.value % 1000 // 10)


def _gpu(lib):
    """(name, (major, minor)) of GPU 0 through the driver, or (None, why not)."""
    count = ctypes.c_int()
    status = lib.cuInit(0)
    if status != 0:
        return None, f"cuInit failed with CUDA error {status} (is a GPU visible? try nvidia-smi)"
    if lib.cuDeviceGetCount(ctypes.byref(count)) != 0 or count.value == 0:
        return None, "the driver reports no GPU"
    name = ctypes.create_string_buffer(256)
    major, minor = ctypes.c_int(), ctypes.c_int()
    lib.cuDeviceGetName(name, 256, 0)
    lib.cuDeviceGetAttribute(ctypes.byref(major), 75, 0)   # CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR
    lib.cuDeviceGetAttribute(ctypes.byref(minor), 76, 0)   # ..._MINOR
    return name.value.decode(), (major.value, minor.value)


def _run(cmd):
    """What ``cmd`` printed within 60 s ("" if it cannot be started or took longer)."""
    try:
        finished = processes.run(cmd, 60)
    except OSError:
        return ""
    return "" if finished.timed_out else finished.stdout


def _version(package):
    try:
        return importlib.metadata.version(package)
    except importlib.metadata.PackageNotFoundError:
        return "?"


def driver_and_gpu():
    """The checks of the driver and of GPU 0; also returns (driver CUDA version, compute
    capability), None for what is missing."""
    lib, driver = _driver()
    if lib is None:
        return [Check("NVIDIA driver", False, f"{libraries.DRIVER} does not load ({driver})",
                      f"install the NVIDIA driver ({COLAB_GPU})"),
                Check("GPU", False, "no driver to ask", f"a machine with an NVIDIA GPU ({COLAB_GPU})")
                ], None, None
    checks = [Check("NVIDIA driver", True, f"supports CUDA {driver[0]}.{driver[1]} ({libraries.DRIVER})")]
    name, cc = _gpu(lib)
    if name is None:
        checks.append(Check("GPU", False, cc, f"a machine with an NVIDIA GPU ({COLAB_GPU})"))
        return checks, driver, None
    ok = cc >= MIN_COMPUTE_CAPABILITY
    checks.append(Check("GPU", ok, f"GPU 0: {name}, compute capability {cc[0]}.{cc[1]} "
                                   f"(sm_{cc[0]}{cc[1]})",
                        "" if ok else "attnlab's kernels are built for compute capability 7.5 "
                                      "and newer (T4, RTX 20xx and later)"))
    return checks, driver, cc


def nvcc(driver, cc):
    """The check of nvcc: on PATH, not newer than the driver, able to build for this GPU."""
    path = shutil.which("nvcc")
    fix = ("install the CUDA toolkit and put its bin/ on PATH (e.g. export "
           "PATH=/usr/local/cuda/bin:$PATH)")
    if path is None:
        return Check("nvcc", False, "not on PATH: the kernels are compiled at run time", fix)
    m = re.search(r"release (\d+)\.(\d+)", _run([path, "--version"]))
    if not m:
        return Check("nvcc", False, f"{path} printed no version", fix)
    release = (int(m.group(1)), int(m.group(2)))
    found = f"CUDA {release[0]}.{release[1]} at {path}"
    if driver and release > driver:
        return Check("nvcc", False, f"{found}, newer than the driver's CUDA {driver[0]}.{driver[1]}",
                     f"use a CUDA toolkit no newer than {driver[0]}.{driver[1]}, or update the "
                     f"driver: code it compiles may not load")
    if cc and f"compute_{cc[0]}{cc[1]}" not in _run([path, "--list-gpu-arch"]).split():
        return Check("nvcc", False, f"{found} cannot build for sm_{cc[0]}{cc[1]}",
                     "install a CUDA toolkit that supports this GPU")
    return Check("nvcc", True, found + (f", builds for sm_{cc[0]}{cc[1]}" if cc else ""))


def pycuda():
    """The check of PyCUDA: importable (it needs the driver library to import)."""
    try:
        import pycuda.driver  # noqa: F401
    except ImportError as e:
        return Check("PyCUDA", False, f"not importable ({e})",
                     "pip install pycuda (it builds against the CUDA toolkit: nvcc on PATH), "
                     "or pip install 'attnlab[gpu]'")
    return Check("PyCUDA", True, f"PyCUDA {_version('pycuda')}")


def cublas():
    """The check of cuBLAS: the file that attnlab.libraries finds for scikit-cuda."""
    try:
        return Check("cuBLAS", True, libraries.find_library("cublas"))
    except SetupError as e:
        return Check("cuBLAS", False, "no libcublas found", str(e))


def scikit_cuda(load):
    """The check of scikit-cuda: installed (with the pkg_resources it imports), and, with
    ``load`` (every piece above is there), loaded with its cuBLAS."""
    missing = libraries.skcuda_not_installed()
    if missing:
        found = ("not installed" if missing[0] == "skcuda" else
                 f"scikit-cuda {_version('scikit-cuda')} is installed, but not pkg_resources")
        return Check("scikit-cuda", False, found, missing[1])
    if not load:
        return Check("scikit-cuda", True, f"scikit-cuda {_version('scikit-cuda')} installed "
                                          f"(not loaded: the pieces above are missing)")
    try:
        skcuda = libraries.import_skcuda_cublas()
    except SetupError as e:
        return Check("scikit-cuda", False, "does not load with the cuBLAS above", str(e))
    return Check("scikit-cuda", True, f"scikit-cuda {_version('scikit-cuda')} with cuBLAS "
                                      f"{skcuda._cublas_version}")


def checks():
    """Every piece, as a list of Check."""
    result = [Check("Python", True, f"Python {platform.python_version()} ({sys.executable})")]
    gpu_checks, driver, cc = driver_and_gpu()
    result += gpu_checks
    result.append(nvcc(driver, cc))
    result.append(pycuda())
    result.append(cublas())
    result.append(scikit_cuda(all(c.ok for c in result)))
    return result


def report(file=None):
    """Print one line per piece (and what to do for each missing one); True when all are there."""
    file = file or sys.stdout
    found = checks()
    for c in found:
        print(f"{'ok' if c.ok else 'MISSING':8} {c.name}: {c.found}", file=file)
        if not c.ok:
            fix = c.fix.replace("\n", "\n" + " " * 21)
            print(f"{'':8} what to do: {fix}", file=file)
    ok = all(c.ok for c in found)
    print("everything the GPU path needs is here" if ok else
          "the GPU path cannot run until the pieces marked MISSING are there", file=file)
    return ok
