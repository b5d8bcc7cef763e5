// Exercise 5, a reference solution: one warp per row, the row kept in registers.
//
// Same math as kernels 7 and 8: dpreatt[t3] = scale * att[t3] * (datt[t3] - S) with
// S = sum_{t2 <= t} att[t2] * datt[t2]. What is different:
//  - a warp per row, BLOCK_SIZE/32 rows per block: S is reduced with shuffles alone, no shared
//    memory and no __syncthreads(), so a warp whose row is done leaves at once;
//  - float4 loads and stores: a quarter of the memory instructions (every row starts on a
//    16-byte boundary because T % 4 == 0);
//  - the row's att and datt are read from memory once: the first pass keeps them in
//    registers (rows up to 1024 floats) and the second pass computes from there;
//  - rows in reverse order (longest first), as in kernel 8; streaming stores (__stcs).
//
// Launch: grid (ceil_div(T, T_PER_BLOCK), B*NH), block BLOCK_SIZE, T_PER_BLOCK = BLOCK_SIZE/32.
// attnlab-exercise-config: block_size=256 t_per_block=8
#define WARPS (BLOCK_SIZE / 32)
static_assert(T_PER_BLOCK == WARPS, "one warp per row: T_PER_BLOCK must be BLOCK_SIZE / 32");
#define VEC_PER_LANE 8     // float4s of a row each lane keeps: rows up to 32 * 4 * 8 = 1024 floats

__device__ __forceinline__ float dot4(float4 a, float4 b) {
    return a.x * b.x + a.y * b.y + a.z * b.z + a.w * b.w;
}

__device__ __forceinline__ float4 grad4(float4 a, float4 d, float S, float scale) {
    return make_float4(scale * a.x * (d.x - S), scale * a.y * (d.y - S),
                       scale * a.z * (d.z - S), scale * a.w * (d.w - S));
}

extern "C" __global__ void __launch_bounds__(BLOCK_SIZE)
my_softmax_backward(float* __restrict__ dpreatt, const float* __restrict__ datt,
                    const float* __restrict__ att, int B, int T, int C, int NH) {
    int warp = threadIdx.x / 32;
    int lane = threadIdx.x % 32;
    int t = T - 1 - ((int)blockIdx.x * T_PER_BLOCK + warp);    // longest rows first
    if (t < 0) {
        return;            // no __syncthreads() in this kernel: a warp may leave on its own
    }
    size_t row = ((size_t)blockIdx.y * T + t) * T;
    const float4* a4 = reinterpret_cast<const float4*>(att + row);
    const float4* d4 = reinterpret_cast<const float4*>(datt + row);
    float4* o4 = reinterpret_cast<float4*>(dpreatt + row);
    int n = t + 1;         // the row's length
    int n4 = n / 4;        // whole float4s in it; the last n % 4 floats are done one by one

    float4 a[VEC_PER_LANE], d[VEC_PER_LANE];
    float s = 0.0f;
#pragma unroll
    for (int k = 0; k < VEC_PER_LANE; ++k) {
        int i = lane + 32 * k;
        if (i < n4) {
            a[k] = a4[i];
            d[k] = d4[i];
            s += dot4(a[k], d[k]);
        }
    }
    for (int i = lane + 32 * VEC_PER_LANE; i < n4; i += 32) {  // rows longer than 1024 floats
        s += dot4(a4[i], d4[i]);
    }
    int tail = 4 * n4 + lane;
    if (tail < n) {
        s += att[row + tail] * datt[row + tail];
    }
    for (int offset = 16; offset > 0; offset /= 2) {
        s += __shfl_xor_sync(0xffffffffu, s, offset);
    }
    const float S = s;
    const float scale = 1.0f / sqrtf((float)(C / NH));

#pragma unroll
    for (int k = 0; k < VEC_PER_LANE; ++k) {
        int i = lane + 32 * k;
        if (i < n4) {
            __stcs(o4 + i, grad4(a[k], d[k], S, scale));
        }
    }
    for (int i = lane + 32 * VEC_PER_LANE; i < n4; i += 32) {
        __stcs(o4 + i, grad4(__ldcs(a4 + i), __ldcs(d4 + i), S, scale));
    }
    if (tail < n) {
        dpreatt[row + tail] = scale * att[row + tail] * (datt[row + tail] - S);
    }
}
