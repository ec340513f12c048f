// Attention over the device KV cache with TokenBatch's tree mask, K/V stores and KV commit.
//
// Cache layout per layer: [n_seq][capacity][width] floats; committed slot i holds position i,
// the rows of the batch in flight sit behind the committed ones in batch order (the suffix).
#include <cfloat>

#include "backends/cuda/kernels.h"

namespace salvo::cuda {
namespace {

constexpr int kWarps = 4;
constexpr int kMaxDimPerLane = 8;  // head_dim <= 256

__global__ void store_kv_kernel(BatchView batch, KvLayerView kv, const float* k, const float* v) {
  const int r = blockIdx.x;
  const int64_t slot =
      static_cast<int64_t>(batch.seq[r]) * kv.capacity + static_cast<int64_t>(batch.slot[r]);
  for (int i = threadIdx.x; i < kv.k_width; i += blockDim.x) {
    kv.k[slot * kv.k_width + i] = k[static_cast<int64_t>(r) * kv.k_width + i];
  }
  for (int i = threadIdx.x; i < kv.v_width; i += blockDim.x) {
    kv.v[slot * kv.v_width + i] = v[static_cast<int64_t>(r) * kv.v_width + i];
  }
}

// One block per (head, row). The visible keys are numbered in position order (the committed
// range, then this row's ancestors in the batch, which come in DFS = depth order) and warp w
// takes the keys numbered w, w + kWarps, ... with an online softmax; the warps' partial results
// are merged in warp order. Key number i is position first + i whether the path above the row is
// committed or still in the batch, so a row's output is bit-identical in a 1-row decode and in a
// k-row tree verification (the row invariance the speculation guarantee rests on).
__global__ void __launch_bounds__(kWarps * 32) attention_kernel(AttentionParams p) {
  const int head = blockIdx.x, row = blockIdx.y;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int kv_head = head / (p.n_head / p.n_head_kv);
  const BatchView& b = p.batch;
  const int seq = b.seq[row];
  const int pos = b.pos[row];
  const int committed = b.committed[seq];
  const int first = p.window > 0 ? max(0, pos - p.window + 1) : 0;
  const int n_committed = max(0, committed - first);

  float q[kMaxDimPerLane];
#pragma unroll
  for (int i = 0; i < kMaxDimPerLane; ++i) {
    const int d = lane + 32 * i;
    q[i] = d < p.head_dim
               ? p.q[static_cast<int64_t>(row) * p.n_head * p.head_dim + head * p.head_dim + d]
               : 0.0f;
  }
  const float* k_base =
      p.kv.k + static_cast<int64_t>(seq) * p.kv.capacity * p.kv.k_width + kv_head * p.head_dim;
  const float* v_base =
      p.kv.v + static_cast<int64_t>(seq) * p.kv.capacity * p.kv.v_width + kv_head * p.head_dim_v;

  float m = -FLT_MAX, l = 0.0f, acc[kMaxDimPerLane];
#pragma unroll
  for (int i = 0; i < kMaxDimPerLane; ++i) acc[i] = 0.0f;

  auto attend = [&](int slot) {
    const float* kr = k_base + static_cast<int64_t>(slot) * p.kv.k_width;
    float s = 0.0f;
#pragma unroll
    for (int i = 0; i < kMaxDimPerLane; ++i) {
      const int d = lane + 32 * i;
      if (d < p.head_dim) s += q[i] * kr[d];
    }
    for (int off = 16; off > 0; off /= 2) s += __shfl_xor_sync(0xffffffffu, s, off);
    s *= p.scale;
    const float m_new = fmaxf(m, s);
    const float correction = __expf(m - m_new);  // m - m_new <= 0: the fast exp is safe
    const float e = __expf(s - m_new);
    l = l * correction + e;
    const float* vr = v_base + static_cast<int64_t>(slot) * p.kv.v_width;
#pragma unroll
    for (int i = 0; i < kMaxDimPerLane; ++i) {
      const int d = lane + 32 * i;
      acc[i] = acc[i] * correction + (d < p.head_dim_v ? e * vr[d] : 0.0f);
    }
    m = m_new;
  };

  for (int j = warp; j < n_committed; j += kWarps) attend(first + j);
  int number = n_committed;  // of the next visible key
  for (int k = 0; k <= row; ++k) {
    if (b.seq[k] != seq || row > b.subtree_end[k]) continue;  // not an ancestor (nor the row)
    if (p.window > 0 && pos - b.pos[k] >= p.window) continue;
    if (number % kWarps == warp) attend(b.slot[k]);
    ++number;
  }

  __shared__ float warp_m[kWarps], warp_l[kWarps];
  __shared__ float warp_acc[kWarps][kMaxDimPerLane * 32];
  if (lane == 0) warp_m[warp] = m, warp_l[warp] = l;
#pragma unroll
  for (int i = 0; i < kMaxDimPerLane; ++i) warp_acc[warp][lane + 32 * i] = acc[i];
  __syncthreads();
  float m_all = -FLT_MAX;
  for (int w = 0; w < kWarps; ++w) m_all = fmaxf(m_all, warp_m[w]);
  float l_all = 0.0f;
  for (int w = 0; w < kWarps; ++w) l_all += warp_l[w] * __expf(warp_m[w] - m_all);
  float* out = p.out + static_cast<int64_t>(row) * p.n_head * p.head_dim_v + head * p.head_dim_v;
  for (int d = threadIdx.x; d < p.head_dim_v; d += blockDim.x) {
    float o = 0.0f;
    for (int w = 0; w < kWarps; ++w) o += warp_acc[w][d] * __expf(warp_m[w] - m_all);
    out[d] = o / l_all;
  }
}

// A thread per element of a slot per layer; each walks the moves in order, so a move never
// reads a slot that an earlier move of the same element has overwritten out of turn.
__global__ void commit_kv_kernel(float* k, float* v, int64_t k_stride, int64_t v_stride,
                                 int k_width, int v_width, const int32_t* from, const int32_t* to,
                                 int n_moves) {
  const int layer = blockIdx.y;
  const int e = blockIdx.x * blockDim.x + threadIdx.x;
  if (e < k_width) {
    float* base = k + layer * k_stride;
    for (int j = 0; j < n_moves; ++j) {
      base[static_cast<int64_t>(to[j]) * k_width + e] =
          base[static_cast<int64_t>(from[j]) * k_width + e];
    }
  }
  if (e < v_width) {
    float* base = v + layer * v_stride;
    for (int j = 0; j < n_moves; ++j) {
      base[static_cast<int64_t>(to[j]) * v_width + e] =
          base[static_cast<int64_t>(from[j]) * v_width + e];
    }
  }
}

}  // namespace

void store_kv(const BatchView& batch, const KvLayerView& kv, const float* k, const float* v,
              cudaStream_t stream) {
  if (batch.n_rows > 0) store_kv_kernel<<<batch.n_rows, 128, 0, stream>>>(batch, kv, k, v);
}

void attention(const AttentionParams& p, cudaStream_t stream) {
  if (p.batch.n_rows == 0) return;
  const dim3 grid(p.n_head, p.batch.n_rows);
  attention_kernel<<<grid, kWarps * 32, 0, stream>>>(p);
}

void commit_kv(float* k, float* v, int64_t k_layer_stride, int64_t v_layer_stride, int n_layer,
               int k_width, int v_width, const int32_t* from, const int32_t* to, int n_moves,
               cudaStream_t stream) {
  if (n_moves == 0) return;
  const int width = k_width > v_width ? k_width : v_width;
  const dim3 grid((width + 127) / 128, n_layer);
  commit_kv_kernel<<<grid, 128, 0, stream>>>(k, v, k_layer_stride, v_layer_stride, k_width, v_width,
                                             from, to, n_moves);
}

}  // namespace salvo::cuda
