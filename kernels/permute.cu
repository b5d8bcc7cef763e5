// permute.cu: the layout changes around the attention matmuls, forward and backward.
//
//   permute            qkv (B, N, 3, NH, d)  ->  q, k, v, each (B, NH, N, d)
//   unpermute          y   (B, NH, N, d)     ->  out (B, N, NH, d), i.e. (B, N, C)
//   and their backward kernels, which move the gradients the other way.
//
// Launch geometry (all four): 1D, one thread per element of a (B, NH, N, d) tensor,
// grid = ceil_div(B*NH*N*d, block_size), any block_size; threads past the end do nothing.
// Indices are int: enough while the packed qkv buffer holds fewer than 2^31 floats.
//
// The backward kernels write with `=`, not `+=` as llm.c does: in this project every
// gradient buffer has exactly one producer, so each element is simply overwritten. The
// backward pass is then idempotent (calling it twice gives the same result) and needs no
// memset of the gradient buffers before each call.
#include "common.cuh"

// Thread idx stands for element [b][h][n][i] of a (B, NH, N, d) tensor. Return the offset
// of the same (b, n, h, i) in a tensor laid out as (B, N, ..., NH, d), whose (b, n) rows
// are row_len floats long: row_len = 3*NH*d for the packed qkv buffer (this is the q
// slot; k and v follow at +NH*d and +2*NH*d), and NH*d for a plain (B, N, NH, d) tensor.
__device__ __forceinline__ int bnhd_offset(int idx, int N, int NH, int d, int row_len) {
    int i = idx % d;
    idx /= d;
    int n = idx % N;
    idx /= N;
    int h = idx % NH;
    int b = idx / NH;
    return (b * N + n) * row_len + h * d + i;
}

extern "C" __global__ void permute_kernel(float* q, float* k, float* v, const float* inp,
                                          int B, int N, int NH, int d) {
    // idx walks q/k/v in their own order, so the three writes are coalesced
    int idx = blockIdx.x * blockDim.x + threadIdx.x;
    if (idx < B * NH * N * d) {
        int inp_idx = bnhd_offset(idx, N, NH, d, 3 * NH * d);
        q[idx] = inp[inp_idx];
        k[idx] = inp[inp_idx + NH * d];
        v[idx] = inp[inp_idx + 2 * NH * d];
    }
}

extern "C" __global__ void unpermute_kernel(const float* inp, float* out, int B, int N, int NH, int d) {
    int idx = blockIdx.x * blockDim.x + threadIdx.x;
    if (idx < B * NH * N * d) {
        out[bnhd_offset(idx, N, NH, d, NH * d)] = inp[idx];
    }
}

// backward of unpermute: dinp (B, NH, N, d) <- dout (B, N, NH, d). Writes with `=` (see top).
extern "C" __global__ void unpermute_backward_kernel(float* dinp, const float* dout, int B, int N, int NH, int d) {
    int idx = blockIdx.x * blockDim.x + threadIdx.x;
    if (idx < B * NH * N * d) {
        dinp[idx] = dout[bnhd_offset(idx, N, NH, d, NH * d)];
    }
}

// backward of permute: dinp (B, N, 3, NH, d) <- dq, dk, dv (B, NH, N, d). Every element of
// dinp is written exactly once (by the thread of its q, k or v element), with `=` (see top).
extern "C" __global__ void permute_backward_kernel(float* dinp, const float* dq, const float* dk, const float* dv,
                                                   int B, int N, int NH, int d) {
    int idx = blockIdx.x * blockDim.x + threadIdx.x;
    if (idx < B * NH * N * d) {
        int inp_idx = bnhd_offset(idx, N, NH, d, 3 * NH * d);
        dinp[inp_idx] = dq[idx];
        dinp[inp_idx + NH * d] = dk[idx];
        dinp[inp_idx + 2 * NH * d] = dv[idx];
    }
}
