// flash_wgmma.cuh: what fused backward kernels 12-18 (flash_attention12.cu .. 17.cu) share:
// their geometry, TF32 rounding, the order of the queries in the transposed tiles (kpos),
// loading rows of a (T, 64) matrix into the K-major tiles wgmma reads, the store of dK and dV,
// and (kernel 13) copying ready-made query tiles with cp.async.
#pragma once
#include "wgmma_tf32.cuh"

#ifndef HEAD_SIZE
#define HEAD_SIZE 64
#endif
#if HEAD_SIZE != 64
#error "fused kernels 12-17 support HEAD_SIZE=64 only"
#endif
#ifndef TF32
#define TF32 1
#endif
#if !TF32 && !defined(SPLIT_TF32)
#error "fused kernels 12-17 are TF32 only: for fp32 accuracy use kernel 18 or 11 (3xTF32)"
#endif

#define HS HEAD_SIZE
#ifndef OWN                              // (kernel 18: 64 keys, one warpgroup)
#define OWN 128                          // keys a block owns: 64 per warpgroup
#endif
#define OTHER 64                         // queries of each tile it loops over
#ifndef NUM_THREADS
#define NUM_THREADS 256
#endif
#define LOG2E 1.4426950408889634f

__device__ __forceinline__ float round_tf32(float x) {
    uint32_t r;
    asm("cvt.rna.tf32.f32 %0, %1;" : "=r"(r) : "f"(x));
    return __uint_as_float(r);
}

// Where query u (0..63) of a tile goes along K in the transposed tiles: in each group of 8,
// query 2p at p and 2p+1 at p+4.
__device__ __forceinline__ int kpos(int u) { return (u & ~7) | ((u & 7) >> 1) | ((u & 1) << 2); }

// Rows row0 .. row0+ROWS-1 of a (T, HS) matrix whose rows are ld floats apart (HS unless it is a
// slice of a wider one), PER float4 per thread (rows >= T: zeros). Thread
// f's float4 i is row 8 (f' / 128) + f' % 8, columns 4 ((f' / 8) % 16) .. +3, f' = f + 256 i: 8
// consecutive threads take one column of 8 rows, a core matrix, stored without bank conflicts.
template <int ROWS>
struct Rows {
    static constexpr int PER = ROWS * HS / 4 / NUM_THREADS;
    float4 x[PER];
};
__device__ __forceinline__ int rows_row(int f) { return 8 * (f / 128) + f % 8; }
__device__ __forceinline__ int rows_c4(int f) { return (f / 8) % 16; }

template <int ROWS>
__device__ __forceinline__ void load_rows(Rows<ROWS>& r, const float* __restrict__ src, int row0, int T, int ld) {
#pragma unroll
    for (int i = 0; i < Rows<ROWS>::PER; ++i) {
        const int f = threadIdx.x + NUM_THREADS * i, row = row0 + rows_row(f);
        r.x[i] = row < T ? __ldg(reinterpret_cast<const float4*>(src + (size_t)row * ld) + rows_c4(f))
                         : make_float4(0.f, 0.f, 0.f, 0.f);
    }
}

// Store rows (rounded to TF32) into a K-major tile s (ROWS x 64) and, unless st is null, into its
// transpose st (64 x ROWS: K = the rows, at kpos(row) when PERMUTE, else in order).
template <int ROWS, bool PERMUTE>
__device__ __forceinline__ void store_rows(const Rows<ROWS>& r, float* __restrict__ s, float* __restrict__ st) {
#pragma unroll
    for (int i = 0; i < Rows<ROWS>::PER; ++i) {
        const int f = threadIdx.x + NUM_THREADS * i, row = rows_row(f), c = 4 * rows_c4(f);
        const float4 x = make_float4(round_tf32(r.x[i].x), round_tf32(r.x[i].y),
                                     round_tf32(r.x[i].z), round_tf32(r.x[i].w));
        *reinterpret_cast<float4*>(s + core_index(row, c, HS)) = x;
        if (st) {
            const int k = PERMUTE ? kpos(row) : row;
            st[core_index(c, k, ROWS)] = x.x;
            st[core_index(c + 1, k, ROWS)] = x.y;
            st[core_index(c + 2, k, ROWS)] = x.z;
            st[core_index(c + 3, k, ROWS)] = x.w;
        }
    }
}


// dK (times scale) and dV of the warpgroup's keys into rows ld floats apart: element 4j + 2r + e
// is key key0 + 8r, dim 8j + 2t + e (keys >= T are not stored).
__device__ __forceinline__ void store_dkdv(float* __restrict__ dk, float* __restrict__ dv, int ld, float (&dK)[32],
                                           float (&dV)[32], int key0, int T, float scale, int t) {
    wg_hold(dK);
    wg_hold(dV);
#pragma unroll
    for (int r = 0; r < 2; ++r) {
        const int key = key0 + 8 * r;
        if (key >= T) continue;
#pragma unroll
        for (int j = 0; j < 8; ++j) {
            const int at = 4 * j + 2 * r;
            *reinterpret_cast<float2*>(dk + (size_t)key * ld + 8 * j + 2 * t) = make_float2(scale * dK[at], scale * dK[at + 1]);
            *reinterpret_cast<float2*>(dv + (size_t)key * ld + 8 * j + 2 * t) = make_float2(dV[at], dV[at + 1]);
        }
    }
}

// The query tiles of kernels 13-17 (flash_backward_prep, in flash_attention13.cu).
#define TILE_FLOATS (4 * OTHER * HS)     // one query tile in its four layouts: Q, dO, Q^T, dO^T

__device__ __forceinline__ void cp_async16(float* s, const float* g) {
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16;"
                 :: "r"(static_cast<uint32_t>(__cvta_generic_to_shared(s))), "l"(g) : "memory");
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;" ::: "memory"); }
template <int N>
__device__ __forceinline__ void cp_async_wait() { asm volatile("cp.async.wait_group %0;" :: "n"(N) : "memory"); }

// Copy LAYOUTS consecutive layouts of a query tile (64 x 64 floats each) into shared memory.
template <int LAYOUTS>
__device__ __forceinline__ void copy_layouts(float* s, const float* g) {
#pragma unroll
    for (int i = 0; i < LAYOUTS * OTHER * HS / 4 / NUM_THREADS; ++i) {
        const int f = 4 * (threadIdx.x + NUM_THREADS * i);
        cp_async16(s + f, g + f);
    }
}
// Half a query tile: Q and dO, or Q^T and dO^T (8192 floats).
__device__ __forceinline__ void copy_half(float* s, const float* g) { copy_layouts<2>(s, g); }
