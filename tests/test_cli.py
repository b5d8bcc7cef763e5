"""The command line, ``python -m attnlab``. Everything it refuses is tested on any machine: bad
arguments get exit status 2 and one line naming the argument, the value and what was expected,
before any GPU work (the ``forbid_gpu`` fixture fails a test that touches the GPU first); so
are the help, a missing GPU, a wrong result (1) and an internal error (3). Only the real runs
are marked ``gpu``. docs/errors.md's command-line rows cite these tests."""
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from attnlab import cli, device, problem
from attnlab.checks import BLOCK_SIZES, KERNELS
from attnlab.fused import FUSED_KERNELS, TF32_ONLY
from attnlab.support import kernel_lines

ROOT = Path(__file__).resolve().parent.parent
LAST = FUSED_KERNELS[-1]
KERNEL_RANGE = (f"kernel must be 1-{LAST} (1-8: the softmax-backward kernels, 9-{LAST}: the "
                f"fused backward), got ")
POWER_OF_TWO = f"--block-sizes must be a power of two in 32..1024 {BLOCK_SIZES}, got "
EMPTY = "(two commas in a row, or a comma at an end)"


def run(*args, env=None):
    """``python -m attnlab ARGS`` in a process of its own."""
    return subprocess.run([sys.executable, "-m", "attnlab", *args], capture_output=True,
                          text=True, env=dict(os.environ, **(env or {})), cwd=ROOT, timeout=600)


def main(capsys, *args):
    """``cli.main(ARGS)`` in this process: (exit status, stdout, stderr), argparse's exits too."""
    try:
        status = cli.main(list(args))
    except SystemExit as e:
        status = e.code
    out, err = capsys.readouterr()
    return status, out, err


# ------------------------------------------------------------ refused before any GPU work

REFUSALS = [   # (id, arguments, the whole message after "attnlab: ")
    ("cli-kernel", ["backward", "0"], KERNEL_RANGE + "0"),
    ("cli-kernel-past-fused", ["backward", str(LAST + 1)], KERNEL_RANGE + str(LAST + 1)),
    ("cli-t4", ["forward", "--T", "1022"], "T must be a multiple of 4 (the softmax kernels read "
     "rows as float4 and kernel 8 does 4 rows per block), got T=1022"),
    ("cli-heads", ["forward", "--C", "770"], "C must be divisible by NH (C=770, NH=12, "
     "C % NH = 2)"),
    ("cli-zero", ["forward", "--B", "0"], "B must be >= 1, got 0"),
    ("cli-grid", ["forward", "--B", "8192", "--T", "4"], "B*NH must be at most 65535 (the "
     "softmax-backward kernels launch one row of blocks per (b, h), and a grid has at most 65535 "
     "rows), got B=8192, NH=12: B*NH = 98304"),
    ("cli-block-sizes", ["forward", "--block-sizes", "32,48"], POWER_OF_TWO + "48"),
    ("cli-block-sizes-zero", ["forward", "--block-sizes", "0"], POWER_OF_TWO + "0"),
    ("cli-block-sizes-negative", ["backward", "8", "--block-sizes", "-32"], POWER_OF_TWO + "-32"),
    ("cli-block-sizes-33", ["forward", "--block-sizes", "64,33"], POWER_OF_TWO + "33"),
    ("cli-block-sizes-text", ["forward", "--block-sizes", "abc"],
     "--block-sizes must be comma-separated integers, got 'abc'"),
    ("cli-block-sizes-text-item", ["forward", "--block-sizes", "64,x"],
     "--block-sizes must be comma-separated integers, got 'x' in '64,x'"),
    ("cli-block-sizes-empty-item", ["forward", "--block-sizes", "64,,128"],
     f"--block-sizes must be comma-separated values with none empty, got '64,,128' {EMPTY}"),
    ("cli-block-sizes-trailing-comma", ["backward", "8", "--block-sizes", "64,"],
     f"--block-sizes must be comma-separated values with none empty, got '64,' {EMPTY}"),
    ("cli-block-sizes-none", ["forward", "--block-sizes", ""],
     "--block-sizes must name at least one value, got ''"),
    ("cli-block-sizes-twice", ["forward", "--block-sizes", "64,128,64"],
     "--block-sizes must name each value once, got 64 twice in '64,128,64'"),
    ("cli-block-sizes-fused", ["backward", "9", "--block-sizes", "64"],
     "--block-sizes does not apply to backward 9: a fused kernel runs with one block size (128 "
     "threads); got --block-sizes '64'"),
    ("cli-repeats", ["forward", "--repeats", "0"], "--repeats must be >= 1, got 0"),
    ("cli-warmup", ["backward", "8", "--warmup", "-1"], "--warmup must be >= 0, got -1"),
    ("cli-seed", ["forward", "--seed", "-1"], "--seed must be >= 0, got -1"),
    ("cli-fused-head-size", ["backward", "10", "--tf32", "--C", "96", "--NH", "3"],
     "the fused attention kernels support head size HS = C / NH in [64] only, got HS = 96 / 3 = "
     "32. The materialized pipeline (attnlab.attention, kernels 1-8) takes any head size but "
     "keeps four B*NH*T*T float buffers: at B=4 T=1024 C=96 NH=3 it needs 0.21 GiB of GPU memory"),
    *[(f"cli-tf32-only-{k}", ["backward", str(k)], f"backward {k} runs in TF32 only: add --tf32 "
       f"(python -m attnlab backward {k} --tf32); for fp32 accuracy use backward 18 or 11 (3xTF32)")
      for k in TF32_ONLY],
    ("cli-fp32-only-18", ["backward", "18", "--tf32"], "backward 18 is fp32-accurate only (3xTF32): "
     "drop --tf32 (python -m attnlab backward 18); for TF32 use backward 17 --tf32"),
    ("cli-report-kernels", ["report", "--ncu-only", "--kernels", "8,9"],
     "--kernels must be a comma-separated subset of 1,2,3,4,5,6,7,8, got '9' in '8,9'"),
]


@pytest.mark.parametrize("args, message", [pytest.param(a, m, id=i) for i, a, m in REFUSALS])
def test_bad_arguments_exit_2_before_any_gpu_work(forbid_gpu, capsys, args, message):
    assert main(capsys, *args) == (2, "", f"attnlab: {message}\n")


@pytest.mark.parametrize("args, message", [
    pytest.param(["backward", "x"], "argument kernel: invalid int value: 'x'", id="cli-kernel-type"),
    pytest.param(["forward", "--B", "4.5"], "argument --B: invalid int value: '4.5'", id="cli-int"),
    pytest.param(["fwd"], "invalid choice: 'fwd'", id="cli-command"),
    pytest.param(["forward", "--bogus"], "unrecognized arguments: --bogus", id="cli-option"),
    pytest.param(["backward"], "the following arguments are required: kernel", id="cli-no-kernel"),
])
def test_argparse_refusals_exit_2_with_the_usage(forbid_gpu, capsys, args, message):
    status, out, err = main(capsys, *args)
    assert status == 2 and out == ""
    assert err.startswith("usage: python -m attnlab") and message in err


def test_a_refusal_is_one_line_from_a_real_process():
    """The exit status and stderr a shell sees (not only cli.main's return value)."""
    p = run("forward", "--block-sizes", "64,,128")
    assert p.returncode == 2 and p.stdout == ""
    assert p.stderr == ("attnlab: --block-sizes must be comma-separated values with none empty, "
                        f"got '64,,128' {EMPTY}\n")


def test_arguments_are_checked_before_the_cpu_reference(monkeypatch, capsys):
    """forward/backward check that the buffers fit in the GPU's free memory before computing
    the CPU reference (hours, or a host MemoryError, at big shapes)."""
    fake = dict(name="Fake GPU", arch="sm_90", sms=1, driver_version="13.0", cuda_version="13.0",
                memory_free_bytes=2**30, memory_total_bytes=2**30, l2_cache_bytes=2**20)
    monkeypatch.setattr(device, "device_info", lambda: fake)

    def reference_first(*a, **k):
        raise AssertionError("the CPU reference was computed before the GPU memory check")
    monkeypatch.setattr(problem, "make_problem", reference_first)
    status, out, err = main(capsys, "forward", "--B", "16", "--T", "16384")
    assert status == 2 and out == ""
    assert err.startswith("attnlab: B=16 T=16384 C=768 NH=12 needs 418,759,311,360 bytes "
                          "(390.00 GiB) of GPU memory for its buffers, but only ")


# ------------------------------------------------------------ no GPU, wrong result, a bug

@pytest.mark.parametrize("args", [["info"], ["forward"], ["backward", "8"],
                                  ["backward", "9", "--tf32"]],
                         ids=["info", "forward", "backward", "backward-fused"])
def test_without_a_gpu_exits_2_naming_it(no_gpu, capsys, args):
    status, out, err = main(capsys, *args)
    assert status == 2 and out == ""
    assert re.fullmatch(r"attnlab: .+ needs a CUDA GPU: no GPU in this test\n", err)


def test_a_wrong_result_raised_as_validation_error_exits_1(monkeypatch, capsys):
    from attnlab import ValidationError

    def wrong():
        raise ValidationError("dinp: 3 of 12 elements outside tol")
    monkeypatch.setattr(cli, "info", wrong)
    assert main(capsys, "info") == (1, "", "attnlab: dinp: 3 of 12 elements outside tol\n")


def test_internal_error_exits_3_saying_how_to_report(monkeypatch, capsys):
    """An exception attnlab did not mean to raise is its own bug: status 3 (1 means a wrong
    result), the traceback, 'internal error' and where to report it."""
    def planted_bug():
        raise ZeroDivisionError("planted")
    monkeypatch.setattr(cli, "info", planted_bug)
    status, _, err = main(capsys, "info")
    assert status == 3
    assert "ZeroDivisionError: planted" in err and "Traceback" in err
    assert "internal error" in err and "Reporting a bug" in err


# ------------------------------------------------------------ help

def test_help_lists_the_exit_statuses(capsys):
    status, out, _ = main(capsys, "--help")
    assert status == 0
    for line in ("0  everything ran", "1  a result was wrong", "2  could not run here",
                 "3  internal error"):
        assert line in out


def test_backward_help_lists_every_kernel(capsys):
    """Kernels 1-8 in one entry, then one per fused kernel, each with the GPUs that run it."""
    status, out, _ = main(capsys, "backward", "--help")
    assert status == 0 and "\n".join(kernel_lines()) in out
    entries = re.findall(r"^  (\d+(?:-\d+)?) +(.+(?:\n {8}.+)*)", out.split("kernels (N):")[1],
                         re.M)
    assert [label for label, _ in entries] == [f"{KERNELS[0]}-{KERNELS[-1]}",
                                               *map(str, FUSED_KERNELS)]
    assert all(re.search(r"runs on (sm_\d+, )*sm_90$", " ".join(text.split()))
               for _, text in entries)
    text = {label: " ".join(entry.split()) for label, entry in entries}   # wherever the help wrapped
    for k in TF32_ONLY:
        assert "TF32 only (give --tf32)" in text[str(k)]
    assert "fp32-accurate 3xTF32 only (no --tf32)" in text["18"]


# ------------------------------------------------------------ on a GPU

@pytest.mark.gpu
def test_backward_json_on_a_small_shape():
    p = run("backward", "8", "--B", "2", "--T", "260", "--C", "192", "--NH", "3",
            "--repeats", "2", "--block-sizes", "64,256", "--json")
    assert p.returncode == 0, p.stderr
    out = json.loads(p.stdout)
    assert out["valid"] and set(out["timings_ms"]) == {"64", "256"}
    assert set(out["validation"]) == {"preatt", "att", "out", "datt", "dpreatt", "dinp"}
    assert all(v["checked"] > 0 for v in out["validation"].values())


@pytest.mark.gpu
def test_without_nvcc_exits_2_naming_it():
    """A missing nvcc is a piece missing here (exit 2), said in one line, not a traceback."""
    p = run("forward", "--B", "1", "--T", "8", "--C", "6", "--NH", "2", "--repeats", "1",
            env={"PATH": ""})
    assert p.returncode == 2, p.stderr
    assert "attnlab: nvcc is not on PATH" in p.stderr
    assert "Traceback" not in p.stderr
