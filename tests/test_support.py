"""attnlab.support: which backward kernels run on which GPU architecture (no GPU needed). The
facts it derives from archs.LIMITS and fused.unsupported_reason, stated here by hand."""
import pytest

from attnlab import fused, support
from attnlab.archs import ARCHS, compute_capability
from attnlab.checks import KERNELS

EVERY = ("sm_75", "sm_80", "sm_86", "sm_89", "sm_90")
RUNS_ON = {   # (kernel, tf32): architectures
    **{(k, tf32): EVERY for k in KERNELS for tf32 in (False, True)},
    (9, False): ("sm_80", "sm_86", "sm_89", "sm_90"),     # 83,456 B of shared memory > sm_75's 64 KB
    (9, True): ("sm_80", "sm_86", "sm_89", "sm_90"),      # TF32 tensor cores: sm_80 and newer
    **{(k, tf32): ("sm_80", "sm_90") for k in (10, 11) for tf32 in (False, True)},   # > 99 KB
    **{(k, True): ("sm_90",) for k in (12, 13, 14, 15, 16, 17)},   # wgmma, TF32 only
    (18, False): ("sm_90",),                                       # wgmma, 3xTF32 only
}


def test_the_architectures_are_the_five_built_for():
    assert ARCHS == EVERY
    assert [compute_capability(a) for a in ARCHS] == [(7, 5), (8, 0), (8, 6), (8, 9), (9, 0)]
    assert compute_capability("sm_90a") == (9, 0)


@pytest.mark.parametrize("kernel, tf32", sorted(RUNS_ON))
def test_runs_on(kernel, tf32):
    assert support.runs_on(kernel, tf32) == RUNS_ON[(kernel, tf32)]


def test_every_kernel_has_its_precisions_and_a_phrase():
    assert {k: support.precisions(k) for k in fused.TF32_ONLY} == {12: (True,), 13: (True,), 14: (True,), 15: (True,), 16: (True,), 17: (True,),
                                                                   19: (True,), 20: (True,), 21: (True,), 22: (True,), 23: (True,),
                                                                   24: (True,), 25: (True,), 26: (True,), 27: (True,), 28: (True,), 29: (True,)}
    assert all(support.precisions(k) == (False, True) for k in KERNELS + (9, 10, 11))
    assert support.precisions(18) == (False,) and fused.FP32_ONLY == (18,)
    assert set(fused.ABOUT) == set(fused.FUSED_KERNELS)


def test_the_readme_table_groups_kernels_that_run_alike():
    rows = support.readme_table().splitlines()
    assert rows[0] == ("| `backward` kernel | sm_75 (T4, RTX 20xx) | sm_80 (A100) | "
                       "sm_86 (RTX 30xx, A10) | sm_89 (RTX 40xx, L4) | sm_90 (H100, H200) |")
    assert rows[2:] == ["| 1–8 | yes | yes | yes | yes | yes |",
                        "| 9 | — | yes | yes | yes | yes |",
                        "| 10, 11 | — | yes | — | — | yes |",
                        "| 12–17 | — | — | — | — | yes, with --tf32 |",
                        "| 18 | — | — | — | — | yes, without --tf32 |",
                        "| 19–29 | — | — | — | — | yes, with --tf32 |"]


def test_help_says_why_a_kernel_is_not_bit_identical():
    """backward --help: atomics for kernels 11-14, the copy engine's bulk reductions for 15-22,
    float4 reductions from registers for 23-29 (whose phrases say so: their help must not say
    "bulk"), nothing for the deterministic ones."""
    text = " ".join(" ".join(support.kernel_lines(width=10_000)).split())
    adds = {**{k: "atomics" for k in (11, 12, 13, 14)}, **{k: "bulk reductions" for k in range(15, 23)},
            23: "float4 reductions", 24: "float4 reductions", 25: "float4 reductions",
            26: "float4 reductions", 27: "float4 reductions", 28: "float4 reductions",
            29: "float4 reductions"}
    for k in fused.FUSED_KERNELS:
        entry = text.split(f" {k} fused: ")[1].split(" runs on ")[0]
        why = "bit-identical run to run;" if fused.DETERMINISTIC[k] else f"not bit-identical run to run ({adds[k]})"
        assert why in entry and ("not" in entry) != fused.DETERMINISTIC[k], (k, entry)
    for k in (23, 24, 25, 26, 27, 28, 29):
        assert "bulk" not in text.split(f" {k} fused: ")[1].split(" runs on ")[0]
    assert fused.DQ_TILED == (15, 16, 17, 18, 19, 20, 21, 22, 23, 24, 25, 26, 27, 28, 29)
