// softmax_backward5.cu: version 5, split the t2 loop so the inner loop has no `if`s.
//
// Change from version 4: the inner loop of version 4 tests, for each of the 8 columns, whether
// the column is in range and whether t2 == t3+k. Those integer compares and selects cost more
// instructions than the floating-point work they guard. Here:
//  - the att[t3+k] loads are clipped with min(t, t3+k) instead of skipped, so they need no
//    branch (the results of columns t3+k > t are computed from garbage but never stored);
//  - the indicator 1[t2 == t3+k] can only be nonzero in the one 32-wide step of t2 that
//    covers t3 .. t3+31 (UNROLL <= 32). The t2 loop is split in three: before that step,
//    that step (with the indicator), and after it. The two outer parts just do
//    result[k] -= p * att[t3+k], with p = att[t2]*datt[t2] computed once per t2.
// Fewer non-FP instructions per FMA: that is the speed-up.
//
// Launch geometry: grid (ceil_div(4*T, block_size), B*NH), block_size a multiple of 32;
// (warp number) * 8 is t3; warps with t3 >= T exit.
// Bounds: att[min(t, t3+k)] stays inside the row even when t3 = T-4 (T % 8 == 4); t2 <= t in
// all three parts; stores only for t3+k <= t. Writes only the lower triangle of dpreatt.
#include <cooperative_groups.h>
#include <cooperative_groups/reduce.h>
#include "common.cuh"

namespace cg = cooperative_groups;

#define UNROLL 8
static_assert(UNROLL <= 32, "the indicator must fall inside a single 32-wide step of t2");

extern "C" __global__ void softmax_autoregressive_backward_kernel5(float* __restrict__ dpreatt,
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
        float att_at_t3[UNROLL];
#pragma unroll
        for (int k = 0; k < UNROLL; ++k) {
            // if t3+k > t this column is not stored, so any in-row value will do: clip.
            att_at_t3[k] = att_bth[min(t, t3 + k)];
        }
        float result[UNROLL] = {};
        // one t2 step where the indicator is known to be 0
        auto loop_step = [&](int t2) {
            float p = att_bth[t2] * datt_bth[t2];
#pragma unroll
            for (int k = 0; k < UNROLL; ++k) {
                result[k] -= p * att_at_t3[k];
            }
        };
        int t2 = warp.thread_rank();
        // part 1: t2 < t3, indicator == 0
        for (; t2 < t3; t2 += warp.size()) {
            loop_step(t2);
        }
        // part 2: now t3 <= t2 < t3 + 32, the only step where t2 == t3+k can happen
        if (t2 <= t) {
            float p = att_bth[t2] * datt_bth[t2];
#pragma unroll
            for (int k = 0; k < UNROLL; ++k) {
                float indicator = t2 == (t3 + k) ? 1.0f : 0.0f;
                result[k] += p * (indicator - att_at_t3[k]);
            }
            t2 += warp.size();
        }
        // part 3: t2 >= t3 + 32, indicator == 0 again
        for (; t2 <= t; t2 += warp.size()) {
            loop_step(t2);
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
