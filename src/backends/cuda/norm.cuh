// The fused RMSNorm's factors of rows from their per-16-element sums of squares (kernels.h
// ResidualNorm): shared by rms_from_sq and the last tile of a residual epilogue, so both give
// the same bits. A row's sums are added lane-strided in index order, then in a butterfly
// (every lane ends with the same value: each step adds the same two numbers on both lanes);
// the rows' loads are issued together.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

namespace salvo::cuda {

// out[c] = 1 / sqrt(sum of row c's sums / dim + eps) for rows c < n (<= kRows) of sq (rows
// `stride` floats apart, `tiles` sums each). Every lane of the warp calls it.
template <int kRows>
__device__ __forceinline__ void rms_of_rows(const float* sq, int64_t stride, int n, int tiles,
                                            int dim, float eps, int lane, float (&out)[kRows]) {
  float s[kRows];
#pragma unroll
  for (int c = 0; c < kRows; ++c) s[c] = 0.0f;
#pragma unroll 4
  for (int i = lane; i < tiles; i += 32) {
#pragma unroll
    for (int c = 0; c < kRows; ++c) {
      if (c < n) s[c] = __fadd_rn(s[c], __ldcg(sq + c * stride + i));
    }
  }
#pragma unroll
  for (int c = 0; c < kRows; ++c) {
    out[c] = 1.0f;
    if (c >= n) continue;
    float v = s[c];
    for (int off = 16; off > 0; off /= 2) v = __fadd_rn(v, __shfl_xor_sync(0xffffffffu, v, off));
    out[c] = __fdiv_rn(1.0f, __fsqrt_rn(__fadd_rn(__fdiv_rn(v, static_cast<float>(dim)), eps)));
  }
}

}  // namespace salvo::cuda
