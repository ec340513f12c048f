// RoPE's pair rotation, shared by the RoPE kernels (ops.cu) and the Q/K matmul that applies it
// itself (matmul_half.cu): one definition, so both give the same bits.
#pragma once

namespace salvo::cuda {

// theta_i = pos * theta_scale^i by repeated multiplication, as the CPU (and ggml) does.
__device__ __forceinline__ float rope_theta(float pos, int i, float theta_scale) {
  float theta = pos;
  for (int k = 0; k < i; ++k) theta *= theta_scale;
  return theta;
}

// (y0, y1) = (x0, x1) rotated by theta.
__device__ __forceinline__ void rope_turn(float x0, float x1, float theta, float& y0, float& y1) {
  float s, c;
  sincosf(theta, &s, &c);
  y0 = x0 * c - x1 * s;
  y1 = x0 * s + x1 * c;
}

// (y0, y1) = pair i of a head at position pos, rotated by pos * theta_scale^i.
__device__ __forceinline__ void rope_rotate(float x0, float x1, int i, float pos, float theta_scale,
                                            float& y0, float& y1) {
  rope_turn(x0, x1, rope_theta(pos, i, theta_scale), y0, y1);
}

}  // namespace salvo::cuda
