// Planted mistake (exercise 1): no bounds check. The grid is rounded up to whole blocks of
// 256 threads, so the last block's extra threads write past the end of q, k and v.
extern "C" __global__ void permute_kernel(float* q, float* k, float* v, const float* inp,
                                          int B, int N, int NH, int d) {
    int idx = blockIdx.x * blockDim.x + threadIdx.x;
    // BUG: missing `if (idx >= B * NH * N * d) return;`
    int i = idx % d;
    int n = (idx / d) % N;
    int h = (idx / (d * N)) % NH;
    int b = idx / (d * N * NH);
    int C = NH * d;
    int inp_idx = (b * N + n) * 3 * C + h * d + i;
    q[idx] = inp[inp_idx];
    k[idx] = inp[inp_idx + C];
    v[idx] = inp[inp_idx + 2 * C];
}
