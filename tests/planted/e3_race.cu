// Planted mistake (exercise 3): a race on shared memory. Thread 0 adds up the warps' sums
// and stores S in shared memory, but there is no __syncthreads() between that store and the
// other threads' reads of it: most of them read whatever the shared memory held before.
#define NUM_WARPS (BLOCK_SIZE / 32)

extern "C" __global__ void __launch_bounds__(BLOCK_SIZE)
softmax_autoregressive_backward_kernel7(float* dpreatt, const float* datt, const float* att,
                                        int B, int T, int C, int NH) {
    __shared__ float warp_sums[NUM_WARPS];
    __shared__ float S_shared;
    int t = blockIdx.x;
    size_t row = ((size_t)blockIdx.y * T + t) * T;
    const float* att_row = att + row;
    const float* datt_row = datt + row;
    float* dpreatt_row = dpreatt + row;
    float scale = 1.0f / sqrtf((float)(C / NH));
    int warp = threadIdx.x / 32;
    int lane = threadIdx.x % 32;

    float s = 0.0f;
    for (int t2 = threadIdx.x; t2 <= t; t2 += BLOCK_SIZE) {
        s += att_row[t2] * datt_row[t2];
    }
    for (int offset = 16; offset > 0; offset /= 2) {
        s += __shfl_xor_sync(0xffffffffu, s, offset);
    }
    if (lane == 0) {
        warp_sums[warp] = s;
    }
    __syncthreads();
    if (threadIdx.x == 0) {
        float total = 0.0f;
        for (int w = 0; w < NUM_WARPS; w++) {
            total += warp_sums[w];
        }
        S_shared = total;
    }
    // BUG: missing __syncthreads() here
    float S = S_shared;
    for (int t3 = threadIdx.x; t3 <= t; t3 += BLOCK_SIZE) {
        dpreatt_row[t3] = scale * att_row[t3] * (datt_row[t3] - S);
    }
}
