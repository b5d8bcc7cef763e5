// flash_attention23.cu: kernel 23, kernel 22 adding dQ^T into dq_tiles from registers, by float4 reductions.
//
// WHAT CHANGED from kernel 22 (flash_attention22.cu), and why it should be faster. In kernel 22 each
// warpgroup step stores its dQ^T (scaled) into its dS region, fences, meets its warpgroup at a
// barrier, and one thread has the copy engine add the region into dq_tiles (cp.reduce.async.bulk);
// before dS^T overwrites the region, that thread waits for the copy engine's read. Those stores exist
// only to give the copy engine a source. Here each thread adds its own dQ^T straight from registers
// with Hopper's vector reduction: atomicAdd on a float4 (red.global.add.v4.f32, REDG.E.ADD.F32x4),
// eight a step, at the very float4 of dq_tiles the bulk reduction added it to. A thread's four values
// are one float4 there, so no shuffle builds them (kernels 13 and 14 shuffled to build theirs, and added
// them into dinp's rows; kernel 15 replaced those atomics with the copy engine). Gone: 16 KiB of stores
// into shared memory a warpgroup step (and the copy engine's 16 KiB read of them), a proxy fence, a
// barrier, and the wait before dS^T. The same 16 KiB still go to L2, as 1,024 reductions of 16 bytes.
// Without its dQ and dS stores kernel 22 was 6.3 % faster in single calls (results/h100/experiments/
// k22_dqpath.txt); the likely reason, not measured, is that the stores take shared memory's bandwidth
// from the wgmma operand reads. dK and dV are kernel 22's bit for bit; dQ adds the same values in
// another order. 242 registers (kernel 22: 254), no spills (nvcc 13.0, sm_90a).
// Measured on the H200 (results/h200/fused_ladder_23.json, beside kernel 22 in one run), the whole
// call in single calls: 3.2 % less time at T=4096, 4.5 % at 16384 (14.3675 against 15.0489 ms), not
// resolved at 1024; 289.4 TFLOP/s at T=16384 in the one-run table (#23's TF32 target: 265). On an
// H100 (results/h100/experiments/k22_red.json: the edit of kernel 22 that this file writes out, the
// same SASS through the loop), flash_backward alone: 1.8 % faster at T=1024, 3.3 % at 4096, 4.4 % at
// 16384. Predicted for flash_backward alone: 1 to 4 % at T=4096 and 16384, not resolved at 1024.
//
// Launch geometry (attnlab/fused.py): kernel 22's: a block of 256 threads per 128 keys, one block
// per SM, 231,488 bytes of shared memory; grid (G, key tiles, B*NH / G); dq_tiles zeroed before.
#include "flash_wgmma.cuh"
#include "copy_engine.cuh"

// x rounded to TF32, to nearest with ties to even (kernel 17).
__device__ __forceinline__ float round_tf32_rn(float x) {
    uint32_t r;
    asm("cvt.rn.tf32.f32 %0, %1;" : "=r"(r) : "f"(x));
    return __uint_as_float(r);
}
// Named barriers: bar_sync waits until n threads have arrived at barrier id; bar_arrive arrives without waiting.
__device__ __forceinline__ void bar_sync(int id, int n) { asm volatile("bar.sync %0, %1;" :: "r"(id), "r"(n) : "memory"); }
__device__ __forceinline__ void bar_arrive(int id, int n) { asm volatile("bar.arrive %0, %1;" :: "r"(id), "r"(n) : "memory"); }
// lse and D of query q0 + w (w < 64) into ld's stage st (lse at 0, D at 64), by cp.async.
__device__ __forceinline__ void load_ld(float* ld, int st, const float* lse, const float* D, int q0, int w, int T) {
    const int q = q0 + w, bytes = q < T ? 4 : 0, at = min(q, T - 1);
    asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;" :: "r"(smem_addr(ld + 128 * st + w)), "l"(lse + at), "r"(bytes) : "memory");
    asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;" :: "r"(smem_addr(ld + 128 * st + 64 + w)), "l"(D + at), "r"(bytes) : "memory");
    cp_async_commit();
}

// One block: key tile J (128 keys, k0 = 128 J; warpgroup w owns keys k0 + 64 w ..) of one (b, h)
// over query tiles i of 64 (q0 = 64 i >= k0). blockIdx.z * G + blockIdx.x = b*NH + h (G = gridDim.x heads
// at a time), blockIdx.y = J (the longest first).
extern "C" __global__ void __launch_bounds__(NUM_THREADS, 1)
flash_backward(float* __restrict__ dinp, float* __restrict__ dq_tiles, const float* __restrict__ tiles, const float* __restrict__ k,
               const float* __restrict__ v, const float* __restrict__ lse, const float* __restrict__ D,
               int T, int NH, float scale) {
    extern __shared__ float4 smem4[];
    float* sK = reinterpret_cast<float*>(smem4);   // OWN x HS
    float* sV = sK + OWN * HS;                      // OWN x HS
    float* sQdO = sV + OWN * HS;                    // 2 stages of Q, dO
    float* sT = sQdO + 4 * OTHER * HS;              // 2 stages of Q^T, dO^T (HS x OTHER each)
    float* sdS = sT + 4 * OTHER * HS;               // per warpgroup: OTHER x 64, dS^T (B of its dQ^T)
    float* sLD = sdS + OTHER * OWN;                 // per warpgroup, 2 stages: lse * log2(e), D
    uint64_t* bars = reinterpret_cast<uint64_t*>(sLD + 2 * 2 * 2 * OTHER);
    // bars: 0, 1 Q/dO stage landed; 2, 3 Q^T/dO^T stage landed; 4, 5 Q/dO stage read by both
    // warpgroups; 6, 7 Q^T/dO^T stage read by both
    const int n_other = (T + OTHER - 1) / OTHER;
    const int bhi = blockIdx.z * gridDim.x + blockIdx.x;   // b*NH + h
    const size_t bh = (size_t)bhi * T;
    k += bh * HS; v += bh * HS; lse += bh; D += bh;
    tiles += (size_t)bhi * n_other * TILE_FLOATS;
    dq_tiles += (size_t)bhi * n_other * DQ_TILE_FLOATS;
    // the warpgroup, read from lane 0 so that the compiler knows it is the same across the warp,
    // and keeps what is computed from it (the descriptors below) in uniform registers
    const int wg = __shfl_sync(0xffffffff, threadIdx.x / 128, 0), wt = threadIdx.x % 128, warp = wt / 32, lane = threadIdx.x % 32;
    const int g = lane / 4, t = lane % 4;
    const int k0 = blockIdx.y * OWN, krow = 16 * warp + g;   // + 8r: the thread's keys, of the warpgroup's 64
    const int key0 = k0 + 64 * wg + krow;
    const float c = scale * LOG2E;
    const int i0 = k0 / OTHER;
    const bool lead = wt == 0;                     // mbarrier arrivals, copies (and lse/D, with wt < 64)
    float* sdSw = sdS + wg * OTHER * 64;
    float* sLDw = sLD + wg * 2 * 2 * OTHER;
    const float* sKw = sK + 64 * wg * HS;
    const float* sVw = sV + 64 * wg * HS;

    if (threadIdx.x == 0) {
        for (int b = 0; b < 4; ++b) mbar_init(bars + b, 1);
        for (int b = 4; b < 8; ++b) mbar_init(bars + b, 2);
        asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
        copy_half_bulk(sQdO, tiles + (size_t)i0 * TILE_FLOATS, bars);
        if (i0 + 1 < n_other) copy_half_bulk(sQdO + 2 * OTHER * HS, tiles + (size_t)(i0 + 1) * TILE_FLOATS, bars + 1);
        copy_half_bulk(sT, tiles + (size_t)i0 * TILE_FLOATS + 2 * OTHER * HS, bars + 2);
        if (i0 + 1 < n_other) copy_half_bulk(sT + 2 * OTHER * HS, tiles + (size_t)(i0 + 1) * TILE_FLOATS + 2 * OTHER * HS, bars + 3);
    }
    {
        Rows<OWN> r;
        load_rows(r, k, k0, T, HS);
        store_rows<OWN, false>(r, sK, nullptr);
        load_rows(r, v, k0, T, HS);
        store_rows<OWN, false>(r, sV, nullptr);
    }
    if (wt < OTHER) {
        load_ld(sLDw, 0, lse, D, i0 * OTHER, wt, T);
        cp_async_wait<0>();
        sLDw[wt] *= LOG2E;
    }
    fence_async_shared();
    __syncthreads();

    uint32_t kt[32];   // A of dQ^T: K^T (rounded in sK), rows (dims) 16 warp + g (+8), the warpgroup's keys 8kk + t (+4)
#pragma unroll
    for (int kk = 0; kk < 8; ++kk)
#pragma unroll
        for (int i = 0; i < 4; ++i)
            kt[4 * kk + i] = __float_as_uint(sK[core_index(64 * wg + 8 * kk + t + 4 * (i >> 1), 16 * warp + g + 8 * (i & 1), HS)]);
    float dK[32], dV[32], dQ[32], s[32], p[32];     // dQ: this tile's dQ^T (64 dims x 64 queries)
#pragma unroll
    for (int n = 0; n < 32; ++n) dK[n] = dV[n] = 0.f;
    uint32_t ph = 0;                                // bit b: the parity of mbarrier b's next phase

    // dQ^T, dV, dK of tile j (A of dV, dK: P^T, dS^T in s, p), issued as three commit groups and
    // not waited for: issue_s waits for each before it overwrites s and p. dQ^T first: it needs
    // neither Q^T nor dO^T, which may still be landing
    auto issue_g = [&](int j) {
        const int st = (j - i0) & 1;
        const float* sQt = sT + 2 * st * OTHER * HS;
        const float* sdOt = sQt + OTHER * HS;
        wg_hold(dV);
        wg_hold(dK);
        wg_fence();
#pragma unroll
        for (int kk = 0; kk < 8; ++kk) {
            const uint32_t a[4] = {kt[4 * kk], kt[4 * kk + 1], kt[4 * kk + 2], kt[4 * kk + 3]};
            wgmma64_rs(dQ, a, wg_desc_step(wg_desc(sdSw, 64), kk), kk > 0);
        }
        wg_commit();
        mbar_wait(bars + 2 + st, (ph >> (2 + st)) & 1);
        ph ^= 1u << (2 + st);
        wg_fence();
#pragma unroll
        for (int jj = 0; jj < 8; ++jj) {
            const uint32_t a[4] = {__float_as_uint(s[4 * jj]), __float_as_uint(s[4 * jj + 2]),
                                   __float_as_uint(s[4 * jj + 1]), __float_as_uint(s[4 * jj + 3])};
            wgmma64_rs(dV, a, wg_desc_step(wg_desc(sdOt, OTHER), jj), 1);
        }
        wg_commit();
        wg_fence();
#pragma unroll
        for (int jj = 0; jj < 8; ++jj) {
            const uint32_t a[4] = {__float_as_uint(p[4 * jj]), __float_as_uint(p[4 * jj + 2]),
                                   __float_as_uint(p[4 * jj + 1]), __float_as_uint(p[4 * jj + 3])};
            wgmma64_rs(dK, a, wg_desc_step(wg_desc(sQt, OTHER), jj), 1);
        }
        wg_commit();
    };
    // Q^T, dO^T of tile j + 2 into tile j's stage once both warpgroups have read it (warpgroup 1, behind, copies)
    auto refill_t = [&](int j) {
        const int st = (j - i0) & 1;
        if (lead) mbar_arrive(bars + 6 + st);
        if (wg == 1 && lead) {
            mbar_wait(bars + 6 + st, (ph >> (6 + st)) & 1);
            ph ^= 1u << (6 + st);
            if (j + 2 < n_other)
                copy_half_bulk(sT + 2 * st * OTHER * HS, tiles + (size_t)(j + 2) * TILE_FLOATS + 2 * OTHER * HS, bars + 2 + st);
        }
    };
    // S^T, dP^T of tile j, issued, each once the product that reads its registers is done
    auto issue_s = [&](int j) {
        const int st = (j - i0) & 1;
        const float* sQ = sQdO + 2 * st * OTHER * HS;
        mbar_wait(bars + st, (ph >> st) & 1);
        ph ^= 1u << st;
        wg_wait<1>();                  // dQ^T and dV done (dK may run): s is free
        wg_hold(dQ);
        wg_hold(dV);
        wg_fence();
#pragma unroll
        for (int kk = 0; kk < 8; ++kk) wgmma64_ss(s, wg_desc_step(wg_desc(sKw, HS), kk), wg_desc_step(wg_desc(sQ, HS), kk), kk > 0);
        wg_commit();
        wg_wait<1>();                  // dK done (S^T may run): p is free
        wg_hold(dK);
        wg_fence();
#pragma unroll
        for (int kk = 0; kk < 8; ++kk) wgmma64_ss(p, wg_desc_step(wg_desc(sVw, HS), kk), wg_desc_step(wg_desc(sQ + OTHER * HS, HS), kk), kk > 0);
        wg_commit();
    };
    // after tile j's products: this thread's dQ^T added into dq_tiles, a float4 at a time
    auto after_g = [&](int j) {
        float4* dq = reinterpret_cast<float4*>(dq_tiles + (size_t)j * DQ_TILE_FLOATS) + wt;
#pragma unroll
        for (int jj = 0; jj < 8; ++jj)
            atomicAdd(dq + 128 * jj, make_float4(scale * dQ[4 * jj], scale * dQ[4 * jj + 1], scale * dQ[4 * jj + 2], scale * dQ[4 * jj + 3]));
    };
    // after tile j's S^T, dP^T were issued: the next lse and D; wait; release (and refill) the
    // stage; P^T and dS^T; dS into this warpgroup's region
    auto after_s = [&](int j) {
        const int st = (j - i0) & 1, q0 = j * OTHER;
        if (wt < OTHER && j + 1 < n_other) load_ld(sLDw, st ^ 1, lse, D, q0 + OTHER, wt, T);
        wg_wait<0>();
        wg_hold(s);
        wg_hold(p);
        if (lead) mbar_arrive(bars + 4 + st);
        if (wg == 1 && lead) {
            mbar_wait(bars + 4 + st, (ph >> (4 + st)) & 1);
            ph ^= 1u << (4 + st);
            if (j + 2 < n_other) copy_half_bulk(sQdO + 2 * st * OTHER * HS, tiles + (size_t)(j + 2) * TILE_FLOATS, bars + st);
        }
        const float* sLse = sLDw + 128 * st;
        const float* sD = sLse + 64;
        const bool edge = q0 < k0 + OWN || q0 + OTHER > T;
#pragma unroll
        for (int jj = 0; jj < 8; ++jj)
#pragma unroll
            for (int e = 0; e < 2; ++e) {
                const int col = 8 * jj + 2 * t + e;
                const float lse2 = sLse[col], d = sD[col];
#pragma unroll
                for (int r = 0; r < 2; ++r) {
                    const int at = 4 * jj + 2 * r + e, key = key0 + 8 * r;
                    float x = exp2f(fmaf(c, s[at], -lse2));
                    if (edge && (key > q0 + col || q0 + col >= T)) x = 0.f;
                    p[at] = round_tf32_rn(x * (p[at] - d));
                    s[at] = round_tf32_rn(x);
                }
            }
        bar_sync(3 + wg, 128);         // every warp's dQ^T of the last tile has read the region
#pragma unroll
        for (int jj = 0; jj < 8; ++jj)
#pragma unroll
            for (int ee = 0; ee < 2; ++ee) {
                const int e = ee ^ (g >> 2), col = 8 * jj + 2 * t + e;
#pragma unroll
                for (int r = 0; r < 2; ++r)
                    sdSw[core_index(col, krow + 8 * r, 64)] = e ? p[4 * jj + 2 * r + 1] : p[4 * jj + 2 * r];
            }
        fence_async_shared();
        if (wt < OTHER && j + 1 < n_other) {
            cp_async_wait<0>();
            sLDw[128 * (st ^ 1) + wt] *= LOG2E;
        }
        bar_sync(3 + wg, 128);
    };

    // turns: warpgroup w issues after bar.sync 1 + w; the other arrives there when it is done issuing
    if (wg == 1) bar_arrive(1, 256);               // warpgroup 0 first
    bar_sync(1 + wg, 256);
    issue_s(i0);
    bar_arrive(2 - wg, 256);
    after_s(i0);
    for (int j = i0 + 1; j < n_other; ++j) {
        bar_sync(1 + wg, 256);
        issue_g(j - 1);
        issue_s(j);
        bar_arrive(2 - wg, 256);
        refill_t(j - 1);
        after_g(j - 1);
        after_s(j);
    }
    bar_sync(1 + wg, 256);
    issue_g(n_other - 1);
    wg_wait<0>();                      // no S^T follows: wait here
    wg_hold(dV);
    wg_hold(dK);
    wg_hold(dQ);
    if (wg == 0) bar_arrive(2, 256);
    after_g(n_other - 1);
    const int ld = 3 * NH * HS;
    float* dk = dinp + (size_t)(bhi / NH) * T * ld + (NH + bhi % NH) * HS;
    store_dkdv(dk, dk + NH * HS, ld, dK, dV, key0, T, scale, t);
}

// dq (dinp's first C columns) from dq_tiles, which hold dQ^T: 256 threads per (b, h) and query
// tile. Float4 n of a tile is float4 j = n / 128 of warpgroup thread f = n % 128 (after_g): dims
// 16 warp + g and + 8, queries 8j + 2t and + 1 (warp, g, t of f).
extern "C" __global__ void __launch_bounds__(NUM_THREADS)
flash_backward_dq(float* __restrict__ dinp, const float* __restrict__ dq_tiles, int T, int NH) {
    const int i = blockIdx.y, ld = 3 * NH * HS;
    const float4* tile = reinterpret_cast<const float4*>(dq_tiles + ((size_t)blockIdx.x * gridDim.y + i) * DQ_TILE_FLOATS);
    float* dq = dinp + (size_t)(blockIdx.x / NH) * T * ld + (blockIdx.x % NH) * HS;
#pragma unroll
    for (int m = 0; m < DQ_TILE_FLOATS / 4 / NUM_THREADS; ++m) {
        const int n = threadIdx.x + NUM_THREADS * m, f = n % 128, lane = f % 32;
        const int d = 16 * (f / 32) + lane / 4, q = i * OTHER + 8 * (n / 128) + 2 * (lane % 4);
        const float4 x = tile[n];
        if (q < T) { dq[(size_t)q * ld + d] = x.x; dq[(size_t)q * ld + d + 8] = x.z; }
        if (q + 1 < T) { dq[(size_t)(q + 1) * ld + d] = x.y; dq[(size_t)(q + 1) * ld + d + 8] = x.w; }
    }
}
