"""attnlab.evidence without a GPU, nvcc or cuobjdump: the occupancy arithmetic against
hand-computed cases, and the SASS and Nsight Compute parsers on synthetic tool output.

Occupancy on sm_90 (attnlab.archs.LIMITS; tests/test_gpu.py checks them against the driver
on an sm_90 GPU): 64 warps, 32 blocks, 64K registers and 228 KB of shared memory per SM;
registers are allocated per warp in units of 256; from sm_80 on the runtime reserves 1 KB of
shared memory per block.
"""
import pytest

from attnlab import evidence
from attnlab.archs import KB
from attnlab.errors import InputError

# ------------------------------------------------------------------ occupancy


def test_32_registers_256_threads_is_warp_limited():
    # 8 warps per block: 64 / 8 = 8 blocks; registers 32*32 = 1024 per warp, 8192 per block:
    # 65536 / 8192 = 8 too (a tie, the warps are named first); shared 233472 // 1024 = 228
    o = evidence.occupancy(32, 0, 256, "sm_90")
    assert o["limits"] == {"blocks": 32, "warps": 8, "registers": 8, "shared memory": 228}
    assert (o["blocks"], o["warps"], o["occupancy"], o["limiter"]) == (8, 64, 1.0, "warps")


def test_128_registers_256_threads_is_register_limited():
    # 128*32 = 4096 registers per warp, 32768 per block: 65536 / 32768 = 2 blocks
    o = evidence.occupancy(128, 0, 256, "sm_90")
    assert o["limits"]["registers"] == 2
    assert (o["blocks"], o["warps"], o["occupancy"], o["limiter"]) == (2, 16, 0.25, "registers")


def test_100kb_static_shared_is_shared_limited():
    # (100 KB + 1 KB reserved) per block: 233472 // 103424 = 2 blocks
    o = evidence.occupancy(32, 100 * KB, 128, "sm_90")
    assert o["limits"]["shared memory"] == 2
    assert (o["blocks"], o["warps"], o["limiter"]) == (2, 8, "shared memory")
    assert o["occupancy"] == pytest.approx(8 / 64)


def test_small_blocks_are_block_limited():
    # 1 warp per block: 64 by warps, 64 by registers (1024 per block), 32 by the block limit
    o = evidence.occupancy(32, 0, 32, "sm_90")
    assert (o["blocks"], o["warps"], o["occupancy"], o["limiter"]) == (32, 32, 0.5, "blocks")


def test_registers_are_allocated_per_warp_in_units_of_256():
    # 33 registers: 33*32 = 1056 per warp, rounded up to 1280; 8 warps: 10240 per block,
    # 65536 // 10240 = 6 blocks (without the rounding it would be 65536 // 8448 = 7)
    o = evidence.occupancy(33, 0, 256, "sm_90")
    assert (o["blocks"], o["limiter"]) == (6, "registers")


def test_one_kb_reserved_per_block_from_sm80_on():
    # sm_90: 57 KB + 1 KB = 59392 B per block: 233472 // 59392 = 3 (without it, 4)
    assert evidence.occupancy(32, 57 * KB, 64, "sm_90")["limits"]["shared memory"] == 3
    # sm_80: 164 KB per SM; 41 KB + 1 KB = 43008 B per block: 167936 // 43008 = 3 (without it, 4)
    assert evidence.occupancy(32, 41 * KB, 64, "sm_80")["limits"]["shared memory"] == 3
    # sm_75 reserves nothing: 64 KB per SM, 21 KB per block -> 3 (with 1 KB reserved: 2)
    o = evidence.occupancy(32, 21 * KB, 64, "sm_75")
    assert o["limits"]["shared memory"] == 3
    assert (o["blocks"], o["limiter"]) == (3, "shared memory")


def test_odd_block_sizes_count_whole_warps():
    # 48 threads are 2 warps: 64 / 2 = 32 by warps; registers 2 * 1024: 32
    o = evidence.occupancy(32, 0, 48, "sm_90")
    assert o["limits"]["warps"] == 32 and o["warps"] == 2 * o["blocks"]


def test_occupancy_rejects_unknown_arch():
    with pytest.raises(InputError, match="arch must be one of .*got 'sm_100'"):
        evidence.occupancy(32, 0, 256, "sm_100")


def test_describe_occupancy_table():
    attrs = {"registers": 128, "shared_bytes": 0, "local_bytes": 0}
    text = evidence.describe_occupancy(attrs, [32, 256], "sm_90")
    lines = text.splitlines()
    assert lines[0].startswith("registers 128, static shared 0 B, local (stack) 0 B")
    # 32 threads: 128*32 = 4096 registers per block, 65536 / 4096 = 16 blocks (< 32)
    assert [c.strip() for c in lines[2].split("|")] == ["32", "16", "16", "25%", "registers"]
    assert [c.strip() for c in lines[3].split("|")] == ["256", "2", "16", "25%", "registers"]


# ------------------------------------------------------------------ SASS

def line(addr, text, end=" ;"):
    """One instruction line as cuobjdump -sass prints it, with its encoding continuation."""
    return (f"        /*{addr:04x}*/                   {text}{end}".ljust(88)
            + f"/* 0x{addr:016x} */\n" + " " * 88 + "/* 0x000fe20000000f00 */")


SASS = "\n".join([
    "",
    "\tcode for sm_90",
    "\t\tFunction : softmax_autoregressive_backward_kernel3",
    '\t.headerflags\t@"EF_CUDA_TEXMODE_UNIFIED EF_CUDA_64BIT_ADDRESS EF_CUDA_SM90"',
    line(0x0000, "LDC R1, c[0x0][0x28]"),
    line(0x0010, "S2R R0, SR_TID.X"),
    line(0x0020, "ISETP.GE.AND P0, PT, R0, c[0x0][0x218], PT"),
    line(0x0030, "@P0 EXIT"),
    ".L_x_0:",                                               # outer loop: rows t
    line(0x0040, "MOV R8, RZ"),
    line(0x0050, "LDG.E R9, desc[UR4][R2.64]"),
    line(0x0060, "ISETP.GT.AND P1, PT, R10, R11, PT"),
    line(0x0070, "@P1 BRA `(.L_x_2)"),                       # forward: skip the inner loop
    ".L_x_1:",                                               # inner loop: t2
    line(0x0080, "LDG.E R4, desc[UR4][R6.64]"),
    line(0x0090, "LDG.E R5, desc[UR4][R12.64]"),
    line(0x00a0, "FADD R13, -R9, 1"),
    line(0x00b0, "FFMA R8, R4, R5, R8"),
    line(0x00c0, "FFMA R14, R4, R13, R14"),
    line(0x00d0, "IADD3 R10, R10, 0x20, RZ"),
    line(0x00e0, "ISETP.GE.AND P2, PT, R11, R10, PT"),
    line(0x00f0, "@P2 BRA `(.L_x_1)"),                       # backward: the inner loop
    ".L_x_2:",
    line(0x0100, "SHFL.BFLY PT, R15, R8, 0x10, 0x1f"),
    line(0x0110, "FADD R8, R8, R15"),
    line(0x0120, "@!P3 STG.E desc[UR4][R16.64], R8"),
    line(0x0130, "IADD3 R17, R17, 0x1, RZ"),
    line(0x0140, "ISETP.GE.AND P4, PT, R17, c[0x0][0x218], PT"),
    line(0x0150, "@!P4 BRA `(.L_x_0)"),                      # backward: the outer loop
    ".L_x_3:",                                               # a second, separate loop
    line(0x0160, "LDS R18, [R19]"),
    line(0x0170, "LDS R20, [R19+0x4]"),
    line(0x0180, "FFMA R21, R18, R20, R21"),
    line(0x0190, "ISETP.NE.AND P5, PT, R19, R22, PT"),
    line(0x01a0, "@P5 BRA.U `(.L_x_3)"),
    line(0x01b0, "EXIT"),
    ".L_x_4:",                                               # cuobjdump's end-of-function trap
    line(0x01c0, "BRA `(.L_x_4)", end=";"),
    line(0x01d0, "NOP", end=";"),
    "\t\t..........",
    "",
])


def test_parse_sass_instructions_and_labels():
    instructions, labels = evidence.parse_sass(SASS)
    assert len(instructions) == 30
    assert [a for a, _, _ in instructions] == list(range(0, 0x1e0, 0x10))
    assert instructions[0] == (0x0, "LDC", "LDC R1, c[0x0][0x28]")
    ops = {a: op for a, op, _ in instructions}
    assert ops[0x30] == "EXIT"                       # predicate dropped from the opcode
    assert ops[0xf0] == "BRA" and ops[0x120] == "STG.E" and ops[0x1a0] == "BRA.U"
    assert ops[0x20] == "ISETP.GE.AND"
    assert labels == {".L_x_0": 0x40, ".L_x_1": 0x80, ".L_x_2": 0x100, ".L_x_3": 0x160,
                      ".L_x_4": 0x1c0}
    # the body keeps the predicate and the branch target
    assert dict((a, b) for a, _, b in instructions)[0xf0] == "@P2 BRA `(.L_x_1)"


def test_consecutive_labels_name_the_same_instruction():
    text = "\n".join([".L_x_7:", ".L_x_8:", line(0x40, "NOP"), line(0x50, "BRA `(.L_x_8)")])
    instructions, labels = evidence.parse_sass(text)
    assert labels == {".L_x_7": 0x40, ".L_x_8": 0x40}
    assert evidence.loops(instructions, labels) == [(0x40, 0x50)]


def test_loops_are_the_innermost_backward_branches():
    instructions, labels = evidence.parse_sass(SASS)
    found = evidence.loops(instructions, labels)
    assert (0x40, 0x150) not in found                # the outer loop holds the inner one
    assert (0x80, 0xf0) in found and (0x160, 0x1a0) in found
    assert found == sorted(found)                    # by start address
    assert all(start < end for start, end in found if (start, end) != (0x1c0, 0x1c0))


def test_the_end_of_function_self_branch_is_not_a_loop():
    instructions, labels = evidence.parse_sass(SASS)
    assert evidence.loops(instructions, labels) == [(0x80, 0xf0), (0x160, 0x1a0)]


def test_mix_counts_opcode_families():
    instructions, _ = evidence.parse_sass(SASS)
    assert evidence.mix(instructions, 0x80, 0xf0) == {"LDG": 2, "FADD": 1, "FFMA": 2,
                                                      "IADD3": 1, "ISETP": 1, "BRA": 1}
    assert evidence.mix(instructions, 0x160, 0x1a0) == {"LDS": 2, "FFMA": 1, "ISETP": 1,
                                                        "BRA": 1}
    assert sum(evidence.mix(instructions, 0, 0x1d0).values()) == 30


def test_sass_reports_each_innermost_loop_largest_first(monkeypatch):
    monkeypatch.setattr(evidence, "sass_text", lambda *a, **k: SASS)
    found = evidence.sass("softmax_backward3", "softmax_autoregressive_backward_kernel3")
    assert found[0] == {"start": 0x80, "end": 0xf0, "instructions": 8,
                        "mix": {"LDG": 2, "FFMA": 2, "FADD": 1, "IADD3": 1, "ISETP": 1,
                                "BRA": 1}}
    assert found[1]["start"] == 0x160 and found[1]["instructions"] == 5
    assert list(found[0]["mix"].values()) == sorted(found[0]["mix"].values(), reverse=True)
    text = evidence.describe_loops(found, top=1)
    assert text.startswith("loop at 0x0080-0x00f0: 8 instructions: LDG 2, FFMA 2")
    assert "\n" not in text
    assert evidence.describe_loops([]) == "no loop in this kernel's SASS"


def test_no_loop_without_a_backward_branch():
    text = "\n".join([line(0x0, "ISETP.GE.AND P0, PT, R0, R1, PT"), line(0x10, "@P0 BRA `(.L_x_9)"),
                      line(0x20, "FFMA R2, R3, R4, R2"), ".L_x_9:", line(0x30, "EXIT")])
    instructions, labels = evidence.parse_sass(text)
    assert labels == {".L_x_9": 0x30}
    assert evidence.loops(instructions, labels) == []


# ------------------------------------------------------------------ Nsight Compute

METRICS = ["dram__bytes_read.sum", "dram__bytes_write.sum", "gpu__time_duration.sum",
           "sm__warps_active.avg.pct_of_peak_sustained_active", "smsp__inst_executed.sum",
           "smsp__average_warp_latency_issue_stalled_barrier",
           "smsp__average_warps_issue_stalled_barrier_per_issue_active.ratio",
           "smsp__average_warps_issue_stalled_long_scoreboard_per_issue_active.ratio",
           "smsp__average_warps_issue_stalled_math_pipe_throttle_per_issue_active.ratio",
           "smsp__average_warps_issue_stalled_short_scoreboard_per_issue_active.ratio",
           "smsp__average_warps_issue_stalled_wait_per_issue_active.ratio",
           "smsp__pcsamp_warps_issue_stalled_long_scoreboard"]
INFO = ["ID", "Process ID", "Process Name", "Host Name", "Kernel Name", "Context", "Stream",
        "Block Size", "Grid Size", "Device", "CC"]
UNITS = ["byte", "byte", "nsecond", "%", "inst", "", "inst", "inst", "inst", "inst", "inst",
         "warp"]
VALUES = ["302,284,800", "100,761,600", "1,234,567", "87.25", "9,876,543,210", "5",
          "0.75", "12.5", "1.25", "0.5", "3", "4,321"]


def q(cells):
    return ",".join(f'"{c}"' for c in cells)


NCU = "\n".join([
    "==PROF== Connected to process 4242 (/usr/bin/python3.12)",
    '==PROF== Profiling "softmax_autoregressive_backward_kernel3": 0%....50%....100% - 9 passes',
    "==PROF== Disconnected from process 4242",
    q(INFO + METRICS),
    q([""] * len(INFO) + UNITS),
    q(["0", "4242", "python3.12", "127.0.0.1", "softmax_autoregressive_backward_kernel3",
       "1", "7", "(256, 1, 1)", "(128, 48, 1)", "0", "9.0"] + VALUES),
    "",
])


def test_parse_ncu_csv_values_and_thousands_separators():
    m = evidence.parse_ncu_csv(NCU)
    assert m["dram__bytes_read.sum"] == 302_284_800.0
    assert m["dram__bytes_write.sum"] == 100_761_600.0
    assert m["gpu__time_duration.sum"] == 1_234_567.0
    assert m["sm__warps_active.avg.pct_of_peak_sustained_active"] == 87.25
    assert m["smsp__inst_executed.sum"] == 9_876_543_210.0
    assert m["ID"] == 0.0 and m["CC"] == 9.0
    # what is not a number stays a string
    assert m["Kernel Name"] == "softmax_autoregressive_backward_kernel3"
    assert m["Block Size"] == "(256, 1, 1)"
    assert set(m) == set(INFO + METRICS)


def test_parse_ncu_csv_skips_what_comes_before_the_header():
    noisy = "some program output\nwith, commas, in it\n" + NCU
    assert evidence.parse_ncu_csv(noisy) == evidence.parse_ncu_csv(NCU)


def test_stall_reasons_prefer_per_issue_ratios():
    m = evidence.parse_ncu_csv(NCU)
    assert evidence.stall_reasons(m) == [("long_scoreboard", 12.5), ("wait", 3.0),
                                         ("math_pipe_throttle", 1.25), ("barrier", 0.75)]
    assert evidence.stall_reasons(m, top=1) == [("long_scoreboard", 12.5)]
    assert len(evidence.stall_reasons(m, top=10)) == 5          # the 5 per-issue ratios


def test_stall_reasons_without_per_issue_ratios():
    m = {"smsp__pcsamp_warps_issue_stalled_long_scoreboard": 40.0,
         "smsp__pcsamp_warps_issue_stalled_barrier": 60.0,
         "smsp__pcsamp_warps_issue_stalled_wait": "n/a",        # not a number: ignored
         "dram__bytes_read.sum": 1e9}
    assert evidence.stall_reasons(m) == [("barrier", 60.0), ("long_scoreboard", 40.0)]


def test_ncu_command_reads_one_launch_as_raw_csv():
    cmd = evidence.ncu_command("kernel3$", ["-m", "attnlab.report"], ncu="/opt/ncu")
    assert cmd[0] == "/opt/ncu"
    assert cmd[cmd.index("--page") + 1] == "raw" and "--csv" in cmd
    assert cmd[cmd.index("--kernel-name") + 1] == "regex:kernel3$"
    assert cmd[cmd.index("--launch-count") + 1] == "1"
    assert cmd[cmd.index("--metrics") + 1].split(",") == \
        list(evidence.NCU_METRICS + evidence.NCU_L1_METRICS)
    assert cmd[-2:] == ["-m", "attnlab.report"]
    # the retry without the L1 metrics
    fewer = evidence.ncu_command("kernel3$", [], metrics=evidence.NCU_METRICS)
    assert fewer[fewer.index("--metrics") + 1].split(",") == list(evidence.NCU_METRICS)


def test_per_block_size_compiles_each_block_size_and_computes_its_occupancy(monkeypatch):
    """Kernels 6-8 are compiled per block size: each gets its own registers and occupancy."""
    class Fn:
        def __init__(self, registers):
            self.num_regs, self.shared_size_bytes, self.local_size_bytes = registers, 16, 0
            self.max_threads_per_block = 1024

    compiled = []

    def fake_get_function(name, function, **defines):
        compiled.append((name, function, defines))
        return Fn(39 if defines["BLOCK_SIZE"] == 32 else 32)

    monkeypatch.setattr(evidence, "get_function", fake_get_function)
    table = evidence.per_block_size("softmax_backward6", "k6", lambda bs: {"BLOCK_SIZE": bs},
                                    "sm_90", (32, 128))
    assert compiled == [("softmax_backward6", "k6", {"BLOCK_SIZE": 32}),
                        ("softmax_backward6", "k6", {"BLOCK_SIZE": 128})]
    assert table[32]["attributes"]["registers"] == 39 and table[128]["attributes"]["registers"] == 32
    # 39 registers -> 1,280 per warp: 12 warps per sub-partition, 48 per SM, 1-warp blocks: 48 > 32
    assert table[32]["occupancy"]["blocks"] == 32 and table[32]["occupancy"]["limiter"] == "blocks"
    assert table[128]["occupancy"]["occupancy"] == 1.0
