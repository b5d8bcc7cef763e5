"""The GPU against the CPU reference, over whole tensors (skipped without a GPU)."""

import numpy as np
import pytest

from attnlab import attention, bench, gemm, validate
from attnlab.device import context
from attnlab.checks import BLOCK_SIZES
from attnlab.validate import TF32_TOLERANCES

pytestmark = pytest.mark.gpu


def buffers_for(problem):
    buf = attention.AttentionBuffers(problem.B, problem.T, problem.C, problem.NH)
    buf.set("inp", problem.inp)
    buf.set("dout", problem.dout)
    return buf


def check_forward(buf, problem, tf32=False):
    tol = TF32_TOLERANCES if tf32 else {}
    for name in ("preatt", "att", "out"):
        validate(buf.get(name), getattr(problem, name), name, tol.get(name), verbose=False)


def check_backward(buf, problem, tf32=False):
    tol = TF32_TOLERANCES if tf32 else {}
    for name in ("datt", "dpreatt", "dinp"):
        validate(buf.get(name), getattr(problem, name), name, tol.get(name), verbose=False)


@pytest.fixture(scope="module")
def small_buf(small):
    with buffers_for(small) as buf:
        attention.forward(buf)
        yield buf


@pytest.fixture(scope="module")
def default_buf(default):
    with buffers_for(default) as buf:
        attention.forward(buf)
        yield buf


@pytest.mark.parametrize("block_size", BLOCK_SIZES)
def test_forward_small(small, block_size):
    with buffers_for(small) as buf:
        buf.arrays["out"].fill(np.nan)
        attention.forward(buf, block_size)
        check_forward(buf, small)


def test_forward_default(default_buf, default):
    check_forward(default_buf, default)


@pytest.mark.parametrize("kernel", range(1, 9))
@pytest.mark.parametrize("block_size", BLOCK_SIZES)
def test_backward_small(small_buf, small, kernel, block_size):
    small_buf.poison_gradients()
    attention.backward(small_buf, kernel, block_size)
    check_backward(small_buf, small)


@pytest.mark.parametrize("kernel", range(1, 9))
def test_backward_default(default_buf, default, kernel):
    default_buf.poison_gradients()
    attention.backward(default_buf, kernel, 256)
    check_backward(default_buf, default)


def test_backward_is_idempotent_and_bit_identical(default_buf):
    attention.backward(default_buf, 8, 256)
    first = default_buf.get("dinp")
    attention.backward(default_buf, 8, 256)
    assert np.array_equal(first, default_buf.get("dinp")), "repeated calls must not accumulate"


def test_same_seed_same_bits_in_fresh_buffers(small):
    results = []
    for _ in range(2):
        with buffers_for(small) as buf:
            attention.forward(buf)
            attention.backward(buf, 8, 256)
            results.append((buf.get("out"), buf.get("dinp")))
    assert all(np.array_equal(a, b) for a, b in zip(*results))


def test_tf32_is_chosen_per_call(default_buf, default):
    """tf32=True runs that call's GEMMs on TF32 tensor cores (dinp's error against the CPU
    reference grows by orders of magnitude), and only that call's: the next call, with the
    default, is exact fp32 again, bit for bit what it was before the TF32 call."""
    attention.backward(default_buf, 8, 256)
    fp32_dinp = default_buf.get("dinp")
    attention.forward(default_buf, tf32=True)
    check_forward(default_buf, default, tf32=True)
    attention.backward(default_buf, 8, 256, tf32=True)
    check_backward(default_buf, default, tf32=True)
    tf32_err = np.abs(default_buf.get("dinp") - default.dinp).max()
    attention.forward(default_buf)
    attention.backward(default_buf, 8, 256)
    check_backward(default_buf, default)
    assert np.array_equal(default_buf.get("dinp"), fp32_dinp), "a TF32 call changed a later fp32 one"
    fp32_err = np.abs(fp32_dinp - default.dinp).max()
    assert tf32_err > 10 * fp32_err, f"TF32 error {tf32_err:.3g}, fp32 error {fp32_err:.3g}"


def test_a_gemm_runs_in_the_precision_it_is_given():
    """gemm.sgemm_strided_batched on its own: C = A·B against float64, TF32 then fp32 twice."""
    import pycuda.gpuarray as gpuarray
    context()   # gpuarray needs a current context: this test may be the first on its worker
    rng = np.random.default_rng(0)
    M, N, K = 64, 48, 512
    a, b = (rng.uniform(-1, 1, s).astype(np.float32) for s in ((M, K), (K, N)))
    exact = a.astype(np.float64) @ b.astype(np.float64)
    A, B, C = gpuarray.to_gpu(a), gpuarray.to_gpu(b), gpuarray.zeros((M, N), np.float32)
    results = []
    for tf32 in (True, False, False):
        # row-major C = A·B is column-major Cᵀ = Bᵀ·Aᵀ: operands swapped
        gemm.sgemm_strided_batched("n", "n", N, M, K, 1.0, B.gpudata, N, 0, A.gpudata, K, 0,
                                   0.0, C.gpudata, N, 0, 1, tf32=tf32)
        results.append(C.get())
    tf32_err, fp32_err = (np.abs(r - exact).max() for r in results[:2])
    assert fp32_err < 1e-4 and tf32_err > 10 * fp32_err, (tf32_err, fp32_err)
    assert np.array_equal(results[1], results[2])


def test_numpy_api(small):
    out, preatt, att = attention.gpu_forward(small.inp, small.NH)
    validate(out, small.out, "out", verbose=False)
    dinp, dpreatt, datt = attention.gpu_backward(small.dout, small.inp, small.NH, kernel=7)
    validate(dinp, small.dinp, "dinp", verbose=False)


@pytest.mark.gpu_memory     # alone on the GPU's memory under pytest-xdist (tests/conftest.py)
def test_repeated_calls_leave_gpu_memory_where_it_was(small):
    from attnlab.device import free_memory
    attention.gpu_backward(small.dout, small.inp, small.NH)       # load modules, cuBLAS
    before = free_memory()[0]
    for _ in range(100):
        attention.gpu_backward(small.dout, small.inp, small.NH)
    assert free_memory()[0] == before


def test_benchmark_reports_sane_numbers(small_buf):
    t = bench.benchmark(lambda: attention.backward(small_buf, 8, 256), repeats=5)
    assert t.repeats == 5 and len(t.times_ms) == 5
    assert 0 < t.min_ms <= t.median_ms <= t.max_ms


def test_sustained_reports_windows_and_what_nvml_read(small_buf):
    """bench.sustained on a real kernel: every window timed and positive; where the driver's NVML
    library loads (the H200), energy per call, SM clock and power are positive and the
    power-cap share a fraction."""
    import ctypes
    s = bench.sustained({"k8": lambda: attention.backward(small_buf, 8, 256)}, seconds=0.2, rounds=2, window=20)["k8"]
    assert s.calls == 20 * len(s.windows_ms) and 0 < min(s.windows_ms) <= s.median_ms
    try:
        ctypes.CDLL("libnvidia-ml.so.1")
    except OSError:
        pytest.skip("no NVML library: bench.sustained reports times only")
    assert s.joules_per_call > 0 and s.sm_mhz > 0 and s.power_w > 0 and 0 <= s.power_capped <= 1


def test_device_info():
    from attnlab import device_info
    d = device_info()
    assert d["sms"] > 0 and d["l2_cache_bytes"] > 0 and d["arch"].startswith("sm_")
    assert 0 < d["memory_free_bytes"] <= d["memory_total_bytes"]


def test_limits_of_this_gpus_architecture_are_what_its_driver_reports():
    """attnlab.archs.LIMITS (the programming guide's table, which the ptxas fit checks and the
    occupancy arithmetic use) holds, for this GPU's architecture, what its driver reports."""
    import pycuda.driver as cuda
    from attnlab.archs import LIMITS
    from attnlab.device import arch
    here = arch()
    if here not in LIMITS:
        pytest.skip(f"{here} is not in attnlab.archs.LIMITS ({', '.join(LIMITS)})")
    lim = LIMITS[here]
    ours = {"MAX_THREADS_PER_BLOCK": lim.max_threads_per_block,
            "MAX_THREADS_PER_MULTIPROCESSOR": 32 * lim.max_warps_per_sm,
            "MAX_BLOCKS_PER_MULTIPROCESSOR": lim.max_blocks_per_sm,
            "MAX_REGISTERS_PER_BLOCK": lim.registers_per_block,
            "MAX_REGISTERS_PER_MULTIPROCESSOR": lim.registers_per_sm,
            "MAX_SHARED_MEMORY_PER_BLOCK": lim.max_static_shared_per_block,
            "MAX_SHARED_MEMORY_PER_BLOCK_OPTIN": lim.max_shared_per_block_optin,
            "MAX_SHARED_MEMORY_PER_MULTIPROCESSOR": lim.shared_per_sm}
    dev = cuda.Device(0)
    driver = {name: dev.get_attribute(getattr(cuda.device_attribute, name)) for name in ours}
    assert driver == ours, here


@pytest.mark.parametrize("kernel", [6, 8])
def test_report_measures_a_kernel_with_its_evidence(small_buf, small, kernel):
    """`python -m attnlab report`'s entry for one kernel, at the small shape: validated, timed
    at its best block size, with the count, the roof and the compiler's evidence per block
    size (kernels 6-8 are compiled per block size: each block size has its own registers)."""
    from attnlab import counts, report
    from attnlab.launch import softmax_backward_launch
    ceil = {"copy": {"median": 4e12}, "fma": {"median": 2.8e13}, "shared_load": {"median": 3e13}}
    e = report.measure_kernel(small_buf, small, kernel, ceil)
    bs = e["block_size"]
    assert bs in BLOCK_SIZES and min(e["sweep_ms"], key=e["sweep_ms"].get) == str(bs)
    assert e["softmax"]["repeats"] >= 20 and e["softmax"]["q1_ms"] <= e["softmax"]["q3_ms"]
    assert e["count"] == counts.count(kernel, small.B, small.T, small.NH, bs).as_dict()
    assert set(e["occupancy"]) == {str(b) for b in BLOCK_SIZES}
    assert e["occupancy"][str(bs)]["registers"] == e["attributes"]["registers"]
    for b, o in e["occupancy"].items():
        defines = softmax_backward_launch(kernel, small.B, small.T, small.NH, int(b))[2]
        assert defines == {"BLOCK_SIZE": int(b)} and 0 < o["occupancy"] <= 1
    assert e["sass_loops"] and all(loop["instructions"] > 0 for loop in e["sass_loops"])
