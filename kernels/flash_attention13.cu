// flash_attention13.cu: kernel 13, kernel 12 without the three costs that kept it at kernel 11's
// time: query tiles arrive ready-made and asynchronously, dS is stored without bank conflicts,
// and dQ is added with a quarter of the atomic instructions; and without the pipeline's permutes.
//
// WHAT CHANGED from kernel 12 (flash_attention12.cu), and why it is faster. Kernel 12's wgmma
// run at 1.45x mma.sync's rate, yet it took kernel 11's time: with one block of 8 warps per SM
// (197 KB of shared memory) every step of a tile waits for the one before, and three of them
// cost more than the products. Removing each in turn from kernel 12's flash_backward (wrong
// results, honest times: benchmarks/fused_k12_costs.py, notebook 13) saved, at T=16384: the
// transposed stores of Q and dO 3.5 ms, the stores of dS 4.9 ms, the atomics 5.8 ms, of 34.3 ms.
// So:
//   1. A small kernel before it, flash_backward_prep, writes each 64-query tile of Q and dO in
//      the four layouts the products read (Q and dO K-major, and transposed with the queries at
//      kpos), rounded to TF32, as one contiguous 64 KiB block in global memory. The backward
//      copies a tile with cp.async (16 bytes per instruction, global to shared memory without
//      registers), half of it while the tile before is still being computed, and makes no
//      transposed stores; the 32 registers that held the next tile in kernel 12 are free.
//   2. dS: in kernel 12 a warp's 32 stores of one value each hit 16 banks (2-way conflicts);
//      here the lanes with g >= 4 store their two queries in the other order, so a store's 32
//      lanes hit 32 banks.
//   3. dQ: lanes t and t^1 swap half of their results (two shuffles) so that each holds 4
//      consecutive dims of one row, and add them with one 16-byte atomicAdd (sm_90's float4
//      atomicAdd, a vector RED): 4 atomic instructions per thread and tile instead of 16.
//   4. The pipeline around it (attnlab/fused.py) had four more kernels: dout to (B, NH, T, HS),
//      D = rowsum(dO o O), zeroing dq, and dq, dk, dv back into dinp (B, T, 3C) -- about
//      0.05 ms of kernel 12's 0.24 ms backward at T=1024. flash_backward_prep reads dO from
//      dout where it lies (row b*T + t, columns h*HS ..: 256 contiguous bytes, as good as a
//      permuted copy) and computes D on the way; flash_backward writes dK and dV, and adds dQ,
//      straight into dinp (rows of 3C floats). What is left is a 2D memset of dinp's dq columns.
//
// The products, the layouts and the precision are kernel 12's (TF32 only; not bit-identical:
// dq's atomics).
//
// Launch geometry (attnlab/fused.py): flash_backward_prep: grid (B*NH, ceil(T/64)), 256 threads;
// flash_backward: grid (B*NH, ceil(T/128)), 256 threads, dynamic shared memory 197,120 bytes, the
// dq columns of dinp zeroed before. q, k, v, o are (B*NH, T, 64); dout (B, T, NH*64); dinp
// (B, T, 3*NH*64); tiles (B*NH, ceil(T/64), 4, 64*64); lse and D (B*NH*T).
#include "flash_wgmma.cuh"

// Query tile i of one (b, h): Q and dO rows 64 i .. 64 i + 63 in the four layouts, rounded, and
// D = rowsum(dO o O) of those rows (fp32, before rounding).
extern "C" __global__ void __launch_bounds__(NUM_THREADS)
flash_backward_prep(float* __restrict__ tiles, float* __restrict__ D, const float* __restrict__ q,
                    const float* __restrict__ dout, const float* __restrict__ o, int T, int NH) {
    __shared__ __align__(16) float st[2][OTHER * HS];
    const int bh = blockIdx.x, b = bh / NH, h = bh % NH, q0 = blockIdx.y * OTHER;
    const float* dO = dout + (size_t)b * T * NH * HS + h * HS;   // row t at t * NH * HS
    float* tile = tiles + ((size_t)bh * gridDim.y + blockIdx.y) * TILE_FLOATS;
    Rows<OTHER> r;
    load_rows(r, q + (size_t)bh * T * HS, q0, T, HS);
    store_rows<OTHER, true>(r, tile, st[0]);                     // K-major straight to memory
    load_rows(r, dO, q0, T, NH * HS);
    store_rows<OTHER, true>(r, tile + OTHER * HS, st[1]);
    {   // D: 4 threads per row, 16 dims each
        const int row = q0 + threadIdx.x / 4, d0 = 16 * (threadIdx.x % 4);
        float sum = 0.f;
        if (row < T) {
#pragma unroll
            for (int i = 0; i < 4; ++i) {
                const float4 x = *reinterpret_cast<const float4*>(dO + (size_t)row * NH * HS + d0 + 4 * i);
                const float4 y = *reinterpret_cast<const float4*>(o + ((size_t)bh * T + row) * HS + d0 + 4 * i);
                sum += x.x * y.x + x.y * y.y + x.z * y.z + x.w * y.w;
            }
        }
        sum += __shfl_xor_sync(0xffffffff, sum, 1);
        sum += __shfl_xor_sync(0xffffffff, sum, 2);
        if (row < T && threadIdx.x % 4 == 0) D[(size_t)bh * T + row] = sum;
    }
    __syncthreads();
#pragma unroll
    for (int i = 0; i < 2 * OTHER * HS / 4 / NUM_THREADS; ++i) {   // the transposes, coalesced
        const int f = 4 * (threadIdx.x + NUM_THREADS * i);
        *reinterpret_cast<float4*>(tile + 2 * OTHER * HS + f) = *reinterpret_cast<const float4*>(&st[0][0] + f);
    }
}

// One block: key tile J (128 keys, k0 = 128 J) of one (b, h) over query tiles i of 64 (q0 = 64 i
// >= k0). blockIdx.x = b*NH + h, blockIdx.y = J (the longest first).
extern "C" __global__ void __launch_bounds__(NUM_THREADS, 1)
flash_backward(float* __restrict__ dinp, const float* __restrict__ tiles, const float* __restrict__ k,
               const float* __restrict__ v, const float* __restrict__ lse, const float* __restrict__ D,
               int T, int NH, float scale) {
    extern __shared__ float4 smem4[];
    float* sK = reinterpret_cast<float*>(smem4);   // OWN x HS     (A of S^T)
    float* sV = sK + OWN * HS;                      // OWN x HS     (A of dP^T)
    float* sKt = sV + OWN * HS;                     // HS x OWN     (B of dQ)
    float* sQ = sKt + OWN * HS;                     // OTHER x HS   (B of S^T)
    float* sdO = sQ + OTHER * HS;                   // OTHER x HS   (B of dP^T)
    float* sQt = sdO + OTHER * HS;                  // HS x OTHER   (B of dK, queries at kpos)
    float* sdOt = sQt + OTHER * HS;                 // HS x OTHER   (B of dV, queries at kpos)
    float* sdS = sdOt + OTHER * HS;                 // OTHER x OWN  (A of dQ)
    float* sLse = sdS + OTHER * OWN;                // lse * log2(e) of the query tile
    float* sD = sLse + OTHER;
    const int n_other = (T + OTHER - 1) / OTHER;
    const size_t bh = (size_t)blockIdx.x * T;
    k += bh * HS; v += bh * HS; lse += bh; D += bh;
    const int ld = 3 * NH * HS;                     // dinp's row: dq, dk, dv of all heads
    float* dq = dinp + (size_t)(blockIdx.x / NH) * T * ld + (blockIdx.x % NH) * HS;
    float* dk = dq + NH * HS;
    float* dv = dk + NH * HS;
    tiles += (size_t)blockIdx.x * n_other * TILE_FLOATS;
    const int wg = threadIdx.x / 128, warp = threadIdx.x / 32 % 4, lane = threadIdx.x % 32;
    const int g = lane / 4, t = lane % 4;
    const int k0 = blockIdx.y * OWN, krow = 64 * wg + 16 * warp + g;   // + 8r: the thread's keys
    const float c = scale * LOG2E;

    int i = k0 / OTHER;
    copy_half(sQ, tiles + (size_t)i * TILE_FLOATS);   // Q and dO of the first tile
    cp_async_commit();
    {
        Rows<OWN> r;
        load_rows(r, k, k0, T, HS);
        store_rows<OWN, false>(r, sK, sKt);
        load_rows(r, v, k0, T, HS);
        store_rows<OWN, false>(r, sV, nullptr);
    }
    const float* sKw = sK + 64 * wg * HS;           // the warpgroup's 64 rows
    const float* sVw = sV + 64 * wg * HS;
    const float* sKtw = sKt + 32 * wg * OWN;        // dims 32 wg .. 32 wg + 31 of K^T
    float dK[32], dV[32];
#pragma unroll
    for (int n = 0; n < 32; ++n) dK[n] = dV[n] = 0.f;

    float next_lse = 0.f, next_d = 0.f;
    if (threadIdx.x < OTHER && i * OTHER + threadIdx.x < T) {
        next_lse = lse[i * OTHER + threadIdx.x] * LOG2E;
        next_d = D[i * OTHER + threadIdx.x];
    }
    for (; i < n_other; ++i) {
        const int q0 = i * OTHER;
        __syncthreads();   // every wgmma of the previous tile has read its tiles (waited below)
        copy_half(sQt, tiles + (size_t)i * TILE_FLOATS + 2 * OTHER * HS);   // Q^T and dO^T
        cp_async_commit();
        if (threadIdx.x < OTHER) {
            sLse[threadIdx.x] = next_lse;
            sD[threadIdx.x] = next_d;
        }
        cp_async_wait<1>();     // this thread's copies of Q and dO have landed
        fence_async_shared();   // the stores and copies, before wgmma reads them
        __syncthreads();

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
        cp_async_wait<0>();     // Q^T and dO^T
        fence_async_shared();
        __syncthreads();        // dS of both warpgroups, Q^T and dO^T are in shared memory;
                                // both warpgroups are done with Q and dO
        if (i + 1 < n_other) {  // the next tile's Q and dO, under this tile's products
            copy_half(sQ, tiles + (size_t)(i + 1) * TILE_FLOATS);
            if (threadIdx.x < OTHER) {   // queries past T: 0, not the last tile's values
                const bool in = q0 + OTHER + threadIdx.x < T;
                next_lse = in ? lse[q0 + OTHER + threadIdx.x] * LOG2E : 0.f;
                next_d = in ? D[q0 + OTHER + threadIdx.x] : 0.f;
            }
        }
        cp_async_commit();

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
        float dQ[16];
#pragma unroll
        for (int kk = 0; kk < OWN / 8; ++kk) wgmma32_ss(dQ, wg_desc(sdS + 64 * kk, OWN), wg_desc(sKtw + 64 * kk, OWN), kk > 0);
        wg_commit();
        wg_wait<0>();
        wg_hold(dV);
        wg_hold(dK);
        wg_hold(dQ);

        // dq += scale dQ: lane t even keeps row g (r = 0) and takes its partner's two dims of
        // it; odd keeps row g + 8. One float4 per 8 dims.
        const int odd = t & 1, row = q0 + 16 * warp + g + 8 * odd;
        float* out = dq + (size_t)row * ld + 32 * wg + 2 * (t & ~1);
#pragma unroll
        for (int j = 0; j < 4; ++j) {
            const float keep0 = odd ? dQ[4 * j + 2] : dQ[4 * j], keep1 = odd ? dQ[4 * j + 3] : dQ[4 * j + 1];
            const float give0 = odd ? dQ[4 * j] : dQ[4 * j + 2], give1 = odd ? dQ[4 * j + 1] : dQ[4 * j + 3];
            const float got0 = __shfl_xor_sync(0xffffffff, give0, 1);
            const float got1 = __shfl_xor_sync(0xffffffff, give1, 1);
            const float4 x = odd ? make_float4(got0, got1, keep0, keep1) : make_float4(keep0, keep1, got0, got1);
            if (row < T)
                atomicAdd(reinterpret_cast<float4*>(out + 8 * j),
                          make_float4(scale * x.x, scale * x.y, scale * x.z, scale * x.w));
        }
    }
    store_dkdv(dk, dv, ld, dK, dV, k0 + krow, T, scale, t);
}
