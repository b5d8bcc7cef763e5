// softmax_backward3.cu: version 3, a whole warp per output column t3.
//
// Change from version 2: the sum over t2 is split across the 32 lanes of a warp (lane j
// takes t2 = j, j+32, ...) and combined with a warp reduction (cg::reduce).
// Why faster: in version 2 the 32 threads of a warp have 32 different t3, so they walk
// different rows t at the same time, and every load instruction touches up to 32 cache lines.
// Here the lanes read 32 consecutive floats of one row: one coalesced 128-byte transaction.
// There are also 32x more threads, and the loop-invariant att[t3] and scale leave the t2 loop.
//
// Launch geometry: grid (ceil_div(32*T, block_size), B*NH), block_size a multiple of 32;
// warp number blockIdx.x * (block_size/32) + warp_rank is t3; warps with t3 >= T exit.
// Bounds: t3 <= t < T and t2 <= t, so every access is inside row (b, h, t).
// Writes only the lower triangle (t3 <= t) of dpreatt.
#include <cooperative_groups.h>
#include <cooperative_groups/reduce.h>
#include "common.cuh"

namespace cg = cooperative_groups;

extern "C" __global__ void softmax_autoregressive_backward_kernel3(float* dpreatt, const float* datt,
                                                                   const float* att,
                                                                   int B, int T, int C, int NH) {
    cg::thread_block block = cg::this_thread_block();
    cg::thread_block_tile<32> warp = cg::tiled_partition<32>(block);
    int t3 = blockIdx.x * warp.meta_group_size() + warp.meta_group_rank();
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
        const float att_at_t3 = att_bth[t3];
        float result = 0.0f;
        for (int t2 = warp.thread_rank(); t2 <= t; t2 += warp.size()) {
            float indicator = t2 == t3 ? 1.0f : 0.0f;
            float local_derivative = att_bth[t2] * (indicator - att_at_t3);
            result += local_derivative * datt_bth[t2];
        }
        result = cg::reduce(warp, result, cg::plus<float>());
        if (warp.thread_rank() == 0) {
            dpreatt[t * T + t3] = scale * result;
        }
    }
}
