// softmax_forward.cu: the causal softmax of the forward pass (llm.c's softmax_forward_kernel5).
//
//   att[n, t, t2] = exp(s * preatt[n, t, t2]) / sum_{t2' <= t} exp(s * preatt[n, t, t2'])   for t2 <= t
//
// with s = inv_temperature = 1/sqrt(head size): the scale of the attention scores is fused
// in here instead of being a separate pass over preatt.
//
// Ideas: one warp per row (its 32 lanes stride along the row, so loads are coalesced);
// the "online softmax" finds the max and the sum of exponentials in a single pass over the
// row (when the running max grows, the running sum is rescaled by exp(s*(old_max - new_max)));
// float4 loads for the bulk of the row; only the causal part t2 <= t is read or written.
//
// Writes ONLY the lower triangle (t2 <= t) of each T x T matrix: the upper triangle of `out`
// must already be zero (the GEMM that follows reads all of it).
//
// Launch geometry: blockDim 256 (any multiple of 32 works), grid ceil_div(N*T*32, 256);
// inp, out are (N, T, T) with N = B*NH. Requires T % 4 == 0 (checked on the Python side), so
// that every row starts on a 16-byte boundary for the float4 loads.
// Bounds: row < N*T; the float4 loop reads floats 0 .. 4*(t/4)-1 and the tail reads
// 4*(t/4) .. t, all inside the row since t < T.
#include <cfloat>
#include <cooperative_groups.h>
#include <cooperative_groups/reduce.h>
#include "common.cuh"

namespace cg = cooperative_groups;

extern "C" __global__ void softmax_forward_kernel5(float* out, float inv_temperature, const float* inp, int N, int T) {
    cg::thread_block block = cg::this_thread_block();
    cg::thread_block_tile<32> warp = cg::tiled_partition<32>(block);
    int row = blockIdx.x * warp.meta_group_size() + warp.meta_group_rank();
    if (row >= N * T) {
        return;  // the whole warp leaves together
    }
    int t = row % T;  // this row's query position: it attends to t2 = 0..t
    int t_by_4 = t / 4;
    const float* x = inp + (size_t)row * T;
    float* y = out + (size_t)row * T;

    // -FLT_MAX rather than -INF, so that (old_max - new_max) can never be inf - inf = NaN
    float maxval = -FLT_MAX;
    float sumval = 0.0f;
    // float4 loads over the whole groups of four before position 4*(t/4)
    const float4* x_vec = reinterpret_cast<const float4*>(x);
    for (int i = warp.thread_rank(); i < t_by_4; i += warp.size()) {
        float4 v = x_vec[i];
        float old_maxval = maxval;
        for (int k = 0; k < 4; ++k) {
            maxval = fmaxf(maxval, vec_at(v, k));
        }
        sumval *= expf(inv_temperature * (old_maxval - maxval));
        for (int k = 0; k < 4; ++k) {
            sumval += expf(inv_temperature * (vec_at(v, k) - maxval));
        }
    }
    // the last 1..4 values, positions 4*(t/4) .. t: one per lane
    int t2 = 4 * t_by_4 + warp.thread_rank();
    if (t2 <= t) {
        float old_maxval = maxval;
        maxval = fmaxf(maxval, x[t2]);
        sumval *= expf(inv_temperature * (old_maxval - maxval));
        sumval += expf(inv_temperature * (x[t2] - maxval));
    }
    // combine the lanes: rescale every lane's sum to the common max before adding
    float global_maxval = cg::reduce(warp, maxval, cg::greater<float>{});
    sumval *= expf(inv_temperature * (maxval - global_maxval));
    float norm = 1.f / cg::reduce(warp, sumval, cg::plus<float>{});

    // write the normalized row. Recomputing exp is cheaper than a round-trip through memory;
    // __ldcs/__stcs are streaming (evict-first) accesses: this row is not needed again soon.
    for (int i = warp.thread_rank(); i <= t; i += warp.size()) {
        float ev = expf(inv_temperature * (__ldcs(x + i) - global_maxval));
        __stcs(y + i, ev * norm);
    }
}
