// flash_attention11.cu: kernel 11, kernel 10's dK/dV blocks also produce dQ, adding it to
// memory with atomics: 5 tile products instead of 7, and results that are no longer bit-identical.
//
// WHAT CHANGED from kernel 10 (flash_attention10.cu; the algorithm and the register layouts are
// kernel 9's, flash_attention.cu): there are no dQ blocks. A block owns 128 keys as in kernel
// 10's dK/dV blocks and, for each query tile (32 queries here), after dS^T = P^T o (dP^T - D)
// it writes dS^T to shared memory and the 4 warps compute that tile's share of dQ,
//   dQ[queries] += scale * dS K      (32 queries x 64 dims; each warp 16 of the dims)
// which they add to dq in global memory with atomicAdd (dq is zeroed before the launch).
//
// WHY IT IS FASTER. Kernels 9 and 10 have one writer per gradient element, and pay for it: a
// dQ block recomputes S = Q K^T and dP = dO V^T, which the dK/dV block of the same tile pair
// already had, so they run 7 tile products where the algorithm needs 5. Every product costs
// its mma, its shared-memory loads and its share of issue slots (kernel 10 runs its mma at
// under half the rate mma.sync reaches, ceilings.mma_tf32_rate: the pipe is not its limit, the
// work around it is), so 2 of 7 products fewer should take up to 2/7 of the time off, minus
// what the atomics, the dS round trip through shared memory and the extra barrier cost.
//
// WHAT IT COSTS. Float additions are not associative, and the blocks that add to one dq row
// finish in a different order each run: dq (and so dinp) changes in its last bits from run to
// run. dK and dV still have one writer each. The order of the additions also changes the
// rounding: with 3xTF32 each atomic adds a tile's partial sum rounded to nearest, as kernel
// 10's fp32 adds do.
//
// TWO PRECISIONS, -DTF32=0/1, as kernel 10 (TF32=0: 3xTF32, fp32-accurate).
//
// Launch geometry (attnlab/fused.py): grid (B*NH, ceil(T/128)), 128 threads, dynamic shared
// memory: sK, sV (128 rows of 72 floats), sQ, sdO (32 rows of 72), lse and D of 32 queries,
// dS^T (128 keys x 40 floats): 112,896 bytes, 2 blocks per SM on sm_90. dq must be zero before
// the launch (attnlab.fused clears it); D comes from kernel 9's flash_backward_preprocess.
#include <cfloat>
#include <cstdint>

#ifndef HEAD_SIZE
#define HEAD_SIZE 64
#endif
#if HEAD_SIZE != 64
#error "flash_attention11.cu supports HEAD_SIZE=64 only"
#endif
#ifndef TF32
#define TF32 0
#endif
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ < 800
#error "kernel 11 needs compute capability 8.0 or newer (mma.sync with .tf32 operands)"
#endif

#define HS HEAD_SIZE
#define OWN 128                          // rows of the block's own tile
#define OTHER 32                         // rows (queries) of each tile it loops over
#define SLICE 16                         // queries per slice of S^T, P^T, dP^T, dS^T
#define SS (OTHER + 8)                   // floats per row of the dS tile in shared memory
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

// ---------------------------------------------------------------------------------------------
// dQ of one query tile: dq[q0 + 0..31][16w .. 16w+15] += scale * sum over the 128 own keys of
// dS[query][key] K[key][dim], warp w taking 16 of the 64 dims. sdS holds dS^T as [key][col]:
// query 16b + q (q < 16) at col 16b + 2 (q % 8) + q / 8, so that queries g and g+8, an mma's
// rows, are one float2 (conflict-free: rows are 40 floats, 8 banks apart).
__device__ __forceinline__ void add_dq(float* __restrict__ dq, const float* __restrict__ sdS,
                                       const float* __restrict__ sK, int q0, int T, float scale,
                                       int warp, int g, int t) {
    float c[2][2][2][2];   // [query block b][dim block n][r][e]
#pragma unroll
    for (int b = 0; b < 2; ++b)
#pragma unroll
        for (int n = 0; n < 2; ++n)
#pragma unroll
            for (int r = 0; r < 2; ++r)
#pragma unroll
                for (int e = 0; e < 2; ++e) c[b][n][r][e] = 0.f;
#pragma unroll 4
    for (int kb = 0; kb < OWN; kb += 8) {   // keys kb + t and kb + t + 4: the mma's k
        Op a[2][4];
#pragma unroll
        for (int b = 0; b < 2; ++b) {
            const float2 lo = *reinterpret_cast<const float2*>(sdS + (kb + t) * SS + 16 * b + 2 * g);
            const float2 hi = *reinterpret_cast<const float2*>(sdS + (kb + t + 4) * SS + 16 * b + 2 * g);
            a[b][0] = from_tile(lo.x); a[b][1] = from_tile(lo.y);
            a[b][2] = from_tile(hi.x); a[b][3] = from_tile(hi.y);
        }
#pragma unroll
        for (int n = 0; n < 2; ++n) {
            const int dim = 16 * warp + 8 * n + g;
            const Op b0 = from_tile(sK[(kb + t) * TS + dim]), b1 = from_tile(sK[(kb + t + 4) * TS + dim]);
#pragma unroll
            for (int b = 0; b < 2; ++b) mma_into(c[b][n], a[b], b0, b1);
        }
    }
#pragma unroll
    for (int b = 0; b < 2; ++b)
#pragma unroll
        for (int r = 0; r < 2; ++r) {
            const int row = q0 + 16 * b + g + 8 * r;
            if (row >= T) continue;
            float* p = dq + (size_t)row * HS + 16 * warp + 2 * t;
#pragma unroll
            for (int n = 0; n < 2; ++n)
#pragma unroll
                for (int e = 0; e < 2; ++e) atomicAdd(p + 8 * n + e, scale * c[b][n][r][e]);
        }
}

// One block: key tile J (128 keys, k0 = 128 J) of one (b, h), over query tiles i of 32
// (q0 = 32 i >= k0), each in 2 slices of 16 queries: dK, dV in registers as kernel 10, and dQ
// of each query tile added to dq. blockIdx.x = b*NH + h, blockIdx.y = J (the longest first).
extern "C" __global__ void __launch_bounds__(NUM_THREADS, MIN_BLOCKS)
flash_backward(float* __restrict__ dq, float* __restrict__ dk, float* __restrict__ dv,
               const float* __restrict__ q, const float* __restrict__ k, const float* __restrict__ v,
               const float* __restrict__ dO, const float* __restrict__ lse, const float* __restrict__ D,
               int T, float scale) {
    extern __shared__ float4 smem4[];
    float* sK = reinterpret_cast<float*>(smem4);
    float* sV = sK + OWN * TS;
    float* sQ = sV + OWN * TS;
    float* sdO = sQ + OTHER * TS;
    float* sLse = sdO + OTHER * TS;
    float* sD = sLse + OTHER;
    float* sdS = sD + OTHER;                  // OWN rows of SS floats
    const size_t bh = (size_t)blockIdx.x * T;
    q += bh * HS; k += bh * HS; v += bh * HS; dO += bh * HS;
    dq += bh * HS; dk += bh * HS; dv += bh * HS; lse += bh; D += bh;
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
    const int k0 = blockIdx.y * OWN, wrow = warp * WARP_ROWS;
    const float c = scale * LOG2E;

    load_tile<OWN>(sK, k, k0, T);
    load_tile<OWN>(sV, v, k0, T);
    Acc dK, dV;
    fill(dK, 0.f);
    fill(dV, 0.f);
    const int n_other = (T + OTHER - 1) / OTHER;
    for (int i = k0 / OTHER; i < n_other; ++i) {
        const int q0 = i * OTHER;
        __syncthreads();   // everyone is done with the previous sQ, sdO, sLse, sD and sdS
        if (threadIdx.x < OTHER) {
            const int row = q0 + threadIdx.x;
            sLse[threadIdx.x] = row < T ? lse[row] * LOG2E : 0.f;
            sD[threadIdx.x] = row < T ? D[row] : 0.f;
        }
        load_tile<OTHER>(sQ, q, q0, T);
        load_tile<OTHER>(sdO, dO, q0, T);
        __syncthreads();   // the query tile is complete (and, the first time, sK and sV)
        // masked where key > query (query tiles that overlap the own keys) or query >= T
        const bool edge = q0 < k0 + OWN || q0 + OTHER > T;
#pragma unroll 1
        for (int h = 0; h < OTHER; h += SLICE) {
            Frag<2> ds;
            if (q0 + h + SLICE - 1 < k0 + wrow) {   // every key of the warp after every query
                fill(ds, 0.f);
            } else {
                Frag<2> p;
                product_abt(p, sK, wrow, sQ, h, g, t);   // S^T = K Q^T: warp's keys x queries q0+h+0..15
#pragma unroll
                for (int jj = 0; jj < 2; ++jj)
#pragma unroll
                    for (int e = 0; e < 2; ++e) {
                        const int col = h + score_col(jj, e, t);   // query q0 + col
                        const float lse2 = sLse[col];
#pragma unroll
                        for (int m = 0; m < MB; ++m)
#pragma unroll
                            for (int r = 0; r < 2; ++r) {
                                float x = exp2f(fmaf(c, p.v[m][jj][r][e], -lse2));   // P^T
                                if (edge && (k0 + wrow + row_of(g, m, r) > q0 + col || q0 + col >= T)) x = 0.f;
                                p.v[m][jj][r][e] = x;
                            }
                    }
                product_pb(dV, p, sdO, h, g, t);          // dV += P^T dO
                product_abt(ds, sV, wrow, sdO, h, g, t);  // dP^T = V dO^T
#pragma unroll
                for (int jj = 0; jj < 2; ++jj)
#pragma unroll
                    for (int e = 0; e < 2; ++e) {
                        const float d = sD[h + score_col(jj, e, t)];
#pragma unroll
                        for (int m = 0; m < MB; ++m)
#pragma unroll
                            for (int r = 0; r < 2; ++r)
                                ds.v[m][jj][r][e] = p.v[m][jj][r][e] * (ds.v[m][jj][r][e] - d);   // dS^T
                    }
                product_pb(dK, ds, sQ, h, g, t);          // dK += dS^T Q   (scale at the end)
            }
            // dS^T to shared memory for dQ (TF32: rounded, as the mma would read it)
#pragma unroll
            for (int jj = 0; jj < 2; ++jj)
#pragma unroll
                for (int e = 0; e < 2; ++e)
#pragma unroll
                    for (int m = 0; m < MB; ++m)
#pragma unroll
                        for (int r = 0; r < 2; ++r)
                            sdS[(wrow + row_of(g, m, r)) * SS + h + 2 * pi8(2 * t + e) + jj] =
                                as_tile(ds.v[m][jj][r][e]);
        }
        __syncthreads();   // dS^T of the query tile is complete
        add_dq(dq, sdS, sK, q0, T, scale, warp, g, t);
    }
    store_rows(dk, dK, k0 + wrow, T, scale, g, t);
    store_rows(dv, dV, k0 + wrow, T, 1.f, g, t);
}
