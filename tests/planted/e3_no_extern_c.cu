// Planted mistake (exercise 3): the kernel is not extern "C", so its compiled name is mangled.
#define NUM_WARPS (BLOCK_SIZE / 32)

__global__ void softmax_autoregressive_backward_kernel7(float* dpreatt, const float* datt,
                                                        const float* att, int B, int T, int C, int NH) {
    int t = blockIdx.x;
    size_t row = ((size_t)blockIdx.y * T + t) * T;
    for (int t3 = threadIdx.x; t3 <= t; t3 += BLOCK_SIZE) {
        dpreatt[row + t3] = 0.0f;
    }
}
