// Planted mistake (exercise 2): no causal mask; the softmax runs over the whole row.
#include <cfloat>

extern "C" __global__ void softmax_forward(float* att, const float* preatt, float scale,
                                           int N, int T) {
    int row = blockIdx.x * blockDim.x + threadIdx.x;
    if (row >= N * T) {
        return;
    }
    const float* x = preatt + (size_t)row * T;
    float* y = att + (size_t)row * T;
    float maxval = -FLT_MAX;
    for (int t2 = 0; t2 < T; t2++) {                  // BUG: t2 <= t
        maxval = fmaxf(maxval, x[t2]);
    }
    float sum = 0.0f;
    for (int t2 = 0; t2 < T; t2++) {
        float e = expf(scale * (x[t2] - maxval));
        y[t2] = e;
        sum += e;
    }
    for (int t2 = 0; t2 < T; t2++) {
        y[t2] /= sum;
    }
}
