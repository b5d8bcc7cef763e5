// Exercise 4, reference solution: kernel 8 for any BLOCK_SIZE and T_PER_BLOCK.
//
// Both come from the checker as -DBLOCK_SIZE=... -DT_PER_BLOCK=...; the grid is
// (ceil_div(T, T_PER_BLOCK), B*NH). Block x does rows T-1-x*T_PER_BLOCK, ..., downwards
// (longest rows first). When T is not a multiple of T_PER_BLOCK the last block runs out of
// rows: t < 0. t is the same for every thread of the block, so `break` makes the whole
// block leave the loop together and no thread waits at a block.sync() that others skip.
#include <cooperative_groups.h>
#include <cooperative_groups/reduce.h>

#define NUM_WARPS (BLOCK_SIZE / 32)
namespace cg = cooperative_groups;

extern "C" __global__ void __launch_bounds__(BLOCK_SIZE)
softmax_autoregressive_backward_kernel8(float* __restrict__ dpreatt, const float* __restrict__ datt,
                                        const float* __restrict__ att, int B, int T, int C, int NH) {
    cg::thread_block block = cg::this_thread_block();
    cg::thread_block_tile<32> warp = cg::tiled_partition<32>(block);
    __shared__ float block_acc[NUM_WARPS];
    size_t bh = (size_t)blockIdx.y * T * T;
    float scale = 1.0f / sqrtf((float)(C / NH));
    int t0 = T - 1 - T_PER_BLOCK * (int)blockIdx.x;   // this block's first (longest) row

    for (int to = 0; to < T_PER_BLOCK; ++to) {
        int t = t0 - to;
        if (t < 0) {
            break;                                    // uniform over the block
        }
        const float* att_bth = att + bh + (size_t)t * T;
        const float* datt_bth = datt + bh + (size_t)t * T;
        float* dpreatt_bth = dpreatt + bh + (size_t)t * T;

        float local_sum = 0.f;
        for (int t2 = block.thread_rank(); t2 <= t; t2 += BLOCK_SIZE) {
            local_sum += att_bth[t2] * datt_bth[t2];
        }
        float warp_sum = cg::reduce(warp, local_sum, cg::plus<float>{});
        if (warp.thread_rank() == 0) {
            block_acc[warp.meta_group_rank()] = warp_sum;
        }
        block.sync();                                 // all partial sums are in block_acc
        float S = cg::reduce(warp, warp.thread_rank() < NUM_WARPS ? block_acc[warp.thread_rank()] : 0.f,
                             cg::plus<float>{});
        block.sync();                                 // all have read block_acc: the next row may write it

        for (int t3 = block.thread_rank(); t3 <= t; t3 += BLOCK_SIZE) {
            float acc = __ldcs(att_bth + t3) * (__ldcs(datt_bth + t3) - S);
            __stcs(dpreatt_bth + t3, scale * acc);
        }
    }
}
