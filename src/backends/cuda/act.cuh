// The gated activations, shared by the activation kernels (ops.cu) and the gate/up matmul that
// applies them itself (matmul_half.cu): one definition, so both give the same bits.
#pragma once

namespace salvo::cuda {

__device__ __forceinline__ float silu_times(float g, float u) { return g / (1.0f + expf(-g)) * u; }

__device__ __forceinline__ float gelu_tanh_times(float g, float u) {
  constexpr float kSqrt2OverPi = 0.7978845608028654f;
  constexpr float kCoef = 0.044715f;
  return 0.5f * g * (1.0f + tanhf(kSqrt2OverPi * g * (1.0f + kCoef * g * g))) * u;
}

}  // namespace salvo::cuda
