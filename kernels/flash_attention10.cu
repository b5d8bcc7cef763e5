// flash_attention10.cu: kernel 10, the fused backward with 32 rows per warp (register blocking),
// on TF32 tensor cores, or fp32-accurate with three TF32 products (3xTF32).
//
// WHAT CHANGED from kernel 9 (flash_attention.cu, whose header explains the algorithm, the
// register layouts and the shared-memory padding; they are unchanged here): every warp now owns
// 32 rows of its block's tile instead of 16, so a block of 4 warps owns 128 rows (queries in a
// dQ block, keys in a dK/dV block). The tiles it loops over stay 64 rows.
//
// WHY IT IS FASTER. In kernel 9 each warp reads the whole "other" tile from shared memory for
// its 16 rows: every B fragment (8 bytes per thread) feeds one mma. Here it feeds two, one per
// 16-row half of the warp's rows, so for the same multiply-adds:
//   - the products over the other tile's rows (dQ += dS K, dV += P^T dO, dK += dS^T Q) read
//     half the shared-memory bytes;
//   - S = Q K^T and dP = dO V^T in dQ blocks (32 x 32 per warp instead of 16 x 32) read
//     (32 + 32) floats per head dim instead of 2 x (16 + 32);
//   - each global tile load and each pair of barriers serves twice the rows;
//   - a warp has two independent accumulator chains behind each B fragment (more instruction-
//     level parallelism for the mma pipe, whose latency kernel 9's 3 warps per scheduler
//     could not hide: ncu's top stall there was "wait", the fixed latency of dependent mma).
// The cost: the accumulators double (dQ: 64 registers; dK and dV: 64 each), so 2 blocks of 128
// threads fit per SM instead of 3, and dK/dV blocks take their query tile 16 queries at a time
// (P^T and dS^T: 16 registers each) to stay under 255 registers: the TF32 build does not
// spill; the 3xTF32 build, holding split operands, spills a few values, reloaded once per tile.
//
// CAUSAL SKIP at warp granularity: a warp skips a slice of the other tile whose keys all lie
// after all of its queries (every P there is 0); the diagonal 128 x 64 tiles are otherwise
// masked element by element, as in kernel 9.
//
// TWO PRECISIONS, -DTF32=0/1:
//   TF32=1  one mma per product, inputs rounded to TF32 (as kernel 9's TF32 variant).
//   TF32=0  fp32-accurate on tensor cores: each operand x is split into big = tf32(x) and
//           small = tf32(x - big) (together x to about 2^-22), and each product is
//           a_small*b_big + a_big*b_small + a_big*b_big, three mma with fp32 accumulators
//           (the a_small*b_small term, ~2^-22 relative, is dropped): CUTLASS's 3xTF32. Tiles
//           stay fp32 in shared memory and are split as they are read into registers, so the
//           shared-memory traffic is the TF32 variant's; the mma count triples.
//
// Launch geometry (attnlab/fused.py): grid (B*NH, 2*ceil(T/128)), 128 threads, dynamic shared
// memory 2 own tiles of 128 rows + 2 other tiles of 64 rows (72 floats per row) + 256 floats
// (lse and D of 128 rows): 111,616 bytes, 2 blocks per SM on sm_90. D comes from kernel 9's flash_backward_preprocess.
// Layouts as kernel 9: q, k, v, dO, dq, dk, dv are (B*NH, T, 64); lse and D are (B*NH*T).
#define OWN 128                          // rows of the block's own tile
#define OTHER 64                         // rows of each tile it loops over
#include "flash_tf32.cuh"

// ---------------------------------------------------------------------------------------------
// dK/dV blocks: key tile J (128 keys, k0 = 128 J) over query tiles i of 64 (q0 = 64 i >= k0 - 63),
// each in 4 slices of 16 queries. Shared memory: sK, sV (own, 128 rows), sQ, sdO (64 rows),
// lse*log2(e) and D of the query tile.
__device__ __forceinline__ void backward_dkdv(float* __restrict__ dk, float* __restrict__ dv,
                                              const float* __restrict__ q, const float* __restrict__ k,
                                              const float* __restrict__ v, const float* __restrict__ dO,
                                              const float* __restrict__ lse, const float* __restrict__ D,
                                              int T, float scale, int J, float* smem) {
    float* sK = smem;
    float* sV = sK + OWN * TS;
    float* sQ = sV + OWN * TS;
    float* sdO = sQ + OTHER * TS;
    float* sLse = sdO + OTHER * TS;
    float* sD = sLse + OTHER;
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
    const int k0 = J * OWN, wrow = warp * WARP_ROWS;
    const float c = scale * LOG2E;

    load_tile<OWN>(sK, k, k0, T);
    load_tile<OWN>(sV, v, k0, T);
    Acc dK, dV;
    fill(dK, 0.f);
    fill(dV, 0.f);
    const int n_other = (T + OTHER - 1) / OTHER;
    for (int i = k0 / OTHER; i < n_other; ++i) {
        const int q0 = i * OTHER;
        __syncthreads();   // everyone is done with the previous sQ, sdO, sLse, sD
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
        for (int h = 0; h < OTHER; h += 16) {
            if (q0 + h + 15 < k0 + wrow) continue;   // every key of the warp after every query
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
            Frag<2> ds;
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
    }
    store_rows(dk, dK, k0 + wrow, T, scale, g, t);
    store_rows(dv, dV, k0 + wrow, T, 1.f, g, t);
}

// dQ blocks: query tile I (128 queries, q0 = 128 I) over key tiles j of 64 (k0 = 64 j < q0 + 128),
// each in 2 halves of 32 keys. Shared memory: sQ, sdO (own, 128 rows), sK, sV (64 rows), and
// lse*log2(e) and D of the own rows.
__device__ __forceinline__ void backward_dq(float* __restrict__ dq, const float* __restrict__ q,
                                            const float* __restrict__ k, const float* __restrict__ v,
                                            const float* __restrict__ dO, const float* __restrict__ lse,
                                            const float* __restrict__ D, int T, float scale, int I,
                                            float* smem) {
    float* sQ = smem;
    float* sdO = sQ + OWN * TS;
    float* sK = sdO + OWN * TS;
    float* sV = sK + OTHER * TS;
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
    const int q0 = I * OWN, wrow = warp * WARP_ROWS;
    const float c = scale * LOG2E;

    // lse*log2(e) and D of the own rows, in shared memory (in registers they made the fp32
    // variant spill)
    float* sLse = sV + OTHER * TS;
    float* sD = sLse + OWN;
    for (int x = threadIdx.x; x < OWN; x += NUM_THREADS) {
        const int row = q0 + x;
        sLse[x] = row < T ? lse[row] * LOG2E : 0.f;   // rows >= T: finite, not stored
        sD[x] = row < T ? D[row] : 0.f;
    }
    load_tile<OWN>(sQ, q, q0, T);
    load_tile<OWN>(sdO, dO, q0, T);
    Acc dQ;
    fill(dQ, 0.f);
    const int j_end = min((q0 + OWN) / OTHER, (T + OTHER - 1) / OTHER);
    for (int j = 0; j < j_end; ++j) {
        const int k0 = j * OTHER;
        __syncthreads();   // everyone is done with the previous sK, sV
        load_tile<OTHER>(sK, k, k0, T);
        load_tile<OTHER>(sV, v, k0, T);
        __syncthreads();   // the key tile is complete (and, the first time, sQ and sdO)
        const bool diagonal = k0 + OTHER > q0;   // some key after some query of the tile
#pragma unroll 1
        for (int h = 0; h < OTHER; h += 32) {
            if (k0 + h > q0 + wrow + WARP_ROWS - 1) continue;   // every key after every query
            Frag<4> p;
            product_abt(p, sQ, wrow, sK, h, g, t);    // S = Q K^T: warp's queries x keys k0+h+0..31
#pragma unroll
            for (int jj = 0; jj < 4; ++jj)
#pragma unroll
                for (int m = 0; m < MB; ++m)
#pragma unroll
                    for (int r = 0; r < 2; ++r)
#pragma unroll
                        for (int e = 0; e < 2; ++e) {
                            float x = exp2f(fmaf(c, p.v[m][jj][r][e], -sLse[wrow + row_of(g, m, r)]));   // P
                            // keys >= T occur only in the diagonal tiles, after every query < T
                            if (diagonal && k0 + h + score_col(jj, e, t) > q0 + wrow + row_of(g, m, r)) x = 0.f;
                            p.v[m][jj][r][e] = x;
                        }
            Frag<4> ds;
            product_abt(ds, sdO, wrow, sV, h, g, t);   // dP = dO V^T
#pragma unroll
            for (int jj = 0; jj < 4; ++jj)
#pragma unroll
                for (int m = 0; m < MB; ++m)
#pragma unroll
                    for (int r = 0; r < 2; ++r)
#pragma unroll
                        for (int e = 0; e < 2; ++e)
                            ds.v[m][jj][r][e] = p.v[m][jj][r][e] * (ds.v[m][jj][r][e] - sD[wrow + row_of(g, m, r)]);   // dS
            product_pb(dQ, ds, sK, h, g, t);           // dQ += dS K   (scale at the end)
        }
    }
    store_rows(dq, dQ, q0 + wrow, T, scale, g, t);
}

// One launch for both kinds of blocks, as kernel 9: blockIdx.y = 2u: dK/dV of key tile u,
// 2u+1: dQ of query tile n_own-1-u, so the longest start first.
extern "C" __global__ void __launch_bounds__(NUM_THREADS, MIN_BLOCKS)
flash_backward(float* __restrict__ dq, float* __restrict__ dk, float* __restrict__ dv,
               const float* __restrict__ q, const float* __restrict__ k, const float* __restrict__ v,
               const float* __restrict__ dO, const float* __restrict__ lse, const float* __restrict__ D,
               int T, float scale) {
    extern __shared__ float4 smem4[];
    float* smem = reinterpret_cast<float*>(smem4);
    const size_t bh = (size_t)blockIdx.x * T;
    const size_t off = bh * HS;
    const int n_own = (T + OWN - 1) / OWN;
    const int u = blockIdx.y / 2;
    if (blockIdx.y % 2 == 0)
        backward_dkdv(dk + off, dv + off, q + off, k + off, v + off, dO + off, lse + bh, D + bh,
                      T, scale, u, smem);
    else
        backward_dq(dq + off, q + off, k + off, v + off, dO + off, lse + bh, D + bh, T, scale,
                    n_own - 1 - u, smem);
}
