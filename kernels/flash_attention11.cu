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
#define OWN 128                          // keys a block owns
#define OTHER 32                         // queries of each tile it loops over
#define SLICE 16                         // queries per slice of S^T, P^T, dP^T, dS^T
#define SS (OTHER + 8)                   // floats per row of the dS tile in shared memory
#include "flash_tf32.cuh"

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
