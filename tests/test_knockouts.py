"""The knock-out benchmarks (benchmarks/fused_k12_costs.py, fused_copies.py, fused_dq.py, fused_phases.py) change a kernel's
source by text: each replacement must still apply to the kernel as it is now, and each variant
must still compile for sm_90a, or the benchmark would fail on the GPU, or measure nothing. CPU
only (nvcc, no GPU)."""
import importlib
import sys
from pathlib import Path

import pytest

from attnlab import archs, kernels
from attnlab.errors import NvccNotFoundError

BENCHMARKS = Path(__file__).resolve().parent.parent / "benchmarks"


@pytest.fixture(scope="module")
def modules():
    sys.path.insert(0, str(BENCHMARKS))
    try:
        yield {name: importlib.import_module(name) for name in ("knockouts", "fused_k12_costs", "fused_copies", "fused_dq", "fused_phases")}
    finally:
        sys.path.remove(str(BENCHMARKS))


def variants(modules):
    """(label, kernel, replacements) of every knock-out variant of the benchmarks."""
    out = [(f"k12 {n}", 12, r) for n, r in modules["fused_k12_costs"].VARIANTS.items()]
    out += [(n, k, r) for n, (k, r) in modules["fused_copies"].VARIANTS.items()]
    out += [(n, k, r) for n, (k, r) in modules["fused_dq"].VARIANTS.items()]
    out += [(f"k22 {n}", 22, r) for n, r in modules["fused_phases"].VARIANTS.items()]
    return out


def test_every_replacement_applies_once_and_changes_the_source(modules):
    ko = modules["knockouts"]
    for label, kernel, replacements in variants(modules):
        src = ko.variant_source(kernel, replacements)
        assert '#include "flash_wgmma.cuh"' not in src and '#include "copy_engine.cuh"' not in src, label
        if replacements:
            assert src != ko.variant_source(kernel, ()), label
    copies = modules["fused_copies"].VARIANTS
    no_bulk = ko.variant_source(14, copies["kernel 14 without copies"][1])
    instructions = ("cp.async.bulk.shared::cluster", "mbarrier.arrive.expect_tx", "mbarrier.try_wait")
    assert not any(i in no_bulk for i in instructions)
    assert all(i in ko.variant_source(14, ()) for i in instructions)
    assert "cp_async16(s + f, g + f);" not in ko.variant_source(13, copies["kernel 13 without copies"][1])
    dq = modules["fused_dq"].VARIANTS
    assert "atomicAdd" in ko.variant_source(14, ()) and "atomicAdd" not in ko.variant_source(*dq["kernel 14 without atomics"])
    reduce = "cp.reduce.async.bulk.global"
    assert ko.variant_source(15, ()).count(reduce) == 1
    assert reduce not in ko.variant_source(*dq["kernel 15 without reductions"])
    assert ko.variant_source(*dq["kernel 15, 64 reductions"]).count(reduce) == 1      # in a loop
    phases = modules["fused_phases"].VARIANTS
    assert ko.variant_source(22, ()).count("exp2f(") == 1 and "exp2f(" not in ko.variant_source(22, phases["no exp"])
    assert "exp2f(" not in ko.variant_source(22, phases["no math"])
    assert "round_tf32_rn(x" not in ko.variant_source(22, phases["no math"]) + ko.variant_source(22, phases["no roundings"])
    no_traffic = ko.variant_source(22, phases["no dQ traffic"])
    assert "reduce_dq(dq_tiles" not in no_traffic and "wait_group.read 0" not in no_traffic
    assert no_traffic.count("if (T < 0)") == ko.variant_source(22, ()).count("if (T < 0)") + 2


def test_a_replacement_the_kernel_no_longer_has_is_refused(modules):
    with pytest.raises(AssertionError, match="occurs 0 times in kernel 14's source"):
        modules["knockouts"].variant_source(14, [("no such line;\n", "")])


def test_every_variant_compiles_for_sm90a(modules):
    try:
        kernels.require_nvcc()
    except NvccNotFoundError as e:
        pytest.skip(f"needs nvcc: {e}")
    for label, kernel, replacements in variants(modules):
        src = modules["knockouts"].variant_source(kernel, replacements)
        report = archs.ptxas_report(src, f"{label}.cu", {"HEAD_SIZE": 64, "TF32": 1}, archs=("sm_90a",))
        assert "flash_backward" in report["sm_90a"], label
        if label.startswith("k22 "):    # timed against each other: none may spill
            assert report["sm_90a"]["flash_backward"].spill_stores == 0, label


def test_the_three_benchmarks_read_their_arguments_alike_and_refuse_bad_ones_first(modules, monkeypatch):
    """knockouts.arguments: --T, --repeats, --json for every knock-out benchmark; a bad value is
    refused, naming the option, before any GPU work."""
    from attnlab.errors import InputError

    def touched():
        raise AssertionError("the GPU was touched before the arguments were checked")
    for name in ("fused_k12_costs", "fused_copies", "fused_dq", "fused_phases"):
        monkeypatch.setattr(modules[name], "context", touched)
    ko = modules["knockouts"]
    assert ko.arguments(modules["fused_dq"].__doc__, []) == ([1024, 4096, 16384], 10, None)
    assert ko.arguments("x", ["--T", "260", "--repeats", "3", "--json", "f.json"], T="1") == ([260], 3, "f.json")
    for name in ("fused_k12_costs", "fused_copies", "fused_dq", "fused_phases"):
        with pytest.raises(InputError, match="--T must be comma-separated integers"):
            modules[name].main(["--T", "1024,16k"])
        with pytest.raises(InputError, match="--repeats must be >= 1, got 0"):
            modules[name].main(["--repeats", "0"])
