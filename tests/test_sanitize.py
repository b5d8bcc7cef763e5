"""``python -m attnlab sanitize``: the commands it builds, how it reads compute-sanitizer's
output, its exit status and the target process. Everything but the tests marked gpu runs
without a GPU (the sanitizer's output is canned, the kernels are fakes); those run
compute-sanitizer for real on a GPU host."""
import json
import os
import shutil
import subprocess
import sys
import types

import pytest

from attnlab import InputError, sanitize
from attnlab.processes import Finished
from attnlab.sanitize import Result, SHAPES

CLEAN = """\
========= COMPUTE-SANITIZER
@@attnlab-sanitize {"step": "forward", "shape": [1, 516, 192, 3], "seconds": 0.5}
@@attnlab-sanitize {"step": "backward", "shape": [1, 516, 192, 3], "kernel": 8, "block_size": 256, "seconds": 0.2}
@@attnlab-sanitize {"step": "done"}
========= LEAK SUMMARY: 0 bytes leaked in 0 allocations
========= ERROR SUMMARY: 0 errors
"""

MEMCHECK_ERROR = """\
========= COMPUTE-SANITIZER
========= Invalid __global__ write of size 4 bytes
=========     at softmax_autoregressive_backward_kernel4+0x1a0 in softmax_backward4.cu:70
=========     by thread (8,0,0) in block (3,2,0)
=========     Address 0x7f3a00001000 is out of bounds
=========     and is 1 bytes after the nearest allocation at 0x7f3a00000000 of size 4096 bytes
=========
========= Invalid __global__ write of size 4 bytes
=========     at softmax_autoregressive_backward_kernel4+0x1a0 in softmax_backward4.cu:70
=========     by thread (9,0,0) in block (3,2,0)
=========
========= LEAK SUMMARY: 0 bytes leaked in 0 allocations
========= ERROR SUMMARY: 2 errors
"""

RACE = """\
========= COMPUTE-SANITIZER
========= Error: Race reported between Write access at softmax_autoregressive_backward_kernel8+0x2f0 in softmax_backward8.cu:70
=========     and Read access at softmax_autoregressive_backward_kernel8+0x340 in softmax_backward8.cu:73 [64 hazards]
=========
========= RACECHECK SUMMARY: 1 hazard displayed (1 error, 0 warnings)
========= ERROR SUMMARY: 1 error
"""

CUBLAS_INIT = """\
========= COMPUTE-SANITIZER
========= Uninitialized __global__ memory read of size 4 bytes
=========     at void gemmSN_NN_kernel<float, 256, 4, 2, 8, 4, 4, false>(cublasGemmSmallNParams<float>)+0x1c0
=========     by thread (0,0,0) in block (0,0,0)
=========
@@attnlab-sanitize {"step": "done"}
========= ERROR SUMMARY: 1 error
"""

LEAK = """\
========= COMPUTE-SANITIZER
========= Leaked 1048576 bytes at 0x7f0000000000
=========
@@attnlab-sanitize {"step": "done"}
========= LEAK SUMMARY: 1048576 bytes leaked in 1 allocations
========= ERROR SUMMARY: 1 error
"""

CRASHED = """\
========= COMPUTE-SANITIZER
Traceback (most recent call last):
  File "x.py", line 1, in <module>
ImportError: No module named pycuda
========= Error: Target application returned an error
"""

SMALL = SHAPES["small"]
DEFAULT = SHAPES["default"]
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(sanitize.__file__)))


def result(text, tool="memcheck", rc=0, timed_out=False, shape=SMALL, name="small"):
    return Result(tool, name, shape, [(8, 256)], ["compute-sanitizer", "x"], rc, 1.0, timed_out,
                  sanitize.parse_report(text), sanitize.target_records(text))


# ------------------------------------------------------------ the commands

@pytest.mark.parametrize("tool", sanitize.TOOLS)
def test_command_runs_the_target_under_the_tool(tool):
    cmd = sanitize.sanitizer_command("/cuda/bin/compute-sanitizer", tool,
                                     sanitize.target_args([(SMALL, [(4, 256), (8, 32)])]),
                                     port=49172)
    assert cmd[:3] == ["/cuda/bin/compute-sanitizer", "--tool", tool]
    assert cmd[cmd.index("--error-exitcode") + 1] == "99"
    assert cmd[cmd.index("--port") + 1] == "49172"
    # the target comes last, after every sanitizer option
    i = cmd.index(sys.executable)
    assert cmd[i:] == [sys.executable, "-m", "attnlab.sanitize", "--target",
                       "--shape", "1x516x192x3", "--runs", "4:256,8:32", "--extra", "fused,ceilings"]
    assert all(not a.startswith("--") or a in sanitize.COMMON_OPTIONS + sanitize.TOOL_OPTIONS[tool]
               + ("--tool", "--port") for a in cmd[:i])


def test_tool_specific_flags():
    args = sanitize.target_args([(SMALL, [(8, 256)])])
    mem = sanitize.sanitizer_command("cs", "memcheck", args)
    assert mem[mem.index("--leak-check") + 1] == "full"
    race = sanitize.sanitizer_command("cs", "racecheck", args)
    assert race[race.index("--racecheck-report") + 1] == "analysis"
    assert "--leak-check" not in race
    with pytest.raises(InputError, match="tool must be one of .*got 'asan'"):
        sanitize.sanitizer_command("cs", "asan", args)


def test_plan_skips_kernel_1_only_at_large_shapes():
    runs, skipped = sanitize.plan(DEFAULT)
    assert 1 not in {k for k, _ in runs}
    assert len(skipped) == 1 and "kernel 1 skipped" in skipped[0] and "--include-slow" in skipped[0]
    runs, skipped = sanitize.plan(DEFAULT, include_slow=True)
    assert (1, 256) in runs and not skipped
    runs, skipped = sanitize.plan(SMALL)
    assert (1, 256) in runs and not skipped


def test_plan_adds_extra_block_sizes_to_kernels_compiled_per_block_size():
    runs, _ = sanitize.plan(SMALL)
    assert runs == [(k, 256) for k in range(1, 6)] + [
        (k, bs) for k in (6, 7, 8) for bs in (256, 32, 1024)]
    runs, _ = sanitize.plan(SMALL, [2, 7], block_sizes=[64], extra_block_sizes=[64, 512])
    assert runs == [(2, 64), (7, 64), (7, 512)]


def test_target_args_round_trip():
    runs, _ = sanitize.plan(SMALL, [3, 6])
    args = sanitize.target_args([(SMALL, runs)], extra=("ceilings",))
    assert sanitize._parse_runs(args[args.index("--runs") + 1]) == runs
    assert sanitize.parse_shape(args[args.index("--shape") + 1])[1] == SMALL
    assert sanitize.parse_extra(args[args.index("--extra") + 1]) == ("ceilings",)
    assert sanitize.target_args([(SMALL, runs)], extra=())[-2:] == ["--extra", "none"]
    assert sanitize.target_args([], plant="racecheck") == ["--target", "--plant", "racecheck"]


def test_extra_names_the_targets_besides_the_softmax_pipeline():
    assert sanitize.parse_extra("fused,ceilings") == ("fused", "ceilings")
    assert sanitize.parse_extra("ceilings") == ("ceilings",)
    assert sanitize.parse_extra("none") == sanitize.parse_extra("") == ()
    with pytest.raises(InputError, match="--extra must be a comma-separated subset of "
                                         "fused,ceilings, got 'flash'"):
        sanitize.parse_extra("flash")


def test_the_default_shape_is_the_series_default():
    from attnlab.problem import DEFAULT
    assert SHAPES["default"] is DEFAULT and SHAPES["small"].astuple() == (1, 516, 192, 3)


@pytest.mark.parametrize("text, shape", [("default", (4, 1024, 768, 12)),
                                         ("small", (1, 516, 192, 3)),
                                         ("2x260x192x3", (2, 260, 192, 3))])
def test_parse_shape(text, shape):
    assert sanitize.parse_shape(text)[1].astuple() == shape


@pytest.mark.parametrize("text, match", [
    ("huge", "each shape must be one of .*got 'huge'"),
    ("2x260x192", "BxTxCxNH"),
    ("2x258x192x3", "--shapes '2x258x192x3': T must be a multiple of 4.*T=258"),
    ("2x260x190x3", "C must be divisible by NH"),
])
def test_bad_shapes(text, match):
    with pytest.raises(InputError, match=match):
        sanitize.parse_shape(text)


def test_find_sanitizer(tmp_path, monkeypatch):
    with pytest.raises(sanitize.SanitizerNotFoundError) as e:
        sanitize.find_sanitizer(path=str(tmp_path), dirs=[str(tmp_path)])
    assert str(e.value) == ("compute-sanitizer not found on PATH (it ships with the CUDA "
                            "toolkit: /usr/local/cuda/bin)")
    exe = tmp_path / "bin" / "compute-sanitizer"
    exe.parent.mkdir()
    exe.write_text("#!/bin/sh\n")
    exe.chmod(0o755)
    assert sanitize.find_sanitizer(path="", dirs=[str(exe.parent)]) == str(exe)   # the fallback
    assert sanitize.find_sanitizer(path=str(exe.parent), dirs=[]) == str(exe)     # on PATH


# ------------------------------------------------------------ reading the output

def test_clean_run():
    r = result(CLEAN)
    assert r.report.errors == 0 and r.report.leaked_bytes == 0 and r.report.lines == []
    assert r.status == "clean" and sanitize.classify(r)
    assert [s["step"] for s in r.steps] == ["forward", "backward", "done"]


def test_errors_are_counted_and_attributed():
    r = result(MEMCHECK_ERROR, rc=99)
    assert r.report.errors == 2 and r.status == "ERRORS" and not sanitize.classify(r)
    assert r.report.kernels == ["softmax_autoregressive_backward_kernel4"]
    assert r.report.lines[0] == " Invalid __global__ write of size 4 bytes"
    table = sanitize.format_table([r], {"softmax_autoregressive_backward_kernel4"})
    assert "softmax_autoregressive_backward_kernel4 (ours)" in table
    assert "Address 0x7f3a00001000 is out of bounds" in table
    assert "rerun it alone with: compute-sanitizer x" in table


def test_racecheck_summary():
    r = result(RACE, "racecheck", rc=99)
    assert (r.report.errors, r.report.race_errors, r.report.race_warnings) == (1, 1, 0)
    assert r.report.kernels == ["softmax_autoregressive_backward_kernel8"]
    assert r.status == "ERRORS"


# What racecheck of compute-sanitizer 2025.3.1 printed on the H200: a RACECHECK SUMMARY and
# no ERROR SUMMARY line.
RACECHECK_2025_CLEAN = """\
========= COMPUTE-SANITIZER
@@attnlab-sanitize {"step": "backward", "shape": [1, 516, 192, 3], "kernel": 8, "block_size": 256, "seconds": 3.3}
@@attnlab-sanitize {"step": "done"}
========= RACECHECK SUMMARY: 0 hazards displayed (0 errors, 0 warnings)
"""
RACECHECK_2025_PLANTED = """\
========= COMPUTE-SANITIZER
========= Error: Race reported between Write access at read_without_barrier+0xb0
=========     and Read access at read_without_barrier+0xc0 [256 hazards]
========= 
@@attnlab-sanitize {"step": "planted", "tool": "racecheck", "kernel": "read_without_barrier"}
@@attnlab-sanitize {"step": "done"}
========= RACECHECK SUMMARY: 1 hazard displayed (1 error, 0 warnings)
"""


def test_racecheck_without_an_error_summary_line():
    clean = result(RACECHECK_2025_CLEAN, "racecheck")
    assert (clean.report.errors, clean.report.race_errors) == (0, 0)
    assert clean.status == "clean"
    planted = result(RACECHECK_2025_PLANTED, "racecheck", rc=99)
    assert planted.report.errors == 1 and planted.status == "ERRORS"
    assert sanitize.classify(planted, expect_errors=True)
    assert planted.report.kernels == ["read_without_barrier"]


def test_race_warnings_alone_are_not_clean():
    text = CLEAN.replace("========= LEAK SUMMARY: 0 bytes leaked in 0 allocations",
                         "========= RACECHECK SUMMARY: 2 hazards displayed (0 errors, 2 warnings)")
    assert result(text, "racecheck").status == "ERRORS"


def test_errors_in_cublas_are_named_as_not_ours():
    r = result(CUBLAS_INIT, "initcheck", rc=99)
    assert r.report.kernels == ["gemmSN_NN_kernel<float, 256, 4, 2, 8, 4, 4, false>"]
    table = sanitize.format_table([r], {"permute_kernel"})
    assert "(not ours: cuBLAS or PyCUDA)" in table
    assert "Uninitialized __global__ memory read" in table


def test_leaks_are_errors():
    r = result(LEAK, rc=99)
    assert (r.report.leaked_bytes, r.report.leaked_allocations) == (1048576, 1)
    assert r.status == "ERRORS"
    assert "1048576 B" in sanitize.format_table([r])


def test_a_run_without_a_summary_failed():
    r = result(CRASHED, rc=1)
    r.tail = "ImportError: No module named pycuda"
    assert r.report.errors is None and r.status == "FAILED"
    assert "ImportError" in sanitize.format_table([r])


def test_a_target_that_did_not_finish_failed():
    assert result(CLEAN.replace('@@attnlab-sanitize {"step": "done"}\n', "")).status == "FAILED"
    assert result(CLEAN, rc=1).status == "FAILED"


def test_timeout():
    assert result("", timed_out=True).status == "TIMEOUT"


def test_self_test_passes_when_the_planted_bug_is_reported():
    assert sanitize.classify(result(MEMCHECK_ERROR, rc=99), expect_errors=True)
    assert not sanitize.classify(result(CLEAN), expect_errors=True)
    table = sanitize.format_table([result(CLEAN)], expect_errors=True)
    assert "MISSED" in table


def test_every_kernel_source_is_known_by_name():
    names = sanitize.our_kernel_names()
    assert {"permute_kernel", "unpermute_kernel", "unpermute_backward_kernel",
            "permute_backward_kernel", "softmax_forward_kernel5"} <= names
    assert {f"softmax_autoregressive_backward_kernel{k}" for k in range(1, 9)} <= names


# ------------------------------------------------------------ the command, end to end (canned)

@pytest.fixture
def fake_gpu_host(monkeypatch):
    """A GPU and a compute-sanitizer that are not there: every subprocess is answered here."""
    import attnlab.device
    monkeypatch.setattr(attnlab.device, "gpu_status", lambda: (True, "Fake GPU"))
    monkeypatch.setattr(sanitize, "find_sanitizer", lambda: "/fake/compute-sanitizer")
    monkeypatch.setattr(sanitize, "sanitizer_version", lambda exe: "2025.3.1.0")
    calls = []

    def answer(cmd, timeout, *, env=None, cwd=None, merge_stderr=False):
        assert merge_stderr and env["PYTHONPATH"].split(os.pathsep)[0] == ROOT
        calls.append(cmd)
        if cmd[0] == sys.executable:            # the native run
            return Finished(0, '@@attnlab-sanitize {"step": "done"}\n', "", 1.0, False)
        tool = cmd[cmd.index("--tool") + 1]
        return Finished(*((99, RACE) if tool == "racecheck" else (0, CLEAN)), "", 2.0, False)

    monkeypatch.setattr(sanitize, "run_process", answer)
    return calls


def run_cli(*args):
    from attnlab.cli import main
    return main(["sanitize", *args])


def test_cli_runs_native_first_then_each_tool_and_shape(fake_gpu_host, capsys):
    status = run_cli("--tools", "memcheck,synccheck", "--kernels", "1,8")
    out, err = capsys.readouterr()
    assert status == 0, out + err
    native, *runs = fake_gpu_host
    assert native[:4] == [sys.executable, "-m", "attnlab.sanitize", "--target"]
    assert native.count("--shape") == 2
    assert sorted((c[c.index("--tool") + 1], c[c.index("--shape") + 1]) for c in runs) == [
        ("memcheck", "1x516x192x3"), ("memcheck", "4x1024x768x12"),
        ("synccheck", "1x516x192x3"), ("synccheck", "4x1024x768x12")]
    default_run = next(c for c in runs if "4x1024x768x12" in c)
    assert default_run[default_run.index("--runs") + 1] == "8:256,8:32,8:1024"   # no kernel 1
    assert all(c[c.index("--extra") + 1] == "fused,ceilings" for c in [native, *runs])
    assert "kernel 1 skipped at B=4 T=1024 C=768 NH=12" in out
    assert "all clean: 0 errors in every run" in out
    assert len({c[c.index("--port") + 1] for c in runs}) == 4, "parallel runs use their own ports"


def test_cli_split_runs_each_kernel_and_each_named_target_on_its_own(fake_gpu_host, capsys,
                                                                      tmp_path):
    status = run_cli("--shapes", "default", "--tools", "racecheck", "--kernels", "4,8",
                     "--extra-block-sizes", "32", "--split", "--log-dir", str(tmp_path))
    out, err = capsys.readouterr()
    assert status == 1, out + err                      # the canned racecheck output has a race
    native, *runs = fake_gpu_host
    assert native[native.index("--extra") + 1] == "fused,ceilings"   # natively: all, once
    got = sorted((c[c.index("--runs") + 1], c[c.index("--extra") + 1]) for c in runs)
    assert got == [("", "ceilings"), ("", "fused"), ("4:256", "none"), ("8:256", "none"),
                   ("8:32", "none")]
    assert all(c[c.index("--kernel-name-exclude") + 1] == "kns=gemm" for c in runs)
    assert len({c[c.index("--port") + 1] for c in runs}) == 5
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        "racecheck-default-ceilings.log", "racecheck-default-fused.log",
        "racecheck-default-k4-bs256.log", "racecheck-default-k8-bs256.log",
        "racecheck-default-k8-bs32.log"]
    assert (tmp_path / "racecheck-default-fused.log").read_text().startswith(
        "/fake/compute-sanitizer --tool racecheck")
    assert "racecheck default k8-bs32: ERRORS" in err and "racecheck default fused: ERRORS" in err
    assert "kernels named *gemm* (cuBLAS's GEMMs) run uninstrumented" in out
    table = out.split("\n\n")[0]
    assert "forward only" not in table and "+ fused " in table and " 8@32 " in table


def test_cli_self_test_runs_each_planted_bug_and_says_which_were_missed(fake_gpu_host, capsys):
    status = run_cli("--self-test", "--tools", "memcheck,racecheck")
    out, err = capsys.readouterr()
    assert status == 1, out + err                   # canned: only racecheck reports an error
    assert len(fake_gpu_host) == 2                  # no native run for the self-test
    assert sorted(c[c.index("--plant") + 1] for c in fake_gpu_host) == ["memcheck", "racecheck"]
    assert "racecheck self-test: caught" in err and "memcheck self-test: MISSED" in err
    assert "a planted bug was MISSED" in out


def test_split_parts():
    assert sanitize.split_parts([(2, 256), (6, 32)], ("fused", "ceilings")) == [
        ("k2-bs256", [(2, 256)], ()), ("k6-bs32", [(6, 32)], ()),
        ("fused", [], ("fused",)), ("ceilings", [], ("ceilings",))]
    assert sanitize.split_parts([(2, 256)], ()) == [("k2-bs256", [(2, 256)], ())]
    assert sanitize.split_parts([], ()) == [("", [], ())]      # the forward, at least


def test_cli_exits_1_and_shows_the_errors(fake_gpu_host, capsys):
    status = run_cli("--quick", "--tools", "memcheck,racecheck", "--json")
    out = json.loads(capsys.readouterr().out)
    assert status == 1 and not out["ok"]
    by_tool = {r["tool"]: r for r in out["runs"]}
    assert by_tool["memcheck"]["status"] == "clean"
    assert by_tool["racecheck"]["status"] == "ERRORS"
    assert by_tool["racecheck"]["report"]["kernels"] == ["softmax_autoregressive_backward_kernel8"]
    assert by_tool["memcheck"]["shape"] == [1, 516, 192, 3]
    assert by_tool["memcheck"]["extra"] == ["fused", "ceilings"]
    assert set(out) >= {"sanitizer", "version", "ok", "skipped", "runs", "native_steps", "not_run"}


NO_SANITIZER = ("compute-sanitizer not found on PATH (it ships with the CUDA toolkit: "
                "/usr/local/cuda/bin)")


@pytest.fixture
def no_sanitizer(monkeypatch, tmp_path):
    monkeypatch.setenv("PATH", str(tmp_path))
    monkeypatch.delenv("CUDA_HOME", raising=False)
    monkeypatch.delenv("CUDA_PATH", raising=False)
    monkeypatch.setattr(sanitize, "SANITIZER_DIRS", (str(tmp_path),))


def gpu_here(monkeypatch, ok):
    import attnlab.device
    monkeypatch.setattr(attnlab.device, "gpu_status",
                        lambda: (True, "Fake GPU") if ok else (False, "no GPU in this test"))


def test_cli_without_compute_sanitizer_exits_2(no_sanitizer, monkeypatch, capsys):
    gpu_here(monkeypatch, True)
    assert run_cli("--quick") == 2
    assert capsys.readouterr().err == f"attnlab: {NO_SANITIZER}\n"


def test_cli_without_gpu_exits_2(monkeypatch, capsys):
    monkeypatch.setattr(sanitize, "find_sanitizer", lambda: "/fake/compute-sanitizer")
    gpu_here(monkeypatch, False)
    assert run_cli("--quick") == 2
    assert capsys.readouterr().err == ("attnlab: python -m attnlab sanitize needs a CUDA GPU: "
                                       "no GPU in this test\n")


def test_cli_without_gpu_and_sanitizer_names_both(no_sanitizer, monkeypatch, capsys):
    """A machine with neither (a laptop, CI): one line naming the GPU first, then the tool."""
    gpu_here(monkeypatch, False)
    assert run_cli("--quick") == 2
    assert capsys.readouterr().err == ("attnlab: python -m attnlab sanitize needs a CUDA GPU: "
                                       f"no GPU in this test; and {NO_SANITIZER}\n")


@pytest.mark.parametrize("args, message", [
    (["--tools", "memchek"], "--tools must be a comma-separated subset of memcheck,racecheck,"
                             "initcheck,synccheck, got 'memchek'"),
    (["--kernels", "0,9"], "--kernels must be one of [1, 2, 3, 4, 5, 6, 7, 8], got 0"),
    (["--kernels", "x"], "--kernels must be one of [1, 2, 3, 4, 5, 6, 7, 8], got 'x'"),
    (["--block-sizes", "48"], "--block-sizes must be a power of two in 32..1024"),
    (["--extra-block-sizes", "2048"], "--extra-block-sizes must be a power of two in 32..1024"),
    (["--shapes", "4x1022x768x12"], "T must be a multiple of 4"),
    (["--jobs", "0"], "--jobs must be >= 1, got 0"),
    (["--timeout", "0"], "--timeout must be >= 1, got 0"),
    (["--extra", "fused,flash"], "--extra must be a comma-separated subset of fused,ceilings, "
                                 "got 'flash'"),
])
def test_cli_bad_options_exit_2_before_anything_runs(args, message):
    p = subprocess.run([sys.executable, "-m", "attnlab", "sanitize", *args],
                       capture_output=True, text=True)
    assert p.returncode == 2 and message in p.stderr and p.stdout == ""


# ------------------------------------------------------------ on the GPU host, for real

needs_sanitizer = pytest.mark.skipif(
    shutil.which("compute-sanitizer") is None
    and not os.access("/usr/local/cuda/bin/compute-sanitizer", os.X_OK),
    reason="compute-sanitizer is not on PATH nor in /usr/local/cuda/bin")


@pytest.mark.gpu
@needs_sanitizer
def test_small_sanitize_run_is_clean():
    p = subprocess.run([sys.executable, "-m", "attnlab", "sanitize", "--shapes", "small",
                        "--tools", "memcheck,racecheck", "--kernels", "4,8", "--json"],
                       capture_output=True, text=True, timeout=1200)
    assert p.returncode == 0, p.stdout + p.stderr
    out = json.loads(p.stdout)
    assert out["ok"] and len(out["runs"]) == 2
    for r in out["runs"]:
        assert r["report"]["errors"] == 0 and r["status"] == "clean"
        ran = {(s.get("kernel"), s.get("block_size")) for s in r["steps"] if s["step"] == "backward"}
        assert ran == {(4, 256), (8, 256), (8, 32), (8, 1024)}
        assert [s["target"] for s in r["steps"] if s["step"] == "extra"] == ["fused", "ceilings"]


@pytest.mark.gpu
@needs_sanitizer
def test_split_run_covers_the_kernel_and_each_named_target_apart():
    p = subprocess.run([sys.executable, "-m", "attnlab", "sanitize", "--shapes", "small",
                        "--tools", "memcheck", "--kernels", "8", "--extra-block-sizes", "none",
                        "--split", "--json"],
                       capture_output=True, text=True, timeout=1200)
    assert p.returncode == 0, p.stdout + p.stderr
    out = json.loads(p.stdout)
    assert out["ok"] and out["not_run"] == {f"softmax_backward{k}": "not selected (--kernels)"
                                            for k in range(1, 8)}
    by_part = {r["part"]: r for r in out["runs"]}
    assert sorted(by_part) == ["ceilings", "fused", "k8-bs256"]
    for part, r in by_part.items():
        assert r["status"] == "clean" and r["report"]["errors"] == 0
        kinds = [s["step"] for s in r["steps"]]
        if part == "k8-bs256":
            assert kinds == ["forward", "backward", "done"] and r["extra"] == []
        else:
            assert kinds == ["forward", "extra", "done"] and r["extra"] == [part]
            assert r["steps"][1]["target"] == part
            assert set(r["steps"][1]["sources"]) >= set(sanitize.TARGETS[part][1])


@pytest.mark.gpu
@needs_sanitizer
def test_planted_bugs_are_caught():
    """A clean report means something only if the same set-up reports a real bug."""
    p = subprocess.run([sys.executable, "-m", "attnlab", "sanitize", "--self-test",
                        "--tools", "memcheck,racecheck,initcheck", "--json"],
                       capture_output=True, text=True, timeout=1200)
    assert p.returncode == 0, p.stdout + p.stderr
    runs = {r["tool"]: r for r in json.loads(p.stdout)["runs"]}
    assert "Invalid __global__ write" in "\n".join(runs["memcheck"]["report"]["lines"])
    assert runs["racecheck"]["report"]["errors"] >= 1
    assert "Uninitialized __global__ memory read" in "\n".join(runs["initcheck"]["report"]["lines"])


# ------------------------------------------------------------ the target's own logic (fake GPU)

class FakeBuffers:
    """Stands in for AttentionBuffers: numpy arrays, and records what ran."""
    log = []

    def __init__(self, B, T, C, NH, backward=True):
        import numpy as np
        self.arrays = {"out": np.zeros((B, T, C), np.float32),
                       "dinp": np.zeros((B, T, 3 * C), np.float32)}
        self.log.append(("alloc", (B, T, C, NH)))

    def set(self, name, host):
        self.log.append(("set", name))

    def get(self, name):
        return self.arrays[name]

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.log.append(("free",))


@pytest.fixture
def fake_attention(monkeypatch):
    from attnlab import attention
    FakeBuffers.log = []
    monkeypatch.setattr(attention, "AttentionBuffers", FakeBuffers)
    monkeypatch.setattr(attention, "forward", lambda buf, bs: FakeBuffers.log.append(("fwd", bs)))
    monkeypatch.setattr(attention, "backward",
                        lambda buf, k, bs: FakeBuffers.log.append(("bwd", k, bs)))
    def fake_target(name, sources):               # the real ones need a GPU
        def steps(B, T, C, NH):
            FakeBuffers.log.append((name, (B, T, C, NH)))
            return list(sources)
        return steps, sources
    monkeypatch.setattr(sanitize, "TARGETS", {
        "fused": fake_target("fused", ("flash_attention",)),
        "ceilings": fake_target("ceilings", ("ceilings", "l2_flush"))})
    return FakeBuffers.log


def test_target_runs_forward_once_then_each_backward(fake_attention, capsys):
    args = ["--target", "--shape", "1x516x192x3", "--runs", "4:256,8:32",
            "--shape", "2x8x6x2", "--runs", "", "--extra", "none"]
    assert sanitize.main(args) == 0
    assert fake_attention == [
        ("alloc", (1, 516, 192, 3)), ("set", "inp"), ("set", "dout"), ("fwd", 256),
        ("bwd", 4, 256), ("bwd", 8, 32), ("free",),
        ("alloc", (2, 8, 6, 2)), ("set", "inp"), ("set", "dout"), ("fwd", 256), ("free",)]
    steps = sanitize.target_records(capsys.readouterr().out)
    assert [s["step"] for s in steps] == ["forward", "backward", "backward", "forward", "done"]


def test_target_reports_a_non_finite_result(fake_attention, monkeypatch, capsys):
    import numpy as np
    from attnlab import attention

    def nan_backward(buf, k, bs):
        buf.arrays["dinp"][0, 0, 0] = np.nan
    monkeypatch.setattr(attention, "backward", nan_backward)
    assert sanitize.main(["--target", "--shape", "small", "--runs", "5:64"]) == 3
    assert "backward kernel 5 (block size 64) wrote NaN/Inf into dinp" in capsys.readouterr().err


def test_target_checks_its_arguments(capsys):
    assert sanitize.main(["--target", "--shape", "small", "--runs", "9:256"]) == 2
    assert "kernel must be one of" in capsys.readouterr().err
    assert sanitize.main(["--target", "--shape", "small"]) == 2
    assert "give one --runs per --shape" in capsys.readouterr().err
    assert sanitize.main(["--target", "--shape", "small", "--runs", "", "--extra", "x"]) == 2
    assert "--extra must be a comma-separated subset of fused,ceilings" in capsys.readouterr().err


@pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc is not on PATH")
@pytest.mark.parametrize("tool", sanitize.TOOLS)
def test_planted_bugs_compile(tool):
    from attnlab import kernels
    name, source = sanitize.PLANTED[tool]
    assert kernels.kernel_names(source) == [name]
    kernels.nvcc_check(source, f"planted_{tool}.cu")


def test_target_runs_the_named_targets_after_the_pipeline(fake_attention, capsys):
    assert sanitize.main(["--target", "--shape", "small", "--runs", "8:256",
                          "--shape", "2x8x6x2", "--runs", ""]) == 0     # default: every target
    assert [e for e in fake_attention if e[0] in ("fwd", "bwd", "fused", "ceilings")] == [
        ("fwd", 256), ("bwd", 8, 256), ("fused", (1, 516, 192, 3)), ("ceilings", (1, 516, 192, 3)),
        ("fwd", 256), ("fused", (2, 8, 6, 2)), ("ceilings", (2, 8, 6, 2))]
    steps = sanitize.target_records(capsys.readouterr().out)
    extra = [s for s in steps if s["step"] == "extra"]
    assert [(s["target"], s["shape"], s["sources"]) for s in extra[:2]] == [
        ("fused", [1, 516, 192, 3], ["flash_attention"]),
        ("ceilings", [1, 516, 192, 3], ["ceilings", "l2_flush"])]
    assert steps[-1] == {"step": "done"}


@pytest.mark.parametrize("extra, ran", [("ceilings", ["ceilings"]), ("none", [])])
def test_target_runs_only_the_named_targets_chosen(fake_attention, capsys, extra, ran):
    assert sanitize.main(["--target", "--shape", "small", "--runs", "8:256", "--extra", extra]) == 0
    assert [e[0] for e in fake_attention if e[0] in sanitize.TARGETS] == ran
    steps = sanitize.target_records(capsys.readouterr().out)
    assert [s["step"] for s in steps] == ["forward", "backward"] + ["extra"] * len(ran) + ["done"]


@pytest.mark.parametrize("name, module", [("fused", "attnlab.fused"),
                                          ("ceilings", "attnlab.ceilings")])
def test_each_named_target_calls_its_modules_sanitize_steps(monkeypatch, name, module):
    calls = []
    fake = types.ModuleType(module)
    fake.sanitize_steps = lambda B, T, C, NH: calls.append((B, T, C, NH)) or ["x"]
    monkeypatch.setitem(sys.modules, module, fake)
    assert sanitize.TARGETS[name][0](1, 516, 192, 3) == ["x"] and calls == [(1, 516, 192, 3)]


def test_every_kernel_source_is_covered_by_a_run():
    """The pipeline, a softmax-backward kernel or a named target runs each kernels/*.cu (the
    fused target: every fused backward source, the sm_90a-only ones included; the ceilings
    target: wgmma_check, on sm_90)."""
    from attnlab import fused
    from attnlab.kernels import KERNEL_DIR
    covered = set(sanitize.PIPELINE_SOURCES) | {f"softmax_backward{k}" for k in range(1, 9)}
    covered |= {src for _, sources in sanitize.TARGETS.values() for src in sources}
    assert set(fused.BACKWARD_SOURCES.values()) <= set(sanitize.TARGETS["fused"][1])
    assert {p.stem for p in KERNEL_DIR.glob("*.cu")} - covered == set()
    assert sanitize.uncovered_sources([], ["mystery"]) == {
        "mystery": "no target runs it (add one to TARGETS in attnlab/sanitize.py)"}


def test_sources_not_run_are_listed():
    sources = ["permute", "softmax_forward", "softmax_backward1", "softmax_backward8",
               "flash_attention", "ceilings", "mystery"]
    r = result(CLEAN)                                   # ran kernel 8 only, no named target
    assert sanitize.uncovered_sources([r], sources) == {
        "softmax_backward1": "not selected (--kernels)",
        "flash_attention": "its target 'fused' was not selected (--extra)",
        "ceilings": "its target 'ceilings' was not selected (--extra)",
        "mystery": "no target runs it (add one to TARGETS in attnlab/sanitize.py)"}
    r.extra = ("fused", "ceilings")
    r.steps.append({"step": "extra", "target": "ceilings", "sources": ["ceilings"]})
    assert sanitize.uncovered_sources([r], sources)["flash_attention"] == (
        "its target 'fused' did not run it at these shapes on this GPU")
    r.steps.append({"step": "extra", "target": "fused", "sources": ["flash_attention"]})
    assert set(sanitize.uncovered_sources([r], sources)) == {"softmax_backward1", "mystery"}


def test_racecheck_leaves_cublas_uninstrumented_only_at_large_shapes():
    assert sanitize.excluded_kernels("racecheck", SHAPES["default"]) == ("gemm",)
    assert sanitize.excluded_kernels("racecheck", SHAPES["default"], racecheck_gemms=True) == ()
    assert sanitize.excluded_kernels("racecheck", SHAPES["small"]) == ()
    assert sanitize.excluded_kernels("memcheck", SHAPES["default"]) == ()
    cmd = sanitize.sanitizer_command("cs", "racecheck", ["--target"], exclude=("gemm",))
    i = cmd.index("--kernel-name-exclude")
    assert cmd[i + 1] == "kns=gemm" and cmd.index("-m") > i


def test_sanitizer_version_is_read_from_its_output(tmp_path):
    exe = tmp_path / "compute-sanitizer"
    exe.write_text("#!/bin/sh\necho 'NVIDIA (R) Compute Sanitizer'\necho 'Version 2025.3.1.0'\n")
    exe.chmod(0o755)
    assert sanitize.sanitizer_version(str(exe)) == "2025.3.1.0"
    assert sanitize.sanitizer_version(str(tmp_path / "missing")) == "unknown version"
