"""The planted wrong kernels of tests/test_exercises.py: each is a reference solution
(notebooks/exercises/solutions/<exercise>.cu) with one edit, applied at test time, so the
bug is one visible line and stays in step with the solution.

BUGS: case name -> (exercise, old text, new text); ``old`` must occur exactly once in the
solution (where a line occurs twice, ``old`` takes the next line along, unchanged).
"""
from pathlib import Path

SOLUTIONS = Path(__file__).resolve().parent.parent / "notebooks" / "exercises" / "solutions"

BUGS = {
    # out of bounds: the bound is inp's size (3 floats per element of q), not q's, so the
    # last block's 128 extra threads write past the end of q, k and v
    "e1_out_of_bounds.cu": (
        "e1_permute",
        "    if (idx >= B * NH * N * d) {",
        "    if (idx >= 3 * B * NH * N * d) {"),
    # wrong index: q is stored in inp's order (b, n, h, i) instead of its own (b, h, n, i)
    "e1_wrong_index.cu": (
        "e1_permute",
        "    q[idx] = inp[inp_idx];",
        "    q[((b * N + n) * NH + h) * d + i] = inp[inp_idx];"),
    # no causal mask: every row is taken for the last one, so max, sum and output run over
    # the whole row
    "e2_missing_mask.cu": (
        "e2_softmax_forward",
        "    int t = row % T;",
        "    int t = T - 1;"),
    # no scale: softmax(preatt) instead of softmax(scale * preatt)
    "e2_missing_scale.cu": (
        "e2_softmax_forward",
        "        float e = expf(scale * (x[t2] - maxval));",
        "        float e = expf(x[t2] - maxval);"),
    # no maximum subtracted: exp(scale * x) overflows to inf on the checker's large logits
    # (and underflows to 0 on its very negative rows): inf/inf and 0/0, NaN
    "e2_no_max.cu": (
        "e2_softmax_forward",
        "        float e = expf(scale * (x[t2] - maxval));",
        "        float e = expf(scale * x[t2]);"),
    # the maximum started at 0: right on rows with a score above 0, NaN on rows whose scores
    # are all far below 0 (every exp underflows)
    "e2_max_from_0.cu": (
        "e2_softmax_forward",
        "    float maxval = -FLT_MAX;",
        "    float maxval = 0.0f;"),
    # right below the diagonal, but 0 written above it, which the spec leaves alone
    "e2_writes_above_diagonal.cu": (
        "e2_softmax_forward",
        "    float* y = att + (size_t)row * T;",
        "    float* y = att + (size_t)row * T; for (int t2 = t + 1; t2 < T; t2++) y[t2] = 0.0f;"),
    # right below the diagonal, but 0 written above it in dpreatt
    "e3_writes_above_diagonal.cu": (
        "e3_kernel7_from_jacobian",
        "    float* dpreatt_row = dpreatt + row;",
        "    float* dpreatt_row = dpreatt + row; for (int t3 = t + 1 + threadIdx.x; t3 < T; "
        "t3 += BLOCK_SIZE) dpreatt_row[t3] = 0.0f;"),
    # does not compile: a missing ';' (nvcc reports it on the next line, 40, and then that
    # S is undefined on lines 42 and 46)
    "e3_compile_error.cu": (
        "e3_kernel7_from_jacobian",
        "    __syncthreads();",
        "    __syncthreads()"),
    # a hang: offset reaches 0 and stays there (0 / 2 == 0), so the first shuffle loop
    # never ends
    "e3_hang.cu": (
        "e3_kernel7_from_jacobian",
        "    for (int offset = 16; offset > 0; offset /= 2) {\n"
        "        s += __shfl_xor_sync(0xffffffffu, s, offset);",
        "    for (int offset = 16; offset >= 0; offset /= 2) {\n"
        "        s += __shfl_xor_sync(0xffffffffu, s, offset);"),
    # an illegal address: the row offset multiplied in twice, the stores land gigabytes past
    # dpreatt (CUDA_ERROR_INVALID_ADDRESS_SPACE on the H200)
    "e3_illegal_address.cu": (
        "e3_kernel7_from_jacobian",
        "        dpreatt_row[t3] = scale * att_row[t3] * (datt_row[t3] - S);",
        "        dpreatt[row * T * T + t3] = scale * att_row[t3] * (datt_row[t3] - S);"),
    # no causal mask in the writes: every column of the row is written, above the diagonal
    # too (S is still right)
    "e3_missing_mask.cu": (
        "e3_kernel7_from_jacobian",
        "    for (int t3 = threadIdx.x; t3 <= t; t3 += BLOCK_SIZE) {",
        "    for (int t3 = threadIdx.x; t3 < T; t3 += BLOCK_SIZE) {"),
    # no scale: dpreatt 8 times too large at HS = 64
    "e3_missing_scale.cu": (
        "e3_kernel7_from_jacobian",
        "        dpreatt_row[t3] = scale * att_row[t3] * (datt_row[t3] - S);",
        "        dpreatt_row[t3] = att_row[t3] * (datt_row[t3] - S);"),
    # not extern "C": the compiled name is mangled (caught by the declaration check)
    "e3_no_extern_c.cu": (
        "e3_kernel7_from_jacobian",
        'extern "C" __global__ void __launch_bounds__(BLOCK_SIZE)',
        "__global__ void __launch_bounds__(BLOCK_SIZE)"),
    # a race on shared memory: a warp's barrier instead of the block's, so a warp reads the
    # other warps' sums in warp_sums before they have written them
    "e3_race.cu": (
        "e3_kernel7_from_jacobian",
        "    __syncthreads();",
        "    __syncwarp();"),
    # rows never written: every block starts at row T-1 (the block index is not used), so
    # only the last T_PER_BLOCK rows of each (b, h) are written
    "e4_rows_not_written.cu": (
        "e4_tune_kernel8",
        "    int t0 = T - 1 - T_PER_BLOCK * (int)blockIdx.x;",
        "    int t0 = T - 1;"),
}


def planted(name):
    """The source of planted case ``name``: its solution with the one edit made."""
    key, old, new = BUGS[name]
    source = (SOLUTIONS / f"{key}.cu").read_text()
    n = source.count(old)
    assert n == 1, (f"planted bug {name}: the text to replace occurs {n} times (must be once) "
                    f"in {key}.cu; the solution changed, so update tests/planted_bugs.py:\n{old}")
    return source.replace(old, new)
