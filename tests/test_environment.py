"""The environment check (python -m attnlab env, notebook 00's first cell) on a machine where
every piece is missing: one MISSING line per piece, each with what to do (no GPU needed)."""
import io
import sys

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


def test_everything_missing_says_what_to_do_for_each_piece(nothing):
    out = io.StringIO()
    assert environment.report(out) is False
    text = out.getvalue()
    missing = {line.split(":")[0].split(None, 1)[1] for line in text.splitlines()
               if line.startswith("MISSING")}
    assert missing == {"NVIDIA driver", "GPU", "nvcc", "PyCUDA", "cuBLAS"}, text
    assert text.count("what to do:") == 5
    assert "install the NVIDIA driver" in text
    assert "install the CUDA toolkit and put its bin/ on PATH" in text
    assert "pip install pycuda" in text
    assert "Looked for libcublas.so, libcublas.so.13, libcublas.so.12" in text
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
