// Planted mistake (exercise 1): the right values written in the wrong layout. The store uses
// (b, n, h, i), the layout of inp, instead of q's own (b, h, n, i).
extern "C" __global__ void permute_kernel(float* q, float* k, float* v, const float* inp,
                                          int B, int N, int NH, int d) {
    int idx = blockIdx.x * blockDim.x + threadIdx.x;
    if (idx >= B * NH * N * d) {
        return;
    }
    int i = idx % d;
    int n = (idx / d) % N;
    int h = (idx / (d * N)) % NH;
    int b = idx / (d * N * NH);
    int C = NH * d;
    int inp_idx = (b * N + n) * 3 * C + h * d + i;
    int out = ((b * N + n) * NH + h) * d + i;         // BUG: should be idx
    q[out] = inp[inp_idx];
    k[out] = inp[inp_idx + C];
    v[out] = inp[inp_idx + 2 * C];
}
