"""attnlab.cubin: where a cubin puts a kernel's parameters, against where an argument format packs
them. The PDL kernels' formats (fused.ARG_FORMATS) are checked against the cubins nvcc builds from
their sources, where nvcc is here: a tensor map passed by value lies where ptxas puts it (offset 112
in kernel 26), not where C's alignment would (64), and a launch packed the C way fails
(CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES, results/h100/experiments/k24_sw128gc_first.txt)."""
import shutil
import subprocess

import pytest

from attnlab import cubin, fused, kernels
from attnlab.errors import InputError, SetupError

needs_nvcc = pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc is not on PATH")


def test_a_format_s_layout_is_struct_s():
    assert cubin.format_layout("PPii") == [(0, 8), (8, 8), (16, 4), (20, 4)]
    assert cubin.format_layout("PPPPPiif60x128s128s") == [(0, 8), (8, 8), (16, 8), (24, 8), (32, 8), (40, 4), (44, 4),
                                                          (48, 4), (112, 128), (240, 128)]
    assert cubin.format_layout("2P3x4si") == [(0, 8), (8, 8), (19, 4), (24, 4)]   # pad bytes are no argument


def test_what_is_not_a_cubin_is_refused():
    with pytest.raises(InputError, match=r"cubin must be the bytes of an ELF cubin, got bytes b'cubin'"):
        cubin.parameters(b"cubin", "flash_backward")
    with pytest.raises(InputError, match="got str"):
        cubin.parameters("kernels/flash_attention26.cu", "flash_backward")


@pytest.fixture(scope="module")
def cubins(tmp_path_factory):
    """{kernel: cubin bytes} of every PDL kernel's source (TF32, head size 64), built by nvcc as the
    library builds it."""
    if shutil.which("nvcc") is None:
        pytest.skip("nvcc is not on PATH")
    out = {}
    for k in fused.PDL:
        path = tmp_path_factory.mktemp(f"k{k}") / "k.cubin"
        subprocess.run(["nvcc", "-cubin", "-arch=sm_90a", *kernels.nvcc_options({"HEAD_SIZE": 64, "TF32": 1}),
                        f"-I{kernels.KERNEL_DIR}", "-o", str(path), str(kernels.kernel_path(fused.BACKWARD_SOURCES[k]))],
                       check=True, capture_output=True)
        out[k] = path.read_bytes()
    return out


@needs_nvcc
@pytest.mark.parametrize("name", ["flash_backward_prep", "flash_backward", "flash_backward_dq"])
def test_each_pdl_kernel_s_formats_match_its_cubin(cubins, name):
    for k, image in cubins.items():
        cubin.check_format(image, name, fused._arg_format(name, k))


@needs_nvcc
def test_the_maps_lie_where_ptxas_puts_them_and_the_c_layout_is_refused(cubins):
    assert cubin.parameters(cubins[26], "flash_backward")[-2:] == [(112, 128), (240, 128)]
    with pytest.raises(SetupError, match=r"packs flash_backward's arguments at .*\(52, 128\), \(180, 128\)\], "
                                         r"and its cubin has them at .*\(112, 128\), \(240, 128\)\]"):
        cubin.check_format(cubins[26], "flash_backward", "PPPPPiif128s128s")    # no pad: C's packing
    with pytest.raises(SetupError, match=r"the cubin has no kernel 'flash_forward'"):
        cubin.parameters(cubins[26], "flash_forward")
    with pytest.raises(SetupError):                                             # kernel 25's pointers k and v
        cubin.check_format(cubins[26], "flash_backward", fused._arg_format("flash_backward", 25))
