// flash_attention18.cu: kernel 18, fp32-accurate (3xTF32) on Hopper's wgmma: every product of
// kernel 17 done three times, on operands split into a TF32 high part and a TF32 low part.
//
// WHAT CHANGED from kernel 17 (flash_attention17.cu), and why. Kernel 11 is the series'
// fp32-accurate kernel: 3xTF32 on mma.sync, where each thread loads its fragments from shared
// memory and splits them in registers, x = hi + lo with hi = tf32(x) and lo = tf32(x - hi), and
// every product A B becomes A_lo B + A B_lo + A B (in TF32, with A standing for A_hi: the term
// A_lo B_lo, ~2^-22 of it, is dropped). wgmma reads its operands from shared memory itself, so
// here the split happens where the operands are written:
//   - flash_backward_prep writes each query tile in eight layouts instead of four: Q, dO, Q^T and
//     dO^T, each as hi and as lo (128 KiB a tile);
//   - the block splits K, V and K^T when it loads them, P^T and dS^T in registers (the A operands
//     of dV and dK), and stores dS as hi and lo for dQ;
//   - each of the five products is three runs of wgmma into one accumulator (lo terms first);
//   - each tile's dV and dK go into accumulators of their own, added to dV and dK by FADD:
//     adding every tile's products into one accumulator, as kernel 17 does, left dinp 3.5e-5
//     from the reference at the default shape (3.6e-6 this way, as kernels 10 and 11), likely
//     because the tensor cores do not round to nearest what they add to an accumulator.
// The operands take twice the shared memory, so a block owns 64 keys (one warpgroup, 128
// threads) instead of 128: K, V, K^T (hi and lo) 96 KiB, a query tile 128 KiB; dS (hi and lo)
// goes into Q's 32 KiB once S^T has read them, and dQ into Q^T's once dK has. With 255
// registers a thread, dK's A operand (dS^T, split) is read back from there once dV is done.
// The copy engine brings Q, dO and Q^T/dO^T as three pieces with an mbarrier each; dO's next
// tile is fetched as soon as dP^T has read this one, and dP^T is issued before waiting for Q.
// Why it should beat kernel 11: the split of the query tiles is done once per tile, not once
// per block that reads it; the products run at wgmma's rate instead of mma.sync's; and no
// thread loads a fragment. It costs three products for one, as kernel 11 does.
//
// Precision: fp32-accurate only (-DTF32=0, SPLIT_TF32); for TF32 use kernel 17. Not
// bit-identical (the bulk reductions add dQ in any order).
//
// Launch geometry (attnlab/fused.py): flash_backward_prep: grid (B*NH, ceil(T/64)), 128
// threads; flash_backward: grid (B*NH, ceil(T/64)), 128 threads, dynamic shared memory 229,912
// bytes, dq_tiles zeroed before; flash_backward_dq: grid (B*NH, ceil(T/64)), 128 threads.
#if TF32
#error "fused kernel 18 is fp32-accurate (3xTF32) only: for TF32 use kernel 17"
#endif
#define SPLIT_TF32 1
#define OWN 64                                   // keys a block owns: one warpgroup
#define NUM_THREADS 128
#include "flash_wgmma.cuh"
#include "copy_engine.cuh"

// dQ tiles (store_dq, copy_engine.cuh): thread f's float4 j holds queries 16 warp + g and + 8, dims
// 8j + 2t, 2t+1 of its tile (wgmma's accumulator layout at N = 64).

#define LAYOUT (OTHER * HS)                      // floats of one 64 x 64 layout (16 KiB)
#define SPLIT_TILE_FLOATS (8 * LAYOUT)           // Q, Q lo, dO, dO lo, Q^T, Q^T lo, dO^T, dO^T lo

// x = hi + lo, both TF32 (hi: to nearest; lo: what hi leaves, to nearest).
__device__ __forceinline__ void split_tf32(float x, uint32_t& hi, uint32_t& lo) {
    asm("cvt.rn.tf32.f32 %0, %1;" : "=r"(hi) : "f"(x));
    asm("cvt.rn.tf32.f32 %0, %1;" : "=r"(lo) : "f"(x - __uint_as_float(hi)));
}

// Rows into the K-major tiles s (hi) and s + LAYOUT (lo) and, unless st is null, their
// transposes st (hi) and st + LAYOUT (lo), queries at kpos when PERMUTE (store_rows, split).
template <int ROWS, bool PERMUTE>
__device__ __forceinline__ void store_split(const Rows<ROWS>& r, float* __restrict__ s, float* __restrict__ st) {
#pragma unroll
    for (int i = 0; i < Rows<ROWS>::PER; ++i) {
        const int f = threadIdx.x + NUM_THREADS * i, row = rows_row(f), c = 4 * rows_c4(f);
        const float x[4] = {r.x[i].x, r.x[i].y, r.x[i].z, r.x[i].w};
        uint32_t hi[4], lo[4];
#pragma unroll
        for (int e = 0; e < 4; ++e) split_tf32(x[e], hi[e], lo[e]);
        *reinterpret_cast<uint4*>(s + core_index(row, c, HS)) = make_uint4(hi[0], hi[1], hi[2], hi[3]);
        *reinterpret_cast<uint4*>(s + ROWS * HS + core_index(row, c, HS)) = make_uint4(lo[0], lo[1], lo[2], lo[3]);
        if (st) {
            const int k = PERMUTE ? kpos(row) : row;
#pragma unroll
            for (int e = 0; e < 4; ++e) {
                st[core_index(c + e, k, ROWS)] = __uint_as_float(hi[e]);
                st[ROWS * HS + core_index(c + e, k, ROWS)] = __uint_as_float(lo[e]);
            }
        }
    }
}

// Query tile i of one (b, h): Q and dO rows 64 i .. 64 i + 63 in the eight layouts, and
// D = rowsum(dO o O) of those rows (fp32).
extern "C" __global__ void __launch_bounds__(NUM_THREADS)
flash_backward_prep(float* __restrict__ tiles, float* __restrict__ D, const float* __restrict__ q,
                    const float* __restrict__ dout, const float* __restrict__ o, int T, int NH) {
    __shared__ __align__(16) float st[2 * LAYOUT];   // one matrix's transpose, hi and lo
    const int bh = blockIdx.x, b = bh / NH, h = bh % NH, q0 = blockIdx.y * OTHER;
    const float* dO = dout + (size_t)b * T * NH * HS + h * HS;   // row t at t * NH * HS
    float* tile = tiles + ((size_t)bh * gridDim.y + blockIdx.y) * SPLIT_TILE_FLOATS;
    Rows<OTHER> r;
#pragma unroll
    for (int m = 0; m < 2; ++m) {                 // Q, then dO
        if (m) load_rows(r, dO, q0, T, NH * HS);
        else load_rows(r, q + (size_t)bh * T * HS, q0, T, HS);
        if (m) __syncthreads();                   // Q's transposes have left st
        store_split<OTHER, true>(r, tile + 2 * m * LAYOUT, st);   // K-major straight to memory
        __syncthreads();
#pragma unroll
        for (int i = 0; i < 2 * LAYOUT / 4 / NUM_THREADS; ++i) {  // the transposes, coalesced
            const int f = 4 * (threadIdx.x + NUM_THREADS * i);
            *reinterpret_cast<float4*>(tile + (4 + 2 * m) * LAYOUT + f) = *reinterpret_cast<const float4*>(st + f);
        }
    }
    {   // D: 2 threads per row, 32 dims each
        const int row = q0 + threadIdx.x / 2, d0 = 32 * (threadIdx.x % 2);
        float sum = 0.f;
        if (row < T) {
#pragma unroll
            for (int i = 0; i < 8; ++i) {
                const float4 x = *reinterpret_cast<const float4*>(dO + (size_t)row * NH * HS + d0 + 4 * i);
                const float4 y = *reinterpret_cast<const float4*>(o + ((size_t)bh * T + row) * HS + d0 + 4 * i);
                sum += x.x * y.x + x.y * y.y + x.z * y.z + x.w * y.w;
            }
        }
        sum += __shfl_xor_sync(0xffffffff, sum, 1);
        if (row < T && threadIdx.x % 2 == 0) D[(size_t)bh * T + row] = sum;
    }
}

// Registers a wgmma reads as its A operand stay untouched until the wait that follows this.
template <int N>
__device__ __forceinline__ void wg_keep(const uint32_t (&a)[N]) {
#pragma unroll
    for (int i = 0; i < N; ++i) asm volatile("" :: "r"(a[i]) : "memory");
}
// D = A_lo B + A B_lo + A B over the K = 64 of a 64 x 64 product, A (the thread's hi and lo,
// 32 values each: k = t, t+4 of step j are a[4j], a[4j+2] / a[4j+1], a[4j+3]) from registers,
// B (hi at b, lo at b + LAYOUT, 64 columns) from shared memory.
__device__ __forceinline__ void product_rs(float (&d)[32], const uint32_t (&x)[32], const float* b, int first) {
#pragma unroll
    for (int j = 0; j < 8; ++j) {
        const uint32_t a[4] = {x[4 * j], x[4 * j + 2], x[4 * j + 1], x[4 * j + 3]};
        if (first && j == 0) wgmma64_rs_first(d, a, wg_desc(b, OTHER));
        else wgmma64_rs(d, a, wg_desc(b + 64 * j, OTHER), 1);
    }
}
__device__ __forceinline__ void product3_rs(float (&d)[32], const uint32_t (&hi)[32], const uint32_t (&lo)[32],
                                            const float* b) {
    product_rs(d, lo, b, 1);
    product_rs(d, hi, b + LAYOUT, 0);
    product_rs(d, hi, b, 0);
}
// D = A_lo B + A B_lo + A B, both from shared memory (hi at a and b, lo LAYOUT further).
__device__ __forceinline__ void product3_ss(float (&d)[32], const float* a, const float* b) {
#pragma unroll
    for (int term = 0; term < 3; ++term)
#pragma unroll
        for (int kk = 0; kk < 8; ++kk) {
            const uint64_t da = wg_desc(a + (term == 0 ? LAYOUT : 0) + 64 * kk, 64);
            const uint64_t db = wg_desc(b + (term == 1 ? LAYOUT : 0) + 64 * kk, 64);
            if (term + kk == 0) wgmma64_ss_first(d, da, db);
            else wgmma64_ss(d, da, db, 1);
        }
}

// dS (hi, lo) as store_ds wrote it into s, read back into the thread's own elements of dS^T
// (the registers it held them in are the ones dV's product needs).
__device__ __forceinline__ void load_ds(uint32_t (&hi)[32], uint32_t (&lo)[32], const float* s, int krow, int g, int t) {
#pragma unroll
    for (int j = 0; j < 8; ++j)
#pragma unroll
        for (int r = 0; r < 2; ++r) {
            const int at = 4 * j + 2 * r, swap = g >> 2;   // the stores' order: 32 banks per load
            const int i0 = core_index(8 * j + 2 * t + swap, krow + 8 * r, OWN);
            const int i1 = core_index(8 * j + 2 * t + (swap ^ 1), krow + 8 * r, OWN);
            const uint32_t h0 = __float_as_uint(s[i0]), h1 = __float_as_uint(s[i1]);
            const uint32_t l0 = __float_as_uint(s[LAYOUT + i0]), l1 = __float_as_uint(s[LAYOUT + i1]);
            hi[at] = swap ? h1 : h0;
            hi[at + 1] = swap ? h0 : h1;
            lo[at] = swap ? l1 : l0;
            lo[at + 1] = swap ? l0 : l1;
        }
}

// One block: key tile J (64 keys, k0 = 64 J) of one (b, h) over query tiles i of 64 (i >= J).
// blockIdx.x = b*NH + h, blockIdx.y = J (the longest first).
extern "C" __global__ void __launch_bounds__(NUM_THREADS, 1)
flash_backward(float* __restrict__ dinp, float* __restrict__ dq_tiles, const float* __restrict__ tiles, const float* __restrict__ k,
               const float* __restrict__ v, const float* __restrict__ lse, const float* __restrict__ D,
               int T, int NH, float scale) {
    extern __shared__ float4 smem4[];
    float* sK = reinterpret_cast<float*>(smem4);   // K (hi, lo): A of S^T
    float* sV = sK + 2 * LAYOUT;                    // V (hi, lo): A of dP^T
    float* sKt = sV + 2 * LAYOUT;                   // K^T (hi, lo): B of dQ
    float* sQ = sKt + 2 * LAYOUT;                   // Q (hi, lo): B of S^T; then dS (hi, lo): A of dQ
    float* sdO = sQ + 2 * LAYOUT;                   // dO (hi, lo): B of dP^T
    float* sQt = sdO + 2 * LAYOUT;                  // Q^T (hi, lo): B of dK; then dQ for the copy engine
    float* sdOt = sQt + 2 * LAYOUT;                 // dO^T (hi, lo): B of dV
    float* sLse = sdOt + 2 * LAYOUT;                // lse * log2(e) of the query tile
    float* sD = sLse + OTHER;
    uint64_t* bars = reinterpret_cast<uint64_t*>(sD + OTHER);   // Q, dO, Q^T/dO^T
    const int n_other = (T + OTHER - 1) / OTHER;
    const size_t bh = (size_t)blockIdx.x * T;
    k += bh * HS; v += bh * HS; lse += bh; D += bh;
    const int ld = 3 * NH * HS;                     // dinp's row: dq, dk, dv of all heads
    float* dk = dinp + (size_t)(blockIdx.x / NH) * T * ld + (NH + blockIdx.x % NH) * HS;
    float* dv = dk + NH * HS;
    tiles += (size_t)blockIdx.x * n_other * SPLIT_TILE_FLOATS;
    dq_tiles += (size_t)blockIdx.x * n_other * DQ_TILE_FLOATS;
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
    const int k0 = blockIdx.y * OWN, krow = 16 * warp + g;   // + 8r: the thread's keys
    const float c = scale * LOG2E;
    const int i0 = k0 / OTHER;                      // the first query tile

    if (threadIdx.x == 0) {
        for (int b = 0; b < 3; ++b) mbar_init(bars + b, 1);
        asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");   // before the copy engine uses them
        const float* tile = tiles + (size_t)i0 * SPLIT_TILE_FLOATS;
        copy_bulk<2 * LAYOUT * 4>(sQ, tile, bars);
        copy_bulk<2 * LAYOUT * 4>(sdO, tile + 2 * LAYOUT, bars + 1);
        copy_bulk<4 * LAYOUT * 4>(sQt, tile + 4 * LAYOUT, bars + 2);
    }
    {
        Rows<OWN> r;
        load_rows(r, k, k0, T, HS);
        store_split<OWN, false>(r, sK, sKt);
        load_rows(r, v, k0, T, HS);
        store_split<OWN, false>(r, sV, nullptr);
    }
    if (threadIdx.x < OTHER) {
        const bool in = i0 * OTHER + threadIdx.x < T;
        sLse[threadIdx.x] = in ? lse[i0 * OTHER + threadIdx.x] * LOG2E : 0.f;
        sD[threadIdx.x] = in ? D[i0 * OTHER + threadIdx.x] : 0.f;
    }
    fence_async_shared();                           // K, V and K^T, before wgmma reads them
    __syncthreads();
    float dK[32], dV[32];
#pragma unroll
    for (int n = 0; n < 32; ++n) dK[n] = dV[n] = 0.f;

    uint32_t phases = 0;                            // bit b: the parity of mbarrier b's next phase
    for (int i = i0; i < n_other; ++i) {
        const int q0 = i * OTHER;
        const float* tile = tiles + (size_t)i * SPLIT_TILE_FLOATS;
        float next_lse = 0.f, next_d = 0.f;         // the next tile's (queries past T: 0)
        if (threadIdx.x < OTHER && q0 + OTHER + threadIdx.x < T) {
            next_lse = lse[q0 + OTHER + threadIdx.x] * LOG2E;
            next_d = D[q0 + OTHER + threadIdx.x];
        }

        // dP^T = V dO^T, then (once Q has landed) S^T = K Q^T: 64 keys x 64 queries
        float s[32], p[32];
        mbar_wait(bars + 1, (phases >> 1) & 1);     // dO
        wg_fence();
        product3_ss(p, sV, sdO);
        mbar_wait(bars, phases & 1);                // Q
        wg_fence();             // (the wait is a branch: ptxas would add this fence itself)
        product3_ss(s, sK, sQ);
        wg_commit();
        phases ^= 3u;
        if (threadIdx.x == 0 && i > i0) {           // the copy engine has read the last dQ: this Q^T, dO^T
            asm volatile("cp.async.bulk.wait_group.read 0;" ::: "memory");
            copy_bulk<4 * LAYOUT * 4>(sQt, tile + 4 * LAYOUT, bars + 2);
        }
        wg_wait<0>();
        wg_hold(s);
        wg_hold(p);
        __syncthreads();        // every warp's products have read Q and dO
        if (threadIdx.x == 0 && i + 1 < n_other)    // the next dO
            copy_bulk<2 * LAYOUT * 4>(sdO, tile + SPLIT_TILE_FLOATS + 2 * LAYOUT, bars + 1);

        // P^T and dS^T = P^T o (dP^T - D). Element 4j + 2r + e: key k0 + krow + 8r, query
        // q0 + 8j + 2t + e.
        const bool edge = q0 < k0 + OWN || q0 + OTHER > T;   // tiles that need the causal mask
#pragma unroll
        for (int j = 0; j < 8; ++j)
#pragma unroll
            for (int e = 0; e < 2; ++e) {
                const int col = 8 * j + 2 * t + e;
                const float lse2 = sLse[col], d = sD[col];
#pragma unroll
                for (int r = 0; r < 2; ++r) {
                    const int at = 4 * j + 2 * r + e, key = k0 + krow + 8 * r;
                    float x = exp2f(fmaf(c, s[at], -lse2));
                    if (edge && (key > q0 + col || q0 + col >= T)) x = 0.f;
                    p[at] = x * (p[at] - d);
                    s[at] = x;
                }
            }
        // dS (hi, lo) into Q's place for dQ; lanes g >= 4 take query 2t+1 first: 32 banks per store
#pragma unroll
        for (int j = 0; j < 8; ++j)
#pragma unroll
            for (int ee = 0; ee < 2; ++ee) {
                const int e = ee ^ (g >> 2), col = 8 * j + 2 * t + e;
#pragma unroll
                for (int r = 0; r < 2; ++r) {
                    uint32_t hi, lo;
                    split_tf32(e ? p[4 * j + 2 * r + 1] : p[4 * j + 2 * r], hi, lo);
                    sQ[core_index(col, krow + 8 * r, OWN)] = __uint_as_float(hi);
                    sQ[LAYOUT + core_index(col, krow + 8 * r, OWN)] = __uint_as_float(lo);
                }
            }
        uint32_t ph[32], pl[32];                    // P^T, split: the A operand of dV
#pragma unroll
        for (int n = 0; n < 32; ++n) split_tf32(s[n], ph[n], pl[n]);
        fence_async_shared();   // dS, before wgmma reads it
        __syncthreads();
        mbar_wait(bars + 2, (phases >> 2) & 1);     // Q^T and dO^T
        phases ^= 4u;

        // the tile's P^T dO, dQ = dS K (64 queries x 64 dims over the 64 keys) and dS^T Q, each
        // into an accumulator of its own, added to dV and dK by FADD, rounded to nearest (one
        // accumulator for every tile, as kernel 17 has, lost accuracy: see the header).
        // dS^T's A operand is read back from dS in shared memory once dV is done: held in
        // registers through dV as well, it would not fit in the 255 a thread has.
        float tV[32], tK[32], dQ[32];
        wg_fence();
        product3_rs(tV, ph, pl, sdOt);
        wg_commit();
        product3_ss(dQ, sQ, sKt);
        wg_commit();
        wg_wait<1>();           // P^T dO is done, and has read P^T's registers
        wg_keep(ph);
        wg_keep(pl);
        wg_hold(tV);
#pragma unroll
        for (int n = 0; n < 32; ++n) dV[n] += tV[n];
        uint32_t dh[32], dl[32];                    // dS^T, split: the A operand of dK
        load_ds(dh, dl, sQ, krow, g, t);
        wg_fence();             // dS^T's registers, written since the last fence
        product3_rs(tK, dh, dl, sQt);
        wg_commit();
        wg_wait<0>();
        wg_keep(dh);
        wg_keep(dl);
        wg_hold(tK);
        wg_hold(dQ);
#pragma unroll
        for (int n = 0; n < 32; ++n) dK[n] += tK[n];

        __syncthreads();        // every warp's products are done: dS, Q^T and dO^T are free
        if (threadIdx.x < OTHER) {
            sLse[threadIdx.x] = next_lse;
            sD[threadIdx.x] = next_d;
        }
        store_dq(sQt, dQ, scale);
        fence_async_shared();   // before the copy engine reads it
        if (threadIdx.x == 0 && i + 1 < n_other)    // the next Q
            copy_bulk<2 * LAYOUT * 4>(sQ, tile + SPLIT_TILE_FLOATS, bars);
        __syncthreads();        // dQ, lse and D are in shared memory
        if (threadIdx.x == 0) reduce_dq(dq_tiles + (size_t)i * DQ_TILE_FLOATS, sQt);
    }
    if (threadIdx.x == 0) asm volatile("cp.async.bulk.wait_group 0;" ::: "memory");   // done before the block exits
    store_dkdv(dk, dv, ld, dK, dV, k0 + krow, T, scale, t);
}

// dq (dinp's first C columns) from dq_tiles: one block per (b, h) and query tile, each thread
// its eight float4 of the tile (as store_dq wrote them), as two float2 of rows g and g + 8.
extern "C" __global__ void __launch_bounds__(NUM_THREADS)
flash_backward_dq(float* __restrict__ dinp, const float* __restrict__ dq_tiles, int T, int NH) {
    const int i = blockIdx.y, ld = 3 * NH * HS;
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    const int g = lane / 4, t = lane % 4, row = i * OTHER + 16 * warp + g;
    const float4* tile = reinterpret_cast<const float4*>(dq_tiles + ((size_t)blockIdx.x * gridDim.y + i) * DQ_TILE_FLOATS);
    float* dq = dinp + (size_t)(blockIdx.x / NH) * T * ld + (blockIdx.x % NH) * HS + 2 * t;
#pragma unroll
    for (int j = 0; j < 8; ++j) {
        const float4 x = tile[threadIdx.x + NUM_THREADS * j];
        if (row < T) *reinterpret_cast<float2*>(dq + (size_t)row * ld + 8 * j) = make_float2(x.x, x.y);
        if (row + 8 < T) *reinterpret_cast<float2*>(dq + (size_t)(row + 8) * ld + 8 * j) = make_float2(x.z, x.w);
    }
}
