// softmax_backward4.cu: version 4, each warp computes UNROLL = 8 columns t3 at once.
//
// Change from version 3: a warp handles the 8 adjacent columns t3 .. t3+7 of each row.
// Why faster: every att[t2], datt[t2] a lane loads is used for 8 outputs instead of 1, which
// cuts the loads from memory by about 8x; the 8 values att[t3+k] and the 8 partial sums live
// in registers. Version 3 was not limited by its memory traffic but by the instructions its
// warps issue, most of them loads, their addresses, the indicator and the loop (notebook 05).
// Sharing each load among 8 columns removes most of those: the warps issue less than half as
// many instructions in all, even though each warp now does 8x the arithmetic (and there are
// 8x fewer warps to hide the loads' latency; notebook 06). The pointers are declared
// __restrict__ from this version on (as in llm.c): no aliasing, so loads may be reordered.
//
// Launch geometry: grid (ceil_div(4*T, block_size), B*NH), block_size a multiple of 32;
// (warp number) * 8 is t3; warps with t3 >= T exit.
// Bounds and guards: T % 4 == 0 but not necessarily T % 8 == 0, so when T % 8 == 4 the last
// warp has t3 = T-4 and columns t3+4 .. t3+7 lie outside the matrix; more generally, in
// rows t < t3+7 some of the 8 columns are above the diagonal. Every access to column t3+k is
// skipped unless t3+k <= t (< T): the loads by the `continue`s, and the store by the
// `t3 + k <= t` test (llm.c stored all 8 columns unguarded, which for T % 8 != 0 wrote past
// the end of the row, and on the last row past the end of the buffer). Other loads use
// t2 <= t. Writes only the lower triangle (t3 <= t) of dpreatt.
#include <cooperative_groups.h>
#include <cooperative_groups/reduce.h>
#include "common.cuh"

namespace cg = cooperative_groups;

#define UNROLL 8

extern "C" __global__ void softmax_autoregressive_backward_kernel4(float* __restrict__ dpreatt,
                                                                   const float* __restrict__ datt,
                                                                   const float* __restrict__ att,
                                                                   int B, int T, int C, int NH) {
    cg::thread_block block = cg::this_thread_block();
    cg::thread_block_tile<32> warp = cg::tiled_partition<32>(block);
    int t3 = UNROLL * (blockIdx.x * warp.meta_group_size() + warp.meta_group_rank());
    if (t3 >= T) {
        return;  // the whole warp leaves together
    }
    size_t bh = (size_t)blockIdx.y * T * T;  // this (b, h)'s T x T matrices start here
    att += bh;
    datt += bh;
    dpreatt += bh;
    int hs = C / NH;  // head size
    float scale = 1.0f / sqrtf(hs);
    for (int t = t3; t < T; t++) {
        // 32-bit offsets inside one T x T matrix (T*T < 2^31 is checked on the Python side):
        // this loop runs T - t3 times per warp, so its few integer instructions count
        const float* att_bth = att + t * T;
        const float* datt_bth = datt + t * T;
        float* dpreatt_bth = dpreatt + t * T;
        // load the t3-dependent values once, before the t2 loop
        float att_at_t3[UNROLL];
#pragma unroll
        for (int k = 0; k < UNROLL; ++k) {
            if (t < t3 + k) continue;  // column above the diagonal (or past the row): skip
            att_at_t3[k] = att_bth[t3 + k];
        }
        float result[UNROLL] = {};
        for (int t2 = warp.thread_rank(); t2 <= t; t2 += warp.size()) {
            // one load of att[t2] and datt[t2], used for UNROLL columns
            float att_t2 = att_bth[t2];
            float datt_t2 = datt_bth[t2];
#pragma unroll
            for (int k = 0; k < UNROLL; ++k) {
                if (t < t3 + k) continue;
                float indicator = t2 == (t3 + k) ? 1.0f : 0.0f;
                float local_derivative = att_t2 * (indicator - att_at_t3[k]);
                result[k] += local_derivative * datt_t2;
            }
        }
        // after the reductions every lane holds all 8 sums; lane k keeps sum k (a select:
        // indexing result[lane] directly would push the array out of registers into local
        // memory), then lanes 0..7 store together: one coalesced 32-byte store per row.
        float mine = 0.0f;
#pragma unroll
        for (int k = 0; k < UNROLL; ++k) {
            float sum = cg::reduce(warp, result[k], cg::plus<float>());
            if (warp.thread_rank() == k) mine = sum;
        }
        int k = warp.thread_rank();
        if (k < UNROLL && t3 + k <= t) {  // guard: lower triangle only
            dpreatt_bth[t3 + k] = scale * mine;
        }
    }
}
