// flash_attention29.cu: kernel 29, kernel 28 with a third warpgroup that computes dQ^T, once per
// tile for the block's 128 keys, so that dQ is added into dq_tiles half as often.
//
// WHAT CHANGED from kernel 28 (flash_attention28.cu), and why it should be faster. In kernel 28 each
// of the two warpgroups that take turns multiplies K^T of its 64 keys by its dS^T and adds the 64 x 64
// result into dq_tiles with float4 reductions: 32 KiB of adds a block and tile. Those adds cost the
// call 1.06x at T=1024 on the H200 (results/h200/experiments/k28_adds_h200.txt: kernel 28 without
// them), half of them 1.03x; plain stores of the same bytes cost as much, so the bytes cost. The two
// halves cannot be summed by either warpgroup: they run half a step apart, and the block has no
// shared memory left to hold one (226 of 227 KiB). Here warpgroup 2 holds K^T of all 128 keys in
// registers; for each tile it multiplies warpgroup 0's dS^T region as soon as it is written, then
// warpgroup 1's, into one accumulator, and adds it once. Warpgroups 0 and 1 keep kernel 28's turns
// without the dQ^T product, its adds, its accumulator and K^T (32 + 32 registers a thread). Named
// barriers pass the regions: 5 + w "warpgroup w's dS^T of this tile is written", 7 + w "warpgroup 2
// has read it" (the writer waits there before its next tile's dS^T). The tensor cores do the same
// products.
// The form. 384 threads under a cap of 168 registers at entry (__launch_bounds__(384, 1));
// setmaxnreg gives 184 to each thread that takes turns and 128 to warpgroup 2 (at 112 it spills). In
// this form ptxas no longer kept kernel 28's copy of the elementwise loop without the mask's tests, and
// the turns lost 1.03x to 1.11x by that alone (results/h100/experiments/k28_idlewg.txt,
// k28_unswitch.txt: kernel 28's own turns with an idle third warpgroup); so the loop is written here in
// two copies, masked (the block's first two tiles and T's edge) and not, chosen once a tile.
// Measured first as a draft on an H100 (results/h100/experiments/k28_unswitch.txt, "k29
// unswitched"): 1.05x faster than kernel 28 at T=1024 (0.1194 against 0.1256 ms), 1.05x at 2048,
// 1.06x at 16384 (range 1.02-1.11x); dinp within 2.98e-08 of kernel 28's (dq summed in another order).
// Predicted for this file on the H200: 1.03x to 1.06x faster than kernel 28 at T=1024 (about 0.107 to
// 0.110 ms against 0.1131), 1.02x to 1.07x at 16384. The basis: the H100's range at T=1024 (1.04x to
// 1.06x), reaching lower because the H200 gave half the adds a little less than the H100 did (1.03x
// against 1.04x); at 16384 no more than all the adds were worth there (1.06x, k28_adds_h200).
// On the H200, beside kernel 28 in one run (results/h200/fused_ladder_29.json, single calls): 0.108
// (0.108-0.109) against 0.113 (0.113-0.114) ms at T=1024, 1.05x, inside the prediction; 0.296 against
// 0.313 at 2048; 13.799 against 14.610 at 16384, 1.06x (298.8 TFLOP/s). In the one-run table with
// every method (results/h200/fused_ladder_vs_torch.json): 0.1078 ms at T=1024, under #23's 0.11.
//
// Launch geometry (attnlab/fused.py): kernel 28's grid; 384 threads for flash_backward, 256 for
// flash_backward_prep and flash_backward_dq (NUM_THREADS).
#include "flash_wgmma.cuh"
#include "copy_engine.cuh"

#define QUERY_TILE_FLOATS (3 * OTHER * HS)   // one query tile in three layouts: dO, Q^T, dO^T
#define BLOCK_THREADS 384     // flash_backward: warpgroups 0 and 1 take turns, warpgroup 2 computes dQ^T
#define TURN_REGS 184         // registers a thread of warpgroups 0 and 1 (setmaxnreg); 168 at entry
#define DQ_REGS 128           // of warpgroup 2: 2 x 128 x 184 + 128 x 128 = 63,488 of 65,536 (at 112 it spills)

// x rounded to TF32, to nearest with ties to even (kernel 17).
__device__ __forceinline__ float round_tf32_rn(float x) {
    uint32_t r;
    asm("cvt.rn.tf32.f32 %0, %1;" : "=r"(r) : "f"(x));
    return __uint_as_float(r);
}
// A bool as a type, so that a generic lambda can be compiled once for each value (if constexpr).
template <bool B> struct Flag { static constexpr bool value = B; };
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

// Store rows (rounded to TF32) into the transpose st only (64 x ROWS, K = the rows at kpos(row)):
// store_rows without the K-major tile, for Q, which flash_backward copies from q itself.
template <int ROWS>
__device__ __forceinline__ void store_transposed(const Rows<ROWS>& r, float* __restrict__ st) {
#pragma unroll
    for (int i = 0; i < Rows<ROWS>::PER; ++i) {
        const int f = threadIdx.x + NUM_THREADS * i, row = rows_row(f), c = 4 * rows_c4(f), k = kpos(row);
        st[core_index(c, k, ROWS)] = round_tf32(r.x[i].x);
        st[core_index(c + 1, k, ROWS)] = round_tf32(r.x[i].y);
        st[core_index(c + 2, k, ROWS)] = round_tf32(r.x[i].z);
        st[core_index(c + 3, k, ROWS)] = round_tf32(r.x[i].w);
    }
}

// Query tile i of one (b, h): dO rows 64 i .. 64 i + 63 K-major, and Q's and dO's transposes, rounded
// (QUERY_TILE_FLOATS), and D = rowsum(dO o O) of those rows (fp32, before rounding); and its tile of
// dq_tiles zeroed.
extern "C" __global__ void __launch_bounds__(NUM_THREADS)
flash_backward_prep(float* __restrict__ tiles, float* __restrict__ D, const float* __restrict__ q,
                    const float* __restrict__ dout, const float* __restrict__ o, int T, int NH,
                    float* __restrict__ dq_tiles) {
    asm volatile("griddepcontrol.launch_dependents;" ::: "memory");   // flash_backward may start
    __shared__ __align__(16) float st[2][OTHER * HS];
    {   // this query tile of dq_tiles (64 x 64 floats) zeroed: flash_backward adds into it
        float4* z = reinterpret_cast<float4*>(dq_tiles + ((size_t)blockIdx.x * gridDim.y + blockIdx.y) * OTHER * HS);
#pragma unroll
        for (int i = 0; i < OTHER * HS / 4 / NUM_THREADS; ++i) z[threadIdx.x + NUM_THREADS * i] = make_float4(0.f, 0.f, 0.f, 0.f);
    }
    const int bh = blockIdx.x, b = bh / NH, h = bh % NH, q0 = blockIdx.y * OTHER;
    const float* dO = dout + (size_t)b * T * NH * HS + h * HS;   // row t at t * NH * HS
    float* tile = tiles + ((size_t)bh * gridDim.y + blockIdx.y) * QUERY_TILE_FLOATS;
    Rows<OTHER> r;
    load_rows(r, q + (size_t)bh * T * HS, q0, T, HS);
    store_transposed<OTHER>(r, st[0]);
    load_rows(r, dO, q0, T, NH * HS);
    store_rows<OTHER, true>(r, tile, st[1]);                     // K-major straight to memory
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
        *reinterpret_cast<float4*>(tile + OTHER * HS + f) = *reinterpret_cast<const float4*>(&st[0][0] + f);
    }
}

// A tensor map (cuTensorMapEncodeTiled's 128 bytes), passed as a __grid_constant__ kernel parameter.
struct __align__(64) TensorMap { unsigned char opaque[128]; };
// K and V rows k0 .. k0 + 127 of head bhi by tensor map: per warpgroup w and half h of the dims one box
// of 64 keys x 32 dims (8 KiB) at 4096 w + 2048 h floats, its 128-byte rows' 16-byte chunks swizzled;
// rows past T read zeros. bar's phase completes when all eight have landed.
__device__ __forceinline__ void copy_kv(float* sK, float* sV, const TensorMap* kmap, const TensorMap* vmap, int bhi,
                                        int k0, uint64_t* bar) {
    asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" :: "r"(smem_addr(bar)), "n"(2 * OWN * HS * 4) : "memory");
#pragma unroll
    for (int w = 0; w < 2; ++w)
#pragma unroll
        for (int h = 0; h < 2; ++h) {
            asm volatile("cp.async.bulk.tensor.3d.shared::cluster.global.tile.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3, %4}], [%5];"
                         :: "r"(smem_addr(sK + 4096 * w + 2048 * h)), "l"(kmap), "r"(32 * h), "r"(k0 + 64 * w), "r"(bhi),
                            "r"(smem_addr(bar)) : "memory");
            asm volatile("cp.async.bulk.tensor.3d.shared::cluster.global.tile.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3, %4}], [%5];"
                         :: "r"(smem_addr(sV + 4096 * w + 2048 * h)), "l"(vmap), "r"(32 * h), "r"(k0 + 64 * w), "r"(bhi),
                            "r"(smem_addr(bar)) : "memory");
        }
}
// Float (row, d) of such a 128 x 64 tile: warpgroup row / 64, half d / 32, 16-byte chunk swizzled.
__device__ __forceinline__ int sw128_index(int row, int d) {
    return 4096 * (row / 64) + 2048 * (d / 32) + 32 * (row % 64) + 4 * (((d % 32) / 4) ^ (row % 8)) + d % 4;
}
// The descriptor of a warpgroup's 64 x 64 tile of it at p (1,024-byte aligned), 8 dims per step kk:
// K-major with a 128-byte swizzle (layout type 1, bits 62-63), 8-row groups 1,024 bytes apart; within
// a row a step is 32 bytes, dims 32-63 are the second box, 8 KiB further.
__device__ __forceinline__ uint64_t wg_desc_sw128(const float* p, int kk) {
    const uint32_t a = smem_addr(p) + 8192 * (kk >> 2) + 32 * (kk & 3);
    return (uint64_t)((a & 0x3FFFF) >> 4) | ((uint64_t)1 << 16) | ((uint64_t)(1024 >> 4) << 32) | ((uint64_t)1 << 62);
}

// Q and dO rows 64 i .. 64 i + 63 of head bhi into one stage (32 KiB; bar's phase completes when all of
// it has landed): Q from q by map, two boxes of 64 rows x 32 dims laid out as copy_kv's; dO by a bulk
// copy of the prep's K-major layout (tile: the query tile's first 16 KiB).
__device__ __forceinline__ void copy_qdo(float* s, const float* tile, const TensorMap* qmap, int bhi, int i, uint64_t* bar) {
    asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" :: "r"(smem_addr(bar)), "n"(2 * OTHER * HS * 4) : "memory");
#pragma unroll
    for (int h = 0; h < 2; ++h)
        asm volatile("cp.async.bulk.tensor.3d.shared::cluster.global.tile.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3, %4}], [%5];"
                     :: "r"(smem_addr(s + h * OTHER * 32)), "l"(qmap), "r"(32 * h), "r"(OTHER * i), "r"(bhi), "r"(smem_addr(bar))
                     : "memory");
    asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];"
                 :: "r"(smem_addr(s + OTHER * HS)), "l"(tile), "n"(OTHER * HS * 4), "r"(smem_addr(bar)) : "memory");
}

// dK (times scale) and dV of a warpgroup's 64 keys (from key kw on) into rows ld floats apart, through
// rk and rv (64 x 64 floats each, of this warpgroup only, free): thread (krow, t) holds, as in
// store_dkdv, element 4j + 2r + e of key krow + 8r, dim 8j + 2t + e. In shared memory key row sits at
// 64 row floats with its 16-byte chunk c at chunk c ^ (row % 8); then 16 threads write a row of 256 bytes.
__device__ __forceinline__ void store_dkdv_rows(float* rk, float* rv, float* __restrict__ dk, float* __restrict__ dv, int ld,
                                                float (&dK)[32], float (&dV)[32], int kw, int krow, int T, float scale,
                                                int t, int wt, int wg) {
#pragma unroll
    for (int r = 0; r < 2; ++r)
#pragma unroll
        for (int j = 0; j < 8; ++j) {
            const int row = krow + 8 * r, at = 4 * j + 2 * r;
            const int off = row * HS + 4 * ((2 * j + t / 2) ^ (row % 8)) + 2 * (t % 2);
            *reinterpret_cast<float2*>(rk + off) = make_float2(scale * dK[at], scale * dK[at + 1]);
            *reinterpret_cast<float2*>(rv + off) = make_float2(dV[at], dV[at + 1]);
        }
    bar_sync(3 + wg, 128);             // the warpgroup's rows are in shared memory
#pragma unroll
    for (int m = 0; m < 64 * HS / 4 / 128; ++m) {
        const int n = wt + 128 * m, row = n / 16, c = n % 16, off = row * HS + 4 * (c ^ (row % 8));
        if (kw + row < T) {
            *reinterpret_cast<float4*>(dk + (size_t)(kw + row) * ld + 4 * c) = *reinterpret_cast<const float4*>(rk + off);
            *reinterpret_cast<float4*>(dv + (size_t)(kw + row) * ld + 4 * c) = *reinterpret_cast<const float4*>(rv + off);
        }
    }
}

// One block: key tile J (128 keys, k0 = 128 J; warpgroup w < 2 owns keys k0 + 64 w ..; warpgroup 2 the
// dQ^T of all 128) of one (b, h) over query tiles i of 64 (q0 = 64 i >= k0). blockIdx.z * G + blockIdx.x
// = b*NH + h (G = gridDim.x heads at a time), blockIdx.y = J (the longest first).
extern "C" __global__ void __launch_bounds__(BLOCK_THREADS, 1)
flash_backward(float* __restrict__ dinp, float* __restrict__ dq_tiles, const float* __restrict__ tiles,
               const float* __restrict__ lse, const float* __restrict__ D, int T, int NH, float scale,
               const __grid_constant__ TensorMap kmap, const __grid_constant__ TensorMap vmap,
               const __grid_constant__ TensorMap qmap) {
    extern __shared__ __align__(1024) float4 smem4[];   // 1,024 bytes: the swizzle's 8-row groups
    float* sK = reinterpret_cast<float*>(smem4);   // OWN x HS, as copy_kv lays it out
    float* sV = sK + OWN * HS;                      // OWN x HS, the same
    float* sQdO = sV + OWN * HS;                    // 2 stages of Q, dO
    float* sT = sQdO + 4 * OTHER * HS;              // 2 stages of Q^T, dO^T (HS x OTHER each)
    float* sdS = sT + 4 * OTHER * HS;               // per warpgroup w < 2: OTHER x 64, dS^T (B of dQ^T)
    float* sLD = sdS + OTHER * OWN;                 // per warpgroup, 2 stages: lse * log2(e), D
    uint64_t* bars = reinterpret_cast<uint64_t*>(sLD + 2 * 2 * 2 * OTHER);
    // bars: 0, 1 Q/dO stage landed; 2, 3 Q^T/dO^T stage landed; 4, 5 Q/dO stage read by both
    // warpgroups that take turns; 6, 7 Q^T/dO^T stage read by both; 8 K and V landed. Named barriers:
    // 1, 2 the turns; 3, 4 within warpgroup 0, 1; 5, 6 its dS^T region written; 7, 8 that region read
    const int n_other = (T + OTHER - 1) / OTHER;
    const int bhi = blockIdx.z * gridDim.x + blockIdx.x;   // b*NH + h
    const size_t bh = (size_t)bhi * T;
    lse += bh; D += bh;
    tiles += (size_t)bhi * n_other * QUERY_TILE_FLOATS;
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

    if (threadIdx.x == 0) {   // K and V by the copy engine: nothing before this kernel writes them
        mbar_init(bars + 8, 1);
        asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
        copy_kv(sK, sV, &kmap, &vmap, bhi, k0, bars + 8);
    }
    asm volatile("griddepcontrol.launch_dependents;" ::: "memory");   // flash_backward_dq may start
    asm volatile("griddepcontrol.wait;" ::: "memory");                // the prep's tiles and D are in memory
    if (threadIdx.x == 0) {
        for (int b = 0; b < 4; ++b) mbar_init(bars + b, 1);
        for (int b = 4; b < 8; ++b) mbar_init(bars + b, 2);
        asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
        copy_qdo(sQdO, tiles + (size_t)i0 * QUERY_TILE_FLOATS, &qmap, bhi, i0, bars);
        if (i0 + 1 < n_other) copy_qdo(sQdO + 2 * OTHER * HS, tiles + (size_t)(i0 + 1) * QUERY_TILE_FLOATS, &qmap, bhi, i0 + 1, bars + 1);
        copy_half_bulk(sT, tiles + (size_t)i0 * QUERY_TILE_FLOATS + OTHER * HS, bars + 2);
        if (i0 + 1 < n_other) copy_half_bulk(sT + 2 * OTHER * HS, tiles + (size_t)(i0 + 1) * QUERY_TILE_FLOATS + OTHER * HS, bars + 3);
    }
    if (wg < 2 && wt < OTHER) {
        load_ld(sLDw, 0, lse, D, i0 * OTHER, wt, T);
        cp_async_wait<0>();
        sLDw[wt] *= LOG2E;
    }
    fence_async_shared();
    __syncthreads();
    mbar_wait(bars + 8, 0);            // K and V landed

    if (wg == 2) {   // the dQ^T warpgroup: K^T of all 128 keys in registers, dS^T of both others read
        asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;" :: "n"(DQ_REGS));
        uint32_t kt[64];   // A of dQ^T: K^T (rounded here), rows (dims) 16 warp + g (+8), keys 64 h + 8kk + t (+4)
#pragma unroll
        for (int h = 0; h < 2; ++h)
#pragma unroll
            for (int kk = 0; kk < 8; ++kk)
#pragma unroll
                for (int i = 0; i < 4; ++i)
                    kt[32 * h + 4 * kk + i] = __float_as_uint(round_tf32_rn(sK[sw128_index(64 * h + 8 * kk + t + 4 * (i >> 1), 16 * warp + g + 8 * (i & 1))]));
        float dQ[32];                               // this tile's dQ^T (64 dims x 64 queries), all 128 keys
        bar_arrive(7, 256);                         // both dS^T regions free for the first tile
        bar_arrive(8, 256);
        for (int j = i0; j < n_other; ++j) {
            bar_sync(5, 256);                       // warpgroup 0's dS^T of tile j is in its region
            wg_fence();
#pragma unroll
            for (int kk = 0; kk < 8; ++kk) {
                const uint32_t a[4] = {kt[4 * kk], kt[4 * kk + 1], kt[4 * kk + 2], kt[4 * kk + 3]};
                wgmma64_rs(dQ, a, wg_desc_step(wg_desc(sdS, 64), kk), kk > 0);
            }
            wg_commit();
            wg_wait<0>();
            if (j + 1 < n_other) bar_arrive(7, 256);   // warpgroup 0's region may take tile j + 1
            bar_sync(6, 256);                       // warpgroup 1's dS^T of tile j is in its region
            wg_fence();
#pragma unroll
            for (int kk = 0; kk < 8; ++kk) {
                const uint32_t a[4] = {kt[32 + 4 * kk], kt[32 + 4 * kk + 1], kt[32 + 4 * kk + 2], kt[32 + 4 * kk + 3]};
                wgmma64_rs(dQ, a, wg_desc_step(wg_desc(sdS + OTHER * 64, 64), kk), 1);
            }
            wg_commit();
            wg_wait<0>();
            wg_hold(dQ);
            if (j + 1 < n_other) bar_arrive(8, 256);   // and warpgroup 1's
            float4* dq = reinterpret_cast<float4*>(dq_tiles + (size_t)j * DQ_TILE_FLOATS) + wt;
#pragma unroll
            for (int jj = 0; jj < 8; ++jj)
                atomicAdd(dq + 128 * jj, make_float4(scale * dQ[4 * jj], scale * dQ[4 * jj + 1], scale * dQ[4 * jj + 2], scale * dQ[4 * jj + 3]));
        }
    } else {   // warpgroups 0 and 1: S^T, dP^T, dV, dK of their 64 keys, in turns
        asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;" :: "n"(TURN_REGS));
        float dK[32], dV[32], s[32], p[32];
#pragma unroll
        for (int n = 0; n < 32; ++n) dK[n] = dV[n] = 0.f;
        uint32_t ph = 0;                            // bit b: the parity of mbarrier b's next phase

        // dV, dK of tile j (A: P^T, dS^T in s, p), issued as two commit groups and not waited for:
        // issue_s waits for each before it overwrites s and p
        auto issue_g = [&](int j) {
            const int st = (j - i0) & 1;
            const float* sQt = sT + 2 * st * OTHER * HS;
            const float* sdOt = sQt + OTHER * HS;
            wg_hold(dV);
            wg_hold(dK);
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
                    copy_half_bulk(sT + 2 * st * OTHER * HS, tiles + (size_t)(j + 2) * QUERY_TILE_FLOATS + OTHER * HS, bars + 2 + st);
            }
        };
        // S^T, dP^T of tile j, issued, each once the product that reads its registers is done
        auto issue_s = [&](int j) {
            const int st = (j - i0) & 1;
            const float* sQ = sQdO + 2 * st * OTHER * HS;
            mbar_wait(bars + st, (ph >> st) & 1);
            ph ^= 1u << st;
            wg_wait<1>();                  // dV done (dK may run): s is free
            wg_hold(dV);
            wg_fence();
#pragma unroll
            for (int kk = 0; kk < 8; ++kk) wgmma64_ss(s, wg_desc_sw128(sKw, kk), wg_desc_sw128(sQ, kk), kk > 0);
            wg_commit();
            wg_wait<1>();                  // dK done (S^T may run): p is free
            wg_hold(dK);
            wg_fence();
#pragma unroll
            for (int kk = 0; kk < 8; ++kk) wgmma64_ss(p, wg_desc_sw128(sVw, kk), wg_desc_step(wg_desc(sQ + OTHER * HS, HS), kk), kk > 0);
            wg_commit();
        };
        // after tile j's S^T, dP^T were issued: the next lse and D; wait; release (and refill) the
        // stage; P^T and dS^T; dS^T into this warpgroup's region, for the dQ^T warpgroup
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
                if (j + 2 < n_other) copy_qdo(sQdO + 2 * st * OTHER * HS, tiles + (size_t)(j + 2) * QUERY_TILE_FLOATS, &qmap, bhi, j + 2, bars + st);
            }
            const float* sLse = sLDw + 128 * st;
            const float* sD = sLse + 64;
            const bool edge = q0 < k0 + OWN || q0 + OTHER > T;
            auto elementwise = [&](auto m) {   // M: mask the tile (only edge tiles need it)
                constexpr bool M = decltype(m)::value;
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
                            if (M && (key > q0 + col || q0 + col >= T)) x = 0.f;
                            p[at] = round_tf32_rn(x * (p[at] - d));
                            s[at] = round_tf32_rn(x);
                        }
                    }
            };
            if (edge) elementwise(Flag<true>{}); else elementwise(Flag<false>{});
            bar_sync(7 + wg, 256);         // the dQ^T warpgroup has read the region's last tile
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
            bar_arrive(5 + wg, 256);       // tile j's dS^T is in the region
            if (wt < OTHER && j + 1 < n_other) {
                cp_async_wait<0>();
                sLDw[128 * (st ^ 1) + wt] *= LOG2E;
            }
            bar_sync(3 + wg, 128);
        };

        // turns: warpgroup w issues after bar.sync 1 + w; the other arrives there when it is done issuing
        if (wg == 1) bar_arrive(1, 256);           // warpgroup 0 first
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
            after_s(j);
        }
        bar_sync(1 + wg, 256);
        issue_g(n_other - 1);
        wg_wait<0>();                      // no S^T follows: wait here
        wg_hold(dV);
        wg_hold(dK);
        if (wg == 0) bar_arrive(2, 256);
        const int ld = 3 * NH * HS;
        float* dk = dinp + (size_t)(bhi / NH) * T * ld + (NH + bhi % NH) * HS;
        store_dkdv_rows(sK + 64 * wg * HS, sV + 64 * wg * HS, dk, dk + NH * HS, ld, dK, dV, k0 + 64 * wg, krow, T, scale, t, wt, wg);
    }
}

// dq (dinp's first C columns) from dq_tiles, which hold dQ^T: 256 threads per (b, h) and query
// tile. Float4 n of a tile is float4 j = n / 128 of warpgroup thread f = n % 128 (after_g): dims
// 16 warp + g and + 8, queries 8j + 2t and + 1 (warp, g, t of f).
extern "C" __global__ void __launch_bounds__(NUM_THREADS)
flash_backward_dq(float* __restrict__ dinp, const float* __restrict__ dq_tiles, int T, int NH) {
    asm volatile("griddepcontrol.wait;" ::: "memory");                // flash_backward's adds are in memory
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
