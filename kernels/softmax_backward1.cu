// softmax_backward1.cu: version 1, naive, just to get correctness.
//
// Backward through the causal softmax att = softmax(scale * preatt) of one row (b, h, t):
//
//   dpreatt[t3] = scale * sum_{t2 <= t} att[t2] * (1[t2 == t3] - att[t3]) * datt[t2]    for t3 <= t
//
// This is the CPU reference's double loop, moved to the GPU as directly as possible: one
// thread per column t3, which walks every (b, h) and every row t >= t3 (those are the rows
// where t3 is in the causal part) and sums over t2 itself.
//
// NOTE: llm.c launched this kernel on a (ceil(T/bs), B*NH) grid, but since each thread loops
// over every b and h anyway, all B*NH rows of blocks redid the whole job and wrote the same
// values (B*NH-fold redundant work). We launch a single row of blocks. Version 2's idea is to
// give each (b, h) its own row of blocks instead of looping over them.
//
// All eight versions share this signature (__restrict__: the three buffers never overlap).
// dpreatt, datt, att are (B, NH, T, T). Like every version, this writes ONLY the lower
// triangle (t3 <= t) of dpreatt: the Python side zeroes dpreatt once at allocation and the
// upper triangle must stay zero, because the dense GEMMs that follow read all of T x T.
//
// Launch geometry: grid (ceil_div(T, block_size), 1), any block_size.
// Bounds: t3 < T, t3 <= t < T and t2 <= t, so every access is inside row (b, h, t).
#include "common.cuh"

extern "C" __global__ void softmax_autoregressive_backward_kernel1(float* __restrict__ dpreatt,
                                                                   const float* __restrict__ datt,
                                                                   const float* __restrict__ att,
                                                                   int B, int T, int C, int NH) {
    int t3 = blockIdx.x * blockDim.x + threadIdx.x;
    if (t3 >= T) {
        return;
    }
    int hs = C / NH;  // head size
    float scale = 1.0f / sqrtf(hs);
    for (int b = 0; b < B; b++) {
        for (int h = 0; h < NH; h++) {
            for (int t = t3; t < T; t++) {
                size_t row = ((size_t)(b * NH + h) * T + t) * T;  // start of row (b, h, t)
                const float* att_bth = att + row;
                const float* datt_bth = datt + row;
                float accum = 0.0f;
                for (int t2 = 0; t2 <= t; t2++) {
                    float indicator = t2 == t3 ? 1.0f : 0.0f;
                    float local_derivative = att_bth[t2] * (indicator - att_bth[t3]);
                    accum += scale * local_derivative * datt_bth[t2];
                }
                dpreatt[row + t3] = accum;
            }
        }
    }
}
