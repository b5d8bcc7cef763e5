// flash_attention15.cu: kernel 15, kernel 14 with dQ added by the copy engine, one bulk reduction
// per query tile, instead of 1024 float4 atomics.
//
// WHAT CHANGED from kernel 14 (flash_attention14.cu), and why it is faster. Kernel 14 adds each
// tile's dQ into dinp with atomics: every thread shuffles its 16 values into float4s and issues
// 4 atomicAdd, 1024 per tile step and block. A copy of kernel 14 whose atomics never fire took
// 16.62 ms at T=16384 against 18.17 (results/h200/experiments/k15_rows_vs_tile.json). Here:
//   1. After the next step's first barrier (both warpgroups' dQ products have read dS by then),
//      each thread stores its dQ of the last tile, times scale, into dS's shared memory as 4
//      float4, in the order the threads hold it: a warp stores 512 contiguous bytes, no bank
//      conflicts and no shuffles.
//   2. After the lse/D barrier, thread 0 hands the whole 16 KiB tile to the copy engine with one
//      cp.reduce.async.bulk .add.f32, which adds it into dq_tiles (per (b, h) and query tile,
//      in the same order) in L2 while the block goes on.
//   3. dS may overwrite those bytes only once the copy engine has read them: thread 0 waits for
//      that (cp.async.bulk.wait_group.read) and arrives on a fourth mbarrier, which every thread
//      waits on before it stores dS.
// A small kernel, flash_backward_dq, then writes dq_tiles into dinp's dq columns in rows. Bulk
// reductions must be large: the same bytes added by 64 reductions of 256 bytes per step, one
// per query row (which could add into dinp in place), made flash_backward 1.43x slower than
// kernel 14's (notebook 15). Everything else is kernel 14's. TF32 only; not bit-identical (the
// reductions, like atomics, add in any order).
//
// Launch geometry (attnlab/fused.py): flash_backward as kernel 14, dynamic shared memory 229,920
// bytes (kernel 14's 229,912 and a fourth mbarrier); flash_backward_dq: one block of 256 threads
// per (b, h) and query tile. dq_tiles is zeroed before, instead of dinp's dq columns.
#include "flash_wgmma.cuh"
#include "copy_engine.cuh"

// dQ tiles (store_dq, copy_engine.cuh): thread f's float4 j holds queries 16 warp + g and + 8, dims
// 32 wg + 8j + 2t, 2t+1 of its tile (warp: within the warpgroup; wgmma's accumulator layout at N = 32).

// One block: key tile J (128 keys, k0 = 128 J) of one (b, h) over query tiles i of 64 (q0 = 64 i
// >= k0). blockIdx.x = b*NH + h, blockIdx.y = J (the longest first).
extern "C" __global__ void __launch_bounds__(NUM_THREADS, 1)
flash_backward(float* __restrict__ dinp, float* __restrict__ dq_tiles, const float* __restrict__ tiles, const float* __restrict__ k,
               const float* __restrict__ v, const float* __restrict__ lse, const float* __restrict__ D,
               int T, int NH, float scale) {
    extern __shared__ float4 smem4[];
    float* sK = reinterpret_cast<float*>(smem4);   // OWN x HS     (A of S^T)
    float* sV = sK + OWN * HS;                      // OWN x HS     (A of dP^T)
    float* sKt = sV + OWN * HS;                     // HS x OWN     (B of dQ)
    float* sQdO = sKt + OWN * HS;                   // 2 stages of Q, dO (OTHER x HS each: B of S^T, dP^T)
    float* sQt = sQdO + 4 * OTHER * HS;             // HS x OTHER   (B of dK, queries at kpos)
    float* sdOt = sQt + OTHER * HS;                 // HS x OTHER   (B of dV, queries at kpos)
    float* sdS = sdOt + OTHER * HS;                 // OTHER x OWN  (A of dQ)
    float* sLse = sdS + OTHER * OWN;                // lse * log2(e) of the query tile
    float* sD = sLse + OTHER;
    float* sdQ = sdS;                               // dQ of the last tile, until dS is stored there
    uint64_t* bars = reinterpret_cast<uint64_t*>(sD + OTHER);   // Q/dO stage 0, stage 1, Q^T/dO^T, dQ read
    const int n_other = (T + OTHER - 1) / OTHER;
    const size_t bh = (size_t)blockIdx.x * T;
    k += bh * HS; v += bh * HS; lse += bh; D += bh;
    const int ld = 3 * NH * HS;                     // dinp's row: dq, dk, dv of all heads
    float* dk = dinp + (size_t)(blockIdx.x / NH) * T * ld + (NH + blockIdx.x % NH) * HS;
    float* dv = dk + NH * HS;
    tiles += (size_t)blockIdx.x * n_other * TILE_FLOATS;
    dq_tiles += (size_t)blockIdx.x * n_other * DQ_TILE_FLOATS;
    const int wg = threadIdx.x / 128, warp = threadIdx.x / 32 % 4, lane = threadIdx.x % 32;
    const int g = lane / 4, t = lane % 4;
    const int k0 = blockIdx.y * OWN, krow = 64 * wg + 16 * warp + g;   // + 8r: the thread's keys
    const float c = scale * LOG2E;
    const int i0 = k0 / OTHER;                      // the first query tile; tile i is in stage (i - i0) % 2

    if (threadIdx.x == 0) {
        for (int b = 0; b < 3; ++b) mbar_init(bars + b, 1);
        mbar_init(bars + 3, 1);                     // thread 0, once its reduction has read sdQ
        asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");   // before the copy engine uses them
        copy_half_bulk(sQdO, tiles + (size_t)i0 * TILE_FLOATS, bars);
    }
    {
        Rows<OWN> r;
        load_rows(r, k, k0, T, HS);
        store_rows<OWN, false>(r, sK, sKt);
        load_rows(r, v, k0, T, HS);
        store_rows<OWN, false>(r, sV, nullptr);
    }
    fence_async_shared();                           // K, V and K^T, before wgmma reads them
    const float* sKw = sK + 64 * wg * HS;           // the warpgroup's 64 rows
    const float* sVw = sV + 64 * wg * HS;
    const float* sKtw = sKt + 32 * wg * OWN;        // dims 32 wg .. 32 wg + 31 of K^T
    float dK[32], dV[32];
#pragma unroll
    for (int n = 0; n < 32; ++n) dK[n] = dV[n] = 0.f;

    float next_lse = 0.f, next_d = 0.f;
    if (threadIdx.x < OTHER && i0 * OTHER + threadIdx.x < T) {
        next_lse = lse[i0 * OTHER + threadIdx.x] * LOG2E;
        next_d = D[i0 * OTHER + threadIdx.x];
    }
    uint32_t phases = 0;                            // bit b: the parity of mbarrier b's next phase
    float dQ[16];                                   // the last tile's, added at the next step
    for (int i = i0; i < n_other; ++i) {
        const int q0 = i * OTHER, stage = (i - i0) & 1;
        const float* sQ = sQdO + 2 * stage * OTHER * HS;
        const float* sdO = sQ + OTHER * HS;
        __syncthreads();   // every wgmma of the previous tile has read its tiles (waited below)
        if (threadIdx.x == 0) {
            copy_half_bulk(sQt, tiles + (size_t)i * TILE_FLOATS + 2 * OTHER * HS, bars + 2);   // Q^T, dO^T
            if (i + 1 < n_other)   // the next tile's Q and dO, into the other stage
                copy_half_bulk(sQdO + 2 * (stage ^ 1) * OTHER * HS, tiles + (size_t)(i + 1) * TILE_FLOATS,
                               bars + (stage ^ 1));
        }
        if (threadIdx.x < OTHER) {
            sLse[threadIdx.x] = next_lse;
            sD[threadIdx.x] = next_d;
        }
        if (i > i0) {   // the last tile's dQ, where both warpgroups' dQ products have read dS
            store_dq(sdQ, dQ, scale);
            fence_async_shared();   // before the copy engine reads it
        }
        mbar_wait(bars + stage, (phases >> stage) & 1);   // Q and dO of this tile have landed
        phases ^= 1u << stage;
        __syncthreads();        // lse, D and the last tile's dQ
        if (i > i0 && threadIdx.x == 0) reduce_dq(dq_tiles + (size_t)(i - 1) * DQ_TILE_FLOATS, sdQ);

        // S^T = K Q^T and dP^T = V dO^T: the warpgroup's 64 keys x the tile's 64 queries
        float s[32], p[32];
        wg_hold(s);
        wg_hold(p);
        wg_fence();
#pragma unroll
        for (int kk = 0; kk < 8; ++kk) wgmma64_ss(s, wg_desc(sKw + 64 * kk, HS), wg_desc(sQ + 64 * kk, HS), kk > 0);
#pragma unroll
        for (int kk = 0; kk < 8; ++kk) wgmma64_ss(p, wg_desc(sVw + 64 * kk, HS), wg_desc(sdO + 64 * kk, HS), kk > 0);
        wg_commit();
        wg_wait<0>();
        wg_hold(s);
        wg_hold(p);

        // P^T and dS^T = P^T o (dP^T - D), rounded to TF32 (the A operands of dV and dK).
        // Element 4j + 2r + e: key k0 + krow + 8r, query q0 + 8j + 2t + e.
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
                    p[at] = round_tf32(x * (p[at] - d));
                    s[at] = round_tf32(x);
                }
            }
        if (i > i0) {   // the copy engine has read the last tile's dQ: dS may overwrite it
            if (threadIdx.x == 0) {
                asm volatile("cp.async.bulk.wait_group.read 0;" ::: "memory");
                mbar_arrive(bars + 3);
            }
            mbar_wait(bars + 3, (phases >> 3) & 1);
            phases ^= 8u;
        }
        // dS to shared memory for dQ; lanes g >= 4 take query 2t+1 first: 32 banks per store
#pragma unroll
        for (int j = 0; j < 8; ++j)
#pragma unroll
            for (int ee = 0; ee < 2; ++ee) {
                const int e = ee ^ (g >> 2), col = 8 * j + 2 * t + e;
#pragma unroll
                for (int r = 0; r < 2; ++r)
                    sdS[core_index(col, krow + 8 * r, OWN)] = e ? p[4 * j + 2 * r + 1] : p[4 * j + 2 * r];
            }
        fence_async_shared();   // dS, before wgmma reads it
        mbar_wait(bars + 2, (phases >> 2) & 1);   // Q^T and dO^T have landed
        phases ^= 4u;
        __syncthreads();        // dS of both warpgroups is in shared memory
        if (threadIdx.x < OTHER && i + 1 < n_other) {   // queries past T: 0, not the last tile's values
            const bool in = q0 + OTHER + threadIdx.x < T;
            next_lse = in ? lse[q0 + OTHER + threadIdx.x] * LOG2E : 0.f;
            next_d = in ? D[q0 + OTHER + threadIdx.x] : 0.f;
        }

        // dV += P^T dO and dK += dS^T Q (A from registers: k = t, t+4 are queries 2t, 2t+1),
        // then dQ (64 queries x the warpgroup's 32 dims) = dS K over the 128 keys
        wg_hold(dV);
        wg_hold(dK);
        wg_fence();
#pragma unroll
        for (int j = 0; j < 8; ++j) {
            const uint32_t a[4] = {__float_as_uint(s[4 * j]), __float_as_uint(s[4 * j + 2]),
                                   __float_as_uint(s[4 * j + 1]), __float_as_uint(s[4 * j + 3])};
            wgmma64_rs(dV, a, wg_desc(sdOt + 64 * j, OTHER), 1);
        }
#pragma unroll
        for (int j = 0; j < 8; ++j) {
            const uint32_t a[4] = {__float_as_uint(p[4 * j]), __float_as_uint(p[4 * j + 2]),
                                   __float_as_uint(p[4 * j + 1]), __float_as_uint(p[4 * j + 3])};
            wgmma64_rs(dK, a, wg_desc(sQt + 64 * j, OTHER), 1);
        }
#pragma unroll
        for (int kk = 0; kk < OWN / 8; ++kk) wgmma32_ss(dQ, wg_desc(sdS + 64 * kk, OWN), wg_desc(sKtw + 64 * kk, OWN), kk > 0);
        wg_commit();
        wg_wait<0>();
        wg_hold(dV);
        wg_hold(dK);
        wg_hold(dQ);
    }
    // the last tile's dQ
    __syncthreads();            // both warpgroups' dQ products have read dS
    store_dq(sdQ, dQ, scale);
    fence_async_shared();
    __syncthreads();
    if (threadIdx.x == 0) {
        reduce_dq(dq_tiles + (size_t)(n_other - 1) * DQ_TILE_FLOATS, sdQ);
        asm volatile("cp.async.bulk.wait_group 0;" ::: "memory");   // done before the block exits
    }
    store_dkdv(dk, dv, ld, dK, dV, k0 + krow, T, scale, t);
}

// dq (dinp's first C columns) from dq_tiles: one block per (b, h) and query tile, each thread
// its four float4 of the tile (as store_dq wrote them), as two float2 of rows g and g + 8.
extern "C" __global__ void __launch_bounds__(NUM_THREADS)
flash_backward_dq(float* __restrict__ dinp, const float* __restrict__ dq_tiles, int T, int NH) {
    const int i = blockIdx.y, ld = 3 * NH * HS;
    const int wg = threadIdx.x / 128, warp = threadIdx.x / 32 % 4, lane = threadIdx.x % 32;
    const int g = lane / 4, t = lane % 4, row = i * OTHER + 16 * warp + g;
    const float4* tile = reinterpret_cast<const float4*>(dq_tiles + ((size_t)blockIdx.x * gridDim.y + i) * DQ_TILE_FLOATS);
    float* dq = dinp + (size_t)(blockIdx.x / NH) * T * ld + (blockIdx.x % NH) * HS + 32 * wg + 2 * t;
#pragma unroll
    for (int j = 0; j < 4; ++j) {
        const float4 x = tile[threadIdx.x + NUM_THREADS * j];
        if (row < T) *reinterpret_cast<float2*>(dq + (size_t)row * ld + 8 * j) = make_float2(x.x, x.y);
        if (row + 8 < T) *reinterpret_cast<float2*>(dq + (size_t)(row + 8) * ld + 8 * j) = make_float2(x.z, x.w);
    }
}
