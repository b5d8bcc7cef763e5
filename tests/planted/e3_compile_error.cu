// Planted mistake (exercise 3): does not compile (line 12: `blok`, line 14: no semicolon).
#define NUM_WARPS (BLOCK_SIZE / 32)

extern "C" __global__ void __launch_bounds__(BLOCK_SIZE)
softmax_autoregressive_backward_kernel7(float* dpreatt, const float* datt, const float* att,
                                        int B, int T, int C, int NH) {
    __shared__ float warp_sums[NUM_WARPS];
    int t = blockIdx.x;
    size_t row = ((size_t)blockIdx.y * T + t) * T;
    float s = 0.0f;
    for (int t2 = threadIdx.x; t2 <= t; t2 += BLOCK_SIZE) {
        s += att[row + t2] * datt[row + blok];
    }
    float scale = 1.0f / sqrtf((float)(C / NH))
    for (int t3 = threadIdx.x; t3 <= t; t3 += BLOCK_SIZE) {
        dpreatt[row + t3] = scale * att[row + t3] * (datt[row + t3] - s);
    }
}
