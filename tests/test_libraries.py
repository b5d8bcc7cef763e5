"""Where attnlab finds cuBLAS and the CUDA runtime for scikit-cuda (no GPU needed): a toolkit's
libcublas.so, pip wheels' libcublas.so.12/.13, the order of the search, the error that lists
where it looked, and scikit-cuda's loads redirected to what was found."""
import ctypes
import ctypes.util
import os
import stat
import sys

import pytest

from attnlab import SetupError, libraries


@pytest.fixture
def nowhere(monkeypatch, tmp_path):
    """No CUDA anywhere: no $CUDA_HOME/$CUDA_PATH, no nvcc, an empty default root, nothing
    the loader finds, and sys.path with one empty site folder."""
    for var in ("CUDA_HOME", "CUDA_PATH"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("PATH", str(tmp_path / "no-bin"))
    monkeypatch.setattr(libraries, "DEFAULT_CUDA_ROOT", str(tmp_path / "no-cuda"))
    monkeypatch.setattr(libraries, "_loadable", lambda name: False)
    site = tmp_path / "site"
    site.mkdir()
    monkeypatch.setattr(sys, "path", [str(site)])
    return tmp_path


def touch(path):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(b"")
    return str(path)


def test_a_toolkit_under_cuda_home(nowhere, monkeypatch):
    monkeypatch.setenv("CUDA_HOME", str(nowhere / "cuda-12.4"))
    lib = touch(nowhere / "cuda-12.4" / "lib64" / "libcublas.so")
    assert libraries.find_library("cublas") == lib


def test_a_toolkit_keeps_its_libraries_in_targets(nowhere, monkeypatch):
    monkeypatch.setenv("CUDA_PATH", str(nowhere / "cuda"))
    lib = touch(nowhere / "cuda" / "targets" / "x86_64-linux" / "lib" / "libcudart.so.13")
    assert libraries.find_library("cudart") == lib


@pytest.mark.parametrize("folder, name", [("nvidia/cu13/lib", "libcublas.so.13"),
                                          ("nvidia/cublas/lib", "libcublas.so.12")])
def test_pip_wheels_ship_only_versioned_names(nowhere, folder, name):
    lib = touch(nowhere / "site" / folder / name)
    assert libraries.find_library("cublas") == lib


def test_cuda_home_comes_before_the_wheels(nowhere, monkeypatch):
    touch(nowhere / "site" / "nvidia" / "cu13" / "lib" / "libcublas.so.13")
    monkeypatch.setenv("CUDA_HOME", str(nowhere / "mine"))
    mine = touch(nowhere / "mine" / "lib64" / "libcublas.so")
    assert libraries.find_library("cublas") == mine


def test_the_root_of_nvcc_comes_from_nvcc_itself(nowhere, monkeypatch):
    """nvcc may be a wrapper script outside its toolkit (/usr/local/bin/nvcc): its own TOP counts."""
    toolkit = nowhere / "opt" / "cuda-13.0"
    lib = touch(toolkit / "lib64" / "libcublas.so")
    wrapper = nowhere / "bin" / "nvcc"
    wrapper.parent.mkdir()
    wrapper.write_text(f"#!/bin/sh\necho '#$ TOP={toolkit}/bin/..'\n")
    wrapper.chmod(wrapper.stat().st_mode | stat.S_IEXEC)
    monkeypatch.setenv("PATH", str(wrapper.parent))
    assert ("nvcc on PATH", toolkit) in libraries.cuda_roots()
    assert libraries.find_library("cublas") == lib


def test_the_loaders_own_search_comes_last(nowhere, monkeypatch):
    monkeypatch.setattr(libraries, "_loadable", lambda name: name == "libcublas.so.12")
    assert libraries.find_library("cublas") == "libcublas.so.12"


def test_not_found_lists_where_it_looked(nowhere, monkeypatch):
    monkeypatch.setenv("CUDA_HOME", str(nowhere / "cuda-x"))
    (nowhere / "cuda-x" / "lib64").mkdir(parents=True)
    with pytest.raises(SetupError) as e:
        libraries.find_library("cublas")
    msg = str(e.value)
    for place in (nowhere / "cuda-x" / "lib64", nowhere / "no-cuda" / "lib64",
                  nowhere / "site" / "nvidia" / "cu13" / "lib",
                  nowhere / "site" / "nvidia" / "cublas" / "lib"):
        assert str(place) in msg
    assert "libcublas.so, libcublas.so.13, libcublas.so.12" in msg
    assert "$CUDA_HOME" in msg and "LD_LIBRARY_PATH" in msg and "pip install nvidia-cublas" in msg


def test_scikit_cudas_loads_go_to_the_files_found():
    libm = ctypes.util.find_library("m")
    assert libm, "the C math library, loaded here in place of cuBLAS"
    with libraries._ctypes_loads_redirected({"cublas": libm}):
        assert ctypes.cdll.LoadLibrary("libcublas.so")._name == libm
        assert ctypes.cdll.LoadLibrary("libcublas.so.10.1")._name == libm
        with pytest.raises(OSError):                       # other names load as they would
            ctypes.cdll.LoadLibrary("libcudart-not-here.so")
    assert "LoadLibrary" not in vars(ctypes.cdll)
    with pytest.raises(OSError):
        ctypes.cdll.LoadLibrary("libcublas-not-here.so")


@pytest.fixture
def fake_skcuda(tmp_path, monkeypatch):
    """A stand-in skcuda package on sys.path whose cublas module loads libcublas.so as scikit-cuda
    0.5.3 does; its __init__ runs ``init`` (default: nothing)."""
    def make(init=""):
        pkg = tmp_path / "fake" / "skcuda"
        pkg.mkdir(parents=True)
        (pkg / "__init__.py").write_text(init)
        (pkg / "cublas.py").write_text("import ctypes\n"
                                       "_libcublas = ctypes.cdll.LoadLibrary('libcublas.so')\n")
        monkeypatch.syspath_prepend(str(pkg.parent))
        for name in [m for m in sys.modules if m == "skcuda" or m.startswith("skcuda.")]:
            monkeypatch.delitem(sys.modules, name)
        libm = ctypes.util.find_library("m")
        monkeypatch.setattr(libraries, "find_library", lambda library: libm)
        return libm
    yield make
    for name in [m for m in sys.modules if m == "skcuda" or m.startswith("skcuda.")]:
        del sys.modules[name]


def test_skcuda_cublas_is_imported_from_the_file_found(fake_skcuda):
    libm = fake_skcuda()
    cublas = libraries.import_skcuda_cublas()
    assert cublas._libcublas._name == libm


def test_no_pkg_resources_says_why_and_what_to_install(fake_skcuda, monkeypatch):
    fake_skcuda(init="import pkg_resources\n")
    monkeypatch.setitem(sys.modules, "pkg_resources", None)   # setuptools >= 82, or none
    with pytest.raises(SetupError, match=r"pkg_resources.*setuptools 82.*pip install 'setuptools<82'"):
        libraries.import_skcuda_cublas()


def test_no_scikit_cuda_says_what_to_install(monkeypatch):
    monkeypatch.setattr(libraries, "find_library", lambda library: "libx.so")
    monkeypatch.delitem(sys.modules, "skcuda.cublas", raising=False)
    monkeypatch.setitem(sys.modules, "skcuda", None)
    with pytest.raises(SetupError, match=r"scikit-cuda is not installed: pip install 'attnlab\[gpu\]'"):
        libraries.import_skcuda_cublas()


def test_unknown_library_name():
    with pytest.raises(ValueError, match="library must be one of"):
        libraries.find_library("cufft")


@pytest.mark.skipif(not os.path.isdir("/usr/local/cuda/lib64"), reason="no CUDA toolkit here")
def test_this_machines_cuda_runtime_is_found():
    """The real search on this machine's toolkit (nvcc's root or /usr/local/cuda)."""
    found = libraries.find_library("cudart")
    ctypes.CDLL(found)


WHEEL_LAYOUT_PROBE = r"""
import sys
from pathlib import Path
site = Path(sys.argv[1])
sys.path.insert(0, str(site))
from attnlab import libraries
libraries.cuda_roots = lambda: []          # no toolkit: only the wheel's folder, then the loader
import attnlab
from attnlab import attention
p = attnlab.make_problem(B=1, T=64, C=128, NH=2)
out, _, _ = attention.gpu_forward(p.inp, p.NH)
attnlab.validate(out, p.out, "out")
from skcuda import cublas
print(cublas._libcublas._name)
"""


@pytest.mark.gpu
def test_cublas_from_a_wheels_folder_runs_the_gemms(tmp_path):
    """CUDA from pip wheels: nvidia/cu13/lib holds only libcublas.so.13 and libcublasLt.so.13
    (links to this machine's toolkit files here). scikit-cuda alone finds neither; through
    attnlab it loads them and the forward pass (two GEMMs) validates."""
    import glob
    import subprocess
    real = {}
    for root in {str(r) for _, r in libraries.cuda_roots()}:
        for name in ("libcublas.so.*", "libcublasLt.so.*"):
            for f in sorted(glob.glob(f"{root}/lib64/{name}")):
                real.setdefault(name, f)
    if len(real) < 2:
        pytest.skip(f"no versioned libcublas/libcublasLt in this machine's toolkit: {real}")
    lib = tmp_path / "site" / "nvidia" / "cu13" / "lib"
    lib.mkdir(parents=True)
    major = real["libcublas.so.*"].split(".so.")[1].split(".")[0]
    (lib / f"libcublas.so.{major}").symlink_to(real["libcublas.so.*"])
    (lib / f"libcublasLt.so.{major}").symlink_to(real["libcublasLt.so.*"])
    proc = subprocess.run([sys.executable, "-c", WHEEL_LAYOUT_PROBE, str(tmp_path / "site")],
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip().splitlines()[-1] == str(lib / f"libcublas.so.{major}")
