"""Compile errors name the file and line (no GPU needed). That every kernel source compiles,
for every architecture, is tests/test_archs.py."""
import shutil

import pytest

from attnlab import KernelCompileError, NvccNotFoundError, kernels

needs_nvcc = pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc is not on PATH")
SOURCES = sorted(p.stem for p in kernels.KERNEL_DIR.glob("*.cu"))


def test_the_sources_are_there():
    expected = {"permute", "softmax_forward"} | {f"softmax_backward{k}" for k in range(1, 9)}
    assert expected <= set(SOURCES)


@needs_nvcc
def test_compile_error_names_file_and_line():
    src = 'extern "C" __global__ void k(float* x) {\n    x[0] = 1.0f\n}\n'
    with pytest.raises(KernelCompileError) as e:
        kernels.nvcc_check(src, "my_kernel.cu")
    assert 'my_kernel.cu(2)' in str(e.value) or 'my_kernel.cu(3)' in str(e.value)
    assert "error" in str(e.value)


def test_missing_nvcc_is_a_clear_error(monkeypatch):
    monkeypatch.setenv("PATH", "")
    with pytest.raises(NvccNotFoundError, match="nvcc is not on PATH"):
        kernels.nvcc_check("", "x.cu")


def test_unknown_kernel_source_lists_the_known_ones():
    from attnlab import InputError
    with pytest.raises(InputError, match="softmax_backward8"):
        kernels.kernel_path("softmax_backward42")
