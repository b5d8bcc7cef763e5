"""attnlab.bench without a GPU: the statistics of Timing, speedup / overlap /
describe_speedup, and the argument checks of interleaved and flush_effect, which must
refuse bad input with an InputError before they touch the GPU.

``forbid_gpu`` (tests/conftest.py) makes bench.context (the first GPU call of both functions)
and device.gpu_status raise AssertionError: an InputError is then proof that the check ran
first.
"""
import numpy as np
import pytest

from attnlab import bench
from attnlab.bench import Timing
from attnlab.errors import InputError


USED_GPU = "the GPU was used"


# ------------------------------------------------------------------ Timing

def test_timing_of():
    t = Timing.of([5, 1, 4, 2, 3])
    assert (t.median_ms, t.min_ms, t.max_ms, t.repeats) == (3.0, 1.0, 5.0, 5)
    assert t.times_ms == [5.0, 1.0, 4.0, 2.0, 3.0]            # order kept
    assert all(type(x) is float for x in t.times_ms)
    assert type(t.median_ms) is float
    assert t.as_dict() == {"median_ms": 3.0, "min_ms": 1.0, "max_ms": 5.0, "repeats": 5,
                           "times_ms": [5.0, 1.0, 4.0, 2.0, 3.0]}


def test_timing_of_even_count_median():
    t = Timing.of(np.array([1.0, 2.0, 3.0, 10.0], dtype=np.float32))
    assert t.median_ms == 2.5 and t.repeats == 4


@pytest.mark.parametrize("data, q1, q3", [
    ([1, 2, 3, 4, 5], 2.0, 4.0),
    ([1, 2, 3, 10], 1.75, 4.75),               # linear interpolation between order statistics
    ([7.0], 7.0, 7.0),
    ([0.5, 0.25, 0.75, 1.0, 0.125, 2.0, 0.3], None, None),
])
def test_quartiles_are_numpys_percentiles(data, q1, q3):
    got = Timing.of(data).quartiles_ms
    assert got == tuple(float(x) for x in np.percentile(data, [25, 75]))
    if q1 is not None:
        assert got == (q1, q3)
    assert all(type(x) is float for x in got)


def test_timing_str():
    s = str(Timing.of([1, 2, 3, 4, 5]))
    assert s == "   3.0000 ms (IQR 2.0000-4.0000, min 1.0000, max 5.0000, 5 repeats)"


# ------------------------------------------------------------------ speedup, overlap

SLOW = Timing.of([8, 9, 10, 11, 12])        # median 10, IQR 9-11
FAST = Timing.of([4, 4.5, 5, 5.5, 6])       # median 5,  IQR 4.5-5.5
NEAR = Timing.of([9, 10, 11, 12, 13])       # median 11, IQR 10-12: overlaps SLOW


def test_speedup_median_ratio_and_range():
    ratio, low, high = bench.speedup(SLOW, FAST)
    assert ratio == pytest.approx(2.0)
    assert low == pytest.approx(9 / 5.5)            # fast quarter of before / slow of after
    assert high == pytest.approx(11 / 4.5)
    assert low < ratio < high
    r2, l2, h2 = bench.speedup(FAST, SLOW)
    assert (r2, l2, h2) == pytest.approx((1 / ratio, 1 / high, 1 / low))


def test_overlap():
    assert not bench.overlap(SLOW, FAST) and not bench.overlap(FAST, SLOW)
    assert bench.overlap(SLOW, NEAR) and bench.overlap(NEAR, SLOW)
    assert bench.overlap(SLOW, SLOW)
    touching = Timing.of([10, 11, 12, 13, 14])       # IQR 11-13 meets SLOW's 9-11 at 11
    assert bench.overlap(SLOW, touching)
    apart = Timing.of([10.5, 11.5, 12, 13, 14])      # IQR 11.5-13
    assert not bench.overlap(SLOW, apart)


def test_describe_speedup_faster():
    assert bench.describe_speedup(SLOW, FAST) == \
        "after is 2.00x faster than before (range 1.64-2.44x)"


def test_describe_speedup_slower():
    assert bench.describe_speedup(FAST, SLOW, names=("kernel 5", "kernel 4")) == \
        "kernel 4 is 2.00x slower than kernel 5 (range 1.64-2.44x)"


def test_describe_speedup_not_resolved():
    assert bench.describe_speedup(SLOW, NEAR, names=("v1", "v2")) == \
        "v2 vs v1: 0.91x, not resolved on this GPU (interquartile ranges overlap)"


def test_best():
    assert bench.best({32: SLOW, 64: FAST, 128: NEAR}) == (64, FAST)


# ------------------------------------------------------------------ argument checks first

def ok():
    return None


def test_the_fixture_catches_gpu_use(forbid_gpu):
    """Valid arguments do reach the GPU: the fixture sees it (so the rows below can fail)."""
    with pytest.raises(AssertionError, match=USED_GPU):
        bench.interleaved({"a": ok})
    with pytest.raises(AssertionError, match=USED_GPU):
        bench.flush_effect(ok)


@pytest.mark.parametrize("kwargs, message", [
    pytest.param(dict(fns={}), "fns must be a non-empty dict", id="empty"),
    pytest.param(dict(fns=[ok]), "fns must be a non-empty dict", id="list"),
    pytest.param(dict(fns=None), "fns must be a non-empty dict", id="none"),
    pytest.param(dict(fns={"a": ok, "b": 3}), "fns['b'] must be callable", id="not-callable"),
    pytest.param(dict(fns={"a": ok}, repeats=0), "repeats must be >= 1, got 0", id="repeats-0"),
    pytest.param(dict(fns={"a": ok}, repeats=2.0), "repeats must be an int, got float 2.0",
                 id="repeats-float"),
    pytest.param(dict(fns={"a": ok}, repeats=True), "repeats must be an int", id="repeats-bool"),
    pytest.param(dict(fns={"a": ok}, warmup=-1), "warmup must be >= 0, got -1", id="warmup"),
])
def test_interleaved_checks_before_the_gpu(forbid_gpu, kwargs, message):
    with pytest.raises(InputError) as e:
        bench.interleaved(**kwargs)
    assert message in str(e.value)


def test_interleaved_accepts_zero_warmup_then_uses_the_gpu(forbid_gpu):
    with pytest.raises(AssertionError, match=USED_GPU):
        bench.interleaved({"a": ok}, repeats=1, warmup=0)


@pytest.mark.parametrize("call", [
    lambda: bench.interleaved({"a": ok}, flush="bogus"),
    lambda: bench.benchmark(ok, flush="bogus"),
], ids=["interleaved", "benchmark"])
def test_bad_flush_is_refused_before_the_gpu(forbid_gpu, call):
    with pytest.raises(InputError, match="flush must be one of"):
        call()


def test_l2flusher_checks_its_method_first(forbid_gpu):
    with pytest.raises(InputError, match=r"flush must be one of \('read', 'memset'\), got 'x'"):
        bench.L2Flusher("x")


@pytest.mark.parametrize("kwargs, message", [
    pytest.param(dict(fn=None), "fn must be callable", id="none"),
    pytest.param(dict(fn="kernel"), "got str 'kernel'", id="str"),
    pytest.param(dict(fn=ok, repeats=0), "repeats must be >= 1, got 0", id="repeats-0"),
    pytest.param(dict(fn=ok, repeats="50"), "repeats must be an int, got str '50'",
                 id="repeats-str"),
])
def test_flush_effect_checks_before_the_gpu(forbid_gpu, kwargs, message):
    with pytest.raises(InputError) as e:
        bench.flush_effect(**kwargs)
    assert message in str(e.value)


@pytest.mark.parametrize("warmup", [-1, 1.5])
def test_flush_effect_checks_warmup_before_the_gpu(forbid_gpu, warmup):
    with pytest.raises(InputError, match="warmup must be"):
        bench.flush_effect(ok, warmup=warmup)


# ------------------------------------------------------------------ sustained

@pytest.mark.parametrize("kwargs, message", [
    pytest.param(dict(fns={}), "fns must be a non-empty dict", id="empty"),
    pytest.param(dict(fns={"a": ok, "b": 3}), "fns['b'] must be callable", id="not-callable"),
    pytest.param(dict(fns={"a": ok}, seconds=0), "seconds must be a number > 0, got 0", id="seconds-0"),
    pytest.param(dict(fns={"a": ok}, seconds="4"), "seconds must be a number > 0, got '4'", id="seconds-str"),
    pytest.param(dict(fns={"a": ok}, seconds=True), "seconds must be a number > 0, got True", id="seconds-bool"),
    pytest.param(dict(fns={"a": ok}, rounds=0), "rounds must be >= 1, got 0", id="rounds-0"),
    pytest.param(dict(fns={"a": ok}, window=2.5), "window must be an int, got float 2.5", id="window-float"),
    pytest.param(dict(fns={"a": ok}, warmup=-1), "warmup must be >= 0, got -1", id="warmup"),
])
def test_sustained_checks_before_the_gpu(forbid_gpu, kwargs, message):
    with pytest.raises(InputError) as e:
        bench.sustained(**kwargs)
    assert message in str(e.value)


def test_sustained_with_good_arguments_uses_the_gpu(forbid_gpu):
    with pytest.raises(AssertionError, match=USED_GPU):
        bench.sustained({"a": ok}, seconds=0.1)


def test_sustained_statistics_are_over_its_windows():
    s = bench.Sustained([4.0, 1.0, 3.0, 2.0], 40, None, None, None, None)
    assert s.median_ms == 2.5 and s.quartiles_ms == (1.75, 3.25)
    assert str(s) == "   2.5000 ms (IQR 1.7500-3.2500, 40 calls)"
    s = bench.Sustained([2.0], 10, 0.5, 1755.0, 692.5, 0.75)
    assert str(s).endswith("10 calls); 0.5 J per call, 1755 MHz, 692 W, power-capped in 75 % of samples")


def test_sustained_text_says_n_a_for_what_nvml_did_not_give():
    """NVML answers each query on its own: an energy without a clock still prints."""
    s = bench.Sustained([1.0], 10, 0.5, None, 690.0, None)
    assert str(s).endswith("10 calls); 0.5 J per call, n/a MHz, 690 W, power-capped in n/a % of samples")


class FakeNvml:
    """libnvidia-ml as ctypes sees it: 0 is success; GPUs by PCI bus id, in NVML's order."""
    def __init__(self, buses):
        self.buses = buses

    def nvmlInit_v2(self):
        return 0

    def nvmlDeviceGetHandleByPciBusId_v2(self, bus, handle):
        if bus.decode() not in self.buses:
            return 2                                # NVML_ERROR_INVALID_ARGUMENT
        handle._obj.value = 100 + self.buses.index(bus.decode())
        return 0

    def nvmlDeviceGetCount_v2(self, count):
        count._obj.value = len(self.buses)
        return 0

    def nvmlDeviceGetHandleByIndex_v2(self, i, handle):
        handle._obj.value = 100 + i
        return 0


@pytest.mark.parametrize("buses, asked, handle", [
    (["0000:19:00.0", "0000:3B:00.0"], "0000:3B:00.0", 101),   # CUDA's GPU 0 is NVML's second
    (["0000:19:00.0"], "0000:19:00.0", 100),
    (["0000:19:00.0"], "0000:99:00.0", 100),                   # an id NVML spells otherwise: its only GPU
    (["0000:19:00.0"], None, 100),
    (["0000:19:00.0", "0000:3B:00.0"], "0000:99:00.0", None),  # not found among several: no guess
    (["0000:19:00.0", "0000:3B:00.0"], None, None),
])
def test_power_reads_the_gpu_cuda_means(monkeypatch, buses, asked, handle):
    from attnlab import power
    monkeypatch.setattr(power.ctypes, "CDLL", lambda name: FakeNvml(buses))
    power._nvml.cache_clear()
    try:
        got = power._nvml(asked)
        assert (got and got[1].value) == handle
    finally:
        power._nvml.cache_clear()


def test_power_sample_without_nvml_is_all_none(monkeypatch):
    """No NVIDIA driver library (a CPU machine, CI): every value None, nothing raised."""
    from attnlab import power
    monkeypatch.setattr(power.ctypes, "CDLL", lambda name: (_ for _ in ()).throw(OSError(name)))
    power._nvml.cache_clear()
    try:
        assert power.sample() == dict.fromkeys(("energy_mj", "sm_mhz", "power_w", "power_capped"))
    finally:
        power._nvml.cache_clear()
