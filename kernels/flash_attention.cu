// flash_attention.cu: causal self-attention without the T x T matrices, FlashAttention-2 style.
//
// WHY. The materialized pipeline (attention.py) keeps preatt, att, datt and dpreatt: four
// B*NH*T*T float buffers, 51.5 GB each at B=4 NH=12 T=16384. Here nothing of size T x T is ever
// written to memory. The forward keeps, besides its output O, one number per query row:
//
//   lse[t] = log sum_{t2 <= t} exp(scale * q_t . k_t2)          (the softmax's log-normalizer)
//
// and the backward recomputes any tile of P = softmax(scale * Q K^T) when it needs it:
//
//   S  = scale * Q K^T        P  = exp(S - lse)  (causal: 0 where t2 > t)
//   dV = P^T dO               dP = dO V^T
//   D  = rowsum(dO o O)  (= rowsum(P o dP): precomputed once per row by flash_backward_preprocess)
//   dS = P o (dP - D)         dQ = scale * dS K      dK = scale * dS^T Q
//
// Memory then grows like T (q, k, v, o, do and two floats per row), not like T^2.
//
// WHY RECOMPUTING BEATS STORING. The materialized backward writes datt and dpreatt and reads
// them and att back, about ten B*NH*T*T float transfers through HBM. Recomputing a tile of S or
// dP costs 64 FMAs per element on operands already in shared memory. HBM delivers one float in
// the time an H200 does ~30 fp32 FMAs on CUDA cores (4.8 TB/s vs 67 TFLOPS), or ~200 on TF32
// tensor cores: the round trips cost more than the arithmetic they save -- and the T^2 storage
// is gone.
//
// TILING. Every tile is TILE = 64 rows (queries or keys) x 64 head dims. A block has 4 warps
// (128 threads); its "own" tile is fixed and each warp owns 16 of its rows; the block then
// loops over the "other" tiles, which it stages in shared memory one at a time:
//
//   flash_forward        own: a query tile i     loops over key tiles   j = 0 .. i
//                        (online softmax: running max m and sum l per row; O rescaled as m grows)
//   flash_backward, dK/dV blocks: own key tile j, loops over query tiles i = j .. last
//                        (accumulates dK_j, dV_j in registers)
//   flash_backward, dQ blocks:    own query tile i, loops over key tiles j = 0 .. i
//                        (accumulates dQ_i in registers)
//
// Every product a warp does has its 16 rows as rows: the running O, dK, dV or dQ (16 x 64) and,
// half a tile at a time in the backward, S, P, dP, dS (16 x 32), all in registers.
//
// CAUSAL SKIP. Query tile i only attends to key tiles j <= i: the loops above never visit a
// tile strictly above the diagonal (half of all tiles), and only the diagonal tile i == j needs
// the element-wise mask t2 <= t. T need not be a multiple of 64: rows >= T of the last tile
// are loaded as zeros, masked out of the dK/dV sums, and never stored.
//
// DETERMINISM. FlashAttention-2 lets every dK/dV block add its share of dQ with float atomics,
// whose order (and so rounding) changes from run to run. Here each gradient has exactly one
// writer: dK/dV blocks and dQ blocks recompute P and dS independently (2 extra tile products
// out of 7), so two runs give bit-identical results. Both kinds of block run in ONE launch
// (blockIdx.y even: dK/dV, odd: dQ), heaviest tiles first, so they share the GPU's tail.
//
// TWO PRECISIONS, one file, chosen with -DTF32=0/1 (and -DHEAD_SIZE=64):
//   TF32=0  fp32 FMAs on CUDA cores.
//   TF32=1  tensor cores: mma.sync.m16n8k8 with TF32 inputs (10-bit mantissas, rounded to
//           nearest with cvt.rna when a tile is staged in shared memory, or when P and dS are
//           fed to the next product) and fp32 accumulators. The softmax statistics, lse, D,
//           P, dS and every accumulation stay fp32.
// The masking, softmax and gradient formulas are written once for both variants; only the two
// warp-level products (product_abt, product_pb) and the register layout differ.
//
// REGISTER LAYOUT. A warp's 16-row result lives in 32 (or 16) registers per thread: thread
// (g = lane/4, t = lane%4) holds rows row_of(g, 0), row_of(g, 1) and, for each column group j,
// NE columns. Results of product_abt (S, P, dP, dS: "score" layout) and of product_pb (O, dK,
// dV, dQ: "output" layout) may place columns differently:
//              rows                  score columns               output columns
//   fp32       g, g+8                16j + t + 4e                16j + 4t + e     (e = 0..3)
//   TF32       pi(g), pi(g)+8        8j + pi(2t+e)               8j + 2t + e      (e = 0..1)
// with pi = (0 6 1 7 2 4 3 5), a permutation of 0..7. In TF32 these are the mma fragments:
// C holds rows g, g+8 and columns 2t, 2t+1 of each 8 x 8 block, and we are free to decide WHICH
// rows and columns of the tile the mma positions stand for, as long as every operand agrees:
// - a product sums over k in any order, so in P V the mma's k position t (and t+4) is taken to
//   mean P's score column pi(2t) (and pi(2t+1)): the C registers of P ARE the A fragment of the
//   next product, no shuffle needed, and B is read from the matching rows of V;
// - in products over the head dimension, thread t's k positions are dims 4t..4t+3 of each 16,
//   so A and B are read as float4;
// - pi makes all these shared-memory reads free of bank conflicts (checked by a model of the
//   32 banks for every access pattern; the fp32 layouts were chosen the same way).
//
// SHARED MEMORY. A tile is 64 rows of 64 floats, each row padded to TS = 72 floats: element
// (row, col) is at row*TS + col. The padding shifts consecutive rows by 8 banks, which with
// the layouts above spreads every load instruction over distinct banks, and keeps addresses
// "base + constant" (cheap; an XOR swizzle would cost integer instructions per load).
//
// Launch geometry (see attnlab/fused.py), 128 threads per block, dynamic shared memory:
//   flash_forward              grid (B*NH, ceil(T/64)),   3 tiles          [+ 4*16*68 floats]
//   flash_backward_preprocess  grid ceil(B*NH*T / 16), 256 threads, no shared memory
//   flash_backward             grid (B*NH, 2*ceil(T/64)), 4 tiles + 128 floats [+ 4*16*36]
// (a tile is 64*72 floats; [...]: the fp32 variant's per-warp scratch for P and dS)
// Layouts: q, k, v, o, dO, dq, dk, dv are (B*NH, T, 64) contiguous; lse and D are (B*NH*T).
// Offsets are size_t: B*NH*T*64 may be large.
#include <cfloat>
#include <cstdint>

#ifndef HEAD_SIZE
#define HEAD_SIZE 64     // attnlab.fused passes -DHEAD_SIZE=64 -DTF32=0/1 explicitly
#endif
#if HEAD_SIZE != 64
#error "flash_attention.cu supports HEAD_SIZE=64 only: its tiles and register layouts are built for 64"
#endif
#ifndef TF32
#define TF32 0
#endif
#if TF32 && defined(__CUDA_ARCH__) && __CUDA_ARCH__ < 800
#error "TF32=1 needs compute capability 8.0 or newer (mma.sync with .tf32 operands)"
#endif

#define HS HEAD_SIZE
#define TILE 64                          // rows (queries or keys) of a tile
#define TS (HS + 8)                      // floats per tile row in shared memory (padded)
#define TILE_FLOATS (TILE * TS)
#define NUM_WARPS 4
#define NUM_THREADS (32 * NUM_WARPS)
#define WARP_ROWS 16                     // rows of the block's own tile per warp
#define HALF (TILE / 2)                  // the backward works on half a tile of S at a time
#define LOG2E 1.4426950408889634f
#define LN2 0.6931471805599453f

// Blocks per SM that the register allocation must allow: what shared memory allows on each
// architecture (228 KB per SM on sm_90, 164 KB on sm_80, 100 KB on sm_86/89, 1 KB reserved
// per block). Asking for more blocks than fit would only cap the registers, and spill.
#if !defined(__CUDA_ARCH__) || __CUDA_ARCH__ >= 900
#define FWD_MIN_BLOCKS (TF32 ? 4 : 3)
#define BWD_MIN_BLOCKS (TF32 ? 3 : 2)
#elif __CUDA_ARCH__ == 800
#define FWD_MIN_BLOCKS 2
#define BWD_MIN_BLOCKS (TF32 ? 2 : 1)
#else
#define FWD_MIN_BLOCKS 1
#define BWD_MIN_BLOCKS 1
#endif

// ---------------------------------------------------------------------------------------------
// Register layout (see REGISTER LAYOUT above). Frag<N> holds a warp's 16 rows x N*COL_STRIDE
// columns: Frag<NJ> is 16 x 64, Frag<NJ/2> is 16 x 32.
#if TF32
#define NJ 8            // 8 mma n-blocks of 8 columns
#define NE 2
#define COL_STRIDE 8
#else
#define NJ 4
#define NE 4
#define COL_STRIDE 16
#endif

template <int N>
struct Frag {
    float v[N][2][NE];   // [column group j][row r][element e]
};
typedef Frag<NJ> Acc;
typedef Frag<NJ / 2> Half;

template <int N>
__device__ __forceinline__ void fill(Frag<N>& a, float x) {
#pragma unroll
    for (int j = 0; j < N; ++j)
#pragma unroll
        for (int r = 0; r < 2; ++r)
#pragma unroll
            for (int e = 0; e < NE; ++e) a.v[j][r][e] = x;
}

// pi = (0 6 1 7 2 4 3 5): pi(2t) = t, pi(2t+1) = 4 + (t+2)%4.
__device__ __forceinline__ int pi8(int x) { return (x & 1) ? 4 + (((x >> 1) + 2) & 3) : x >> 1; }

// The row (within the warp's 16) of a thread's registers v[.][r][.], for g = lane / 4.
__device__ __forceinline__ int row_of(int g, int r) {
#if TF32
    return pi8(g) + 8 * r;
#else
    return g + 8 * r;
#endif
}
// The column of v[j][.][e] in the score layout (product_abt results) and the output layout
// (product_pb results), for t = lane % 4.
__device__ __forceinline__ int score_col(int j, int e, int t) {
#if TF32
    return COL_STRIDE * j + pi8(2 * t + e);
#else
    return COL_STRIDE * j + t + 4 * e;
#endif
}
__device__ __forceinline__ int out_col(int j, int e, int t) { return COL_STRIDE * j + NE * t + e; }

// Store rows row0 + row_of(g, r) (those < T) of a warp's output-layout result, times mul,
// into a (T, HS) matrix in global memory.
__device__ __forceinline__ void store_rows(float* __restrict__ dst, const Acc& a, int row0, int T,
                                           float mul, int g, int t) {
#pragma unroll
    for (int r = 0; r < 2; ++r) {
        const int row = row0 + row_of(g, r);
        if (row >= T) continue;
        float* p = dst + (size_t)row * HS;
#pragma unroll
        for (int j = 0; j < NJ; ++j) {
#if TF32
            *reinterpret_cast<float2*>(p + out_col(j, 0, t)) =
                make_float2(mul * a.v[j][r][0], mul * a.v[j][r][1]);
#else
            *reinterpret_cast<float4*>(p + out_col(j, 0, t)) =
                make_float4(mul * a.v[j][r][0], mul * a.v[j][r][1], mul * a.v[j][r][2], mul * a.v[j][r][3]);
#endif
        }
    }
}

__device__ __forceinline__ float4 lds4(const float* s) { return *reinterpret_cast<const float4*>(s); }

// ---- PTX wrappers (TF32 variant, sm_80+) ----
#if TF32
// Round to TF32 (10-bit mantissa, to nearest, ties away): the low 13 bits become 0.
__device__ __forceinline__ float round_tf32(float x) {
    uint32_t r;
    asm("cvt.rna.tf32.f32 %0, %1;" : "=r"(r) : "f"(x));
    return __uint_as_float(r);
}

// D = A * B + D for one warp: A 16x8 (a0..a3), B 8x8 (b0, b1), D 16x8 fp32 (d0..d3), TF32 inputs.
// Fragments (g = lane/4, t = lane%4): a0 (g, t) a1 (g+8, t) a2 (g, t+4) a3 (g+8, t+4);
// b0 (k=t, n=g) b1 (k=t+4, n=g); d0 (g, 2t) d1 (g, 2t+1) d2 (g+8, 2t) d3 (g+8, 2t+1).
__device__ __forceinline__ void mma_tf32(float& d0, float& d1, float& d2, float& d3,
                                         float a0, float a1, float a2, float a3, float b0, float b1) {
    asm("mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 "
        "{%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};"
        : "+f"(d0), "+f"(d1), "+f"(d2), "+f"(d3)
        : "r"(__float_as_uint(a0)), "r"(__float_as_uint(a1)), "r"(__float_as_uint(a2)),
          "r"(__float_as_uint(a3)), "r"(__float_as_uint(b0)), "r"(__float_as_uint(b1)));
}
#endif
// ---- end of PTX wrappers ----

// Load rows row0 .. row0+63 of a (T, HS) matrix into a shared-memory tile (TF32: rounded to
// TF32); rows >= T become zeros. All 128 threads take part, 8 float4 each, all loads issued
// before the first store; a warp reads two whole rows (512 contiguous bytes) per instruction.
__device__ __forceinline__ void load_tile(float* __restrict__ s, const float* __restrict__ src,
                                          int row0, int T) {
    constexpr int PER_THREAD = TILE * HS / 4 / NUM_THREADS;
    float4 x[PER_THREAD];
#pragma unroll
    for (int it = 0; it < PER_THREAD; ++it) {
        const int idx = threadIdx.x + it * NUM_THREADS;       // float4 index in the tile
        const int row = idx / (HS / 4), c4 = idx % (HS / 4);
        x[it] = row0 + row < T
                    ? __ldg(reinterpret_cast<const float4*>(src + (size_t)(row0 + row) * HS) + c4)
                    : make_float4(0.f, 0.f, 0.f, 0.f);
    }
#pragma unroll
    for (int it = 0; it < PER_THREAD; ++it) {
        const int idx = threadIdx.x + it * NUM_THREADS;
        const int row = idx / (HS / 4), c4 = idx % (HS / 4);
#if TF32
        x[it] = make_float4(round_tf32(x[it].x), round_tf32(x[it].y), round_tf32(x[it].z), round_tf32(x[it].w));
#endif
        *reinterpret_cast<float4*>(s + row * TS + 4 * c4) = x[it];
    }
}

// ---------------------------------------------------------------------------------------------
// The two products every stage is made of, for one warp (N: column groups of the result or of P).
//
// product_abt:  c = A B^T   A: rows a_row0 .. a_row0+15 of tile sA; B: rows b_row0 .. of tile
//               sB (as many as c has columns); summed over the 64 head dims. Score layout.
//               (S = Q K^T, S^T = K Q^T, dP = dO V^T, dP^T = V dO^T)
// product_pb:   c += P B    P: 16 rows x (N*COL_STRIDE) in registers, score layout; B: rows
//               k_row0 .. of tile sB, read as [k][n], n = 0..63. Output layout.
//               (O += P V, dV += P^T dO, dK += dS^T Q, dQ += dS K)
// scratch: this warp's 16 x (N*COL_STRIDE + 4) floats of shared memory (fp32 variant only).
#if TF32

template <int N>
__device__ __forceinline__ void product_abt(Frag<N>& c, const float* __restrict__ sA, int a_row0,
                                            const float* __restrict__ sB, int b_row0, int g, int t) {
    fill(c, 0.f);
    const float* a_lo = sA + (a_row0 + row_of(g, 0)) * TS + 4 * t;   // mma rows g and g+8
    const float* a_hi = sA + (a_row0 + row_of(g, 1)) * TS + 4 * t;
    const float* b = sB + (b_row0 + pi8(g)) * TS + 4 * t;             // mma column g of block j
#pragma unroll
    for (int m = 0; m < HS / 16; ++m) {
        // k steps 2m and 2m+1 cover head dims 16m .. 16m+15; thread t brings dims 16m+4t .. +3:
        // step 2m uses (4t, 4t+1) as its k positions (t, t+4), step 2m+1 uses (4t+2, 4t+3).
        const float4 alo = lds4(a_lo + 16 * m), ahi = lds4(a_hi + 16 * m);
#pragma unroll
        for (int j = 0; j < N; ++j) {
            const float4 bj = lds4(b + 8 * j * TS + 16 * m);
            mma_tf32(c.v[j][0][0], c.v[j][0][1], c.v[j][1][0], c.v[j][1][1],
                     alo.x, ahi.x, alo.y, ahi.y, bj.x, bj.y);
            mma_tf32(c.v[j][0][0], c.v[j][0][1], c.v[j][1][0], c.v[j][1][1],
                     alo.z, ahi.z, alo.w, ahi.w, bj.z, bj.w);
        }
    }
}

template <int N>
__device__ __forceinline__ void product_pb(Acc& c, const Frag<N>& p, const float* __restrict__ sB,
                                           int k_row0, float* __restrict__ /*scratch*/, int g, int t) {
    // k step kk: k position t stands for P's column 8kk + pi(2t), held in p.v[kk][.][0], and
    // position t+4 for column 8kk + pi(2t+1), held in p.v[kk][.][1]: P's registers are the A
    // fragment. B: the same two rows of sB, at column 8j + g.
    const float* b0 = sB + (k_row0 + pi8(2 * t)) * TS + g;
    const float* b1 = sB + (k_row0 + pi8(2 * t + 1)) * TS + g;
#pragma unroll
    for (int kk = 0; kk < N; ++kk) {
        const float a0 = round_tf32(p.v[kk][0][0]), a1 = round_tf32(p.v[kk][1][0]);
        const float a2 = round_tf32(p.v[kk][0][1]), a3 = round_tf32(p.v[kk][1][1]);
#pragma unroll
        for (int j = 0; j < NJ; ++j)
            mma_tf32(c.v[j][0][0], c.v[j][0][1], c.v[j][1][0], c.v[j][1][1], a0, a1, a2, a3,
                     b0[8 * kk * TS + 8 * j], b1[8 * kk * TS + 8 * j]);
    }
}

#else  // fp32 on CUDA cores

__device__ __forceinline__ void fma4(float& c, const float4& a, const float4& b) {
    c = fmaf(a.x, b.x, c);
    c = fmaf(a.y, b.y, c);
    c = fmaf(a.z, b.z, c);
    c = fmaf(a.w, b.w, c);
}

template <int N>
__device__ __forceinline__ void product_abt(Frag<N>& c, const float* __restrict__ sA, int a_row0,
                                            const float* __restrict__ sB, int b_row0, int g, int t) {
    fill(c, 0.f);
    const float* a_lo = sA + (a_row0 + row_of(g, 0)) * TS;
    const float* a_hi = sA + (a_row0 + row_of(g, 1)) * TS;
    const float* b = sB + (b_row0 + score_col(0, 0, t)) * TS;   // + (16j + 4e) rows
#pragma unroll 4
    for (int k = 0; k < HS; k += 4) {
        // 4 head dims at a time: 2 float4 of A (rows g, g+8), one float4 per column of B
        const float4 a0 = lds4(a_lo + k), a1 = lds4(a_hi + k);
#pragma unroll
        for (int j = 0; j < N; ++j)
#pragma unroll
            for (int e = 0; e < NE; ++e) {
                const float4 bje = lds4(b + (COL_STRIDE * j + 4 * e) * TS + k);
                fma4(c.v[j][0][e], a0, bje);
                fma4(c.v[j][1][e], a1, bje);
            }
    }
}

template <int N>
__device__ __forceinline__ void product_pb(Acc& c, const Frag<N>& p, const float* __restrict__ sB,
                                           int k_row0, float* __restrict__ scratch, int g, int t) {
    // A thread holds only some of the columns of its rows of P, and the product needs all of
    // them: the warp passes P through its shared-memory scratch.
    constexpr int SS = N * COL_STRIDE + 4;   // scratch row stride (padded)
#pragma unroll
    for (int j = 0; j < N; ++j)
#pragma unroll
        for (int r = 0; r < 2; ++r)
#pragma unroll
            for (int e = 0; e < NE; ++e) scratch[row_of(g, r) * SS + score_col(j, e, t)] = p.v[j][r][e];
    __syncwarp();  // the warp's P is complete in scratch
    const float* a_lo = scratch + row_of(g, 0) * SS;
    const float* a_hi = scratch + row_of(g, 1) * SS;
    const float* b = sB + k_row0 * TS + out_col(0, 0, t);
#pragma unroll 2
    for (int k = 0; k < N * COL_STRIDE; k += 4) {
        const float4 a0 = lds4(a_lo + k), a1 = lds4(a_hi + k);
        const float a0k[4] = {a0.x, a0.y, a0.z, a0.w};
        const float a1k[4] = {a1.x, a1.y, a1.z, a1.w};
#pragma unroll
        for (int kk = 0; kk < 4; ++kk)
#pragma unroll
            for (int j = 0; j < NJ; ++j) {
                const float4 bj = lds4(b + (k + kk) * TS + COL_STRIDE * j);
                c.v[j][0][0] = fmaf(a0k[kk], bj.x, c.v[j][0][0]);
                c.v[j][0][1] = fmaf(a0k[kk], bj.y, c.v[j][0][1]);
                c.v[j][0][2] = fmaf(a0k[kk], bj.z, c.v[j][0][2]);
                c.v[j][0][3] = fmaf(a0k[kk], bj.w, c.v[j][0][3]);
                c.v[j][1][0] = fmaf(a1k[kk], bj.x, c.v[j][1][0]);
                c.v[j][1][1] = fmaf(a1k[kk], bj.y, c.v[j][1][1]);
                c.v[j][1][2] = fmaf(a1k[kk], bj.z, c.v[j][1][2]);
                c.v[j][1][3] = fmaf(a1k[kk], bj.w, c.v[j][1][3]);
            }
    }
    __syncwarp();  // everyone has read scratch: the next product_pb may overwrite it
}

#endif

// Reduce over the 4 threads (t = 0..3) that share a row.
__device__ __forceinline__ float row_max(float x) {
    x = fmaxf(x, __shfl_xor_sync(0xffffffffu, x, 1));
    return fmaxf(x, __shfl_xor_sync(0xffffffffu, x, 2));
}
__device__ __forceinline__ float row_sum(float x) {
    x += __shfl_xor_sync(0xffffffffu, x, 1);
    return x + __shfl_xor_sync(0xffffffffu, x, 2);
}

// ---------------------------------------------------------------------------------------------
// Forward: o = softmax(scale * q k^T) v (causal) and lse, for one query tile of one (b, h).
// blockIdx.x = b*NH + h, blockIdx.y = n_tiles-1-i (the longest rows first).
// Shared memory: sQ, sK, sV [+ scratch, fp32 variant].
extern "C" __global__ void __launch_bounds__(NUM_THREADS, FWD_MIN_BLOCKS)
flash_forward(float* __restrict__ o, float* __restrict__ lse, const float* __restrict__ q,
              const float* __restrict__ k, const float* __restrict__ v, int T, float scale) {
    extern __shared__ float4 smem4[];
    float* smem = reinterpret_cast<float*>(smem4);
    float* sQ = smem;
    float* sK = smem + TILE_FLOATS;
    float* sV = smem + 2 * TILE_FLOATS;
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
    float* scratch = smem + 3 * TILE_FLOATS + warp * WARP_ROWS * (TILE + 4);   // fp32 variant only

    const int n_tiles = (T + TILE - 1) / TILE;
    const int i = n_tiles - 1 - (int)blockIdx.y;
    const int q0 = i * TILE;                           // first query of the tile
    const int wrow = warp * WARP_ROWS;                 // this warp's rows: q0 + wrow + 0..15
    const size_t bh = (size_t)blockIdx.x * T;          // first row of this (b, h)
    q += bh * HS; k += bh * HS; v += bh * HS; o += bh * HS; lse += bh;
    const float c = scale * LOG2E;                     // exp(scale*s) = exp2(c*s)

    // running statistics of this thread's two rows, in log2 units: m = max of c*s so far,
    // l = this thread's part of sum exp2(c*s - m)
    float m[2] = {-INFINITY, -INFINITY}, l[2] = {0.f, 0.f};
    Acc acc;
    fill(acc, 0.f);
    load_tile(sQ, q, q0, T);
    for (int j = 0; j <= i; ++j) {
        __syncthreads();   // everyone is done with the previous sK, sV
        load_tile(sK, k, j * TILE, T);
        load_tile(sV, v, j * TILE, T);
        __syncthreads();   // the tiles are complete (and, the first time, sQ)
        Acc s;
        product_abt(s, sQ, wrow, sK, 0, g, t);   // raw scores q . k: this warp's rows x 64 keys
        if (j == i) {      // diagonal tile (q0 == k0): mask key > query
#pragma unroll
            for (int jj = 0; jj < NJ; ++jj)
#pragma unroll
                for (int r = 0; r < 2; ++r)
#pragma unroll
                    for (int e = 0; e < NE; ++e)
                        if (score_col(jj, e, t) > wrow + row_of(g, r)) s.v[jj][r][e] = -INFINITY;
        }
#pragma unroll
        for (int r = 0; r < 2; ++r) {
            float mx = -INFINITY;
#pragma unroll
            for (int jj = 0; jj < NJ; ++jj)
#pragma unroll
                for (int e = 0; e < NE; ++e) mx = fmaxf(mx, s.v[jj][r][e]);
            // every row has a valid key in every tile it visits (key 0 of tile 0, the
            // diagonal key on the diagonal tile), so m_new is finite
            const float m_new = fmaxf(m[r], c * row_max(mx));
            const float alpha = exp2f(m[r] - m_new);   // rescales the old sums; 0 on the first tile
            m[r] = m_new;
            float sum = 0.f;
#pragma unroll
            for (int jj = 0; jj < NJ; ++jj)
#pragma unroll
                for (int e = 0; e < NE; ++e) {
                    const float p = exp2f(fmaf(c, s.v[jj][r][e], -m_new));   // masked: exp2(-inf) = 0
                    s.v[jj][r][e] = p;
                    sum += p;
                    acc.v[jj][r][e] *= alpha;
                }
            l[r] = l[r] * alpha + sum;
        }
        product_pb(acc, s, sV, 0, scratch, g, t);   // O += P V
    }
    // finish: whole row sums, normalize, store o and lse (natural log)
#pragma unroll
    for (int r = 0; r < 2; ++r) {
        l[r] = row_sum(l[r]);
        const int row = q0 + wrow + row_of(g, r);
        if (t == 0 && row < T) lse[row] = (m[r] + log2f(l[r])) * LN2;
        const float inv = 1.f / l[r];
#pragma unroll
        for (int jj = 0; jj < NJ; ++jj)
#pragma unroll
            for (int e = 0; e < NE; ++e) acc.v[jj][r][e] *= inv;
    }
    store_rows(o, acc, q0 + wrow, T, 1.f, g, t);
}

// ---------------------------------------------------------------------------------------------
// D[row] = sum_d dO[row][d] * O[row][d] for rows = B*NH*T. Half a warp per row (16 lanes x
// float4 = 64 floats), 16 rows per 256-thread block; fixed reduction order: deterministic.
extern "C" __global__ void __launch_bounds__(256)
flash_backward_preprocess(float* __restrict__ D, const float* __restrict__ o,
                          const float* __restrict__ dO, int rows) {
    const int row = blockIdx.x * 16 + threadIdx.x / 16;
    const int c4 = threadIdx.x % 16;
    float sum = 0.f;
    if (row < rows) {
        const float4 a = __ldg(reinterpret_cast<const float4*>(o + (size_t)row * HS) + c4);
        const float4 b = __ldg(reinterpret_cast<const float4*>(dO + (size_t)row * HS) + c4);
        sum = a.x * b.x + a.y * b.y + a.z * b.z + a.w * b.w;
    }
    // every lane takes part in the shuffles (rows past the end contribute 0 and store nothing)
    sum += __shfl_xor_sync(0xffffffffu, sum, 8);
    sum += __shfl_xor_sync(0xffffffffu, sum, 4);
    sum += __shfl_xor_sync(0xffffffffu, sum, 2);
    sum += __shfl_xor_sync(0xffffffffu, sum, 1);
    if (c4 == 0 && row < rows) D[row] = sum;
}

// ---------------------------------------------------------------------------------------------
// Backward, dK/dV blocks: key tile j of one (b, h), over query tiles i = j .. last.
// Shared memory: sK, sV (own), sQ, sdO (the current query tile), its lse*log2(e) and D.
// Each query tile is done in two halves of 32 queries (h = 0, 32), with S^T, P^T, dP^T and
// dS^T of one half in registers (16 keys x 32 queries per warp) next to the running dK and dV.
__device__ __forceinline__ void backward_dkdv(float* __restrict__ dk, float* __restrict__ dv,
                                              const float* __restrict__ q, const float* __restrict__ k,
                                              const float* __restrict__ v, const float* __restrict__ dO,
                                              const float* __restrict__ lse, const float* __restrict__ D,
                                              int T, float scale, int j, float* smem) {
    float* sK = smem;
    float* sV = smem + TILE_FLOATS;
    float* sQ = smem + 2 * TILE_FLOATS;
    float* sdO = smem + 3 * TILE_FLOATS;
    float* sLse = smem + 4 * TILE_FLOATS;   // TILE floats: lse * log2(e) of the query tile
    float* sD = sLse + TILE;                // TILE floats
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
    float* scratch = sD + TILE + warp * WARP_ROWS * (HALF + 4);   // fp32 variant only
    const int n_tiles = (T + TILE - 1) / TILE;
    const int k0 = j * TILE, wrow = warp * WARP_ROWS;
    const float c = scale * LOG2E;

    load_tile(sK, k, k0, T);
    load_tile(sV, v, k0, T);
    Acc dK, dV;
    fill(dK, 0.f);
    fill(dV, 0.f);
    for (int i = j; i < n_tiles; ++i) {
        const int q0 = i * TILE;
        __syncthreads();   // everyone is done with the previous sQ, sdO, sLse, sD
        if (threadIdx.x < TILE) {
            const int row = q0 + threadIdx.x;
            sLse[threadIdx.x] = row < T ? lse[row] * LOG2E : 0.f;
            sD[threadIdx.x] = row < T ? D[row] : 0.f;
        }
        load_tile(sQ, q, q0, T);
        load_tile(sdO, dO, q0, T);
        __syncthreads();   // the query tile is complete (and, the first time, sK and sV)
        // P^T is masked (0) where key > query or query >= T: only on the diagonal tile and on
        // the last tile when T % 64 != 0
        const bool edge = i == j || q0 + TILE > T;
#pragma unroll 1
        for (int h = 0; h < TILE; h += HALF) {
            // S^T = K Q^T: rows are this warp's keys, columns the queries q0 + h + 0..31
            Half p;
            product_abt(p, sK, wrow, sQ, h, g, t);
#pragma unroll
            for (int jj = 0; jj < NJ / 2; ++jj)
#pragma unroll
                for (int e = 0; e < NE; ++e) {
                    const int col = h + score_col(jj, e, t);   // query q0 + col
                    const float lse2 = sLse[col];
#pragma unroll
                    for (int r = 0; r < 2; ++r) {
                        float x = exp2f(fmaf(c, p.v[jj][r][e], -lse2));   // P^T = exp(S^T - lse)
                        if (edge && (k0 + wrow + row_of(g, r) > q0 + col || q0 + col >= T)) x = 0.f;
                        p.v[jj][r][e] = x;
                    }
                }
            product_pb(dV, p, sdO, h, scratch, g, t);   // dV += P^T dO   (dO rows q0+h ..)
            Half ds;
            product_abt(ds, sV, wrow, sdO, h, g, t);    // dP^T = V dO^T
#pragma unroll
            for (int jj = 0; jj < NJ / 2; ++jj)
#pragma unroll
                for (int e = 0; e < NE; ++e) {
                    const float d = sD[h + score_col(jj, e, t)];
#pragma unroll
                    for (int r = 0; r < 2; ++r)
                        ds.v[jj][r][e] = p.v[jj][r][e] * (ds.v[jj][r][e] - d);   // dS^T = P^T o (dP^T - D)
                }
            product_pb(dK, ds, sQ, h, scratch, g, t);   // dK += dS^T Q   (scale applied at the end)
        }
    }
    store_rows(dk, dK, k0 + wrow, T, scale, g, t);
    store_rows(dv, dV, k0 + wrow, T, 1.f, g, t);
}

// Backward, dQ blocks: query tile i of one (b, h), over key tiles j = 0 .. i, each in two
// halves of 32 keys. Shared memory: sQ, sdO (own), sK, sV (the current key tile).
__device__ __forceinline__ void backward_dq(float* __restrict__ dq, const float* __restrict__ q,
                                            const float* __restrict__ k, const float* __restrict__ v,
                                            const float* __restrict__ dO, const float* __restrict__ lse,
                                            const float* __restrict__ D, int T, float scale, int i,
                                            float* smem) {
    float* sQ = smem;
    float* sdO = smem + TILE_FLOATS;
    float* sK = smem + 2 * TILE_FLOATS;
    float* sV = smem + 3 * TILE_FLOATS;
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
    float* scratch = smem + 4 * TILE_FLOATS + 2 * TILE + warp * WARP_ROWS * (HALF + 4);   // fp32 only
    const int q0 = i * TILE, wrow = warp * WARP_ROWS;
    const float c = scale * LOG2E;

    // the statistics of this thread's two rows, in registers for the whole loop
    float lse2[2], Drow[2];
#pragma unroll
    for (int r = 0; r < 2; ++r) {
        const int row = q0 + wrow + row_of(g, r);
        lse2[r] = row < T ? lse[row] * LOG2E : 0.f;   // rows >= T: anything finite (not stored)
        Drow[r] = row < T ? D[row] : 0.f;
    }
    load_tile(sQ, q, q0, T);
    load_tile(sdO, dO, q0, T);
    Acc dQ;
    fill(dQ, 0.f);
    for (int j = 0; j <= i; ++j) {
        const int k0 = j * TILE;
        __syncthreads();   // everyone is done with the previous sK, sV
        load_tile(sK, k, k0, T);
        load_tile(sV, v, k0, T);
        __syncthreads();   // the key tile is complete (and, the first time, sQ and sdO)
#pragma unroll 1
        for (int h = 0; h < TILE; h += HALF) {
            Half p;
            product_abt(p, sQ, wrow, sK, h, g, t);   // S = Q K^T: this warp's queries x keys k0+h+0..31
#pragma unroll
            for (int jj = 0; jj < NJ / 2; ++jj)
#pragma unroll
                for (int r = 0; r < 2; ++r)
#pragma unroll
                    for (int e = 0; e < NE; ++e) {
                        float x = exp2f(fmaf(c, p.v[jj][r][e], -lse2[r]));   // P = exp(S - lse)
                        // diagonal tile (k0 == q0): mask key > query. Keys >= T occur only
                        // there, in rows >= T, which are not stored.
                        if (j == i && h + score_col(jj, e, t) > wrow + row_of(g, r)) x = 0.f;
                        p.v[jj][r][e] = x;
                    }
            Half ds;
            product_abt(ds, sdO, wrow, sV, h, g, t);  // dP = dO V^T
#pragma unroll
            for (int jj = 0; jj < NJ / 2; ++jj)
#pragma unroll
                for (int r = 0; r < 2; ++r)
#pragma unroll
                    for (int e = 0; e < NE; ++e)
                        ds.v[jj][r][e] = p.v[jj][r][e] * (ds.v[jj][r][e] - Drow[r]);   // dS = P o (dP - D)
            product_pb(dQ, ds, sK, h, scratch, g, t);  // dQ += dS K   (scale applied at the end)
        }
    }
    store_rows(dq, dQ, q0 + wrow, T, scale, g, t);
}

// One launch for both kinds of blocks: blockIdx.x = b*NH + h; blockIdx.y = 2u: dK/dV of key
// tile u (n_tiles - u query tiles of work), 2u+1: dQ of query tile n_tiles-1-u (as many key
// tiles). Blocks start in order of blockIdx.y, so the longest start first.
extern "C" __global__ void __launch_bounds__(NUM_THREADS, BWD_MIN_BLOCKS)
flash_backward(float* __restrict__ dq, float* __restrict__ dk, float* __restrict__ dv,
               const float* __restrict__ q, const float* __restrict__ k, const float* __restrict__ v,
               const float* __restrict__ dO, const float* __restrict__ lse, const float* __restrict__ D,
               int T, float scale) {
    extern __shared__ float4 smem4[];
    float* smem = reinterpret_cast<float*>(smem4);
    const size_t bh = (size_t)blockIdx.x * T;
    const size_t off = bh * HS;
    const int n_tiles = (T + TILE - 1) / TILE;
    const int u = blockIdx.y / 2;
    if (blockIdx.y % 2 == 0) {
        backward_dkdv(dk + off, dv + off, q + off, k + off, v + off, dO + off, lse + bh, D + bh,
                      T, scale, u, smem);
    } else {
        backward_dq(dq + off, q + off, k + off, v + off, dO + off, lse + bh, D + bh,
                    T, scale, n_tiles - 1 - u, smem);
    }
}
