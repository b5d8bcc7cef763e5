// softmax_backward6.cu: version 6, one block per row, t2-side products tiled in shared memory.
//
// Change from version 5: step back to the CPU loops. The outer loops (b, h, t) are
// independent; the inner double loop over (t2, t3) is where data can be reused. So:
//  - one block per row (b, h, t) (grid (T, B*NH)); each thread owns one column t3 at a time;
//  - the t2 loop is tiled: per tile of BLOCK_SIZE values, each thread computes ONE product
//    p[t2] = att[t2]*datt[t2] into shared memory, then every thread reads all BLOCK_SIZE of
//    them from shared memory (a broadcast: all threads read the same address).
// Why faster: per tile that is 2*BLOCK_SIZE global loads for BLOCK_SIZE^2 FMAs, and the
// multiply of p is no longer repeated per column: the DRAM traffic falls to the minimum and
// the warps stop waiting on loads. The kernel becomes issue-bound, not compute bound
// (notebook 08): only about a third of its instructions are multiply-adds (the rest are the
// shared-memory broadcasts, the loop, and in the diagonal tile the indicator), so with its
// schedulers busy most of the time it reaches about a third of the FMA ceiling.
// As in version 5, the indicator is only evaluated in the one tile that holds the diagonal.
// BLOCK_SIZE is a compile-time constant (-DBLOCK_SIZE=...), so the shared array has a fixed
// size and __launch_bounds__ tells the compiler the block size.
//
// Launch geometry: grid (T, B*NH), blockDim.x == BLOCK_SIZE (any block size 32..1024).
// Bounds and guards: the product loads are clipped to t2 = min(t, ...) <= t (the clipped
// duplicates lie past `end` and are not used). llm.c also read att[t3] and wrote dpreatt[t3]
// for t3 > t, up to the end of the last tile, and so past the end of the buffer on the last
// row when T is not a multiple of BLOCK_SIZE: here att[t3] is read, and dpreatt[t3]
// written, only when t3 <= t. Every thread still runs every loop iteration (the loop bounds
// depend only on t and BLOCK_SIZE), so all threads reach every block.sync().
// Writes only the lower triangle (t3 <= t) of dpreatt.
#include <cooperative_groups.h>
#include "common.cuh"

#ifndef BLOCK_SIZE
#error "compile with -DBLOCK_SIZE=N, N being the blockDim.x of the launch"
#endif

namespace cg = cooperative_groups;

extern "C" __global__ void __launch_bounds__(BLOCK_SIZE)
softmax_autoregressive_backward_kernel6(float* __restrict__ dpreatt, const float* __restrict__ datt,
                                        const float* __restrict__ att, int B, int T, int C, int NH) {
    cg::thread_block block = cg::this_thread_block();
    __shared__ float p_s[BLOCK_SIZE];  // one tile of p[t2] = att[t2] * datt[t2]
    int t = blockIdx.x;
    size_t row = ((size_t)blockIdx.y * T + t) * T;  // start of row (b, h, t)
    const float* att_bth = att + row;
    const float* datt_bth = datt + row;
    float* dpreatt_bth = dpreatt + row;
    int hs = C / NH;  // head size
    float scale = 1.0f / sqrtf(hs);
    int tid = block.thread_rank();

    // columns and products both cover 0..t, in tiles of BLOCK_SIZE. Very important: the loop
    // bounds must be the same for all threads, even those with no column left (t3 > t): they
    // still have to help load the tiles and reach every block.sync().
    int num_tiles = ceil_div(t + 1, BLOCK_SIZE);
    for (int t3_tile = 0; t3_tile < num_tiles; ++t3_tile) {
        int t3 = t3_tile * BLOCK_SIZE + tid;
        bool in_row = t3 <= t;  // guard: lower triangle (and inside the buffer) only
        float at3 = in_row ? att_bth[t3] : 0.f;
        float acc = 0.f;
        for (int t2_tile = 0; t2_tile < num_tiles; ++t2_tile) {
            int t2b = t2_tile * BLOCK_SIZE;
            block.sync();  // everyone is done reading the previous tile
            int t2 = min(t, t2b + tid);
            p_s[tid] = att_bth[t2] * datt_bth[t2];
            block.sync();  // the tile is complete
            int end = min(t + 1 - t2b, BLOCK_SIZE);  // valid entries in this tile
            if (t2_tile == t3_tile) {
                // the diagonal tile: the only one where t2 == t3 can happen
                for (int i = 0; i < end; i++) {
                    float indicator = t2b + i == t3 ? 1.0f : 0.0f;
                    acc += p_s[i] * (indicator - at3);
                }
            } else {
                for (int i = 0; i < end; i++) {
                    acc -= p_s[i] * at3;
                }
            }
        }
        if (in_row) {
            dpreatt_bth[t3] = scale * acc;
        }
    }
}
