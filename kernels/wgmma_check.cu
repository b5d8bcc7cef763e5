// wgmma_check.cu: one warpgroup multiplies two 64 x 64 fp32 matrices with the primitives of
// wgmma_tf32.cuh, so that their layouts (descriptors, register fragments, accumulator) can be
// checked against numpy (tests/test_wgmma.py); and the rate of wgmma_rate, the roof of kernel 12.
#include "wgmma_tf32.cuh"

// out (3 x 64 x 64), a and b (64 x 64, row-major, TF32 values), all products over the 64 columns:
//   out[0] = a b^T              A and B from shared memory (wgmma64_ss)
//   out[1] = a b^T              A from registers (wgmma64_rs)
//   out[2][:, :32] = a b[32:]^T A and B from shared memory, N = 32 (wgmma32_ss); out[2][:, 32:] = 0
extern "C" __global__ void __launch_bounds__(128) wgmma_check(float* out, const float* a, const float* b) {
    __shared__ __align__(128) float sA[64 * 64];
    __shared__ __align__(128) float sB[64 * 64];
    for (int i = threadIdx.x; i < 64 * 64; i += 128) {
        sA[core_index(i / 64, i % 64, 64)] = a[i];
        sB[core_index(i / 64, i % 64, 64)] = b[i];
    }
    fence_async_shared();
    __syncthreads();
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
    uint32_t af[8][4];
#pragma unroll
    for (int s = 0; s < 8; ++s)
#pragma unroll
        for (int i = 0; i < 4; ++i)
            af[s][i] = __float_as_uint(a[(16 * warp + g + 8 * (i & 1)) * 64 + 8 * s + t + 4 * (i >> 1)]);
    float d0[32], d1[32], d2[16];
    wg_fence();
#pragma unroll
    for (int s = 0; s < 8; ++s) wgmma64_ss(d0, wg_desc(sA + 64 * s, 64), wg_desc(sB + 64 * s, 64), s > 0);
#pragma unroll
    for (int s = 0; s < 8; ++s) wgmma64_rs(d1, af[s], wg_desc(sB + 64 * s, 64), s > 0);
#pragma unroll
    for (int s = 0; s < 8; ++s) wgmma32_ss(d2, wg_desc(sA + 64 * s, 64), wg_desc(sB + 32 * 64 + 64 * s, 64), s > 0);
    wg_commit();
    wg_wait<0>();
#pragma unroll
    for (int j = 0; j < 8; ++j)
#pragma unroll
        for (int r = 0; r < 2; ++r)
#pragma unroll
            for (int e = 0; e < 2; ++e) {
                const int at = (16 * warp + g + 8 * r) * 64 + 8 * j + 2 * t + e, i = 4 * j + 2 * r + e;
                out[at] = d0[i];
                out[64 * 64 + at] = d1[i];
                out[2 * 64 * 64 + at] = j < 4 ? d2[i] : 0.f;
            }
}

// The rate: each block (one warpgroup) runs `iterations` times 8 wgmma m64nNk8 (a 64 x N x 64
// product) into one accumulator. mode 0: N = 64, A from shared memory; 1: N = 64, A from
// registers; 2: N = 32, A from shared memory (the shape of kernels 12-14's dQ).
extern "C" __global__ void __launch_bounds__(128) wgmma_rate(float* out, int iterations, int mode) {
    __shared__ __align__(128) float sA[64 * 64];
    __shared__ __align__(128) float sB[64 * 64];
    for (int i = threadIdx.x; i < 64 * 64; i += 128) {
        sA[i] = 1e-3f * (i % 7);
        sB[i] = 1e-3f * (i % 5);
    }
    fence_async_shared();
    __syncthreads();
    uint32_t af[4];
#pragma unroll
    for (int i = 0; i < 4; ++i) af[i] = __float_as_uint(1e-3f * (threadIdx.x % 3 + i));
    float d[32], d32[16];
#pragma unroll
    for (int i = 0; i < 32; ++i) d[i] = 0.f;
#pragma unroll
    for (int i = 0; i < 16; ++i) d32[i] = 0.f;
    for (int it = 0; it < iterations; ++it) {
        wg_hold(d);
        wg_hold(d32);
        wg_fence();
        if (mode == 1) {
#pragma unroll
            for (int s = 0; s < 8; ++s) wgmma64_rs(d, af, wg_desc(sB + 64 * s, 64), 1);
        } else if (mode == 2) {
#pragma unroll
            for (int s = 0; s < 8; ++s) wgmma32_ss(d32, wg_desc(sA + 64 * s, 64), wg_desc(sB + 64 * s, 64), 1);
        } else {
#pragma unroll
            for (int s = 0; s < 8; ++s) wgmma64_ss(d, wg_desc(sA + 64 * s, 64), wg_desc(sB + 64 * s, 64), 1);
        }
        wg_commit();
        wg_wait<0>();
        wg_hold(d);
        wg_hold(d32);
    }
    float s = 0.f;
#pragma unroll
    for (int i = 0; i < 32; ++i) s += d[i];
#pragma unroll
    for (int i = 0; i < 16; ++i) s += d32[i];
    out[blockIdx.x * blockDim.x + threadIdx.x] = s;
}
