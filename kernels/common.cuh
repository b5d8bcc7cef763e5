// common.cuh: tiny helpers shared by the attnlab kernels (#include "common.cuh").
#pragma once

// Number of b-sized chunks needed to cover a (a >= 0, b > 0), e.g. blocks in a grid.
__host__ __device__ constexpr int ceil_div(int a, int b) {
    return (a + b - 1) / b;
}

// The index-th float (0..3) of a float4, so that `for (int k = 0; k < 4; ++k)` can walk
// the four values of one vectorized load. With k a compile-time constant after unrolling,
// this compiles to a plain register access.
__device__ __forceinline__ float& vec_at(float4& vec, int index) {
    return reinterpret_cast<float*>(&vec)[index];
}
__device__ __forceinline__ float vec_at(const float4& vec, int index) {
    return reinterpret_cast<const float*>(&vec)[index];
}
