// Quantized matrix × skinny activation product, variant kFloat (and the variant dispatch): one
// block per output row, its threads taking
// the row's 16-weight chunks in turn. A thread dequantizes a chunk once into registers and
// applies it to every activation row of the launch, so each weight byte is read once for up to
// kMatmulMaxRows rows. (A warp-per-row variant with an unrolled chunk loop measured slower on
// the H200: 320 against 374 tokens/s on the Qwen2.5-1.5B shape, 153 against 176 on the 7B; so
// did four rows per block, 296 and 126, and `#pragma unroll 4` on the chunk loop, 368 and 165.)
//
// Row invariance: every row's value is the same sequence of roundings whatever the number of
// rows (R only sizes the accumulator array): explicit __fmaf_rn/__fadd_rn (never contracted
// differently per unrolled copy), chunks in a fixed order per thread, a fixed butterfly per warp
// and the warps summed in order.
#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <mutex>

#include "backends/cuda/dequant.cuh"
#include "backends/cuda/device_memory.h"
#include "backends/cuda/kernels.h"
#include "backends/cuda/launch.cuh"

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

template <DType T, int R>
__global__ void __launch_bounds__(kThreads) matmul_kernel(MatmulParams p, int64_t row_bytes) {
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int64_t o = blockIdx.x;
  const uint8_t* row = static_cast<const uint8_t*>(p.w) + o * row_bytes;
  pdl_enter();
  const int n_chunks = static_cast<int>(p.n_in / 16);
  const int n_rows = static_cast<int>(p.n_rows);
  float acc[R];
#pragma unroll
  for (int r = 0; r < R; ++r) acc[r] = 0.0f;

  for (int c = threadIdx.x; c < n_chunks; c += kThreads) {
    float w[16];
    int a, b;
    load_chunk<T>(row, c, w, a, b);
#pragma unroll
    for (int r = 0; r < R; ++r) {
      if (r < n_rows) {
        const float* xr = p.x + static_cast<int64_t>(r) * p.n_in;
        acc[r] = __fadd_rn(acc[r], dot16(w, xr + a, xr + b));
      }
    }
  }
  __shared__ float partial[kWarps][R];
#pragma unroll
  for (int r = 0; r < R; ++r) {
    float s = acc[r];
#pragma unroll
    for (int off = 16; off > 0; off /= 2) s = __fadd_rn(s, __shfl_xor_sync(0xffffffffu, s, off));
    if (lane == 0) partial[warp][r] = s;
  }
  __syncthreads();
  for (int r = threadIdx.x; r < n_rows && r < R; r += kThreads) {
    float s = partial[0][r];
#pragma unroll
    for (int w = 1; w < kWarps; ++w) s = __fadd_rn(s, partial[w][r]);
    if (p.bias != nullptr) s = __fadd_rn(s, p.bias[o]);
    p.y[static_cast<int64_t>(r) * p.n_out + o] = s;
  }
}

template <DType T, int R>
void launch_float(const MatmulParams& p, cudaStream_t stream) {
  const int64_t row_bytes = p.n_in / ChunkTraits<T>::kChunks / 16 * ChunkTraits<T>::kBlockBytes;
  launch(matmul_kernel<T, R>, static_cast<unsigned>(p.n_out), kThreads, 0, stream, p, row_bytes);
}

template <DType T>
void launch_rows(const MatmulParams& p, cudaStream_t stream) {
  // The smallest accumulator array that holds the rows: fewer registers, more warps in flight.
  if (p.n_rows <= 1) return launch_float<T, 1>(p, stream);
  if (p.n_rows <= 2) return launch_float<T, 2>(p, stream);
  if (p.n_rows <= 4) return launch_float<T, 4>(p, stream);
  if (p.n_rows <= 8) return launch_float<T, 8>(p, stream);
  if (p.n_rows <= 16) return launch_float<T, 16>(p, stream);
  if (p.n_rows <= 32) return launch_float<T, 32>(p, stream);
  return launch_float<T, 64>(p, stream);
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

const char* variant_name(MatmulVariant v) {
  switch (v) {
    case MatmulVariant::kFloat:
      return "float";
    case MatmulVariant::kMma:
      return "mma";
    case MatmulVariant::kQ8:
      return "q8";
    case MatmulVariant::kHalf:
      return "half";
    default:
      return "auto";
  }
}

// kHalf is not a name SALVO_CUDA_MATMUL takes: it needs weights packed at upload.
MatmulVariant variant_from_name(const char* name) {
  for (MatmulVariant v : {MatmulVariant::kFloat, MatmulVariant::kMma, MatmulVariant::kQ8}) {
    if (std::strcmp(name, variant_name(v)) == 0) return v;
  }
  return MatmulVariant::kAuto;
}

bool variant_supports(MatmulVariant v, DType type) {
  switch (v) {
    case MatmulVariant::kFloat:
      return weight_type_supported(type);
    case MatmulVariant::kMma:
    case MatmulVariant::kQ8:
      return mma_supports(type);
    case MatmulVariant::kHalf:
      return type == DType::kQ4_K || type == DType::kQ6_K;
    default:
      return weight_type_supported(type);
  }
}

namespace {
// The default variant per weight type, from the H200 measurements of bench/cuda_matmul_bench
// (7B layer, 7 matmuls, us for 1 / 16 rows): Q4_K float 144 / 1140, mma 121 / 195, q8 125 / 195;
// Q6_K float 173 / 1170, mma 199 / 270; Q8_0 float 209 / 2084, mma 236 / 290. mma loses a little
// at one row on Q5_0/Q6_K/Q8_0 but wins 4-7x on verification and prefill, and a type must use
// one family for every row count (row invariance). F32/F16/BF16 have no integer kernel.
MatmulVariant default_variant(DType type) {
  return mma_supports(type) ? MatmulVariant::kMma : MatmulVariant::kFloat;
}

// Rows up to which the integer variants run the dp4a GEMV instead of the tensor cores (the same
// bits): kQ8 up to 8; kMma up to 4, where the GEMV measured faster on the H200 for every shape
// (session 19, cuda_matmul_bench, us at 4 rows, dp4a against mma: 1.5B Q4_K q/o 4.6 / 6.5,
// gate/up 7.8 / 9.1, down 11.5 / 11.8, LM head 55.6 / 77.2; Q6_K gate/up 10.7 / 17.7, down
// 16.8 / 20.2, LM head 79.6 / 148; 7B Q4_K gate/up 23.3 / 27.1, down 24.4 / 34.9; a 4-row pass
// of the random 1.5B 2.01 -> 1.84 ms, 7B 4.58 -> 3.55). At 8 rows mma wins (1.5B pass 2.29
// against 2.77) but for Q6_K LM heads (matmul_mma.cu: dp4a_rows_at).
// SALVO_CUDA_DP4A_ROWS=N (1..8) sets kMma's N, for A/B runs (2: the session-18 kernels' choice,
// without the LM-head rule, which needs N >= 4).
int env_dp4a_rows() {
  static const int n = [] {
    const int v = env_int("SALVO_CUDA_DP4A_ROWS", 0);
    return v >= 1 && v <= 8 ? v : 0;
  }();
  return n;
}

int dp4a_rows_for(MatmulVariant v) {
  if (v == MatmulVariant::kQ8) return 8;
  if (v == MatmulVariant::kMma) return env_dp4a_rows() > 0 ? env_dp4a_rows() : 4;
  return 0;
}

MatmulVariant env_variant() {
  static const MatmulVariant v = [] {
    const char* env = std::getenv("SALVO_CUDA_MATMUL");
    return env != nullptr ? variant_from_name(env) : MatmulVariant::kAuto;
  }();
  return v;
}

// matmul()'s own quantized copy of x, for callers that pass float activations only.
struct Scratch {
  std::mutex mu;
  DeviceBuffer q, meta, h;
};
Scratch& scratch() {
  static Scratch s;
  return s;
}
}  // namespace

MatmulVariant resolve_variant(MatmulVariant requested, DType type) {
  if (requested != MatmulVariant::kAuto) return requested;
  const MatmulVariant env = env_variant();
  if (env != MatmulVariant::kAuto && variant_supports(env, type)) return env;
  return default_variant(type);
}

MatmulVariant variant_of(const MatmulParams& p) { return resolve_variant(p.variant, p.type); }

void matmul(const MatmulParams& p, cudaStream_t stream) {
  const MatmulVariant v = resolve_variant(p.variant, p.type);
  if (v == MatmulVariant::kHalf) {
    if (p.xq.h != nullptr) return matmul_half_group(&p, 1, stream);
    Scratch& s = scratch();
    std::lock_guard<std::mutex> lock(s.mu);
    const Status st = s.h.reserve(half_frag_rows(p.n_rows) * p.n_in * sizeof(uint16_t));
    SALVO_CHECK_MSG(st.ok(), "matmul: no device memory for the fp16 activations");
    MatmulParams q = p;
    q.xq.h = s.h.get<uint16_t>();
    half_frags(p.x, p.n_rows, p.n_in, s.h.get<uint16_t>(), stream);
    return matmul_half_group(&q, 1, stream);
  }
  SALVO_CHECK_MSG(variant_supports(v, p.type), "matmul: variant does not support the weight type");
  SALVO_CHECK_MSG(!p.tiled || variant_takes_q8(v), "matmul: tiled weights need an integer variant");
  if (v == MatmulVariant::kMma || v == MatmulVariant::kQ8) {
    const int dp4a_rows = dp4a_rows_for(v);
    if (p.xq.q != nullptr) return matmul_mma(p, dp4a_rows, stream);
    Scratch& s = scratch();
    std::lock_guard<std::mutex> lock(s.mu);
    const Status st1 = s.q.reserve(p.n_rows * p.n_in);
    const Status st2 = s.meta.reserve(p.n_rows * (p.n_in / 32) * sizeof(Q8Meta));
    SALVO_CHECK_MSG(st1.ok() && st2.ok(), "matmul: no device memory for the quantized activations");
    MatmulParams q = p;
    q.xq = {s.q.get<int8_t>(), s.meta.get<Q8Meta>(), p.n_rows};
    quantize_rows(p.x, p.n_rows, p.n_in, s.q.get<int8_t>(), s.meta.get<Q8Meta>(), p.n_rows, stream);
    return matmul_mma(q, dp4a_rows, stream);
  }
  for (int64_t r0 = 0; r0 < p.n_rows; r0 += kMatmulMaxRows) {
    MatmulParams piece = p;
    piece.x = p.x + r0 * p.n_in;
    piece.y = p.y + r0 * p.n_out;
    piece.n_rows = std::min<int64_t>(kMatmulMaxRows, p.n_rows - r0);
    dispatch_weight_type(p.type, LaunchRows{piece, stream});
  }
}

bool half_shares_launch(const MatmulParams& a, const MatmulParams& b) {
  const auto half = [](const MatmulParams& p) {
    return variant_of(p) == MatmulVariant::kHalf && p.xq.h != nullptr;
  };
  return half(a) && half(b) && a.n_in == b.n_in && (a.type == b.type || half_mixed_enabled());
}

void matmul_group(MatmulParams* parts, int n_parts, cudaStream_t stream) {
  bool all_half = n_parts > 1;
  for (int i = 0; i < n_parts && all_half; ++i) all_half = half_shares_launch(parts[i], parts[0]);
  if (all_half) return matmul_half_group(parts, n_parts, stream);
  bool one_launch = n_parts > 1;
  for (int i = 0; i < n_parts && one_launch; ++i) {
    const MatmulVariant v = resolve_variant(parts[i].variant, parts[i].type);
    one_launch = variant_takes_q8(v) && parts[i].xq.q != nullptr &&
                 parts[i].type == parts[0].type && parts[i].n_in == parts[0].n_in &&
                 resolve_variant(parts[0].variant, parts[0].type) == v;
  }
  if (!one_launch) {
    for (int i = 0; i < n_parts; ++i) matmul(parts[i], stream);
    return;
  }
  const int dp4a_rows = dp4a_rows_for(resolve_variant(parts[0].variant, parts[0].type));
  matmul_mma_group(parts, n_parts, dp4a_rows, stream);
}

}  // namespace salvo::cuda
