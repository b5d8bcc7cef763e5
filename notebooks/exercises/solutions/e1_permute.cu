// Exercise 1, reference solution: the permute kernel.
//
// inp is (B, N, 3, NH, d): for each batch b and position n, the 3*C floats of q, k and v,
// each C = NH*d wide and split into NH heads of d floats. q, k, v are (B, NH, N, d).
// One thread per element of q (and the same element of k and v); idx walks q in its own
// order, so the three stores are coalesced (consecutive threads, consecutive addresses).
extern "C" __global__ void permute_kernel(float* q, float* k, float* v, const float* inp,
                                          int B, int N, int NH, int d) {
    int idx = blockIdx.x * blockDim.x + threadIdx.x;
    if (idx >= B * NH * N * d) {
        return;                      // the last block has threads past the end
    }
    // idx = ((b * NH + h) * N + n) * d + i: peel the coordinates off, fastest first
    int i = idx % d;
    int n = (idx / d) % N;
    int h = (idx / (d * N)) % NH;
    int b = idx / (d * N * NH);
    int C = NH * d;
    int inp_idx = (b * N + n) * 3 * C + h * d + i;    // q's slot in row (b, n) of inp
    q[idx] = inp[inp_idx];
    k[idx] = inp[inp_idx + C];
    v[idx] = inp[inp_idx + 2 * C];
}
