// softmax_backward2.cu: version 2, one row of blocks per (b, h).
//
// Change from version 1: the loops over b and h become the grid's y dimension,
// blockIdx.y = b*NH + h. Each thread now does the work of one (b, h, t3) instead of all B*NH
// of them: B*NH times more threads, each with B*NH times less work, so the GPU is filled
// (version 1 has only T threads in all). The runtime drops by far less than that factor
// (notebook 04): each lane reads its own row, so a warp-wide load touches about 30 cache
// lines, and the SMs' L1 caches, busy looking those lines up, take much of the gain back.
// The per-element math is unchanged.
//
// Launch geometry: grid (ceil_div(T, block_size), B*NH), any block_size.
// Bounds: t3 < T, t3 <= t < T and t2 <= t, so every access is inside row (b, h, t).
// Writes only the lower triangle (t3 <= t) of dpreatt.
#include "common.cuh"

extern "C" __global__ void softmax_autoregressive_backward_kernel2(float* __restrict__ dpreatt,
                                                                   const float* __restrict__ datt,
                                                                   const float* __restrict__ att,
                                                                   int B, int T, int C, int NH) {
    int t3 = blockIdx.x * blockDim.x + threadIdx.x;
    if (t3 >= T) {
        return;
    }
    size_t bh = (size_t)blockIdx.y * T * T;  // start of this (b, h)'s T x T matrix
    int hs = C / NH;  // head size
    float scale = 1.0f / sqrtf(hs);
    for (int t = t3; t < T; t++) {
        const float* att_bth = att + bh + (size_t)t * T;
        const float* datt_bth = datt + bh + (size_t)t * T;
        float result = 0.0f;
        for (int t2 = 0; t2 <= t; t2++) {
            float indicator = t2 == t3 ? 1.0f : 0.0f;
            float local_derivative = att_bth[t2] * (indicator - att_bth[t3]);
            result += scale * local_derivative * datt_bth[t2];
        }
        dpreatt[bh + (size_t)t * T + t3] = result;
    }
}
