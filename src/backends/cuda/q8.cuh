// The activation quantization of quantize_rows (kernels.h, Q8Meta) as one warp's step, shared by
// quantize_rows and the kernels that fuse it into the op producing the matmul input (RMSNorm,
// the gated activations, the attention output). One arithmetic everywhere: a fused kernel gives
// the matmul the same bits as quantize_rows would.
#pragma once

#include <cstdint>

#include "backends/cuda/kernels.h"

namespace salvo::cuda {

// The 32 lanes of a warp hold the 32 elements of one block (lane i: element i). Writes the
// block's quants to q[0..32) and its Q8Meta to *meta (lane 0). All 32 lanes must call it.
__device__ __forceinline__ void quantize_block_warp(float v, int lane, int8_t* q, Q8Meta* meta) {
  float amax = fabsf(v);
#pragma unroll
  for (int off = 16; off > 0; off /= 2) amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, off));
  const float d = __fdiv_rn(amax, 127.0f);
  const int qv = d > 0.0f ? max(-127, min(127, __float2int_rn(__fdiv_rn(v, d)))) : 0;
  q[lane] = static_cast<int8_t>(qv);
  int s = qv;
#pragma unroll
  for (int off = 8; off > 0; off /= 2) s += __shfl_xor_sync(0xffffffffu, s, off);  // per half
  const int hi = __shfl_sync(0xffffffffu, s, 16);
  if (lane == 0) *meta = {d, static_cast<int16_t>(s), static_cast<int16_t>(hi)};
}

}  // namespace salvo::cuda
