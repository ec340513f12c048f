// Quantized matrix × skinny activation product: a block per few output rows, its threads taking
// the rows' 16-weight chunks in turn. A thread dequantizes a chunk once into registers and
// applies it to every activation row of the launch, so each weight byte is read once for up to
// kMatmulMaxRows rows. (A warp-per-row variant with an unrolled chunk loop measured slower on
// the H200: 320 against 374 tokens/s on the Qwen2.5-1.5B shape, 153 against 176 on the 7B.)
//
// Row invariance: every row's value is the same sequence of roundings whatever the number of
// rows (R only sizes the accumulator array): explicit __fmaf_rn/__fadd_rn (never contracted
// differently per unrolled copy), chunks in a fixed order per thread, a fixed butterfly per warp
// and the warps summed in order.
#include <algorithm>

#include "backends/cuda/dequant.cuh"
#include "backends/cuda/kernels.h"

namespace salvo::cuda {
namespace {

constexpr int kThreads = 128;  // per output row: enough loads in flight for short matrices too
constexpr int kWarps = kThreads / 32;

__device__ __forceinline__ float dot16(const float w[16], const float* xa, const float* xb) {
  const float4 x0 = __ldg(reinterpret_cast<const float4*>(xa));
  const float4 x1 = __ldg(reinterpret_cast<const float4*>(xa + 4));
  const float4 x2 = __ldg(reinterpret_cast<const float4*>(xb));
  const float4 x3 = __ldg(reinterpret_cast<const float4*>(xb + 4));
  const float x[16] = {x0.x, x0.y, x0.z, x0.w, x1.x, x1.y, x1.z, x1.w,
                       x2.x, x2.y, x2.z, x2.w, x3.x, x3.y, x3.z, x3.w};
  float s = __fmul_rn(w[0], x[0]);
#pragma unroll
  for (int i = 1; i < 16; ++i) s = __fmaf_rn(w[i], x[i], s);
  return s;
}

// RB output rows per block: a thread loads the same chunk of RB rows at once, which keeps more
// weight bytes in flight per block (a block's life is mostly load latency; the H200 profile of
// the 1-row-per-block kernel showed 675 GB/s on 8 MB matrices). Each row's arithmetic is the
// same whatever RB, so row invariance holds across launches that pick different RB.
template <DType T, int R, int RB>
__global__ void __launch_bounds__(kThreads) matmul_kernel(MatmulParams p, int64_t row_bytes) {
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int64_t o0 = static_cast<int64_t>(blockIdx.x) * RB;
  const int n_chunks = static_cast<int>(p.n_in / 16);
  const int n_rows = static_cast<int>(p.n_rows);
  const int n_out_here = static_cast<int>(p.n_out - o0 < RB ? p.n_out - o0 : RB);
  float acc[RB][R];
#pragma unroll
  for (int j = 0; j < RB; ++j) {
#pragma unroll
    for (int r = 0; r < R; ++r) acc[j][r] = 0.0f;
  }

  for (int c = threadIdx.x; c < n_chunks; c += kThreads) {
    float w[RB][16];
    int a, b;
#pragma unroll
    for (int j = 0; j < RB; ++j) {
      if (j < n_out_here) {
        load_chunk<T>(static_cast<const uint8_t*>(p.w) + (o0 + j) * row_bytes, c, w[j], a, b);
      }
    }
#pragma unroll
    for (int r = 0; r < R; ++r) {
      if (r < n_rows) {
        const float* xr = p.x + static_cast<int64_t>(r) * p.n_in;
#pragma unroll
        for (int j = 0; j < RB; ++j) {
          if (j < n_out_here) acc[j][r] = __fadd_rn(acc[j][r], dot16(w[j], xr + a, xr + b));
        }
      }
    }
  }
  __shared__ float partial[kWarps][RB * R];
#pragma unroll
  for (int j = 0; j < RB; ++j) {
#pragma unroll
    for (int r = 0; r < R; ++r) {
      float s = acc[j][r];
#pragma unroll
      for (int off = 16; off > 0; off /= 2) {
        s = __fadd_rn(s, __shfl_xor_sync(0xffffffffu, s, off));
      }
      if (lane == 0) partial[warp][j * R + r] = s;
    }
  }
  __syncthreads();
  for (int i = threadIdx.x; i < RB * R; i += kThreads) {
    const int j = i / R, r = i % R;
    if (j >= n_out_here || r >= n_rows) continue;
    float s = partial[0][i];
#pragma unroll
    for (int w = 1; w < kWarps; ++w) s = __fadd_rn(s, partial[w][i]);
    if (p.bias != nullptr) s = __fadd_rn(s, p.bias[o0 + j]);
    p.y[static_cast<int64_t>(r) * p.n_out + o0 + j] = s;
  }
}

template <DType T, int R>
void launch(const MatmulParams& p, cudaStream_t stream) {
  const int64_t row_bytes = p.n_in / ChunkTraits<T>::kChunks / 16 * ChunkTraits<T>::kBlockBytes;
  // Several output rows per block where the accumulators leave registers for it.
  constexpr int kRowsPerBlock = R <= 8 ? 4 : 1;
  const unsigned blocks = static_cast<unsigned>((p.n_out + kRowsPerBlock - 1) / kRowsPerBlock);
  matmul_kernel<T, R, kRowsPerBlock><<<blocks, kThreads, 0, stream>>>(p, row_bytes);
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
