// ceilings.cu: four microbenchmarks that measure this GPU's ceilings, the limits a kernel's
// time is set against in notebooks 03-11 (attnlab/ceilings.py launches and times them).
//
//  - empty_kernel: does nothing; its time is the fixed cost of one launch.
//  - copy_kernel: out[i] = in[i] over a buffer much larger than L2, 16 bytes per thread per
//    step (float4), grid-stride: the DRAM bandwidth a simple streaming kernel can reach
//    (read + write bytes per second). This, not the datasheet's figure, is the roof.
//  - fma_kernel: every thread runs FMA_CHAINS independent chains of multiply-adds, so the
//    FP32 pipes never wait on a previous result: the fp32 multiply-add rate.
//  - shared_load_kernel: every thread reads shared memory, conflict-free (lane i reads bank
//    i), LOADS times: the rate at which an SM's load path delivers bytes from shared memory
//    (the same path serves L1 hits), the roof for loads that never leave the SM.
//  - mma_tf32_kernel (sm_80 and newer): every warp runs MMA_CHAINS independent chains of
//    mma.sync.m16n8k8 TF32 products (2048 flops each) on operands held in registers: the rate
//    of the warp-level tensor-core instruction the fused kernels 9 and 10 are built on. (On
//    Hopper the warpgroup instruction wgmma reaches a higher rate; mma.sync does not use it.)
// The results are written to `out` only so that the compiler cannot remove the work.
#include "common.cuh"

extern "C" __global__ void empty_kernel() {}

extern "C" __global__ void copy_kernel(float4* __restrict__ out, const float4* __restrict__ in,
                                       long long n) {
    long long stride = (long long)gridDim.x * blockDim.x;
    for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride) {
        out[i] = in[i];
    }
}

#define FMA_CHAINS 8
extern "C" __global__ void fma_kernel(float* out, int iterations, float a, float b) {
    float x[FMA_CHAINS];
#pragma unroll
    for (int c = 0; c < FMA_CHAINS; ++c) {
        x[c] = threadIdx.x + c;
    }
    for (int i = 0; i < iterations; ++i) {
#pragma unroll
        for (int c = 0; c < FMA_CHAINS; ++c) {
            x[c] = fmaf(x[c], a, b);   // one multiply-add; the chains are independent
        }
    }
    float sum = 0.f;
#pragma unroll
    for (int c = 0; c < FMA_CHAINS; ++c) {
        sum += x[c];
    }
    out[blockIdx.x * blockDim.x + threadIdx.x] = sum;
}

#define SHARED_FLOATS 1024
extern "C" __global__ void __launch_bounds__(1024) shared_load_kernel(float* out, int iterations) {
    __shared__ float tile[SHARED_FLOATS];
    for (int i = threadIdx.x; i < SHARED_FLOATS; i += blockDim.x) {
        tile[i] = i;
    }
    __syncthreads();
    int lane = threadIdx.x % 32;
    float acc[4] = {0.f, 0.f, 0.f, 0.f};
    for (int i = 0; i < iterations; ++i) {
        int base = (i * 128) % SHARED_FLOATS;   // 32 consecutive floats: one per bank
#pragma unroll
        for (int k = 0; k < 4; ++k) {
            acc[k] += tile[base + 32 * k + lane];
        }
    }
    out[blockIdx.x * blockDim.x + threadIdx.x] = acc[0] + acc[1] + acc[2] + acc[3];
}

#define MMA_CHAINS 8
extern "C" __global__ void mma_tf32_kernel(float* out, int iterations) {
#if !defined(__CUDA_ARCH__) || __CUDA_ARCH__ >= 800
    float d[MMA_CHAINS][4];
#pragma unroll
    for (int c = 0; c < MMA_CHAINS; ++c)
#pragma unroll
        for (int e = 0; e < 4; ++e) d[c][e] = 0.f;
    const unsigned a = __float_as_uint(1.f + threadIdx.x * 1e-3f), b = __float_as_uint(1e-3f);
    for (int i = 0; i < iterations; ++i) {
#pragma unroll
        for (int c = 0; c < MMA_CHAINS; ++c) {   // independent: the pipe never waits on a result
            asm volatile("mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 "
                         "{%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};"
                         : "+f"(d[c][0]), "+f"(d[c][1]), "+f"(d[c][2]), "+f"(d[c][3])
                         : "r"(a), "r"(a), "r"(a), "r"(a), "r"(b), "r"(b));
        }
    }
    float sum = 0.f;
#pragma unroll
    for (int c = 0; c < MMA_CHAINS; ++c) sum += d[c][0] + d[c][1] + d[c][2] + d[c][3];
    out[blockIdx.x * blockDim.x + threadIdx.x] = sum;
#endif
}
