// softmax_backward7.cu: version 7, do the algebra: O(T) work per row instead of O(T^2).
//
// Change from version 6: expand the sum over t2 (all sums over t2 <= t):
//
//   sum_t2 att[t2] * (1[t2 == t3] - att[t3]) * datt[t2]
//     = att[t3] * datt[t3] - att[t3] * sum_t2 att[t2] * datt[t2]
//     = att[t3] * (datt[t3] - S),        S = sum_{t2 <= t} att[t2] * datt[t2]
//
// S does not depend on t3: one block-wide reduction per row gives it, then one elementwise
// pass writes dpreatt[t3] = scale * att[t3] * (datt[t3] - S). Version 6 did t+1 FMAs per
// element; this does 2, and the kernel is now bound by memory bandwidth (two passes over
// att and datt, the second served mostly by the caches), which is why it is over an order of
// magnitude faster (notebook 09). The scale is computed in the kernel
// here (as in versions 1-6) so that all eight versions keep the same argument list.
//
// Block reduction: each warp reduces its partial sums (cg::reduce) and its lane 0 writes
// the result into shared block_acc[warp]; after a block.sync() every warp reduces block_acc.
// Race fixed from llm.c: there, warp 0 zeroed all 32 entries of block_acc while other warps
// could already be writing their partial sums into it, with no barrier in between. Here
// nothing is zeroed: the second reduction reads block_acc[lane] only for lane < NUM_WARPS
// (entries that were written before the barrier) and uses 0 for the other lanes.
//
// Launch geometry: grid (T, B*NH), blockDim.x == BLOCK_SIZE, a multiple of 32 up to 1024.
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

namespace cg = cooperative_groups;

extern "C" __global__ void __launch_bounds__(BLOCK_SIZE)
softmax_autoregressive_backward_kernel7(float* __restrict__ dpreatt, const float* __restrict__ datt,
                                        const float* __restrict__ att, int B, int T, int C, int NH) {
    cg::thread_block block = cg::this_thread_block();
    cg::thread_block_tile<32> warp = cg::tiled_partition<32>(block);
    __shared__ float block_acc[NUM_WARPS];  // one partial sum per warp
    int t = blockIdx.x;
    size_t row = ((size_t)blockIdx.y * T + t) * T;  // start of row (b, h, t)
    const float* att_bth = att + row;
    const float* datt_bth = datt + row;
    float* dpreatt_bth = dpreatt + row;
    int hs = C / NH;  // head size
    float scale = 1.0f / sqrtf(hs);

    // S = sum_{t2 <= t} att[t2] * datt[t2], reduced over the whole block
    float local_sum = 0.f;
    for (int t2 = block.thread_rank(); t2 <= t; t2 += BLOCK_SIZE) {
        local_sum += att_bth[t2] * datt_bth[t2];
    }
    float warp_sum = cg::reduce(warp, local_sum, cg::plus<float>{});
    if (warp.thread_rank() == 0) {
        block_acc[warp.meta_group_rank()] = warp_sum;
    }
    block.sync();
    float S = cg::reduce(warp, warp.thread_rank() < NUM_WARPS ? block_acc[warp.thread_rank()] : 0.f,
                         cg::plus<float>{});

    for (int t3 = block.thread_rank(); t3 <= t; t3 += BLOCK_SIZE) {
        dpreatt_bth[t3] = scale * att_bth[t3] * (datt_bth[t3] - S);
    }
}
