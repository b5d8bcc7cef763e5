// l2_flush.cu: empty the L2 cache before a timed call by READING a buffer twice its size.
//
// llm.c flushes with a memset of an L2-sized buffer. That leaves L2 full of dirty lines,
// and the timed kernel then pays for writing them back to DRAM as it evicts them. Reading
// leaves only clean lines, which are dropped for free. Notebook 00 measures both flushes
// (attnlab.bench.FLUSHES); attnlab.bench uses the one the measurement supports.
// The sum is stored only when it equals `never`, so the loads cannot be removed.
extern "C" __global__ void l2_flush_read_kernel(const float4* __restrict__ buf, long long n,
                                                float never, float* out) {
    float sum = 0.f;
    long long stride = (long long)gridDim.x * blockDim.x;
    for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride) {
        float4 v = buf[i];
        sum += v.x + v.y + v.z + v.w;
    }
    if (sum == never) {
        *out = sum;
    }
}
