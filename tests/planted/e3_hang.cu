// Planted mistake (exercise 3): a hang. Every thread waits for a flag in shared memory that
// thread 0 was meant to set, but thread 0 sets it only when t >= T, which never happens.
#define NUM_WARPS (BLOCK_SIZE / 32)

extern "C" __global__ void __launch_bounds__(BLOCK_SIZE)
softmax_autoregressive_backward_kernel7(float* dpreatt, const float* datt, const float* att,
                                        int B, int T, int C, int NH) {
    __shared__ volatile int ready;
    int t = blockIdx.x;
    if (threadIdx.x == 0) {
        ready = 0;
    }
    __syncthreads();
    if (threadIdx.x == 0 && t >= T) {                 // BUG: never true
        ready = 1;
    }
    while (ready == 0) {
        // wait for thread 0 (forever)
    }
    size_t row = ((size_t)blockIdx.y * T + t) * T;
    for (int t3 = threadIdx.x; t3 <= t; t3 += BLOCK_SIZE) {
        dpreatt[row + t3] = 0.0f;
    }
}
