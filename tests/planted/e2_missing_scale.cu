// Planted mistake (exercise 2): the scale is never applied: softmax(preatt).
#include <cfloat>

extern "C" __global__ void softmax_forward(float* att, const float* preatt, float scale,
                                           int N, int T) {
    int row = blockIdx.x * blockDim.x + threadIdx.x;
    if (row >= N * T) {
        return;
    }
    int t = row % T;
    const float* x = preatt + (size_t)row * T;
    float* y = att + (size_t)row * T;
    float maxval = -FLT_MAX;
    for (int t2 = 0; t2 <= t; t2++) {
        maxval = fmaxf(maxval, x[t2]);
    }
    float sum = 0.0f;
    for (int t2 = 0; t2 <= t; t2++) {
        float e = expf(x[t2] - maxval);               // BUG: scale * (x[t2] - maxval)
        y[t2] = e;
        sum += e;
    }
    for (int t2 = 0; t2 <= t; t2++) {
        y[t2] /= sum;
    }
}
