"""The kernel sources ship inside the package: a built wheel carries every file of kernels/ as
attnlab/cuda/, and an install outside the checkout finds them from any working directory."""
import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from attnlab import kernels

ROOT = Path(__file__).resolve().parent.parent
SOURCES = sorted(p.name for p in (ROOT / "kernels").iterdir() if p.suffix in (".cu", ".cuh"))


@pytest.fixture(scope="module")
def wheel(tmp_path_factory):
    """attnlab's wheel, built from this checkout (no index needed: the [notebooks] extra
    installs setuptools, which builds it)."""
    pytest.importorskip("setuptools", reason="building the wheel needs setuptools "
                                             "(pip install -e '.[notebooks]' installs it)")
    src, out = tmp_path_factory.mktemp("src"), tmp_path_factory.mktemp("wheel")
    for name in ("pyproject.toml", "README.md"):      # a copy: setuptools writes build/ into it
        shutil.copy(ROOT / name, src)
    for name in ("attnlab", "kernels"):
        shutil.copytree(ROOT / name, src / name, ignore=shutil.ignore_patterns("__pycache__"))
    proc = subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps",
                           "--no-build-isolation", "-q", "-w", str(out), str(src)],
                          capture_output=True, text=True, cwd=out)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    (whl,) = out.glob("attnlab-*.whl")
    return whl


def test_the_wheel_carries_every_kernel_source(wheel):
    names = zipfile.ZipFile(wheel).namelist()
    shipped = sorted(n.split("/")[-1] for n in names if n.startswith("attnlab/cuda/"))
    assert shipped == SOURCES
    assert "attnlab/kernels.py" in names


def test_an_install_outside_the_checkout_reads_its_own_sources(wheel, tmp_path):
    site = tmp_path / "site"
    proc = subprocess.run([sys.executable, "-m", "pip", "install", "--no-deps", "--no-index",
                           "-q", "--target", str(site), str(wheel)], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    probe = ("import attnlab, attnlab.kernels as k; print(attnlab.__file__); print(k.KERNEL_DIR); "
             "print(len(k.kernel_source('softmax_backward8')))")
    env = {k: v for k, v in os.environ.items() if k != "ATTNLAB_KERNELS"}
    env["PYTHONPATH"] = str(site)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    proc = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True,
                          cwd=elsewhere, env=env)
    assert proc.returncode == 0, proc.stderr
    package, kernel_dir, length = proc.stdout.split()
    assert Path(package).parent == site / "attnlab"
    assert Path(kernel_dir) == site / "attnlab" / "cuda"
    assert int(length) == len((ROOT / "kernels" / "softmax_backward8.cu").read_text())


def test_a_checkout_reads_kernels_at_the_top_of_the_repository():
    if (Path(kernels.__file__).parent / "cuda").is_dir():
        pytest.skip("attnlab is imported from an installed wheel here, not from the checkout")
    assert kernels.KERNEL_DIR == ROOT / "kernels"


def test_ci_runs_the_readmes_commands_in_a_venv_of_its_own():
    readme = (ROOT / "README.md").read_text()
    ci = (ROOT / ".ci" / "run").read_text()
    for command in ('pip install -e ".[notebooks]"', "python -m pytest --nbval tests notebooks"):
        assert f"    {command}\n" in readme, command
        assert command in ci, command
    assert "python3 -m venv" in ci and "/bin/activate" in ci
