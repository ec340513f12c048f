// Quantized matrix × skinny activation product: one warp per output row. A lane dequantizes a
// 16-weight chunk once into registers and applies it to every activation row of the launch, so
// each weight byte is read once for up to kMatmulMaxRows rows.
//
// Row invariance: a lane walks its chunks in the same order and the warp reduces in the same
// butterfly for every row, whatever the number of rows (R only sizes the accumulator array).
#include <algorithm>

#include "backends/cuda/dequant.cuh"
#include "backends/cuda/kernels.h"

namespace salvo::cuda {
namespace {

constexpr int kWarps = 4;  // output rows per block

template <DType T, int R>
__global__ void __launch_bounds__(kWarps * 32) matmul_kernel(MatmulParams p, int64_t row_bytes) {
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int64_t o = static_cast<int64_t>(blockIdx.x) * kWarps + warp;
  if (o >= p.n_out) return;
  const uint8_t* row = static_cast<const uint8_t*>(p.w) + o * row_bytes;
  const int n_chunks = static_cast<int>(p.n_in / 16);
  const int n_rows = static_cast<int>(p.n_rows);
  float acc[R];
#pragma unroll
  for (int r = 0; r < R; ++r) acc[r] = 0.0f;

  for (int c = lane; c < n_chunks; c += 32) {
    float w[16];
    int a, b;
    load_chunk<T>(row, c, w, a, b);
#pragma unroll
    for (int r = 0; r < R; ++r) {
      if (r < n_rows) {
        const float* xr = p.x + static_cast<int64_t>(r) * p.n_in;
        const float4 x0 = __ldg(reinterpret_cast<const float4*>(xr + a));
        const float4 x1 = __ldg(reinterpret_cast<const float4*>(xr + a + 4));
        const float4 x2 = __ldg(reinterpret_cast<const float4*>(xr + b));
        const float4 x3 = __ldg(reinterpret_cast<const float4*>(xr + b + 4));
        float s = w[0] * x0.x + w[1] * x0.y + w[2] * x0.z + w[3] * x0.w;
        s += w[4] * x1.x + w[5] * x1.y + w[6] * x1.z + w[7] * x1.w;
        s += w[8] * x2.x + w[9] * x2.y + w[10] * x2.z + w[11] * x2.w;
        s += w[12] * x3.x + w[13] * x3.y + w[14] * x3.z + w[15] * x3.w;
        acc[r] += s;
      }
    }
  }
#pragma unroll
  for (int r = 0; r < R; ++r) {
    if (r < n_rows) {
      float s = acc[r];
#pragma unroll
      for (int off = 16; off > 0; off /= 2) s += __shfl_xor_sync(0xffffffffu, s, off);
      if (lane == 0) {
        if (p.bias != nullptr) s += p.bias[o];
        p.y[static_cast<int64_t>(r) * p.n_out + o] = s;
      }
    }
  }
}

template <DType T, int R>
void launch(const MatmulParams& p, cudaStream_t stream) {
  const int64_t row_bytes = p.n_in / ChunkTraits<T>::kChunks / 16 * ChunkTraits<T>::kBlockBytes;
  const unsigned blocks = static_cast<unsigned>((p.n_out + kWarps - 1) / kWarps);
  matmul_kernel<T, R><<<blocks, kWarps * 32, 0, stream>>>(p, row_bytes);
}

template <DType T>
void launch_rows(const MatmulParams& p, cudaStream_t stream) {
  // The smallest accumulator array that holds the rows: fewer registers, more warps in flight.
  if (p.n_rows <= 1) return launch<T, 1>(p, stream);
  if (p.n_rows <= 2) return launch<T, 2>(p, stream);
  if (p.n_rows <= 4) return launch<T, 4>(p, stream);
  if (p.n_rows <= 8) return launch<T, 8>(p, stream);
  if (p.n_rows <= 16) return launch<T, 16>(p, stream);
  if (p.n_rows <= 32) return launch<T, 32>(p, stream);
  return launch<T, 64>(p, stream);
}

}  // namespace

namespace {
struct NoOp {
  template <DType T>
  void operator()() const {}
};
struct LaunchRows {
  const MatmulParams& p;
  cudaStream_t stream;
  template <DType T>
  void operator()() const {
    launch_rows<T>(p, stream);
  }
};
}  // namespace

bool weight_type_supported(DType type) { return dispatch_weight_type(type, NoOp{}); }

void matmul(const MatmulParams& p, cudaStream_t stream) {
  for (int64_t r0 = 0; r0 < p.n_rows; r0 += kMatmulMaxRows) {
    MatmulParams piece = p;
    piece.x = p.x + r0 * p.n_in;
    piece.y = p.y + r0 * p.n_out;
    piece.n_rows = std::min<int64_t>(kMatmulMaxRows, p.n_rows - r0);
    dispatch_weight_type(p.type, LaunchRows{piece, stream});
  }
}

}  // namespace salvo::cuda
