"""The environment check (python -m attnlab env, notebook 00's first cell) on a machine where
every piece is missing: one MISSING line per piece, each with what to do (no GPU needed)."""
import importlib.machinery
import io
import sys
import types

import pytest

from attnlab import environment, libraries
from attnlab.cli import main


@pytest.fixture
def nothing(monkeypatch, tmp_path):
    """No driver, no nvcc, no PyCUDA, no cuBLAS anywhere."""
    monkeypatch.setattr(libraries, "DRIVER", "libcuda-not-here.so.1")
    monkeypatch.setenv("PATH", str(tmp_path))
    for var in ("CUDA_HOME", "CUDA_PATH"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setattr(libraries, "DEFAULT_CUDA_ROOT", str(tmp_path / "no-cuda"))
    monkeypatch.setattr(libraries, "_loadable", lambda name: False)
    monkeypatch.setattr(sys, "path", [p for p in sys.path if "nvidia" not in p])
    monkeypatch.setitem(sys.modules, "pycuda", None)
    monkeypatch.setitem(sys.modules, "pycuda.driver", None)
    monkeypatch.setitem(sys.modules, "skcuda", None)


def installed(monkeypatch, name):
    """``name`` is found by importlib.util.find_spec (as if installed), without being imported."""
    module = types.ModuleType(name)
    module.__spec__ = importlib.machinery.ModuleSpec(name, None)
    monkeypatch.setitem(sys.modules, name, module)


def test_everything_missing_says_what_to_do_for_each_piece(nothing):
    out = io.StringIO()
    assert environment.report(out) is False
    text = out.getvalue()
    missing = {line.split(":")[0].split(None, 1)[1] for line in text.splitlines()
               if line.startswith("MISSING")}
    assert missing == {"NVIDIA driver", "GPU", "nvcc", "PyCUDA", "cuBLAS", "scikit-cuda"}, text
    assert text.count("what to do:") == 6
    assert "install the NVIDIA driver" in text
    assert "install the CUDA toolkit and put its bin/ on PATH" in text
    assert "pip install pycuda" in text
    assert "Looked for libcublas.so, libcublas.so.13, libcublas.so.12" in text
    assert "MISSING  scikit-cuda: not installed\n" in text
    assert "what to do: scikit-cuda is not installed: pip install 'attnlab[gpu]'" in text
    assert text.splitlines()[0].startswith("ok       Python: Python 3.")
    assert text.rstrip().endswith("cannot run until the pieces marked MISSING are there")


def test_the_cli_exits_2_when_a_piece_is_missing(nothing, capsys):
    assert main(["env"]) == 2
    assert "MISSING  nvcc" in capsys.readouterr().out


def test_an_nvcc_newer_than_the_driver_is_refused(monkeypatch):
    monkeypatch.setattr(environment.shutil, "which", lambda name: "/opt/cuda/bin/nvcc")
    monkeypatch.setattr(environment, "_run", lambda cmd: "Cuda compilation tools, release 13.0, V13.0.88")
    check = environment.nvcc(driver=(12, 4), cc=None)
    assert not check.ok
    assert "newer than the driver's CUDA 12.4" in check.found
    assert "no newer than 12.4" in check.fix


def test_an_nvcc_that_cannot_build_for_the_gpu_is_refused(monkeypatch):
    monkeypatch.setattr(environment.shutil, "which", lambda name: "/opt/cuda/bin/nvcc")
    outputs = {"--version": "release 13.0, V13.0.88", "--list-gpu-arch": "compute_75\ncompute_80\n"}
    monkeypatch.setattr(environment, "_run", lambda cmd: outputs[cmd[1]])
    assert environment.nvcc(driver=(13, 0), cc=(7, 5)).ok
    check = environment.nvcc(driver=(13, 0), cc=(6, 1))
    assert not check.ok and "cannot build for sm_61" in check.found


def test_scikit_cuda_has_its_line_without_a_gpu(nothing, monkeypatch):
    """Installed but not loadable here (no GPU): still one line, ok, saying it was not loaded."""
    installed(monkeypatch, "skcuda")
    installed(monkeypatch, "pkg_resources")
    out = io.StringIO()
    environment.report(out)
    lines = [ln for ln in out.getvalue().splitlines() if "scikit-cuda:" in ln]
    assert len(lines) == 1 and lines[0].startswith("ok       scikit-cuda: scikit-cuda "), lines
    assert lines[0].endswith("installed (not loaded: the pieces above are missing)")


def test_scikit_cuda_without_pkg_resources_is_missing(nothing, monkeypatch):
    installed(monkeypatch, "skcuda")
    monkeypatch.setitem(sys.modules, "pkg_resources", None)
    check = environment.scikit_cuda(load=False)
    assert not check.ok and check.found.endswith("is installed, but not pkg_resources")
    assert "pip install 'setuptools<82'" in check.fix
