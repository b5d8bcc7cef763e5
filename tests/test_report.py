"""attnlab.report without a GPU: repeats_for, the README table from a synthetic results folder
(kernels.json and ceilings.json shaped as run(), measure_kernel() and measure_fused() write
them, built with the same helpers: report._stats, counts.count / floors / roof), the ncu step
on that folder, and the command line's ``report`` options.
"""
import json

import pytest

from attnlab import bench, cli, counts, evidence, report
from attnlab.checks import BLOCK_SIZES, KERNELS
from attnlab.problem import DEFAULT_SHAPE


@pytest.mark.parametrize("ms, repeats", [(0.001, 50), (0.5, 50), (0.999, 50), (1, 20),
                                         (1.0, 20), (1.5, 20), (5000, 20)])
def test_repeats_for(ms, repeats):
    assert report.repeats_for(ms) == repeats


# ------------------------------------------------------------------ a synthetic results folder

GPU = "NVIDIA Test GPU"
SHAPE = dict(DEFAULT_SHAPE)                                  # B=4 T=1024 C=768 NH=12
CEILINGS = {
    "gpu": GPU, "arch": "sm_90", "sms": 132, "clock_mhz": 1980,
    "launch": {"median_us": 2.5, "q1_us": 2.4, "q3_us": 2.6, "timing": {}},
    "copy": {"median": 4.0e12, "from_q3": 3.9e12, "to_q1": 4.1e12, "unit": "bytes/s",
             "timing": {}},
    "fma": {"median": 5.0e13, "from_q3": 4.9e13, "to_q1": 5.1e13, "unit": "multiply-adds/s",
            "timing": {}},
    "shared_load": {"median": 2.0e13, "from_q3": 1.9e13, "to_q1": 2.1e13, "unit": "bytes/s",
                    "timing": {}},
}
# kernel: (best block size, median ms of the softmax backward alone)
BEST = {1: (32, 800.0), 2: (64, 40.0), 3: (256, 8.0), 4: (128, 2.0), 5: (128, 1.0),
        6: (256, 0.5), 7: (256, 0.1), 8: (512, 0.08)}


def around(m):
    """Five repeats with median m and quartiles 0.95 m, 1.05 m."""
    return bench.Timing.of([m * 0.9, m * 0.95, m, m * 1.05, m * 1.1])


def kernel_entry(kernel, bs, ms):
    soft = around(ms)
    c = counts.count(kernel, SHAPE["B"], SHAPE["T"], SHAPE["NH"], bs)
    return {
        "kernel": kernel, "block_size": bs,
        "sweep_ms": {str(b): ms * (1 + abs(b - bs) / 1024)
                     for b in report.SWEEP_BLOCK_SIZES.get(kernel, BLOCK_SIZES)},
        "max_abs_err": {"datt": 1e-7, "dpreatt": 1e-8, "dinp": 1e-6},
        "softmax": report._stats(soft), "backward_fp32": report._stats(around(4 * ms)),
        "backward_tf32": report._stats(around(3 * ms)),
        "count": c.as_dict(), "floors_ms": counts.floors(c, CEILINGS),
        "roof": counts.roof(c, soft.median_ms, CEILINGS),
        "attributes": {"registers": 32, "shared_bytes": 0, "local_bytes": 0,
                       "max_threads_per_block": 1024},
        "occupancy": {str(b): evidence.occupancy(32, 0, b, "sm_90") for b in BLOCK_SIZES},
        "sass_loops": [],
    }


def fused_entry(tf32_supported=True):
    out = {"kernel": 9, "block_size": 128}
    out["backward_fp32"] = report._stats(around(0.6)) | {"max_abs_err": 2e-6}
    out["backward_tf32"] = (report._stats(around(0.25)) | {"max_abs_err": 3e-3}
                            if tf32_supported else {"unsupported": "TF32 needs sm_80 or newer"})
    out["flops"] = counts.fused_flops(SHAPE["B"], SHAPE["T"], SHAPE["NH"],
                                      SHAPE["C"] // SHAPE["NH"])
    return out


def write_results(folder, tf32_supported=True):
    entries = {str(k): kernel_entry(k, *BEST[k]) for k in KERNELS}
    entries["9"] = fused_entry(tf32_supported)
    rep = {"device": {"name": GPU, "arch": "sm_90", "sms": 132, "clock_mhz": 1980,
                      "driver_version": 13000, "cuda_version": 13000},
           "shape": SHAPE, "seed": 0, "kernels": entries,
           "command": "python -m attnlab report", "seconds": 1234}
    (folder / "kernels.json").write_text(json.dumps(rep, indent=1) + "\n")
    (folder / "ceilings.json").write_text(json.dumps(CEILINGS, indent=1) + "\n")
    return rep


@pytest.fixture
def results(tmp_path):
    write_results(tmp_path)
    return tmp_path


def test_readme_table_header(results):
    lines = report.readme_tables(results).splitlines()
    assert lines[0] == (
        f"{GPU}, B=4 T=1024 C=768 NH=12; median ms (interquartile range) at each kernel's best "
        f"block size; % of ceiling for the softmax backward alone (copy bandwidth 4,000 GB/s, "
        f"fp32 50.0 T multiply-adds/s, both measured):")
    assert lines[1] == ""
    assert lines[2].startswith("| kernel | block size | softmax backward alone |")
    assert lines[3] == "|---|---|---|---|---|---|---|"
    assert len(lines) == 4 + 8 + 1


def test_readme_table_rows(results):
    lines = report.readme_tables(results).splitlines()
    rows = lines[4:]
    for line in lines[2:]:
        assert line.startswith("|") and line.endswith("|") and line.count("|") == 8, line
    assert [r.split("|")[1].strip() for r in rows] == [str(k) for k in KERNELS] + ["9 (fused)"]
    assert [r.split("|")[2].strip() for r in rows] == \
        [str(BEST[k][0]) for k in KERNELS] + ["128"]
    # kernel 7 at 0.1 ms: DRAM 302,284,800 B / 0.1 ms = 3.0228 TB/s = 75.6% of 4 TB/s;
    # 2 * 25,190,400 multiply-adds / 0.1 ms = 5.038e11 /s = 1.01% of 5e13
    assert rows[6] == ("| 7 | 256 | 0.1 (0.095–0.105) | 75.6% | 1.01% | 0.4 (0.38–0.42) | "
                       "0.3 (0.285–0.315) |")
    # kernel 6 at 0.5 ms: DRAM 15.1%; executed multiply-adds (whole 256-wide tiles) / 0.5 ms
    c6 = counts.count(6, 4, 1024, 12, 256)
    fma6 = c6.executed_multiply_adds / 0.5e-3 / 5e13
    assert rows[5].split("|")[4].strip() == "15.1%"
    assert rows[5].split("|")[5].strip() == f"{fma6:.1%}"
    # kernel 1 at 800 ms: the 4 significant digits keep 800 (760–840)
    assert rows[0].split("|")[3].strip() == "800 (760–840)"
    assert rows[8] == "| 9 (fused) | 128 | – | – | – | 0.6 (0.57–0.63) | 0.25 (0.2375–0.2625) " \
                      "(tensor cores) |"


def test_readme_table_fused_tf32_unsupported(tmp_path):
    write_results(tmp_path, tf32_supported=False)
    last = report.readme_tables(tmp_path).splitlines()[-1]
    assert last == ("| 9 (fused) | 128 | – | – | – | 0.6 (0.57–0.63) | "
                    "not supported (tensor cores) |")


def test_readme_table_needs_both_files(tmp_path):
    write_results(tmp_path)
    (tmp_path / "ceilings.json").unlink()
    with pytest.raises(FileNotFoundError, match="ceilings.json"):
        report.readme_tables(tmp_path)


def test_readme_table_accepts_str_folder(results):
    assert report.readme_tables(str(results)) == report.readme_tables(results)


def test_ncu_step_uses_the_best_block_sizes(results, monkeypatch):
    seen = {}
    monkeypatch.setattr(report, "measure_ncu", lambda best, path: seen.update(best=best,
                                                                              path=path))
    report.ncu_step(results)
    assert seen["best"] == {k: BEST[k][0] for k in KERNELS}        # kernel 9 left out
    assert seen["path"] == results / "ncu.json"


def test_measure_ncu_writes_what_it_read_or_why_not(tmp_path, monkeypatch):
    metrics = {"dram__bytes_read.sum": 1e8, "dram__bytes_write.sum": 5e7,
               "smsp__average_warps_issue_stalled_wait_per_issue_active.ratio": 2.0,
               "smsp__average_warps_issue_stalled_barrier_per_issue_active.ratio": 1.0}
    answers = {"softmax_autoregressive_backward_kernel7$": (metrics, None),
               "softmax_autoregressive_backward_kernel8$": (None, "ncu is not on PATH")}
    calls = []

    def fake(regex, args):
        calls.append((regex, args))
        return answers[regex]

    monkeypatch.setattr(evidence, "ncu_metrics", fake)
    path = tmp_path / "ncu.json"
    out = report.measure_ncu({7: 256, 8: 512}, path)
    assert calls[1] == ("softmax_autoregressive_backward_kernel8$",
                        ["-m", "attnlab.report", "--ncu-target", "8", "512"])
    assert json.loads(path.read_text()) == {
        "7": {"block_size": 256, "metrics": metrics,
              "stalls": [["wait", 2.0], ["barrier", 1.0]]},
        "8": {"block_size": 512, "unavailable": "ncu is not on PATH"},
    }
    assert out["7"]["stalls"] == [("wait", 2.0), ("barrier", 1.0)]
    assert out["8"] == {"block_size": 512, "unavailable": "ncu is not on PATH"}


# ------------------------------------------------------------------ the command line

def test_cli_parses_report_readme_out(tmp_path):
    args = cli.parser().parse_args(["report", "--readme", "--out", str(tmp_path)])
    assert args.command == "report"
    assert args.readme is True
    assert args.out == str(tmp_path)
    assert args.no_ncu is False and args.ncu_only is False


def test_cli_report_defaults():
    args = cli.parser().parse_args(["report"])
    assert args.out is None          # results/<this GPU>, decided when the GPU is known
    assert (args.readme, args.no_ncu, args.ncu_only) == (False, False, False)


@pytest.mark.parametrize("name, folder", [("NVIDIA H200", "h200"), ("Tesla T4", "tesla-t4"),
                                          ("NVIDIA GeForce RTX 4090", "geforce-rtx-4090")])
def test_results_go_to_a_folder_named_after_the_gpu(name, folder):
    assert report.gpu_folder(name) == folder


def test_cli_report_other_options():
    args = cli.parser().parse_args(["report", "--no-ncu"])
    assert args.no_ncu is True and args.readme is False
    args = cli.parser().parse_args(["report", "--ncu-only", "--out", "x"])
    assert args.ncu_only is True and args.out == "x"


def test_cli_report_rejects_unknown_option(capsys):
    with pytest.raises(SystemExit) as e:
        cli.parser().parse_args(["report", "--readmee"])
    assert e.value.code == 2
    assert "unrecognized arguments: --readmee" in capsys.readouterr().err


FUSED_VS_TORCH = {"results": {
    "2048": {"k8 fp32": {"status": "ok", "median_ms": 3.25},
             "torch": {"status": "does not fit", "buffer_bytes": 3 * 2**30}},
    "1024": {"k8 fp32": {"status": "ok", "median_ms": 0.85}, "fused fp32": {"status": "ok",
                                                                           "median_ms": 0.98}},
}}


def test_cli_report_readme_prints_the_tables(results, capsys):
    (results / "fused_vs_torch.json").write_text(json.dumps(FUSED_VS_TORCH))
    assert cli.main(["report", "--readme", "--out", str(results)]) == 0
    out = capsys.readouterr().out
    assert out.startswith(report.readme_tables(results) + "\n\n")
    fused = out.split("\n\n", 2)[2].splitlines()
    assert fused[0].startswith("| T | kernel 8, fp32 |")
    assert fused[2].startswith("| 1024 | 0.85 |") and fused[3].startswith("| 2048 | 3.25 |")
    assert fused[3].endswith("| does not fit (3 GiB) |")
    assert not (results / "ncu.json").exists()            # --readme only reads


def test_cli_report_readme_on_a_folder_without_results(tmp_path, capsys):
    assert cli.main(["report", "--readme", "--out", str(tmp_path)]) == 2
    assert "kernels.json" in capsys.readouterr().err
