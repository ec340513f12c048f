// RoPE's pair rotation, shared by the RoPE kernels (ops.cu) and the Q/K matmul that applies it
// itself (matmul_half.cu): one definition, so both give the same bits.
#pragma once

namespace salvo::cuda {

// theta[j] = pos_j * theta_scale^i (theta[j] holds pos_j on entry) by repeated multiplication,
// as the CPU (and ggml) does; the N chains run side by side, so N positions wait for one chain.
template <int N>
__device__ __forceinline__ void rope_thetas(float (&theta)[N], int i, float theta_scale) {
  for (int k = 0; k < i; ++k) {
#pragma unroll
    for (int j = 0; j < N; ++j) theta[j] *= theta_scale;
  }
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
  float theta[1] = {pos};
  rope_thetas(theta, i, theta_scale);
  rope_turn(x0, x1, theta[0], y0, y1);
}

}  // namespace salvo::cuda
