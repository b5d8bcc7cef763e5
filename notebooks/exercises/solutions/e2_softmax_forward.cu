// Exercise 2, reference solution: a naive causal softmax, one thread per row.
//
// preatt and att are (N, T, T) with N = B*NH. Row r = n*T + t of att is
//   att[r][t2] = exp(scale * (preatt[r][t2] - m)) / sum_{t2' <= t} exp(scale * (preatt[r][t2'] - m))
// for t2 <= t, with m = max_{t2 <= t} preatt[r][t2] (subtracted so that exp cannot overflow;
// it cancels between numerator and denominator). The upper triangle (t2 > t) is left alone.
#include <cfloat>

extern "C" __global__ void softmax_forward(float* att, const float* preatt, float scale,
                                           int N, int T) {
    int row = blockIdx.x * blockDim.x + threadIdx.x;
    if (row >= N * T) {
        return;
    }
    int t = row % T;                                  // this row's query position
    const float* x = preatt + (size_t)row * T;
    float* y = att + (size_t)row * T;

    float maxval = -FLT_MAX;                          // pass 1: the maximum
    for (int t2 = 0; t2 <= t; t2++) {
        maxval = fmaxf(maxval, x[t2]);
    }
    float sum = 0.0f;                                 // pass 2: exponentials and their sum
    for (int t2 = 0; t2 <= t; t2++) {
        float e = expf(scale * (x[t2] - maxval));
        y[t2] = e;
        sum += e;
    }
    float norm = 1.0f / sum;                          // pass 3: normalize
    for (int t2 = 0; t2 <= t; t2++) {
        y[t2] *= norm;
    }
}
