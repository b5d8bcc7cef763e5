// softmax_backward8.cu: version 8, version 7 plus three small tricks from llm.c.
//
// Same math as version 7, dpreatt[t3] = scale * att[t3] * (datt[t3] - S). Changes:
//  - each block does T_PER_BLOCK = 4 rows: block setup and the scale computation are
//    amortized, and there are 4x fewer blocks to schedule;
//  - blocks run in reverse order of rows: row t costs t+1 elements, so the longest rows
//    start first and the short ones fill the gaps at the end (less of a "tail effect", where
//    a few slow blocks run alone on an almost idle GPU);
//  - the second pass uses streaming loads/stores (__ldcs/__stcs, "evict first"): it is the
//    last use of the row's att and datt (which the first pass has just brought into cache),
//    and dpreatt is not read back here, so these lines are marked to leave the cache first,
//    keeping room for data still to be used.
// In llm.c's measurement the whole attention backward was about as fast as with version 7
// (the four GEMMs dominate it). On the H200 at the default shape the tricks gain nothing on
// the softmax backward alone either (notebook 10): version 7 already moves about the minimum
// bytes at about the copy bandwidth, and the tricks change the blocks, the tail and the
// cache, not the bytes; version 8 runs within a few percent of version 7, no faster.
//
// Race fixed from llm.c: block_acc (see version 7) is reused for each of the 4 rows. There, a
// fast warp could already write its partial sum for the next row while a slower warp was
// still reading block_acc for the current row. Here a block.sync() separates the read of
// block_acc from its next write (and, as in version 7, block_acc is never zeroed).
//
// Launch geometry: grid (T/4, B*NH), blockDim.x == BLOCK_SIZE, a multiple of 32 up to 1024.
// Requires T % 4 == 0 (checked on the Python side), so that the T/4 blocks cover every row:
// block x handles rows T-1-4x, ..., T-4-4x, all >= 0 (so llm.c's `if (t < 0) return;` was
// unreachable and is dropped; and every thread reaches every block.sync()).
// Bounds: t2, t3 <= t, so every access is inside row (b, h, t).
// Writes only the lower triangle (t3 <= t) of dpreatt.
#include <cooperative_groups.h>
#include <cooperative_groups/reduce.h>
#include "common.cuh"

#ifndef BLOCK_SIZE
#error "compile with -DBLOCK_SIZE=N, N being the blockDim.x of the launch"
#endif
#define NUM_WARPS (BLOCK_SIZE / 32)
static_assert(BLOCK_SIZE % 32 == 0 && NUM_WARPS <= 32, "BLOCK_SIZE must be a multiple of 32, at most 1024");
#define T_PER_BLOCK 4

namespace cg = cooperative_groups;

extern "C" __global__ void __launch_bounds__(BLOCK_SIZE)
softmax_autoregressive_backward_kernel8(float* __restrict__ dpreatt, const float* __restrict__ datt,
                                        const float* __restrict__ att, int B, int T, int C, int NH) {
    cg::thread_block block = cg::this_thread_block();
    cg::thread_block_tile<32> warp = cg::tiled_partition<32>(block);
    __shared__ float block_acc[NUM_WARPS];  // one partial sum per warp
    size_t bh = (size_t)blockIdx.y * T * T;
    int hs = C / NH;  // head size
    float scale = 1.0f / sqrtf(hs);
    // reverse order: block 0 takes the last (longest) rows
    int t0 = T - 1 - T_PER_BLOCK * (int)blockIdx.x;

    for (int to = 0; to < T_PER_BLOCK; ++to) {
        int t = t0 - to;
        const float* att_bth = att + bh + (size_t)t * T;
        const float* datt_bth = datt + bh + (size_t)t * T;
        float* dpreatt_bth = dpreatt + bh + (size_t)t * T;

        float local_sum = 0.f;
        for (int t2 = block.thread_rank(); t2 <= t; t2 += BLOCK_SIZE) {
            local_sum += att_bth[t2] * datt_bth[t2];
        }
        float warp_sum = cg::reduce(warp, local_sum, cg::plus<float>{});
        if (warp.thread_rank() == 0) {
            block_acc[warp.meta_group_rank()] = warp_sum;
        }
        block.sync();  // all partial sums are in block_acc
        float S = cg::reduce(warp, warp.thread_rank() < NUM_WARPS ? block_acc[warp.thread_rank()] : 0.f,
                             cg::plus<float>{});
        block.sync();  // everyone has read block_acc: the next row may overwrite it

        for (int t3 = block.thread_rank(); t3 <= t; t3 += BLOCK_SIZE) {
            float acc = __ldcs(att_bth + t3) * (__ldcs(datt_bth + t3) - S);
            __stcs(dpreatt_bth + t3, scale * acc);
        }
    }
}
