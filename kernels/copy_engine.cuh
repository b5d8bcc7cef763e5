// copy_engine.cuh: what fused backward kernels 14-19 (flash_attention14.cu .. 19.cu) share to drive
// Hopper's copy engine (sm_90): shared-memory addresses, mbarriers, bulk copies that complete on an
// mbarrier, and (kernels 15-19) the dQ of a query tile staged in shared memory and added into global
// memory by a bulk reduction. It includes flash_wgmma.cuh and uses its OTHER, HS and NUM_THREADS:
// a kernel that changes OWN or NUM_THREADS defines them before the first include (kernel 18).
#pragma once
#include "flash_wgmma.cuh"

__device__ __forceinline__ uint32_t smem_addr(const void* p) {
    return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}
// An mbarrier whose phase completes after `count` arrivals (and the bytes they said to expect).
__device__ __forceinline__ void mbar_init(uint64_t* bar, int count) {
    asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" :: "r"(smem_addr(bar)), "r"(count) : "memory");
}
// Wait until bar completes the phase whose parity is `phase`.
__device__ __forceinline__ void mbar_wait(uint64_t* bar, uint32_t phase) {
    asm volatile("{\n.reg .pred done;\nwait:\n"
                 "mbarrier.try_wait.parity.shared::cta.b64 done, [%0], %1;\n"
                 "@!done bra wait;\n}" :: "r"(smem_addr(bar)), "r"(phase) : "memory");
}
// Arrive at bar (one of the arrivals its phase counts), without waiting.
__device__ __forceinline__ void mbar_arrive(uint64_t* bar) {
    asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];" :: "r"(smem_addr(bar)) : "memory");
}
// Copy BYTES from global g to shared s; bar's phase completes when they have landed.
template <int BYTES>
__device__ __forceinline__ void copy_bulk(float* s, const float* g, uint64_t* bar) {
    asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;"
                 :: "r"(smem_addr(bar)), "n"(BYTES) : "memory");
    asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];"
                 :: "r"(smem_addr(s)), "l"(g), "n"(BYTES), "r"(smem_addr(bar)) : "memory");
}
// Half a query tile of kernels 14-17: Q and dO, or Q^T and dO^T.
#define HALF_TILE_BYTES (2 * OTHER * HS * 4)
__device__ __forceinline__ void copy_half_bulk(float* s, const float* g, uint64_t* bar) {
    copy_bulk<HALF_TILE_BYTES>(s, g, bar);
}

// The dQ of one query tile (64 x 64 floats, DQ_TILE_FLOATS) as the threads hold it, times scale:
// thread f's float4 j (at 4 (f + NUM_THREADS j)) is its dQ[4j .. 4j+3] (wgmma's accumulator
// layout; each kernel's flash_backward_dq puts the elements back in rows). A warp stores 512
// contiguous bytes, with no bank conflicts.
#define DQ_TILE_FLOATS (OTHER * HS)
template <int N>
__device__ __forceinline__ void store_dq(float* sdQ, const float (&dQ)[N], float scale) {
#pragma unroll
    for (int j = 0; j < N / 4; ++j)
        *reinterpret_cast<float4*>(sdQ + 4 * (threadIdx.x + NUM_THREADS * j)) =
            make_float4(scale * dQ[4 * j], scale * dQ[4 * j + 1], scale * dQ[4 * j + 2], scale * dQ[4 * j + 3]);
}
// Add the tile's dQ (16 KiB in shared memory) into dq_tile (global) by the copy engine.
__device__ __forceinline__ void reduce_dq(float* dq_tile, const float* sdQ) {
    asm volatile("cp.reduce.async.bulk.global.shared::cta.bulk_group.add.f32 [%0], [%1], %2;"
                 :: "l"(dq_tile), "r"(smem_addr(sdQ)), "n"(DQ_TILE_FLOATS * 4) : "memory");
    asm volatile("cp.async.bulk.commit_group;" ::: "memory");
}
