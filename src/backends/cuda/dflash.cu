// Kernels of the DFlash drafter's device runner: each depth's top candidates with their
// log-probabilities (so only k ids and k floats per depth cross to the host instead of a logit
// row), and the adapter's scores of those candidates for every parent a tree can give them.
#include <cuda_fp16.h>

#include <cfloat>
#include <climits>

#include "backends/cuda/kernels.h"
#include "backends/cuda/launch.cuh"

namespace salvo::cuda {
namespace {

constexpr int kTopThreads = 256;
constexpr int kK = kMaxTopCandidates;

// a ranks before b: larger value, or the same value and a lower id.
__device__ __forceinline__ bool ranks_before(float va, int ia, float vb, int ib) {
  return va > vb || (va == vb && ia < ib);
}

// A row is cut into kChunks chunks, one block each (one block per row left most of the GPU idle:
// 150 us for 15 rows of 151936 on the H200, a sixth of a draft pass), then one warp per row
// merges the chunks' lists.
constexpr int kChunks = 32;

// What a chunk leaves for the merge: its k best (value, id), best first (id INT_MAX: none), and
// its log-sum-exp as a running max m and sum s of exp(v - m).
struct ChunkTop {
  float v[kK];
  int i[kK];
  float m, s;
};

// Each thread keeps a sorted list of its kK best (value, id) in registers while it also
// accumulates an online log-sum-exp over the chunk; the block then merges the lists k times by a
// block-wide arg-max of the list heads.
__global__ void __launch_bounds__(kTopThreads)
    chunk_candidates_kernel(const float* logits, int n_vocab, int n_tokens, int k, ChunkTop* out) {
  pdl_enter();
  const float* row = logits + static_cast<int64_t>(blockIdx.y) * n_vocab;
  const int per = (n_vocab + kChunks - 1) / kChunks;
  const int begin = blockIdx.x * per, end = min(n_vocab, begin + per);
  float tv[kK];
  int ti[kK];
#pragma unroll
  for (int j = 0; j < kK; ++j) tv[j] = -INFINITY, ti[j] = INT_MAX;
  // Running max and sum of exp(v - m); -FLT_MAX rather than -inf keeps every exponent finite.
  float m = -FLT_MAX, s = 0.0f;
  for (int i = begin + threadIdx.x; i < end; i += kTopThreads) {
    const float v = row[i];
    if (v > m) {
      s = s * expf(m - v) + 1.0f;
      m = v;
    } else {
      s += expf(v - m);
    }
    if (i < n_tokens && ranks_before(v, i, tv[kK - 1], ti[kK - 1])) {
      tv[kK - 1] = v, ti[kK - 1] = i;
#pragma unroll
      for (int j = kK - 1; j > 0; --j) {
        if (ranks_before(tv[j], ti[j], tv[j - 1], ti[j - 1])) {
          const float fv = tv[j];
          tv[j] = tv[j - 1], tv[j - 1] = fv;
          const int fi = ti[j];
          ti[j] = ti[j - 1], ti[j - 1] = fi;
        }
      }
    }
  }
  ChunkTop& o = out[static_cast<int64_t>(blockIdx.y) * kChunks + blockIdx.x];

  // Block log-sum-exp: warps, then the warps' results in order.
  constexpr int kWarps = kTopThreads / 32;
  __shared__ float warp_m[kWarps], warp_s[kWarps];
  for (int off = 16; off > 0; off /= 2) {
    const float om = __shfl_xor_sync(0xffffffffu, m, off);
    const float os = __shfl_xor_sync(0xffffffffu, s, off);
    const float nm = fmaxf(m, om);
    s = s * expf(m - nm) + os * expf(om - nm);
    m = nm;
  }
  if (threadIdx.x % 32 == 0) warp_m[threadIdx.x / 32] = m, warp_s[threadIdx.x / 32] = s;

  // The lists go to shared memory so that each round can read any thread's current head.
  __shared__ float list_v[kTopThreads][kK];
  __shared__ int list_i[kTopThreads][kK];
#pragma unroll
  for (int j = 0; j < kK; ++j) list_v[threadIdx.x][j] = tv[j], list_i[threadIdx.x][j] = ti[j];
  __syncthreads();
  if (threadIdx.x == 0) {
    float bm = -FLT_MAX;
    for (int w = 0; w < kWarps; ++w) bm = fmaxf(bm, warp_m[w]);
    float bs = 0.0f;
    for (int w = 0; w < kWarps; ++w) bs += warp_s[w] * expf(warp_m[w] - bm);
    o.m = bm, o.s = bs;
  }

  __shared__ float best_v[kWarps];
  __shared__ int best_i[kWarps], best_t[kWarps];
  int head = 0;
  for (int round = 0; round < k; ++round) {
    float v = head < kK ? list_v[threadIdx.x][head] : -INFINITY;
    int i = head < kK ? list_i[threadIdx.x][head] : INT_MAX;
    int t = threadIdx.x;
    for (int off = 16; off > 0; off /= 2) {
      const float ov = __shfl_xor_sync(0xffffffffu, v, off);
      const int oi = __shfl_xor_sync(0xffffffffu, i, off);
      const int ot = __shfl_xor_sync(0xffffffffu, t, off);
      if (ranks_before(ov, oi, v, i)) v = ov, i = oi, t = ot;
    }
    if (threadIdx.x % 32 == 0) {
      best_v[threadIdx.x / 32] = v, best_i[threadIdx.x / 32] = i, best_t[threadIdx.x / 32] = t;
    }
    __syncthreads();
    v = best_v[0], i = best_i[0], t = best_t[0];
    for (int w = 1; w < kWarps; ++w) {
      if (ranks_before(best_v[w], best_i[w], v, i)) v = best_v[w], i = best_i[w], t = best_t[w];
    }
    if (threadIdx.x == t) ++head;
    if (threadIdx.x == 0) o.v[round] = v, o.i[round] = i;
    __syncthreads();  // best_* are rewritten by the next round
  }
}

// One warp per row: lane c holds chunk c's list; k rounds of a warp arg-max of the list heads.
// The log-sum-exp adds the chunks in chunk order.
__global__ void merge_candidates_kernel(const ChunkTop* chunks, int k, int32_t* ids,
                                        float* logprobs, const int32_t* id_map) {
  static_assert(kChunks <= 32, "a lane per chunk");
  pdl_enter();
  const int lane = threadIdx.x;
  const ChunkTop* c = chunks + static_cast<int64_t>(blockIdx.x) * kChunks;
  float bm = -FLT_MAX;
  for (int j = 0; j < kChunks; ++j) bm = fmaxf(bm, c[j].m);
  float bs = 0.0f;
  for (int j = 0; j < kChunks; ++j) bs += c[j].s * expf(c[j].m - bm);
  const float log_z = bm + logf(bs);
  int head = 0;
  for (int round = 0; round < k; ++round) {
    float v = lane < kChunks && head < k ? c[lane].v[head] : -INFINITY;
    int i = lane < kChunks && head < k ? c[lane].i[head] : INT_MAX;
    int t = lane;
    for (int off = 16; off > 0; off /= 2) {
      const float ov = __shfl_xor_sync(0xffffffffu, v, off);
      const int oi = __shfl_xor_sync(0xffffffffu, i, off);
      const int ot = __shfl_xor_sync(0xffffffffu, t, off);
      if (ranks_before(ov, oi, v, i)) v = ov, i = oi, t = ot;
    }
    if (lane == t) ++head;
    if (lane == 0) {
      const int64_t o = static_cast<int64_t>(blockIdx.x) * k + round;
      const bool found = i != INT_MAX;  // fewer than k ids below n_tokens
      ids[o] = found ? (id_map != nullptr ? id_map[i] : i) : 0;
      logprobs[o] = found ? v - log_z : -INFINITY;
    }
  }
}

__device__ __forceinline__ int child_depth(int parent_row, int k) {
  return parent_row == 0 ? 1 : 2 + (parent_row - 1) / k;
}

// One thread per (parent row, hidden unit).
__global__ void adapter_activation_kernel(const float* ah, const uint16_t* ae_table,
                                          const int32_t* parents, float* ae, int n_parents,
                                          int hidden, int k) {
  pdl_enter();
  const int64_t idx = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (idx >= static_cast<int64_t>(n_parents) * hidden) return;
  const int r = static_cast<int>(idx / hidden), j = static_cast<int>(idx % hidden);
  const float e =
      __half2float(__ushort_as_half(ae_table[static_cast<int64_t>(parents[r]) * hidden + j]));
  const float z = ah[static_cast<int64_t>(child_depth(r, k) - 1) * hidden + j] + e;
  ae[idx] = z / (1.0f + expf(-z));
}

__global__ void to_fp16_kernel(const float* x, int64_t n, uint16_t* out) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < n) out[i] = __half_as_ushort(__float2half_rn(x[i]));
}

// One block per parent row: u = y[child depth] + bu, then a warp per candidate dot product.
__global__ void adapter_scores_kernel(const float* y, float* bu, const float* cand_rows, int dim,
                                      int k, float* scores) {
  pdl_enter();
  const int r = blockIdx.x;
  const int d = child_depth(r, k);
  float* u = bu + static_cast<int64_t>(r) * dim;
  const float* yd = y + static_cast<int64_t>(d) * dim;
  for (int i = threadIdx.x; i < dim; i += blockDim.x) u[i] += yd[i];
  __syncthreads();
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  for (int c = warp; c < k; c += blockDim.x / 32) {
    const float* row = cand_rows + (static_cast<int64_t>(d - 1) * k + c) * dim;
    float s = 0.0f;
    for (int i = lane; i < dim; i += 32) s = fmaf(row[i], u[i], s);
    for (int off = 16; off > 0; off /= 2) s += __shfl_xor_sync(0xffffffffu, s, off);
    if (lane == 0) scores[static_cast<int64_t>(r) * k + c] = s;
  }
}

}  // namespace

size_t top_candidates_scratch_bytes(int n_rows) {
  return static_cast<size_t>(n_rows) * kChunks * sizeof(ChunkTop);
}

void top_candidates(const float* logits, int n_rows, int n_vocab, int n_tokens, int k, int32_t* ids,
                    float* logprobs, void* scratch, cudaStream_t stream, const int32_t* id_map) {
  if (n_rows <= 0 || k <= 0) return;
  ChunkTop* chunks = static_cast<ChunkTop*>(scratch);
  launch(chunk_candidates_kernel, dim3(kChunks, static_cast<unsigned>(n_rows)), kTopThreads, 0,
         stream, logits, n_vocab, n_tokens, k, chunks);
  launch(merge_candidates_kernel, static_cast<unsigned>(n_rows), 32, 0, stream,
         static_cast<const ChunkTop*>(chunks), k, ids, logprobs, id_map);
}

void adapter_activation(const float* ah, const uint16_t* ae_table, const int32_t* parents,
                        float* ae, int n_parents, int hidden, int k, cudaStream_t stream) {
  const int64_t n = static_cast<int64_t>(n_parents) * hidden;
  if (n > 0) {
    launch(adapter_activation_kernel, static_cast<unsigned>((n + 255) / 256), 256, 0, stream, ah,
           ae_table, parents, ae, n_parents, hidden, k);
  }
}

void to_fp16(const float* x, int64_t n, uint16_t* out, cudaStream_t stream) {
  if (n > 0) {
    to_fp16_kernel<<<static_cast<unsigned>((n + 255) / 256), 256, 0, stream>>>(x, n, out);
  }
}

void adapter_scores(const float* y, float* bu, const float* cand_rows, int n_parents, int dim,
                    int k, float* scores, cudaStream_t stream) {
  if (n_parents > 0) {
    launch(adapter_scores_kernel, n_parents, 256, 0, stream, y, bu, cand_rows, dim, k, scores);
  }
}

}  // namespace salvo::cuda
