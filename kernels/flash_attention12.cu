// flash_attention12.cu: kernel 12, kernel 11's algorithm on Hopper's warpgroup MMA (wgmma,
// sm_90a): B operands are read from shared memory once per 4 warps instead of once per warp.
//
// WHAT CHANGED from kernel 11 (flash_attention11.cu): the five tile products are wgmma.mma_async
// instructions (kernels/wgmma_tf32.cuh explains them and the shared-memory layout they read)
// instead of mma.sync. A block is 2 warpgroups (256 threads) that own 128 keys, 64 each, and
// loops over query tiles of 64. For each query tile, warpgroup w (its keys k0 + 64w ..):
//   S^T  = K Q^T          64 x 64, A = its K rows, B = the Q tile    (both from shared memory)
//   dP^T = V dO^T         64 x 64, A = its V rows, B = the dO tile
//   P^T, dS^T elementwise in registers (kernel 9's softmax backward), and dS to shared memory
//   dV  += P^T dO         A = P^T from registers, B = the dO tile transposed
//   dK  += dS^T Q         A = dS^T from registers, B = the Q tile transposed
//   dQ   = dS K           64 queries x 32 dims (warpgroup w: dims 32w ..), over all 128 keys,
//                         A = dS, B = K transposed; added to dq with atomicAdd, as kernel 11.
//
// WHY IT SHOULD BE FASTER. Kernels 9-11 are bound by shared-memory bytes per mma (notebook 13):
// each warp's mma.sync reads its own copy of every B fragment. A wgmma reads B once for the 64
// rows of a warpgroup, and A too when it comes from shared memory, so the bytes per multiply-add
// fall by more than half; and the instruction is asynchronous: 8 wgmma (a 64 x 64 x 64 product)
// issue back to back and run while the warps wait, without the registers and issue slots of 64
// mma.sync per warp. Its roof (benchmarks/wgmma_rate.py, H200): 442 TFLOP/s with A from shared
// memory, 455 from registers, against mma.sync's 305.
//
// MEASURED: no faster than kernel 11 (notebook 13). With one block of 8 warps per SM every step
// of a tile waits for the one before, and the work around the products -- the transposed
// stores, the dS stores, the atomics -- takes the time the products gave back. Kernel 13
// removes it.
//
// WHAT IT COSTS. TF32 wgmma wants both operands K-major (the K index contiguous), with no
// transposed variant: S^T = K Q^T reads Q as it is stored, but dV = P^T dO and dK = dS^T Q reduce
// over queries, so they need dO and Q transposed (dims x queries); dQ = dS K needs K transposed.
// Each query tile is therefore stored twice, as is and transposed, with scalar stores (4-way bank
// conflicts). In the transposed tiles the queries of each group of 8 are reordered (kpos): the
// accumulator holds columns 2t and 2t+1 of a row where an A fragment wants k = t and t+4, so
// storing query 2t at t and 2t+1 at t+4 lets P^T and dS^T go from accumulator to A operand as
// they are (kernel 9's trick, done here in the B tile's layout).
//
// LATENCY. One block of 8 warps per SM (its tiles take 197 KB of shared memory): while a tile is
// computed, the next one's Q and dO rows are already being loaded into registers (32 per thread).
//
// TF32 only (-DTF32=1): for fp32 accuracy use kernel 11's 3xTF32. Not bit-identical (dq's atomics).
// Launch geometry (attnlab/fused.py): grid (B*NH, ceil(T/128)), 256 threads, dynamic shared memory
// 197,120 bytes; dq must be zero before the launch. Layouts as kernel 9: q, k, v, dO, dq, dk, dv
// are (B*NH, T, 64); lse and D are (B*NH*T); D from kernel 9's flash_backward_preprocess.
#include "flash_wgmma.cuh"

// One block: key tile J (128 keys, k0 = 128 J) of one (b, h) over query tiles i of 64 (q0 = 64 i
// >= k0). blockIdx.x = b*NH + h, blockIdx.y = J (the longest first).
extern "C" __global__ void __launch_bounds__(NUM_THREADS, 1)
flash_backward(float* __restrict__ dq, float* __restrict__ dk, float* __restrict__ dv,
               const float* __restrict__ q, const float* __restrict__ k, const float* __restrict__ v,
               const float* __restrict__ dO, const float* __restrict__ lse, const float* __restrict__ D,
               int T, float scale) {
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
    const size_t bh = (size_t)blockIdx.x * T;
    q += bh * HS; k += bh * HS; v += bh * HS; dO += bh * HS;
    dq += bh * HS; dk += bh * HS; dv += bh * HS; lse += bh; D += bh;
    const int wg = threadIdx.x / 128, warp = threadIdx.x / 32 % 4, lane = threadIdx.x % 32;
    const int g = lane / 4, t = lane % 4;
    const int k0 = blockIdx.y * OWN, krow = 64 * wg + 16 * warp + g;   // + 8r: the thread's keys
    const float c = scale * LOG2E;

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
    for (int i = 0; i < 32; ++i) dK[i] = dV[i] = 0.f;

    const int n_other = (T + OTHER - 1) / OTHER;
    int i = k0 / OTHER;
    Rows<OTHER> rq, rdo;   // the next query tile, on its way from global memory
    float next_lse = 0.f, next_d = 0.f;
    load_rows(rq, q, i * OTHER, T, HS);
    load_rows(rdo, dO, i * OTHER, T, HS);
    if (threadIdx.x < OTHER && i * OTHER + threadIdx.x < T) {
        next_lse = lse[i * OTHER + threadIdx.x] * LOG2E;
        next_d = D[i * OTHER + threadIdx.x];
    }
    for (; i < n_other; ++i) {
        const int q0 = i * OTHER;
        __syncthreads();   // every wgmma of the previous tile has read its tiles (waited below)
        store_rows<OTHER, true>(rq, sQ, sQt);
        store_rows<OTHER, true>(rdo, sdO, sdOt);
        if (threadIdx.x < OTHER) {
            sLse[threadIdx.x] = next_lse;
            sD[threadIdx.x] = next_d;
        }
        fence_async_shared();   // the stores, before wgmma reads them
        __syncthreads();
        if (i + 1 < n_other) {   // the next tile's loads run under this tile's products
            load_rows(rq, q, q0 + OTHER, T, HS);
            load_rows(rdo, dO, q0 + OTHER, T, HS);
            if (threadIdx.x < OTHER) {   // queries past T: 0, not the last tile's values
                const bool in = q0 + OTHER + threadIdx.x < T;
                next_lse = in ? lse[q0 + OTHER + threadIdx.x] * LOG2E : 0.f;
                next_d = in ? D[q0 + OTHER + threadIdx.x] : 0.f;
            }
        }

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

        // P^T and dS^T = P^T o (dP^T - D), rounded to TF32 (the A operands of dV and dK); dS to
        // shared memory for dQ. Element 4j + 2r + e: key k0 + krow + 8r, query q0 + 8j + 2t + e.
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
                    sdS[core_index(col, krow + 8 * r, OWN)] = p[at];
                }
            }
        fence_async_shared();

        // dV += P^T dO and dK += dS^T Q: A from registers (k = t, t+4 are queries 2t, 2t+1)
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
        wg_commit();
        __syncthreads();   // dS of both warpgroups is in shared memory

        // dQ (64 queries x the warpgroup's 32 dims) = dS K over the 128 keys, added to dq
        float dQ[16];
        wg_hold(dQ);
        wg_fence();
#pragma unroll
        for (int kk = 0; kk < OWN / 8; ++kk) wgmma32_ss(dQ, wg_desc(sdS + 64 * kk, OWN), wg_desc(sKtw + 64 * kk, OWN), kk > 0);
        wg_commit();
        wg_wait<0>();
        wg_hold(dV);
        wg_hold(dK);
        wg_hold(dQ);
#pragma unroll
        for (int r = 0; r < 2; ++r) {
            const int row = q0 + 16 * warp + g + 8 * r;
            if (row >= T) continue;
            float* out = dq + (size_t)row * HS + 32 * wg + 2 * t;
#pragma unroll
            for (int j = 0; j < 4; ++j)
#pragma unroll
                for (int e = 0; e < 2; ++e) atomicAdd(out + 8 * j + e, scale * dQ[4 * j + 2 * r + e]);
        }
    }
    wg_hold(dK);
    wg_hold(dV);
#pragma unroll
    for (int r = 0; r < 2; ++r) {
        const int key = k0 + krow + 8 * r;
        if (key >= T) continue;
#pragma unroll
        for (int j = 0; j < 8; ++j) {
            const int at = 4 * j + 2 * r;
            *reinterpret_cast<float2*>(dk + (size_t)key * HS + 8 * j + 2 * t) = make_float2(scale * dK[at], scale * dK[at + 1]);
            *reinterpret_cast<float2*>(dv + (size_t)key * HS + 8 * j + 2 * t) = make_float2(dV[at], dV[at + 1]);
        }
    }
}
