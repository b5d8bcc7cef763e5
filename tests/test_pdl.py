"""attnlab.pdl with the CUDA driver faked (no GPU needed): the structures are cuda.h's, a launch
passes exactly the parameters a prepared PyCUDA Function would pack, with the PDL attribute on the
default stream, and every failure says which call failed and why, naming the kernel."""
import ctypes
import shutil
import struct
import subprocess

import pytest

from attnlab import pdl
from attnlab.errors import SetupError
from attnlab.libraries import cuda_roots

# cuda.h 13.0, by offsetof: sizeof(CUlaunchAttribute), offsetof(.., value), sizeof(CUlaunchConfig),
# offsetof(.., sharedMemBytes), (.., hStream), (.., attrs), (.., numAttrs)
CUDA_H_LAYOUT = (72, 8, 56, 24, 32, 40, 48)


def ctypes_layout():
    A, C = pdl.LaunchAttribute, pdl.LaunchConfig
    return (ctypes.sizeof(A), A.value.offset, ctypes.sizeof(C), C.shared.offset, C.stream.offset,
            C.attrs.offset, C.n_attrs.offset)


def test_the_structures_are_laid_out_as_cuda_h_lays_them_out():
    assert ctypes_layout() == CUDA_H_LAYOUT


def _cuda_h():
    """The include folder of the first CUDA root (attnlab.libraries' search order) that has cuda.h."""
    for _, root in cuda_roots():
        if (root / "include" / "cuda.h").is_file():
            return root / "include"
    return None


def run_against_cuda_h(tmp_path, name, c_source):
    """What the C program ``c_source`` prints, compiled against the toolkit's own cuda.h and run; the
    test skips where there is no cuda.h or no C compiler."""
    include, cc = _cuda_h(), shutil.which("cc") or shutil.which("gcc")
    if include is None or cc is None:
        pytest.skip(f"needs cuda.h and a C compiler (cuda.h: {include}, cc: {cc})")
    src = tmp_path / f"{name}.c"
    src.write_text(c_source)
    subprocess.run([cc, f"-I{include}", str(src), "-o", str(tmp_path / name)], check=True, capture_output=True)
    return subprocess.run([str(tmp_path / name)], check=True, capture_output=True, text=True).stdout


def test_the_layout_and_the_numbers_are_this_toolkit_s(tmp_path):
    """Compiled against the toolkit's own cuda.h, where there is one and a C compiler: the same layout,
    and the attribute and parameter numbers pdl uses."""
    layout, numbers = run_against_cuda_h(tmp_path, "layout", """#include <stdio.h>
#include <stddef.h>
#include <cuda.h>
int main(void) {
    printf("%zu %zu %zu %zu %zu %zu %zu\\n", sizeof(CUlaunchAttribute), offsetof(CUlaunchAttribute, value),
           sizeof(CUlaunchConfig), offsetof(CUlaunchConfig, sharedMemBytes), offsetof(CUlaunchConfig, hStream),
           offsetof(CUlaunchConfig, attrs), offsetof(CUlaunchConfig, numAttrs));
    printf("%d %d %d %d %d\\n", (int)CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION,
           (int)CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, (int)(size_t)CU_LAUNCH_PARAM_BUFFER_POINTER,
           (int)(size_t)CU_LAUNCH_PARAM_BUFFER_SIZE, (int)(size_t)CU_LAUNCH_PARAM_END);
    return 0;
}
""").splitlines()
    assert tuple(map(int, layout.split())) == ctypes_layout()
    assert tuple(map(int, numbers.split())) == (pdl.PROGRAMMATIC_STREAM_SERIALIZATION, pdl.MAX_DYNAMIC_SHARED_SIZE_BYTES,
                                                pdl.LAUNCH_PARAM_BUFFER_POINTER, pdl.LAUNCH_PARAM_BUFFER_SIZE,
                                                pdl.LAUNCH_PARAM_END)


class FakeDriver:
    """libcuda's calls that pdl makes, recording what they were given; ``fail`` names one to fail."""

    def __init__(self, context=0xC0, fail=None):
        self.context, self.fail, self.calls, self.launches = context, fail, [], []

    def _status(self, name):
        self.calls.append(name)
        return 700 if name == self.fail else 0          # CUDA_ERROR_ILLEGAL_ADDRESS

    def cuGetErrorName(self, status, out):
        ctypes.cast(out, ctypes.POINTER(ctypes.c_char_p))[0] = b"CUDA_ERROR_ILLEGAL_ADDRESS"
        return 0

    def cuCtxGetCurrent(self, out):
        ctypes.cast(out, ctypes.POINTER(ctypes.c_void_p))[0] = self.context
        return self._status("cuCtxGetCurrent")

    def cuModuleLoadData(self, out, image):
        self.image = bytes(image)
        ctypes.cast(out, ctypes.POINTER(ctypes.c_void_p))[0] = 0x10
        return self._status("cuModuleLoadData")

    def cuModuleGetFunction(self, out, module, name):
        self.function_name = name
        ctypes.cast(out, ctypes.POINTER(ctypes.c_void_p))[0] = 0x20
        return self._status("cuModuleGetFunction")

    def cuFuncSetAttribute(self, function, attribute, value):
        self.attribute = (function.value, attribute, value)
        return self._status("cuFuncSetAttribute")

    def cuLaunchKernelEx(self, config, function, params, extra):
        cfg = ctypes.cast(config, ctypes.POINTER(pdl.LaunchConfig)).contents
        pointer, size = extra[1], ctypes.cast(extra[3], ctypes.POINTER(ctypes.c_size_t)).contents.value
        attrs = [cfg.attrs[i] for i in range(cfg.n_attrs)]
        self.launches.append({"grid": tuple(cfg.grid), "block": tuple(cfg.block), "shared": cfg.shared,
                              "stream": cfg.stream, "params": params, "extra": (extra[0], extra[2], extra[4]),
                              "bytes": ctypes.string_at(pointer, size),
                              "attrs": [(a.id, struct.unpack("i", ctypes.string_at(ctypes.addressof(a) + 8, 4))[0]) for a in attrs],
                              "function": function.value})
        return self._status("cuLaunchKernelEx")


@pytest.fixture
def driver(monkeypatch):
    fake = FakeDriver()
    monkeypatch.setattr(pdl, "driver", lambda: fake)
    return fake


FORMAT = "PPPPPPPiif"          # flash_backward_dq_tiled's: 7 pointers, T, NH, scale


def test_a_launch_passes_the_packed_arguments_with_the_pdl_attribute(driver):
    k = pdl.DependentKernel(b"\x7fELF cubin", "flash_backward", FORMAT, shared_size=231_488)
    assert driver.image == b"\x7fELF cubin" and driver.function_name == b"flash_backward"
    assert driver.attribute == (0x20, 8, 231_488)          # the opt-in beyond 48 KB
    args = (1 << 40, 2, 3, 4, 5, 6, 7, 1024, 12, 0.125)
    k.prepared_call((24, 8, 2), (256, 1, 1), *args, shared_size=231_488)
    (launch,) = driver.launches
    assert launch["bytes"] == struct.pack(FORMAT, *args) and len(launch["bytes"]) == 68   # no trailing byte
    assert launch["grid"] == (24, 8, 2) and launch["block"] == (256, 1, 1) and launch["shared"] == 231_488
    assert launch["stream"] is None and launch["params"] is None                       # PyCUDA's default stream
    assert launch["extra"] == (1, 2, None)                 # BUFFER_POINTER, BUFFER_SIZE, END
    assert launch["attrs"] == [(6, 1)] and launch["function"] == 0x20


def test_small_shared_memory_needs_no_opt_in(driver):
    pdl.DependentKernel(b"cubin", "flash_backward_dq", "PPii")
    assert "cuFuncSetAttribute" not in driver.calls


@pytest.mark.parametrize("call", ["cuModuleLoadData", "cuModuleGetFunction", "cuFuncSetAttribute", "cuLaunchKernelEx"])
def test_a_failing_driver_call_says_which_and_why(driver, call):
    driver.fail = call
    with pytest.raises(SetupError, match=rf"{call} \(flash_backward.*failed: CUDA_ERROR_ILLEGAL_ADDRESS"):
        k = pdl.DependentKernel(b"cubin", "flash_backward", FORMAT, shared_size=100_000)
        k.prepared_call((1, 1, 1), (256, 1, 1), 1, 2, 3, 4, 5, 6, 7, 8, 9, 1.0)


def test_no_current_context_is_refused_before_loading(driver):
    driver.context = 0
    with pytest.raises(SetupError, match="no CUDA context is current in this thread to load flash_backward_dq"):
        pdl.DependentKernel(b"cubin", "flash_backward_dq", "PPii")
    assert driver.calls == ["cuCtxGetCurrent"]


def test_wrong_arguments_fail_in_python_before_the_driver(driver):
    """The student who passes one argument too few, or a float where a pointer goes: struct refuses
    before anything reaches the GPU."""
    k = pdl.DependentKernel(b"cubin", "flash_backward_dq", "PPii")
    with pytest.raises(struct.error):
        k.prepared_call((1, 1, 1), (256, 1, 1), 1, 2, 3)
    with pytest.raises(struct.error):
        k.prepared_call((1, 1, 1), (256, 1, 1), 1.5, 2, 3, 4)
    assert driver.launches == []


def test_without_libcuda_the_error_says_what_it_needs(monkeypatch):
    def missing(name):
        raise OSError(f"{name}: cannot open shared object file")
    monkeypatch.setattr(pdl.ctypes, "CDLL", missing)
    with pytest.raises(SetupError, match="libcuda.so.1 could not be loaded .*Linux with the NVIDIA driver"):
        pdl.driver()
