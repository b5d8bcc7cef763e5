// flash_tf32.cuh: the building blocks of fused backward kernels 10 and 11 (flash_attention10.cu,
// flash_attention11.cu): 4 warps of 32 rows (MB = 2 blocks of 16), the register layouts of
// kernel 9's TF32 variant (flash_attention.cu's header explains them and the padded tiles),
// mma.sync m16n8k8 TF32, and the 3xTF32 split that -DTF32=0 selects.
#pragma once
#include <cfloat>
#include <cstdint>

#ifndef HEAD_SIZE
#define HEAD_SIZE 64
#endif
#if HEAD_SIZE != 64
#error "fused kernels 10 and 11 support HEAD_SIZE=64 only"
#endif
#ifndef TF32
#define TF32 0
#endif
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ < 800
#error "fused kernels 10 and 11 need compute capability 8.0 or newer (mma.sync with .tf32 operands)"
#endif

#define HS HEAD_SIZE
#define TS (HS + 8)                      // floats per tile row in shared memory (padded)
#define NUM_WARPS 4
#define NUM_THREADS (32 * NUM_WARPS)
#define WARP_ROWS 32                     // own rows per warp: MB blocks of 16
#define MB 2
#define NJ 8                             // 8 mma n-blocks of 8 columns: 64 head dims
#define LOG2E 1.4426950408889634f

// Blocks per SM: 2 on sm_90 (228 KB of shared memory), 1 on sm_80 (164 KB) and smaller.
#if !defined(__CUDA_ARCH__) || __CUDA_ARCH__ >= 900
#define MIN_BLOCKS 2
#else
#define MIN_BLOCKS 1
#endif

// A warp's 32 rows x N*8 columns: v[m][j][r][e] is row 16m + row_of(g, r), column j*8 + (score
// layout: pi(2t+e); output layout: 2t+e), as kernel 9's TF32 layout for each 16-row block m.
template <int N>
struct Frag {
    float v[MB][N][2][2];
};
typedef Frag<NJ> Acc;

template <int N>
__device__ __forceinline__ void fill(Frag<N>& a, float x) {
#pragma unroll
    for (int m = 0; m < MB; ++m)
#pragma unroll
        for (int j = 0; j < N; ++j)
#pragma unroll
            for (int r = 0; r < 2; ++r)
#pragma unroll
                for (int e = 0; e < 2; ++e) a.v[m][j][r][e] = x;
}

// pi = (0 6 1 7 2 4 3 5), as kernel 9.
__device__ __forceinline__ int pi8(int x) { return (x & 1) ? 4 + (((x >> 1) + 2) & 3) : x >> 1; }
__device__ __forceinline__ int row_of(int g, int m, int r) { return 16 * m + pi8(g) + 8 * r; }
__device__ __forceinline__ int score_col(int j, int e, int t) { return 8 * j + pi8(2 * t + e); }

__device__ __forceinline__ float4 lds4(const float* s) { return *reinterpret_cast<const float4*>(s); }

__device__ __forceinline__ float round_tf32(float x) {
    uint32_t r;
    asm("cvt.rna.tf32.f32 %0, %1;" : "=r"(r) : "f"(x));
    return __uint_as_float(r);
}

__device__ __forceinline__ void mma_tf32(float (&d)[2][2], float a0, float a1, float a2, float a3,
                                         float b0, float b1) {
    asm("mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 "
        "{%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};"
        : "+f"(d[0][0]), "+f"(d[0][1]), "+f"(d[1][0]), "+f"(d[1][1])
        : "r"(__float_as_uint(a0)), "r"(__float_as_uint(a1)), "r"(__float_as_uint(a2)),
          "r"(__float_as_uint(a3)), "r"(__float_as_uint(b0)), "r"(__float_as_uint(b1)));
}

// An operand as PARTS TF32 numbers: [0] big, [1] small (3xTF32 only).
#if TF32
#define PARTS 1
#else
#define PARTS 2
#endif
struct Op {
    float p[PARTS];
};
// From shared memory: TF32=1 tiles were rounded when staged; TF32=0 tiles are fp32, split here.
__device__ __forceinline__ Op from_tile(float x) {
#if TF32
    return Op{{x}};
#else
    const float big = round_tf32(x);
    return Op{{big, round_tf32(x - big)}};
#endif
}
// A value as a tile in shared memory holds it: TF32=1 rounded, TF32=0 fp32 (split when read).
__device__ __forceinline__ float as_tile(float x) {
#if TF32
    return round_tf32(x);
#else
    return x;
#endif
}
// From registers (P, dS): rounded, or split.
__device__ __forceinline__ Op from_reg(float x) {
#if TF32
    return Op{{round_tf32(x)}};
#else
    const float big = round_tf32(x);
    return Op{{big, round_tf32(x - big)}};
#endif
}

// d += A B for one m16n8k8 step: A's fragment a0..a3, B's b0, b1 (kernel 9's fragment order).
__device__ __forceinline__ void mma(float (&d)[2][2], const Op (&a)[4], const Op& b0, const Op& b1) {
#if !TF32   // the two correction terms first, while the accumulator is small
    mma_tf32(d, a[0].p[1], a[1].p[1], a[2].p[1], a[3].p[1], b0.p[0], b1.p[0]);
    mma_tf32(d, a[0].p[0], a[1].p[0], a[2].p[0], a[3].p[0], b0.p[1], b1.p[1]);
#endif
    mma_tf32(d, a[0].p[0], a[1].p[0], a[2].p[0], a[3].p[0], b0.p[0], b1.p[0]);
}

// The same for the running sums dQ, dK, dV, which add up hundreds of mma over a row of tiles.
// The tensor cores align and add with truncation (not rounding to nearest), an error biased
// toward zero that grows with the number of additions: in 3xTF32 it made dinp 7x less
// accurate than kernel 9's fp32 FMAs (H200, default shape). So each step's three products
// are summed from zero, and added to the running sum by an fp32 add (rounded to nearest).
__device__ __forceinline__ void mma_into(float (&c)[2][2], const Op (&a)[4], const Op& b0, const Op& b1) {
#if TF32
    mma(c, a, b0, b1);
#else
    float d[2][2] = {{0.f, 0.f}, {0.f, 0.f}};
    mma(d, a, b0, b1);
#pragma unroll
    for (int r = 0; r < 2; ++r)
#pragma unroll
        for (int e = 0; e < 2; ++e) c[r][e] += d[r][e];
#endif
}

// Load rows row0 .. row0+ROWS-1 of a (T, HS) matrix into a tile (TF32=1: rounded); rows >= T
// become zeros. All loads are issued before the first store.
template <int ROWS>
__device__ __forceinline__ void load_tile(float* __restrict__ s, const float* __restrict__ src,
                                          int row0, int T) {
    constexpr int PER_THREAD = ROWS * HS / 4 / NUM_THREADS;
    float4 x[PER_THREAD];
#pragma unroll
    for (int it = 0; it < PER_THREAD; ++it) {
        const int idx = threadIdx.x + it * NUM_THREADS, row = idx / (HS / 4), c4 = idx % (HS / 4);
        x[it] = row0 + row < T
                    ? __ldg(reinterpret_cast<const float4*>(src + (size_t)(row0 + row) * HS) + c4)
                    : make_float4(0.f, 0.f, 0.f, 0.f);
    }
#pragma unroll
    for (int it = 0; it < PER_THREAD; ++it) {
        const int idx = threadIdx.x + it * NUM_THREADS, row = idx / (HS / 4), c4 = idx % (HS / 4);
#if TF32
        x[it] = make_float4(round_tf32(x[it].x), round_tf32(x[it].y), round_tf32(x[it].z), round_tf32(x[it].w));
#endif
        *reinterpret_cast<float4*>(s + row * TS + 4 * c4) = x[it];
    }
}

// c = A B^T: A the warp's 32 rows (a_row0 ..) of tile sA, B rows b_row0 .. b_row0+8N-1 of sB,
// over the 64 head dims. Each B fragment read feeds MB = 2 mma. Score layout.
template <int N>
__device__ __forceinline__ void product_abt(Frag<N>& c, const float* __restrict__ sA, int a_row0,
                                            const float* __restrict__ sB, int b_row0, int g, int t) {
    fill(c, 0.f);
    const float* b = sB + (b_row0 + pi8(g)) * TS + 4 * t;
#pragma unroll
    for (int kk = 0; kk < HS / 16; ++kk) {
        // thread t brings head dims 16kk + 4t .. +3: k step 0 takes (4t, 4t+1), step 1 (4t+2, 4t+3)
        Op a[MB][2][4];
#pragma unroll
        for (int m = 0; m < MB; ++m) {
            const float4 lo = lds4(sA + (a_row0 + row_of(g, m, 0)) * TS + 4 * t + 16 * kk);
            const float4 hi = lds4(sA + (a_row0 + row_of(g, m, 1)) * TS + 4 * t + 16 * kk);
            a[m][0][0] = from_tile(lo.x); a[m][0][1] = from_tile(hi.x);
            a[m][0][2] = from_tile(lo.y); a[m][0][3] = from_tile(hi.y);
            a[m][1][0] = from_tile(lo.z); a[m][1][1] = from_tile(hi.z);
            a[m][1][2] = from_tile(lo.w); a[m][1][3] = from_tile(hi.w);
        }
#pragma unroll
        for (int j = 0; j < N; ++j) {
            const float4 bj = lds4(b + 8 * j * TS + 16 * kk);
            const Op b0 = from_tile(bj.x), b1 = from_tile(bj.y), b2 = from_tile(bj.z), b3 = from_tile(bj.w);
#pragma unroll
            for (int m = 0; m < MB; ++m) mma(c.v[m][j], a[m][0], b0, b1);
#pragma unroll
            for (int m = 0; m < MB; ++m) mma(c.v[m][j], a[m][1], b2, b3);
        }
    }
}

// c += P B: P the warp's 32 rows x 8N columns in registers (score layout), B rows k_row0 .. of
// sB as [k][n], n = 0..63. Output layout. P's registers are the A fragments (kernel 9's header).
template <int N>
__device__ __forceinline__ void product_pb(Acc& c, const Frag<N>& p, const float* __restrict__ sB,
                                           int k_row0, int g, int t) {
    const float* b0 = sB + (k_row0 + pi8(2 * t)) * TS + g;
    const float* b1 = sB + (k_row0 + pi8(2 * t + 1)) * TS + g;
#pragma unroll
    for (int kk = 0; kk < N; ++kk) {
        Op a[MB][4];
#pragma unroll
        for (int m = 0; m < MB; ++m) {
            a[m][0] = from_reg(p.v[m][kk][0][0]); a[m][1] = from_reg(p.v[m][kk][1][0]);
            a[m][2] = from_reg(p.v[m][kk][0][1]); a[m][3] = from_reg(p.v[m][kk][1][1]);
        }
#pragma unroll
        for (int j = 0; j < NJ; ++j) {
            const Op bj0 = from_tile(b0[8 * kk * TS + 8 * j]), bj1 = from_tile(b1[8 * kk * TS + 8 * j]);
#pragma unroll
            for (int m = 0; m < MB; ++m) mma_into(c.v[m][j], a[m], bj0, bj1);
        }
    }
}

// Store the warp's rows row0 + row_of(g, m, r) (those < T) of an output-layout result, times mul.
__device__ __forceinline__ void store_rows(float* __restrict__ dst, const Acc& a, int row0, int T,
                                           float mul, int g, int t) {
#pragma unroll
    for (int m = 0; m < MB; ++m)
#pragma unroll
        for (int r = 0; r < 2; ++r) {
            const int row = row0 + row_of(g, m, r);
            if (row >= T) continue;
            float* p = dst + (size_t)row * HS + 2 * t;
#pragma unroll
            for (int j = 0; j < NJ; ++j)
                *reinterpret_cast<float2*>(p + 8 * j) = make_float2(mul * a.v[m][j][r][0], mul * a.v[m][j][r][1]);
        }
}
