// wgmma_tf32.cuh: Hopper's warpgroup matrix multiply-accumulate (wgmma.mma_async, sm_90a) on
// TF32 operands, for fused backward kernels 12-18 (flash_attention12.cu ..) and its check
// (wgmma_check.cu).
//
// A warpgroup is 4 consecutive warps (128 threads). One wgmma.mma_async.m64nNk8 computes
// D (64 x N, fp32) += A (64 x 8) B (8 x N): warp w of the group holds rows 16w .. 16w+15 of D,
// as mma.sync's m16n8 accumulator (thread g = lane/4, t = lane%4: d[4j + e] is row g, column
// 8j + 2t + e; d[4j + 2 + e] is row g + 8). A comes from shared memory through a descriptor, or
// from registers (a[0..3]: rows g, g+8 x columns t, t+4 of the warp's 16 rows, as mma.sync's
// m16n8k8 TF32 A fragment); B always from shared memory. Unlike mma.sync, B is read once for
// the 4 warps, and the instruction runs asynchronously: fence, issue, commit, wait.
//
// With TF32 operands both A and B must be K-major in shared memory: each row (of A's M rows or
// B's N columns) has its K elements contiguous. No swizzle: the tile is cut into core matrices
// of 8 rows x 4 floats (16 bytes per row, 128 bytes each, stored contiguously); for a tile of
// COLS columns (its K extent) element (r, c) is at float
//     (r / 8) * 8 COLS + (c / 4) * 32 + (r % 8) * 4 + c % 4
// so core matrices adjacent along K are 128 bytes apart (the descriptor's leading-dimension
// offset) and 8-row groups 32 COLS bytes apart (its stride offset). The k-th step of 8 columns
// starts 256 bytes (64 floats) further.
#pragma once
#include <cstdint>

// (Compiled for sm_90a only: attnlab.kernels.ARCH_SPECIFIC. No #error guard on the feature
// macro here: PyCUDA's cache key preprocesses the source without it.)

__device__ __forceinline__ int core_index(int r, int c, int cols) {
    return (r >> 3) * (cols * 8) + (c >> 2) * 32 + (r & 7) * 4 + (c & 3);
}

// Shared-memory matrix descriptor of a K-major, unswizzled tile of `cols` columns at p.
__device__ __forceinline__ uint64_t wg_desc(const float* p, int cols) {
    const uint32_t a = static_cast<uint32_t>(__cvta_generic_to_shared(p));
    return (uint64_t)((a & 0x3FFFF) >> 4) | ((uint64_t)(128 >> 4) << 16)
         | ((uint64_t)(((32 * cols) & 0x3FFFF) >> 4) << 32);
}

// The descriptor of the tile k steps of 8 columns (k x 256 bytes) further than desc's: only the
// address field (bits 0-13, bytes / 16) grows, by 16 k, and as every shared address is below 2^18
// it never carries out of that field. An add, where wg_desc(p + 64 k, cols) converts and masks.
__device__ __forceinline__ uint64_t wg_desc_step(uint64_t desc, int k) { return desc + 16 * k; }

__device__ __forceinline__ void wg_fence() { asm volatile("wgmma.fence.sync.aligned;" ::: "memory"); }
__device__ __forceinline__ void wg_commit() { asm volatile("wgmma.commit_group.sync.aligned;" ::: "memory"); }
template <int N>
__device__ __forceinline__ void wg_wait() { asm volatile("wgmma.wait_group.sync.aligned %0;" :: "n"(N) : "memory"); }
// Keeps the compiler from moving accesses to the accumulator d across the fence/wait (without
// it, ptxas injects warpgroup.arrive and serializes the wgmma, warning C7519).
template <int N>
__device__ __forceinline__ void wg_hold(float (&d)[N]) {
#pragma unroll
    for (int i = 0; i < N; ++i) asm volatile("" : "+f"(d[i])::"memory");
}
// Shared memory written by ordinary stores, before wgmma (the async proxy) reads it.
__device__ __forceinline__ void fence_async_shared() { asm volatile("fence.proxy.async.shared::cta;" ::: "memory"); }

#define WG_D8(d, i) "+f"(d[i]), "+f"(d[i + 1]), "+f"(d[i + 2]), "+f"(d[i + 3]), \
                    "+f"(d[i + 4]), "+f"(d[i + 5]), "+f"(d[i + 6]), "+f"(d[i + 7])
#define WG_D16(d) WG_D8(d, 0), WG_D8(d, 8)
#define WG_D32(d) WG_D8(d, 0), WG_D8(d, 8), WG_D8(d, 16), WG_D8(d, 24)

// D (64 x 64) = A B + (accumulate ? D : 0); A and B from shared memory.
__device__ __forceinline__ void wgmma64_ss(float (&d)[32], uint64_t da, uint64_t db, int accumulate) {
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %34, 0;\n"
                 "wgmma.mma_async.sync.aligned.m64n64k8.f32.tf32.tf32 "
                 "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31}, %32, %33, p, 1, 1;\n}"
                 : WG_D32(d) : "l"(da), "l"(db), "r"(accumulate));
}
// The same with A from registers (a: the thread's 4 TF32 values, as above).
__device__ __forceinline__ void wgmma64_rs(float (&d)[32], const uint32_t (&a)[4], uint64_t db, int accumulate) {
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %37, 0;\n"
                 "wgmma.mma_async.sync.aligned.m64n64k8.f32.tf32.tf32 "
                 "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31}, {%32, %33, %34, %35}, %36, p, 1, 1;\n}"
                 : WG_D32(d) : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(db), "r"(accumulate));
}
// D (64 x 64) = A B, A and B from shared memory, and the same with A from registers: D is only
// written. (With the accumulating forms above, a D not yet set is read, and the compiler keeps
// its registers live around the loop that holds them.)
#define WG_O8(d, i) "=f"(d[i]), "=f"(d[i + 1]), "=f"(d[i + 2]), "=f"(d[i + 3]), \
                    "=f"(d[i + 4]), "=f"(d[i + 5]), "=f"(d[i + 6]), "=f"(d[i + 7])
#define WG_O32(d) WG_O8(d, 0), WG_O8(d, 8), WG_O8(d, 16), WG_O8(d, 24)
__device__ __forceinline__ void wgmma64_ss_first(float (&d)[32], uint64_t da, uint64_t db) {
    asm volatile("wgmma.mma_async.sync.aligned.m64n64k8.f32.tf32.tf32 "
                 "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31}, %32, %33, 0, 1, 1;"
                 : WG_O32(d) : "l"(da), "l"(db));
}
__device__ __forceinline__ void wgmma64_rs_first(float (&d)[32], const uint32_t (&a)[4], uint64_t db) {
    asm volatile("wgmma.mma_async.sync.aligned.m64n64k8.f32.tf32.tf32 "
                 "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31}, {%32, %33, %34, %35}, %36, 0, 1, 1;"
                 : WG_O32(d) : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(db));
}
// D (64 x 32) = A B + (accumulate ? D : 0); A and B from shared memory.
__device__ __forceinline__ void wgmma32_ss(float (&d)[16], uint64_t da, uint64_t db, int accumulate) {
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %18, 0;\n"
                 "wgmma.mma_async.sync.aligned.m64n32k8.f32.tf32.tf32 "
                 "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15}, %16, %17, p, 1, 1;\n}"
                 : WG_D16(d) : "l"(da), "l"(db), "r"(accumulate));
}
