// Attention over the device KV cache with TokenBatch's tree mask, K/V stores and KV commit.
//
// Cache layout per layer: [n_seq][capacity][width] floats; committed slot i holds position i,
// the rows of the batch in flight sit behind the committed ones in batch order (the suffix).
#include <cuda_fp16.h>

#include <algorithm>
#include <cfloat>
#include <cstdlib>
#include <string>

#include "backends/cuda/kernels.h"
#include "backends/cuda/launch.cuh"
#include "backends/cuda/q8.cuh"

namespace salvo::cuda {
namespace {

constexpr int kWarps = 8;
constexpr int kMaxDimPerLane = 8;  // head_dim <= 256

__global__ void store_kv_kernel(BatchView batch, KvLayerView kv, const float* k, const float* v) {
  pdl_enter();
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

// Row `row`'s output element d of head `head` (and its int8 form when asked; all 32 lanes of a
// warp call it for 32 consecutive d when head_dim_v % 32 == 0).
__device__ __forceinline__ void write_output(const AttentionParams& p, int head, int row, int d,
                                             float y) {
  const int64_t row_base = static_cast<int64_t>(row) * p.n_head * p.head_dim_v;
  p.out[row_base + head * p.head_dim_v + d] = y;
  if (p.out_q8.q != nullptr) {
    const int e = head * p.head_dim_v + d;  // element of the row
    quantize_block_warp(y, threadIdx.x % 32, p.out_q8.q + row_base + e - threadIdx.x % 32,
                        p.out_q8.meta + static_cast<int64_t>(e / 32) * p.out_q8.meta_stride + row);
  }
  if (p.out_q8.h != nullptr) {
    const int64_t width = static_cast<int64_t>(p.n_head) * p.head_dim_v;
    p.out_q8.h[half_frag_index(row, head * p.head_dim_v + d, width)] =
        __half_as_ushort(__float2half_rn(y));
  }
}

// Split-K attention. The visible keys of a row are numbered in position order (the committed
// range, then the row's ancestors in the batch, which come in DFS = depth order); key number i
// is position first + i whether the path above the row is committed or still in the batch. Key
// i goes to split i / kKeysPerSplit, warp (i / kKeysPerWarp) % kWarps, lane i % kKeysPerWarp,
// and every reduction runs in a fixed order over those, so a row's output is bit-identical in a
// 1-row decode and in a k-row tree verification (the row invariance the speculation guarantee
// rests on).
//
// One block per (head, row, split); each warp scores its 16 keys and accumulates their values;
// the block merges its warps and writes the split's (max, sum, unnormalised output). The last
// block of a (head, row) to finish merges the splits in order (a count per (head, row), which
// that block resets to 0 for the next pass): one launch a layer instead of two, and the merge is
// the same whichever block does it. A row whose keys fit one split (any context under
// kKeysPerSplit) skips the partial: its block writes the output with the merge's arithmetic.
//
// Latency, not bandwidth, sets a decode's attention time (a few hundred KB a layer): each
// dependent round of loads costs microseconds. So a warp takes only 16 keys and issues the loads
// of all their K rows at once, then of all their V rows: two rounds of memory latency where 32
// keys a warp in batches took four (21 us a layer on the 1.5B and 7B shapes at a 128-token
// context, a quarter of the decode step; now about 5).
constexpr int kKeysPerWarp = 16;
constexpr int kKeysPerSplit = kWarps * kKeysPerWarp;

// What a block needs of its row and of the batch rows it may see, loaded in one round at the
// kernel's start: each dependent round of loads (the row's sequence, then that sequence's
// committed count, then the batch rows' entries) cost a memory latency before the K rows could
// be requested.
struct RowMeta {
  int seq, pos, first, n_committed, n_batch_keys;
};
// Batch row `lane`'s entries (the first 32 rows: all of a decode step's or a tree's), for warp
// 0's scan of the visible rows.
struct BatchEntry {
  int seq, end, slot, pos;
};

__device__ __forceinline__ RowMeta row_meta(const AttentionParams& p, int row) {
  const BatchView& b = p.batch;
  RowMeta m;
  m.seq = b.seq[row];
  m.pos = b.pos[row];
  const int committed = b.row_committed != nullptr ? b.row_committed[row] : b.committed[m.seq];
  m.first = p.window > 0 ? max(0, m.pos - p.window + 1) : 0;
  m.n_committed = max(0, committed - m.first);
  // The batch rows this row may see: those before it and itself, or all of them in a block.
  m.n_batch_keys = p.block_visible ? b.n_rows : row + 1;
  return m;
}

__device__ __forceinline__ BatchEntry batch_entry(const AttentionParams& p, int k) {
  const BatchView& b = p.batch;
  BatchEntry e{-1, 0, 0, 0};
  if (k < b.n_rows) {
    e.seq = b.seq[k];
    e.slot = b.slot[k];
    if (!p.block_visible) e.end = b.subtree_end[k];
    if (p.window > 0) e.pos = b.pos[k];
  }
  return e;
}

template <int kDim>
__device__ __forceinline__ void split_partial(const AttentionParams& p, const RowMeta& rm,
                                              const BatchEntry& mine, bool direct) {
  const int head = blockIdx.x, row = p.row_base + blockIdx.y, split = blockIdx.z;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int seq = rm.seq, pos = rm.pos, first = rm.first, n_committed = rm.n_committed;
  const int n_batch_keys = rm.n_batch_keys;
  const int partial_width = 2 + p.head_dim_v;
  // The launch's rows (blockIdx.y) index the scratch; the batch's (row) everything else.
  float* partial =
      p.partial +
      ((static_cast<int64_t>(blockIdx.y) * p.n_head + head) * gridDim.z + split) * partial_width;
  if (split * kKeysPerSplit >= n_committed + n_batch_keys) {  // beyond any key this row can see
    if (threadIdx.x == 0) partial[0] = -FLT_MAX, partial[1] = 0.0f;
    return;
  }

  extern __shared__ int32_t suffix_slots[];  // [n_rows]: this row's visible batch rows' slots
  __shared__ int n_suffix;
  __shared__ float q[kMaxDimPerLane * 32];
  if (warp == 0) {
    int count = 0;
    for (int k0 = 0; k0 < n_batch_keys; k0 += 32) {
      const int k = k0 + lane;
      const BatchEntry e = k0 == 0 ? mine : batch_entry(p, k);
      const bool visible = k < n_batch_keys && e.seq == seq && (p.block_visible || row <= e.end) &&
                           (p.window == 0 || pos - e.pos < p.window);
      const unsigned ballot = __ballot_sync(0xffffffffu, visible);
      if (visible) suffix_slots[count + __popc(ballot & ((1u << lane) - 1))] = e.slot;
      count += __popc(ballot);
    }
    if (lane == 0) n_suffix = count;
  }
  const float* q_row = p.q + static_cast<int64_t>(row) * p.n_head * p.head_dim + head * p.head_dim;
  for (int d = threadIdx.x; d < p.head_dim; d += blockDim.x) q[d] = q_row[d];
  __syncthreads();

  const int kv_head = head / (p.n_head / p.n_head_kv);
  const float* k_base =
      p.kv.k + static_cast<int64_t>(seq) * p.kv.capacity * p.kv.k_width + kv_head * p.head_dim;
  const float* v_base =
      p.kv.v + static_cast<int64_t>(seq) * p.kv.capacity * p.kv.v_width + kv_head * p.head_dim_v;
  const int n_keys = n_committed + n_suffix;
  const int warp_first = split * kKeysPerSplit + warp * kKeysPerWarp;  // the warp's first key
  const int number = warp_first + lane;
  const bool valid = lane < kKeysPerWarp && number < n_keys;
  const int slot =
      valid ? (number < n_committed ? first + number : suffix_slots[number - n_committed]) : 0;
  const int n_warp_keys = max(0, min(kKeysPerWarp, n_keys - warp_first));  // uniform
  // Lane l holds elements [4l, 4l + 4) (and [128 + 4l, ...) of wider heads) of q and of each
  // key's K row, so a row is one coalesced read; lane l + 32 i holds element l + 32 i of V rows.
  constexpr int kChunks = (32 * kDim + 127) / 128;  // float4 chunks of a lane (head_dim <= 32 kDim)
  float4 qv[kChunks];
#pragma unroll
  for (int c = 0; c < kChunks; ++c) {
    const int d = 128 * c + 4 * lane;
    qv[c] = d < p.head_dim ? make_float4(q[d], q[d + 1], q[d + 2], q[d + 3])
                           : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
  }
  float4 kr[kKeysPerWarp][kChunks];
#pragma unroll
  for (int j = 0; j < kKeysPerWarp; ++j) {
    const int slot_j = __shfl_sync(0xffffffffu, slot, j);
    const float* row_k = k_base + static_cast<int64_t>(slot_j) * p.kv.k_width;
#pragma unroll
    for (int c = 0; c < kChunks; ++c) {
      const int d = 128 * c + 4 * lane;
      kr[j][c] = j < n_warp_keys && d < p.head_dim ? *reinterpret_cast<const float4*>(row_k + d)
                                                   : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
    }
  }
  // Key j's score: the lanes' products added by an xor butterfly (every lane gets the same
  // sum); lane j keeps it.
  float s_mine = 0.0f;
#pragma unroll
  for (int j = 0; j < kKeysPerWarp; ++j) {
    float s = 0.0f;
#pragma unroll
    for (int c = 0; c < kChunks; ++c) {
      if (128 * c >= p.head_dim) break;  // the same FMAs whatever kChunks
      s = __fmaf_rn(qv[c].x, kr[j][c].x, s);
      s = __fmaf_rn(qv[c].y, kr[j][c].y, s);
      s = __fmaf_rn(qv[c].z, kr[j][c].z, s);
      s = __fmaf_rn(qv[c].w, kr[j][c].w, s);
    }
#pragma unroll
    for (int off = 16; off > 0; off /= 2) s = __fadd_rn(s, __shfl_xor_sync(0xffffffffu, s, off));
    if (j == lane) s_mine = s;
  }
  // Then the V rows: issued with the K rows (both register sets live) they measured slower on
  // the H200, 1.87 ms a decode step of the 1.5B shape against 1.70 this way.
  float vr[kKeysPerWarp][kDim];
#pragma unroll
  for (int j = 0; j < kKeysPerWarp; ++j) {
    const int slot_j = __shfl_sync(0xffffffffu, slot, j);
    const float* row_v = v_base + static_cast<int64_t>(slot_j) * p.kv.v_width;
#pragma unroll
    for (int i = 0; i < kDim; ++i) {
      const int d = lane + 32 * i;
      vr[j][i] = j < n_warp_keys && d < p.head_dim_v ? row_v[d] : 0.0f;
    }
  }
  const float score = valid ? __fmul_rn(s_mine, p.scale) : -FLT_MAX;
  float m = score;
  for (int off = 16; off > 0; off /= 2) m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, off));
  const float e = valid ? __expf(score - m) : 0.0f;  // score - m <= 0: the fast exp is safe
  float l = e;
  for (int off = 16; off > 0; off /= 2) l = __fadd_rn(l, __shfl_xor_sync(0xffffffffu, l, off));
  float acc[kDim];
#pragma unroll
  for (int i = 0; i < kDim; ++i) acc[i] = 0.0f;
#pragma unroll
  for (int j = 0; j < kKeysPerWarp; ++j) {
    const float ej = __shfl_sync(0xffffffffu, e, j);
    if (j >= n_warp_keys) break;  // uniform over the warp
#pragma unroll
    for (int i = 0; i < kDim; ++i) acc[i] = __fmaf_rn(ej, vr[j][i], acc[i]);
  }

  __shared__ float warp_m[kWarps], warp_l[kWarps];
  __shared__ float warp_acc[kWarps][kMaxDimPerLane * 32];
  if (lane == 0) warp_m[warp] = m, warp_l[warp] = l;
#pragma unroll
  for (int i = 0; i < kDim; ++i) {
    if (lane + 32 * i < p.head_dim_v) warp_acc[warp][lane + 32 * i] = acc[i];
  }
  __syncthreads();
  float m_all = -FLT_MAX;
  for (int w = 0; w < kWarps; ++w) m_all = fmaxf(m_all, warp_m[w]);
  float l_all = 0.0f;
  for (int w = 0; w < kWarps; ++w) {
    if (warp_l[w] > 0.0f) l_all = __fmaf_rn(warp_l[w], __expf(warp_m[w] - m_all), l_all);
  }
  // merge_splits over this one split: m_all is the split's, each weight exp(m_all - m_all).
  const float w_self = __expf(m_all - m_all);
  for (int d = threadIdx.x; d < p.head_dim_v; d += blockDim.x) {
    float o = 0.0f;
    for (int w = 0; w < kWarps; ++w) {
      if (warp_l[w] > 0.0f) o = __fmaf_rn(warp_acc[w][d], __expf(warp_m[w] - m_all), o);
    }
    if (direct) {
      write_output(p, head, row, d,
                   __fdiv_rn(__fmaf_rn(o, w_self, 0.0f), __fmaf_rn(l_all, w_self, 0.0f)));
    } else {
      partial[2 + d] = o;
    }
  }
  if (threadIdx.x == 0 && !direct) partial[0] = m_all, partial[1] = l_all;
}

// Splits of the (head, row) that can hold a key it sees; the merge reads only those.
__device__ __forceinline__ int used_splits(const RowMeta& rm) {
  const int max_keys = rm.n_committed + rm.n_batch_keys;
  return min(static_cast<int>(gridDim.z), (max_keys + kKeysPerSplit - 1) / kKeysPerSplit);
}

// Merges the (head, row)'s splits in order into out (and its int8 copy). Splits at or beyond the
// row's last possible key hold no partial (or an empty one, l = 0), so the merge stops
// before them (a 4096-slot cache has 32 splits; a short context uses one). The partials come from
// other blocks of this launch: read past L1 (__ldcg), which is not coherent between SMs.
//
// Two rounds of loads: every split's (max, sum) at once, then every split's output element; the
// splits' weights exp(m_s - m_all) are computed once, in split order, by one thread (the same
// operations in the same order as an element's own loop would do them). A merge that read them
// per element waited on several dependent rounds of L2 loads a split.
constexpr int kMergeMaxSplits = 256;  // 32768 slots; wider caches take the per-element loop
__device__ void merge_splits(const AttentionParams& p, const RowMeta& rm, int n_splits) {
  const int head = blockIdx.x, row = p.row_base + blockIdx.y;
  const int n_used = used_splits(rm);
  const int partial_width = 2 + p.head_dim_v;
  const float* partial =
      p.partial + (static_cast<int64_t>(blockIdx.y) * p.n_head + head) * n_splits * partial_width;
  if (n_used <= kMergeMaxSplits) {
    __shared__ float split_m[kMergeMaxSplits], split_l[kMergeMaxSplits], split_w[kMergeMaxSplits];
    __shared__ float l_shared;
    for (int s = threadIdx.x; s < n_used; s += blockDim.x) {
      split_m[s] = __ldcg(partial + s * partial_width);
      split_l[s] = __ldcg(partial + s * partial_width + 1);
    }
    __syncthreads();
    if (threadIdx.x == 0) {
      float m_all = -FLT_MAX;
      for (int s = 0; s < n_used; ++s) {
        if (split_l[s] > 0.0f) m_all = fmaxf(m_all, split_m[s]);
      }
      float l_all = 0.0f;
      for (int s = 0; s < n_used; ++s) {
        split_w[s] = __expf(split_m[s] - m_all);
        if (split_l[s] > 0.0f) l_all = __fmaf_rn(split_l[s], split_w[s], l_all);
      }
      l_shared = l_all;
    }
    __syncthreads();
    const float l_all = l_shared;
    // With head_dim_v % 32 == 0 a warp's elements of one loop turn are one quantization block.
    for (int d = threadIdx.x; d < p.head_dim_v; d += blockDim.x) {
      float o = 0.0f;
#pragma unroll 4
      for (int s = 0; s < n_used; ++s) {
        const float v = __ldcg(partial + s * partial_width + 2 + d);
        if (split_l[s] > 0.0f) o = __fmaf_rn(v, split_w[s], o);
      }
      write_output(p, head, row, d, __fdiv_rn(o, l_all));
    }
    return;
  }
  float m_all = -FLT_MAX;
  for (int s = 0; s < n_used; ++s) {
    if (__ldcg(partial + s * partial_width + 1) > 0.0f) {
      m_all = fmaxf(m_all, __ldcg(partial + s * partial_width));
    }
  }
  float l_all = 0.0f;
  for (int s = 0; s < n_used; ++s) {
    const float* ps = partial + s * partial_width;
    const float l = __ldcg(ps + 1);
    if (l > 0.0f) l_all = __fmaf_rn(l, __expf(__ldcg(ps) - m_all), l_all);
  }
  for (int d = threadIdx.x; d < p.head_dim_v; d += blockDim.x) {
    float o = 0.0f;
    for (int s = 0; s < n_used; ++s) {
      const float* ps = partial + s * partial_width;
      if (__ldcg(ps + 1) > 0.0f) o = __fmaf_rn(__ldcg(ps + 2 + d), __expf(__ldcg(ps) - m_all), o);
    }
    write_output(p, head, row, d, __fdiv_rn(o, l_all));
  }
}

// kSkip: blocks past the used splits return at once instead of writing an empty partial and
// taking their turn at the count (a 4096-slot cache launches 32 splits; a short context uses 1).
template <int kDim, bool kSkip>
__global__ void __launch_bounds__(kWarps * 32) attention_kernel(AttentionParams p) {
  pdl_enter();
  const RowMeta rm = row_meta(p, p.row_base + blockIdx.y);
  // Warp 0's first batch entries load with the row's (the scan needs them next).
  const BatchEntry mine = threadIdx.x < 32 ? batch_entry(p, threadIdx.x) : BatchEntry{-1, 0, 0, 0};
  const int n_used = kSkip ? used_splits(rm) : gridDim.z;
  if (kSkip && static_cast<int>(blockIdx.z) >= n_used) return;  // uniform over the block
  // One split (any context under kKeysPerSplit): no partial, no count, no second pass over L2.
  if (kSkip && n_used == 1) return split_partial<kDim>(p, rm, mine, true);
  split_partial<kDim>(p, rm, mine, false);
  if (last_to_arrive(p.split_counts + blockIdx.y * p.n_head + blockIdx.x, n_used)) {
    merge_splits(p, rm, gridDim.z);
  }
}

// SALVO_CUDA_ATTENTION=serial: every split counted (no skipped splits, no one-split shortcut),
// for A/B runs and as the tests' check that those shortcuts keep the bits. Read at every launch (a
// graph captures it once) so that a test can run both.
bool serial_attention() {
  const char* env = std::getenv("SALVO_CUDA_ATTENTION");
  return env != nullptr && std::string(env) == "serial";
}

// A thread per element of a slot per layer; each walks the moves in order, so a move never
// reads a slot that an earlier move of the same element has overwritten out of turn.
__global__ void commit_kv_kernel(float* k, float* v, int64_t k_stride, int64_t v_stride,
                                 int k_width, int v_width, const int32_t* from, const int32_t* to,
                                 int n_moves) {
  pdl_enter();
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
  if (batch.n_rows > 0) launch(store_kv_kernel, batch.n_rows, 128, 0, stream, batch, kv, k, v);
}

int attention_splits(int capacity) { return (capacity + kKeysPerSplit - 1) / kKeysPerSplit; }

namespace {
// The partials of one batch row: every head, every split of the cache.
size_t scratch_row_bytes(int n_head, int capacity, int head_dim_v) {
  return static_cast<size_t>(n_head) * attention_splits(capacity) * (2 + head_dim_v) *
         sizeof(float);
}
}  // namespace

int attention_rows_per_launch(int n_head, int capacity, int head_dim_v) {
  const size_t rows = kAttentionScratchBudget / scratch_row_bytes(n_head, capacity, head_dim_v);
  return static_cast<int>(std::clamp<size_t>(rows, 1, 1 << 20));
}

size_t attention_scratch_bytes(int n_rows, int n_head, int capacity, int head_dim_v) {
  const int rows = std::min(n_rows, attention_rows_per_launch(n_head, capacity, head_dim_v));
  return static_cast<size_t>(rows) * scratch_row_bytes(n_head, capacity, head_dim_v);
}

void attention(const AttentionParams& p, cudaStream_t stream) {
  if (p.batch.n_rows == 0) return;
  const int n_splits = attention_splits(p.kv.capacity);
  int per_launch = attention_rows_per_launch(p.n_head, p.kv.capacity, p.head_dim_v);
  if (p.rows_per_launch > 0) per_launch = std::min(per_launch, p.rows_per_launch);
  const size_t smem = p.batch.n_rows * sizeof(int32_t);
  // A row's arithmetic does not depend on which launch takes it: the same bits in one launch
  // or many.
  for (int first = 0; first < p.batch.n_rows; first += per_launch) {
    AttentionParams part = p;
    part.row_base = first;
    const dim3 grid(p.n_head, std::min(per_launch, p.batch.n_rows - first), n_splits);
    if (serial_attention()) {
      launch(attention_kernel<kMaxDimPerLane, false>, grid, kWarps * 32, smem, stream, part);
    } else if (p.head_dim <= 128 && p.head_dim_v <= 128) {
      launch(attention_kernel<4, true>, grid, kWarps * 32, smem, stream, part);
    } else {
      launch(attention_kernel<kMaxDimPerLane, true>, grid, kWarps * 32, smem, stream, part);
    }
  }
}

void commit_kv(float* k, float* v, int64_t k_layer_stride, int64_t v_layer_stride, int n_layer,
               int k_width, int v_width, const int32_t* from, const int32_t* to, int n_moves,
               cudaStream_t stream) {
  if (n_moves == 0) return;
  const int width = k_width > v_width ? k_width : v_width;
  const dim3 grid((width + 127) / 128, n_layer);
  launch(commit_kv_kernel, grid, 128, 0, stream, k, v, k_layer_stride, v_layer_stride, k_width,
         v_width, from, to, n_moves);
}

}  // namespace salvo::cuda
