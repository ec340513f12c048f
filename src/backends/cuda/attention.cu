// Attention over the device KV cache with TokenBatch's tree mask, K/V stores and KV commit.
//
// Cache layout per layer: [n_seq][capacity][width] fp16 values; committed slot i holds position i,
// the rows of the batch in flight sit behind the committed ones in batch order (the suffix).
#include <cooperative_groups.h>
#include <cuda_fp16.h>

#include <algorithm>
#include <cfloat>
#include <cstdlib>
#include <string>

#include "backends/cuda/kernels.h"
#include "backends/cuda/l2_prefetch.cuh"
#include "backends/cuda/launch.cuh"
#include "backends/cuda/mma.cuh"
#include "backends/cuda/q8.cuh"

namespace salvo::cuda {
namespace {

constexpr int kWarps = 8;

__global__ void store_kv_kernel(BatchView batch, KvLayerView kv, const float* k, const float* v) {
  pdl_enter();
  const int r = blockIdx.x;
  const int64_t slot =
      static_cast<int64_t>(batch.seq[r]) * kv.capacity + static_cast<int64_t>(batch.slot[r]);
  for (int i = threadIdx.x; i < kv.k_width; i += blockDim.x) {
    kv.k[slot * kv.k_width + i] =
        __half_as_ushort(__float2half_rn(k[static_cast<int64_t>(r) * kv.k_width + i]));
  }
  for (int i = threadIdx.x; i < kv.v_width; i += blockDim.x) {
    kv.v[slot * kv.v_width + i] =
        __half_as_ushort(__float2half_rn(v[static_cast<int64_t>(r) * kv.v_width + i]));
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

// Split-K attention on the tensor cores. The visible keys of a row are numbered in position order
// (the committed range, then the row's ancestors in the batch, which come in DFS = depth order);
// key number i is position first + i whether the path above the row is committed or still in the
// batch. Key i goes to split i / kKeysPerSplit, warp (i / kKeysPerWarp) % kWarps and column
// i % kKeysPerWarp of that warp's mma tiles, and every reduction runs in a fixed order over
// those, so a row's output is bit-identical in a 1-row decode and in a k-row tree verification
// (the row invariance the speculation guarantee rests on): the mma computes each (head, key)
// score and each (head, element) sum from its own row and column alone.
//
// One block per (group of query heads of one K/V head, row or pair of rows, split): the group's
// heads are rows 0-7 of the mma (S = Q K^T over the warp's 16 keys, then O = P V), the second
// row's rows 8-15, so each K and V row is read once for all of them, where the FMA kernel before
// this one (a block per query head) read it once per head: on the 1.5B's six heads a K/V head a
// 16-row verification's attention took 28 us a layer at a 512-token context, in L2 traffic and
// waves of blocks. Q, K, V and the probabilities go in as fp16 (the host cache holds K and V as
// halves anyway), scores and sums are fp32. Measured on the H200 (session 29, random Qwen2.5-1.5B
// shape, `salvo bench -p 512 -n 128 --verify --verify-rows 1,...,64 --verify-context 512`, FMA
// kernel / this one): k-row passes 1 1.213 / 1.254 ms, 8 1.448 / 1.406, 16 2.011 / 1.742, 64 6.097
// / 4.527; at a 2048-token context 16 rows 3.43 / 2.20; pp512 13513 / 18532 tok/s; tg128 812 / 838.
//
// Two rows a block (passes of 64 or more rows, pair_rows()): each K/V row read once for both.
//
// The block merges its warps and writes the split's (max, sum, unnormalised output) per head.
// The last block of a (group, row) to finish merges the splits in order (a count per (group,
// row), which that block resets to 0 for the next pass): one launch a layer instead of two, and
// the merge is the same whichever block does it. A row whose keys fit one split (any context
// under kKeysPerSplit) skips the partial: its block writes the output with the merge's
// arithmetic.
//
// Latency, not bandwidth, sets a decode's attention time (a few hundred KB a layer): each
// dependent round of loads costs microseconds. So a warp takes only 16 keys and issues the loads
// of all their K elements at once, then of all their V elements: two rounds of memory latency.
constexpr int kKeysPerWarp = 16;
constexpr int kKeysPerSplit = kWarps * kKeysPerWarp;
constexpr int kMaxGroup = 8;            // query heads a row of a block: 8 of the mma's 16 rows
constexpr int kDimsPerRound = 128;      // elements of K (V) rows whose loads a warp issues at once
constexpr int kMinBlocksPerSplit = 32;  // head_group()
constexpr int kMaxHeadDim = 256;

// What a block needs of its rows and of the batch rows they may see, loaded in one round at the
// kernel's start: each dependent round of loads (the row's sequence, then that sequence's
// committed count, then the batch rows' entries) cost a memory latency before the K rows could
// be requested.
struct RowMeta {
  int seq, pos, first, n_committed, n_batch_keys;
};
// Batch row `lane`'s entries (the first 32 rows: all of a decode step's or a tree's), for the
// scans of the visible rows.
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

// Dynamic shared memory: each of the block's rows' visible batch slots, then each warp's
// unnormalised output [row][group][dim_v] (the merge reuses that space for the splits' maxima,
// sums and weights).
__device__ __forceinline__ int32_t* row_slots(const AttentionParams& p, int32_t* slots, int r) {
  return slots + r * ((p.batch.n_rows + 3) & ~3);
}
template <int kRows>
__device__ __forceinline__ float* block_scratch(const AttentionParams& p, int32_t* slots) {
  return reinterpret_cast<float*>(row_slots(p, slots, kRows));
}

// Four fp16 values (8 bytes) of a cache row, or zeros.
__device__ __forceinline__ uint2 load4(const uint16_t* p, bool ok) {
  return ok ? *reinterpret_cast<const uint2*>(p) : make_uint2(0u, 0u);
}

// The fp16 pair (lo, hi) from element j of a and of b (j a constant after unrolling).
__device__ __forceinline__ uint32_t pair_of(const uint2& a, const uint2& b, int j) {
  const uint32_t x = j < 2 ? a.x : a.y, y = j < 2 ? b.x : b.y;
  return __byte_perm(x, y, j % 2 == 0 ? 0x5410 : 0x7632);
}

// The block's kRows rows (launch rows kRows blockIdx.y + r; n_here of them exist) over the keys
// of split blockIdx.z. Row r's heads are rows 8 r + h of the mma.
// With `local` (a cluster's merge) the partials go to the block's own shared memory,
// [row][head][2 + dim_v], instead of p.partial.
template <int kRows>
__device__ __forceinline__ void split_partial(const AttentionParams& p, const RowMeta (&rm)[kRows],
                                              int n_here, const BatchEntry& mine, bool direct,
                                              int32_t* slots, float* local = nullptr) {
  const int group = p.group, head0 = blockIdx.x * group;
  const int row0 = kRows * blockIdx.y, split = blockIdx.z;  // row0: the launch's, not the batch's
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
  const int dim_v = p.head_dim_v, partial_width = 2 + dim_v;
  // Head head0 + h's partial of this split for row r: partial_of(r) + h head_stride.
  const int64_t head_stride =
      local != nullptr ? partial_width : static_cast<int64_t>(p.n_splits) * partial_width;
  auto partial_of = [&](int r) {
    if (local != nullptr) return local + static_cast<int64_t>(r) * group * partial_width;
    return p.partial + ((static_cast<int64_t>(row0 + r) * p.n_head + head0) * p.n_splits + split) *
                           partial_width;
  };
  bool beyond = true;  // beyond any key the block's rows can see
#pragma unroll
  for (int r = 0; r < kRows; ++r) {
    if (r < n_here)
      beyond = beyond && split * kKeysPerSplit >= rm[r].n_committed + rm[r].n_batch_keys;
  }
  if (beyond) {
    if (threadIdx.x < n_here * group) {
      float* ph = partial_of(threadIdx.x / group) + (threadIdx.x % group) * head_stride;
      ph[0] = -FLT_MAX;
      ph[1] = 0.0f;
    }
    return;
  }

  __shared__ int n_suffix[kRows];
  __shared__ float warp_m[kWarps][kRows * kMaxGroup], warp_l[kWarps][kRows * kMaxGroup];
  const int acc_floats = kRows * group * dim_v;
  float* acc = block_scratch<kRows>(p, slots) + warp * acc_floats;  // [row][group][dim_v]
  // The rows' query heads as fp16 pairs, two to an entry (elements 4 i .. 4 i + 3 of row r's
  // head h at [8 r + h][i]); rows of q_words entries, padded so that a half-warp's reads of 8
  // bytes at (g, 4 c + t) fall in distinct banks. Loaded with the scan, read just before each
  // mma. A row the block lacks is zeros.
  __shared__ uint2 q_frag[kRows * kMaxGroup * (kMaxHeadDim / 4 + 4)];
  const int q_words = p.head_dim / 4 + 4;
  {
    const int quads = p.head_dim / 4;
    for (int i = threadIdx.x; i < kRows * group * quads; i += blockDim.x) {
      const int r = kRows == 1 ? 0 : i / (group * quads), h = i / quads % group, c = i % quads;
      uint2 w = make_uint2(0u, 0u);
      if (r < n_here) {
        const int64_t row = p.row_base + row0 + r;
        const float4 v = *reinterpret_cast<const float4*>(
            p.q + (row * p.n_head + head0 + h) * p.head_dim + 4 * c);
        w = make_uint2(half2_bits(v.x, v.y), half2_bits(v.z, v.w));
      }
      q_frag[(r * kMaxGroup + h) * q_words + c] = w;
    }
  }
  // Warp r lists the batch rows that row r sees.
#pragma unroll
  for (int r = 0; r < kRows; ++r) {
    if (warp != r || r >= n_here) continue;
    const RowMeta& m = rm[r];
    const int row = p.row_base + row0 + r;
    int32_t* list = row_slots(p, slots, r);
    int count = 0;
    for (int k0 = 0; k0 < m.n_batch_keys; k0 += 32) {
      const int k = k0 + lane;
      const BatchEntry e = k0 == 0 ? mine : batch_entry(p, k);
      const bool visible = k < m.n_batch_keys && e.seq == m.seq &&
                           (p.block_visible || row <= e.end) &&
                           (p.window == 0 || m.pos - e.pos < p.window);
      const unsigned ballot = __ballot_sync(0xffffffffu, visible);
      if (visible) list[count + __popc(ballot & ((1u << lane) - 1))] = e.slot;
      count += __popc(ballot);
    }
    if (lane == 0) n_suffix[r] = count;
  }
  __syncthreads();

  const int kv_head = head0 / (p.n_head / p.n_head_kv);
  const int warp_first = split * kKeysPerSplit + warp * kKeysPerWarp;  // the warp's first key
  const int number = warp_first + lane;
  // Row r: the slot of its key `number` (lanes 0-15), and how many of the warp's keys it sees.
  int slot[kRows], n_warp_keys[kRows];
  bool valid[kRows];
  const uint16_t* k_base[kRows];
  const uint16_t* v_base[kRows];
#pragma unroll
  for (int r = 0; r < kRows; ++r) {
    const RowMeta& m = rm[r];
    const int n_keys = r < n_here ? m.n_committed + n_suffix[r] : 0;
    valid[r] = lane < kKeysPerWarp && number < n_keys;
    slot[r] = valid[r] ? (number < m.n_committed ? m.first + number
                                                 : row_slots(p, slots, r)[number - m.n_committed])
                       : 0;
    n_warp_keys[r] = max(0, min(kKeysPerWarp, n_keys - warp_first));  // uniform
    k_base[r] =
        p.kv.k + static_cast<int64_t>(m.seq) * p.kv.capacity * p.kv.k_width + kv_head * p.head_dim;
    v_base[r] =
        p.kv.v + static_cast<int64_t>(m.seq) * p.kv.capacity * p.kv.v_width + kv_head * dim_v;
  }
  // Two rows share the warp's K and V rows where each key either is seen by one of them only or
  // has the same slot in both (the committed keys of one sequence, a tree path's ancestors): one
  // load for both, and the row that does not see a key masks its score and multiplies its value
  // by a probability of 0, which adds +-0 to the row's sums as the zero value of a 1-row pass
  // does. Otherwise (siblings' last keys, other sequences, sliding windows) a pass each.
  bool shared = true;
  if (kRows == 2 && n_here == 2) {
    shared = rm[0].seq == rm[kRows - 1].seq &&
             __all_sync(0xffffffffu, !(valid[0] && valid[kRows - 1]) || slot[0] == slot[kRows - 1]);
  }
  const int n_pass = shared ? 1 : kRows;
  int n_any = 0;
#pragma unroll
  for (int r = 0; r < kRows; ++r) n_any = max(n_any, n_warp_keys[r]);
  // The pass's rows' keys: the union when shared, else row `pass`'s.
  auto pass_slot = [&](int pass) {
    return shared ? (valid[0] ? slot[0] : slot[kRows - 1]) : pass == 0 ? slot[0] : slot[kRows - 1];
  };
  auto pass_keys = [&](int pass) {
    return shared ? n_any : pass == 0 ? n_warp_keys[0] : n_warp_keys[kRows - 1];
  };
  if (n_any == 0) {
    if (lane < kRows * kMaxGroup) warp_m[warp][lane] = -FLT_MAX, warp_l[warp][lane] = 0.0f;
  } else {
    // Scores: lane (g, t) holds the scores of keys 8 j + 2 t and + 1 of row 0's head g
    // (s[j][0..1]) and of row 1's (s[j][2..3]); as the B operand it reads key 8 j + g. The k
    // slots of a step take the head's elements in an order of their own (the dot product does
    // not care when Q and K agree): slots 2t, 2t + 1, 2t + 8, 2t + 9 of step c are elements
    // 16 c + 4 t + 0..3, four halves (8 bytes) of a row. The first version read float2 pairs in the
    // natural order (twice the load instructions, each across 8 rows) and Q per warp from
    // global memory: a 1.5B decode step cost 0.12 ms more than with the FMA kernel; this one
    // 0.04 ms. Staging K and V through shared memory for ldmatrix was worse still (+0.28 ms).
    float s[2][4];
    for (int pass = 0; pass < n_pass; ++pass) {
      const int lane_slot = pass_slot(pass), n_load = pass_keys(pass);
      const uint16_t* kb = pass == 0 ? k_base[0] : k_base[kRows - 1];
      const uint16_t* k_row[2];
      bool k_ok[2];
#pragma unroll
      for (int j = 0; j < 2; ++j) {
        const int key = 8 * j + g;
        k_row[j] =
            kb + static_cast<int64_t>(__shfl_sync(0xffffffffu, lane_slot, key)) * p.kv.k_width;
        k_ok[j] = key < n_load;
      }
      float ps[2][4] = {};
      for (int d0 = 0; d0 < p.head_dim; d0 += kDimsPerRound) {
        uint2 kv[2][8];
#pragma unroll
        for (int c = 0; c < 8; ++c) {
          const int d = d0 + 16 * c + 4 * t;
#pragma unroll
          for (int j = 0; j < 2; ++j) kv[j][c] = load4(k_row[j] + d, k_ok[j] && d < p.head_dim);
        }
#pragma unroll
        for (int c = 0; c < 8; ++c) {
          if (d0 + 16 * c >= p.head_dim) break;  // uniform
          const int d = d0 + 16 * c + 4 * t;  // zeros past head_dim: K's are, and 0 x stale is not
          const bool q_ok = g < group && d < p.head_dim;
          const uint2 q0 = q_ok ? q_frag[g * q_words + d / 4] : make_uint2(0u, 0u);
          const uint2 q1 =
              kRows == 2 && q_ok ? q_frag[(kMaxGroup + g) * q_words + d / 4] : make_uint2(0u, 0u);
          const uint32_t a[4] = {q0.x, q1.x, q0.y, q1.y};
#pragma unroll
          for (int j = 0; j < 2; ++j) {
            mma16816(ps[j], a, kv[j][c].x, kv[j][c].y);
          }
        }
      }
#pragma unroll
      for (int j = 0; j < 2; ++j) {
        if (pass == 0) s[j][0] = ps[j][0], s[j][1] = ps[j][1];
        if (pass == n_pass - 1) s[j][2] = ps[j][2], s[j][3] = ps[j][3];
      }
    }
    // Softmax over the warp's keys, per row and head: the 4 lanes of a g hold its 16 keys. The
    // probabilities are rounded to fp16 (the mma's input) before they are summed, so the sum
    // is that of the weights used.
    uint32_t pa[kRows][2];
#pragma unroll
    for (int r = 0; r < kRows; ++r) {
      const int n_keys = n_warp_keys[r];
      float sc[2][2], m = -FLT_MAX;
#pragma unroll
      for (int j = 0; j < 2; ++j) {
#pragma unroll
        for (int i = 0; i < 2; ++i) {
          sc[j][i] = 8 * j + 2 * t + i < n_keys ? __fmul_rn(s[j][2 * r + i], p.scale) : -FLT_MAX;
          m = fmaxf(m, sc[j][i]);
        }
      }
      m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, 1));
      m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, 2));
      float l_pair[2];
#pragma unroll
      for (int j = 0; j < 2; ++j) {
        // score - m <= 0: the fast exp is safe
        const float e0 = 8 * j + 2 * t < n_keys ? __expf(sc[j][0] - m) : 0.0f;
        const float e1 = 8 * j + 2 * t + 1 < n_keys ? __expf(sc[j][1] - m) : 0.0f;
        const __half2 h = __floats2half2_rn(e0, e1);
        pa[r][j] = *reinterpret_cast<const uint32_t*>(&h);
        l_pair[j] = __fadd_rn(__low2float(h), __high2float(h));
      }
      float l = __fadd_rn(l_pair[0], l_pair[1]);
      l = __fadd_rn(l, __shfl_xor_sync(0xffffffffu, l, 1));
      l = __fadd_rn(l, __shfl_xor_sync(0xffffffffu, l, 2));
      if (t == 0 && g < group)
        warp_m[warp][r * kMaxGroup + g] = m, warp_l[warp][r * kMaxGroup + g] = l;
    }

    // O = P V: P's C fragments are the A fragment with the keys as k (row 1's probabilities in
    // the mma's rows 8-15). The B operand reads keys 2t, 2t + 1, 2t + 8, 2t + 9; column g of n
    // tile 4 q + j is element 32 q + 4 g + j, so a lane reads four halves of a row per quad of
    // tiles, and the C fragment's columns 2t, 2t + 1 land at elements 32 q + 8 t + j and + 4.
    const uint32_t a[4] = {pa[0][0], kRows == 2 ? pa[kRows - 1][0] : 0u, pa[0][1],
                           kRows == 2 ? pa[kRows - 1][1] : 0u};
    for (int pass = 0; pass < n_pass; ++pass) {
      const int lane_slot = pass_slot(pass), n_load = pass_keys(pass);
      const uint16_t* vb = pass == 0 ? v_base[0] : v_base[kRows - 1];
      const uint16_t* v_row[4];
      bool v_ok[4];
#pragma unroll
      for (int k = 0; k < 4; ++k) {
        const int key = 2 * t + (k & 1) + 8 * (k >> 1);
        v_row[k] =
            vb + static_cast<int64_t>(__shfl_sync(0xffffffffu, lane_slot, key)) * p.kv.v_width;
        v_ok[k] = key < n_load;  // never a stale slot's value times 0: it may be NaN
      }
      const bool first_row = pass == 0 && g < group,
                 second_row = kRows == 2 && pass == n_pass - 1 && g < group;
      for (int d0 = 0; d0 < dim_v; d0 += kDimsPerRound) {
        constexpr int kQuads = kDimsPerRound / 32;
        uint2 vv[kQuads][4];
#pragma unroll
        for (int q = 0; q < kQuads; ++q) {
          const int d = d0 + 32 * q + 4 * g;
#pragma unroll
          for (int k = 0; k < 4; ++k) vv[q][k] = load4(v_row[k] + d, v_ok[k] && d < dim_v);
        }
#pragma unroll
        for (int q = 0; q < kQuads; ++q) {
          if (d0 + 32 * q >= dim_v) break;  // uniform
#pragma unroll
          for (int j = 0; j < 4; ++j) {
            float o[4] = {};
            mma16816(o, a, pair_of(vv[q][0], vv[q][1], j), pair_of(vv[q][2], vv[q][3], j));
            const int e = d0 + 32 * q + 8 * t + j;
            float* acc0 = acc + g * dim_v + e;
            float* acc1 = acc0 + group * dim_v;
            if (first_row && e < dim_v) acc0[0] = o[0];
            if (first_row && e + 4 < dim_v) acc0[4] = o[1];
            if (second_row && e < dim_v) acc1[0] = o[2];
            if (second_row && e + 4 < dim_v) acc1[4] = o[3];
          }
        }
      }
    }
  }
  __syncthreads();

  // The block's merge of its warps: each (row, head)'s weights exp(m_w - m_all) once, then per
  // element; a warp of 32 consecutive elements is one head's quantization block
  // (head_dim_v % 32 == 0 when the int8 output is asked for).
  __shared__ float weight[kRows * kMaxGroup][kWarps], head_m[kRows * kMaxGroup],
      head_l[kRows * kMaxGroup];
  if (threadIdx.x < n_here * group) {
    const int i = (threadIdx.x / group) * kMaxGroup + threadIdx.x % group;
    float m_all = -FLT_MAX;
    for (int w = 0; w < kWarps; ++w) m_all = fmaxf(m_all, warp_m[w][i]);
    float l_all = 0.0f;
    for (int w = 0; w < kWarps; ++w) {
      weight[i][w] = warp_l[w][i] > 0.0f ? __expf(warp_m[w][i] - m_all) : 0.0f;
      if (warp_l[w][i] > 0.0f) l_all = __fmaf_rn(warp_l[w][i], weight[i][w], l_all);
    }
    head_m[i] = m_all, head_l[i] = l_all;
  }
  __syncthreads();
  const float* accs = block_scratch<kRows>(p, slots);
  for (int e = threadIdx.x; e < n_here * group * dim_v; e += blockDim.x) {
    const int r = kRows == 1 ? 0 : e / (group * dim_v), h = e / dim_v % group, d = e % dim_v;
    const int i = r * kMaxGroup + h;
    float o = 0.0f;
    for (int w = 0; w < kWarps; ++w) {
      if (warp_l[w][i] > 0.0f) o = __fmaf_rn(accs[w * acc_floats + e], weight[i][w], o);
    }
    if (direct) {
      // merge_splits over this one split: m_all is the split's, its weight exp(m_all - m_all).
      const float w_self = __expf(head_m[i] - head_m[i]);
      write_output(p, head0 + h, p.row_base + row0 + r, d,
                   __fdiv_rn(__fmaf_rn(o, w_self, 0.0f), __fmaf_rn(head_l[i], w_self, 0.0f)));
    } else {
      float* ph = partial_of(r) + h * head_stride;
      ph[2 + d] = o;
      if (d == 0) ph[0] = head_m[i], ph[1] = head_l[i];
    }
  }
}

// Splits of the row that can hold a key it sees; the merge reads only those.
__device__ __forceinline__ int used_splits(const RowMeta& rm, int n_splits) {
  const int max_keys = rm.n_committed + rm.n_batch_keys;
  return min(n_splits, (max_keys + kKeysPerSplit - 1) / kKeysPerSplit);
}

// Merges the splits of the block's rows (launch rows row0 + r, r < n_here; of the block's group)
// in order into out (and its int8 and fp16 forms), per head. Splits at or beyond a row's last
// possible key hold no partial (or an empty one, l = 0), so its merge stops before them (a
// 4096-slot cache has 32 splits; a short context uses one). `partial(r, h, s, i)` reads element i
// (0: max, 1: sum, 2 + d: output element d) of row r's head h in split s: GlobalPartials, from
// other blocks of this launch, or ClusterPartials, from the shared memory of the cluster's.
//
// Two rounds of loads for all the rows: every split's (max, sum) at once, then every split's
// output element; a head's split weights exp(m_s - m_all) are computed once, in split order, by
// one thread (the same operations in the same order as an element's own loop would do them). A
// merge that read them per element waited on several dependent rounds of L2 loads a split.
constexpr int kMergeMaxSplits = 256;  // 32768 slots; wider caches take the per-element loop

// The partials in global memory, read past L1 (__ldcg), which is not coherent between SMs.
struct GlobalPartials {
  const AttentionParams& p;
  int row0, head0, n_splits;
  __device__ float operator()(int r, int h, int s, int i) const {
    const int64_t row_head = static_cast<int64_t>(row0 + r) * p.n_head + head0 + h;
    return __ldcg(p.partial + (row_head * n_splits + s) * (2 + p.head_dim_v) + i);
  }
};
// The partials of a cluster's blocks, each in its own shared memory ([row][head][2 + dim_v] at
// the same offset `local` in every block; split s is the cluster's block s).
struct ClusterPartials {
  const float* local;
  int group, width;
  __device__ float operator()(int r, int h, int s, int i) const {
    return cooperative_groups::this_cluster().map_shared_rank(local + (r * group + h) * width,
                                                              s)[i];
  }
};

template <int kRows, class Partials>
__device__ void merge_splits(const AttentionParams& p, const RowMeta (&rm)[kRows], int n_here,
                             int row0, int n_splits, float* scratch, const Partials& partial) {
  const int group = p.group, head0 = blockIdx.x * group;
  const int dim_v = p.head_dim_v;
  int n_used[kRows], max_used = 0;
#pragma unroll
  for (int r = 0; r < kRows; ++r) {
    n_used[r] = r < n_here ? used_splits(rm[r], n_splits) : 0;
    max_used = max(max_used, n_used[r]);
  }
  auto used = [&](int r) { return kRows == 1 || r == 0 ? n_used[0] : n_used[kRows - 1]; };
  if (max_used <= kMergeMaxSplits) {
    const int per_row = group * max_used;  // [row][head][split] each
    float* split_m = scratch;
    float* split_l = split_m + kRows * per_row;
    float* split_w = split_l + kRows * per_row;
    __shared__ float l_shared[kRows * kMaxGroup];
    for (int i = threadIdx.x; i < n_here * per_row; i += blockDim.x) {
      const int r = kRows == 1 ? 0 : i / per_row, h = i / max_used % group, s = i % max_used;
      if (s >= used(r)) continue;
      split_m[i] = partial(r, h, s, 0);
      split_l[i] = partial(r, h, s, 1);
    }
    __syncthreads();
    if (threadIdx.x < n_here * group) {
      const int r = kRows == 1 ? 0 : threadIdx.x / group, n = used(r);
      const int h0 = threadIdx.x * max_used;  // (r group + h) max_used
      float m_all = -FLT_MAX;
      for (int s = 0; s < n; ++s) {
        if (split_l[h0 + s] > 0.0f) m_all = fmaxf(m_all, split_m[h0 + s]);
      }
      float l_all = 0.0f;
      for (int s = 0; s < n; ++s) {
        split_w[h0 + s] = __expf(split_m[h0 + s] - m_all);
        if (split_l[h0 + s] > 0.0f) l_all = __fmaf_rn(split_l[h0 + s], split_w[h0 + s], l_all);
      }
      l_shared[r * kMaxGroup + threadIdx.x % group] = l_all;
    }
    __syncthreads();
    // With head_dim_v % 32 == 0 a warp's elements of one loop turn are one quantization block.
    for (int e = threadIdx.x; e < n_here * group * dim_v; e += blockDim.x) {
      const int r = kRows == 1 ? 0 : e / (group * dim_v), h = e / dim_v % group, d = e % dim_v;
      const int n = used(r), h0 = (r * group + h) * max_used;
      float o = 0.0f;
#pragma unroll 4
      for (int s = 0; s < n; ++s) {
        const float v = partial(r, h, s, 2 + d);
        if (split_l[h0 + s] > 0.0f) o = __fmaf_rn(v, split_w[h0 + s], o);
      }
      write_output(p, head0 + h, p.row_base + row0 + r, d,
                   __fdiv_rn(o, l_shared[r * kMaxGroup + h]));
    }
    return;
  }
  for (int e = threadIdx.x; e < n_here * group * dim_v; e += blockDim.x) {
    const int r = kRows == 1 ? 0 : e / (group * dim_v), h = e / dim_v % group, d = e % dim_v;
    const int n = used(r);
    float m_all = -FLT_MAX;
    for (int s = 0; s < n; ++s) {
      if (partial(r, h, s, 1) > 0.0f) m_all = fmaxf(m_all, partial(r, h, s, 0));
    }
    float l_all = 0.0f;
    for (int s = 0; s < n; ++s) {
      const float l = partial(r, h, s, 1);
      if (l > 0.0f) l_all = __fmaf_rn(l, __expf(partial(r, h, s, 0) - m_all), l_all);
    }
    float o = 0.0f;
    for (int s = 0; s < n; ++s) {
      if (partial(r, h, s, 1) > 0.0f) {
        o = __fmaf_rn(partial(r, h, s, 2 + d), __expf(partial(r, h, s, 0) - m_all), o);
      }
    }
    write_output(p, head0 + h, p.row_base + row0 + r, d, __fdiv_rn(o, l_all));
  }
}

// The committed K and V rows that the warp's lanes 0-15 will read in split blockIdx.z, asked
// into L2 (no registers held): before the PDL wait their latency overlaps the Q/K/V launch. Safe
// there: committed rows were written by earlier steps or by commit_kv, kernels that have finished
// once the kernel before this one has passed its own wait (every kernel waits, then lets the
// next one in). The default since session 62 (AttentionParams::early; SALVO_CUDA_ATTENTION_EARLY=0
// for A/B): on an H100, random 7B, two alternations, 1-row pass 2.617 / 2.636 against 2.661 /
// 2.659 ms, 16 rows 3.423 / 3.430 against 3.453 / 3.480.
template <int kRows>
__device__ __forceinline__ void prefetch_committed(const AttentionParams& p,
                                                   const RowMeta (&rm)[kRows], int n_here) {
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  const int number = blockIdx.z * kKeysPerSplit + warp * kKeysPerWarp + lane;
  const int kv_head = blockIdx.x * p.group / (p.n_head / p.n_head_kv);
#pragma unroll
  for (int r = 0; r < kRows; ++r) {
    if (r >= n_here || lane >= kKeysPerWarp || number >= rm[r].n_committed) continue;
    const int64_t row = static_cast<int64_t>(rm[r].seq) * p.kv.capacity + rm[r].first + number;
    const char* k =
        reinterpret_cast<const char*>(p.kv.k + row * p.kv.k_width + kv_head * p.head_dim);
    const char* v =
        reinterpret_cast<const char*>(p.kv.v + row * p.kv.v_width + kv_head * p.head_dim_v);
    for (int b = 0; b < 2 * p.head_dim; b += 128)
      asm volatile("prefetch.global.L2 [%0];" ::"l"(k + b));
    for (int b = 0; b < 2 * p.head_dim_v; b += 128)
      asm volatile("prefetch.global.L2 [%0];" ::"l"(v + b));
  }
}

// The block's share of p.l2_prefetch_bytes asked into L2 (prefetch_l2). After the wait it lost
// (session 64, H100, random 7B at 10%: tg128 377.3, 379.2 against 385.1, 384.8 tok/s before it).
__device__ __forceinline__ void prefetch_weights(const AttentionParams& p) {
  if (p.l2_prefetch_bytes <= 0) return;  // before the indices: 80 registers, not 84
  const int64_t blocks = static_cast<int64_t>(gridDim.x) * gridDim.y * gridDim.z;
  const int64_t block =
      (static_cast<int64_t>(blockIdx.z) * gridDim.y + blockIdx.y) * gridDim.x + blockIdx.x;
  prefetch_l2(p.l2_prefetch, p.l2_prefetch_bytes, block, blocks);
}

// The floats behind a block's slots: the warps' outputs, which the merge's split arrays reuse.
__host__ __device__ inline int64_t scratch_floats(int rows_a_block, int group, int head_dim_v,
                                                  int n_splits) {
  const int64_t outputs = int64_t{kWarps} * rows_a_block * group * head_dim_v;
  const int64_t merge =
      3ll * rows_a_block * group * (n_splits < kMergeMaxSplits ? n_splits : kMergeMaxSplits);
  return outputs > merge ? outputs : merge;
}

// The block's partials of a cluster's merge, behind that scratch (attention_smem() counts them
// when p.cluster > 1).
template <int kRows>
__device__ __forceinline__ float* cluster_partial(const AttentionParams& p, int32_t* slots) {
  return block_scratch<kRows>(p, slots) + scratch_floats(kRows, p.group, p.head_dim_v, p.n_splits);
}

// The first cluster's blocks (splits 0 .. p.cluster - 1; those past n_used compute nothing)
// write their partials to their own shared memory, and block 0 merges them once all have: the
// same arithmetic as through global memory, without the global partials, the fence, the count
// and the L2 round trips that merge waits on (session 64 on an H100: a row's second split cost a
// 1-row pass of the random 1.5B 54 us, 1.9 us a layer, and its 16-row pass 76 us).
template <int kRows>
__device__ void cluster_splits(const AttentionParams& p, const RowMeta (&rm)[kRows], int n_here,
                               const BatchEntry& mine, int n_used, int32_t* slots) {
  namespace cg = cooperative_groups;
  const cg::cluster_group cluster = cg::this_cluster();
  float* local = cluster_partial<kRows>(p, slots);
  if (static_cast<int>(blockIdx.z) < n_used) {
    split_partial<kRows>(p, rm, n_here, mine, false, slots, local);
  }
  cluster.sync();  // every partial written and visible to the cluster
  if (blockIdx.z == 0) {
    merge_splits<kRows>(p, rm, n_here, kRows * blockIdx.y, p.n_splits,
                        block_scratch<kRows>(p, slots),
                        ClusterPartials{local, p.group, 2 + p.head_dim_v});
  }
  cluster.sync();  // no block leaves while block 0 may still read its shared memory
}

// kSkip: blocks past the used splits return at once instead of writing an empty partial and
// taking their turn at the count (a 4096-slot cache launches 32 splits; a short context uses 1).
// kRows: batch rows a block (launch rows kRows blockIdx.y + r). kCluster: launched in clusters of
// p.cluster blocks along the splits (cluster_splits(); a kernel of its own, for the merge's
// registers would cost the others occupancy).
template <bool kSkip, int kRows, bool kCluster = false>
__global__ void __launch_bounds__(kWarps * 32, 2) attention_kernel(AttentionParams p) {
  static_assert(kSkip || !kCluster, "a cluster's merge skips the unused splits");
  prefetch_weights(p);
  if (p.early == 0) pdl_enter();
  extern __shared__ int32_t slots[];
  const int row0 = kRows * blockIdx.y;
  const int n_here = min(kRows, p.launch_rows - row0);
  RowMeta rm[kRows];
#pragma unroll
  for (int r = 0; r < kRows; ++r) {
    rm[r] = r < n_here ? row_meta(p, p.row_base + row0 + r) : RowMeta{0, 0, 0, 0, 0};
  }
  // The scanning warps' first batch entries load with the rows' (the scans need them next).
  const BatchEntry mine =
      threadIdx.x < 32 * kRows ? batch_entry(p, threadIdx.x % 32) : BatchEntry{-1, 0, 0, 0};
  if (p.early != 0) {
    if (p.early == 2) prefetch_committed<kRows>(p, rm, n_here);
    pdl_enter();
  }
  int n_used = p.n_splits;
  if (kSkip) {
    n_used = 0;
#pragma unroll
    for (int r = 0; r < kRows; ++r) {
      if (r < n_here) n_used = max(n_used, used_splits(rm[r], p.n_splits));
    }
  }
  // Keys in 2 to p.cluster splits: the first cluster's blocks merge through distributed shared
  // memory (n_used is the same in every block of a cluster: the same rows).
  if constexpr (kCluster) {
    if (n_used > 1 && n_used <= p.cluster) {
      if (static_cast<int>(blockIdx.z) >= p.cluster) return;  // uniform over the cluster
      return cluster_splits<kRows>(p, rm, n_here, mine, n_used, slots);
    }
  }
  if (kSkip && static_cast<int>(blockIdx.z) >= n_used) return;  // uniform over the block
  // One split (any context under kKeysPerSplit): no partial, no count, no second pass over L2.
  if (kSkip && n_used == 1) return split_partial<kRows>(p, rm, n_here, mine, true, slots);
  split_partial<kRows>(p, rm, n_here, mine, false, slots);
  if (last_to_arrive(p.split_counts + blockIdx.y * p.n_head + blockIdx.x * p.group, n_used)) {
    merge_splits<kRows>(
        p, rm, n_here, row0, p.n_splits, block_scratch<kRows>(p, slots),
        GlobalPartials{p, row0, static_cast<int>(blockIdx.x) * p.group, p.n_splits});
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
__global__ void commit_kv_kernel(uint16_t* k, uint16_t* v, int64_t k_stride, int64_t v_stride,
                                 int k_width, int v_width, const int32_t* from, const int32_t* to,
                                 int n_moves) {
  pdl_enter();
  const int layer = blockIdx.y;
  const int e = blockIdx.x * blockDim.x + threadIdx.x;
  if (e < k_width) {
    uint16_t* base = k + layer * k_stride;
    for (int j = 0; j < n_moves; ++j) {
      base[static_cast<int64_t>(to[j]) * k_width + e] =
          base[static_cast<int64_t>(from[j]) * k_width + e];
    }
  }
  if (e < v_width) {
    uint16_t* base = v + layer * v_stride;
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

namespace {
// Query heads a block takes: a divisor of the heads per K/V head up to kMaxGroup. A head's bits
// do not depend on it (the mma's rows are independent), so it follows the launch's shape: the
// largest group that still leaves min_blocks blocks a split. Few rows (a decode) want a head a
// block, as many blocks as there are, for the latency of a block's merge and output writes grows
// with its heads; many rows want the K/V rows read once for every head of a group.
// SALVO_CUDA_ATTENTION_GROUP=N caps the group and SALVO_CUDA_ATTENTION_BLOCKS sets min_blocks
// (A/B runs; read at every launch, a graph captures them once).
// Where the next group down reads every K/V row 7 or more times as often (7 heads a K/V head, as
// Qwen2.5-7B's 28 on 4: 7, then 1), half of min_blocks will do. Session 38 on the H200, random
// 7B shape, 4-row pass at a 512-token context: 16 blocks of 7 heads 2.638, 2.656 ms against 112
// of one 2.859, 2.841 (the 8-row pass, 32 blocks of 7 either way, 2.66-2.68). Halving
// min_blocks for every shape lost 2-3% on the 1.5B's 4- and 8-row passes (6 heads a K/V head:
// groups of 3 and 6 for 1 and 3), so only that step is eased.
// Twice min_blocks where a group above one leaves that many, min_blocks otherwise: session 64 on
// an H100, random 1.5B, 16-row pass (groups of 3 instead of 6: 64 blocks a split, not 32) 1.656,
// 1.674 against 1.721, 1.720 ms; min_blocks 64 alone also took the 8-row pass to a head a block
// (1.406 against 1.321 ms) and the 7B's 4-row pass (2.899 against 2.772).
int head_group(int n_head, int n_head_kv, int n_rows) {
  const int per_kv = n_head / n_head_kv;
  const int cap = std::clamp(env_int("SALVO_CUDA_ATTENTION_GROUP", std::min(per_kv, kMaxGroup)), 1,
                             std::min(per_kv, kMaxGroup));
  const int min_blocks = env_int("SALVO_CUDA_ATTENTION_BLOCKS", kMinBlocksPerSplit);
  // The largest group > 1 that leaves `want` blocks a split, or 1.
  auto largest = [&](int want) {
    for (int group = cap; group > 1; --group) {
      if (per_kv % group != 0) continue;
      int next = group - 1;
      while (per_kv % next != 0) --next;
      if (n_rows * (n_head / group) >= (group >= 7 * next ? want / 2 : want)) return group;
    }
    return 1;
  };
  const int wide = largest(2 * min_blocks);
  return wide > 1 ? wide : largest(min_blocks);
}

// The warps' outputs and the merge's split arrays share the space behind the slots; a cluster's
// merge puts the block's partials behind them (cluster_partial()).
size_t attention_smem(int n_rows, int rows_a_block, int group, int head_dim_v, int n_splits,
                      int cluster) {
  size_t floats = scratch_floats(rows_a_block, group, head_dim_v, n_splits);
  if (cluster > 1) floats += static_cast<size_t>(rows_a_block) * group * (2 + head_dim_v);
  return (static_cast<size_t>(rows_a_block) * ((n_rows + 3) & ~3) + floats) * sizeof(float);
}
constexpr size_t kMaxSmem = 160 << 10;

template <bool kSkip, int kRows, bool kCluster = false>
void launch_attention(dim3 grid, size_t smem, cudaStream_t stream, const AttentionParams& p) {
  // Past the default 48 KB (eight heads of 256 elements, or a batch of thousands of rows).
  static const bool opted = [] {
    SALVO_CUDA_CHECK(cudaFuncSetAttribute(attention_kernel<kSkip, kRows, kCluster>,
                                          cudaFuncAttributeMaxDynamicSharedMemorySize, kMaxSmem));
    return true;
  }();
  (void)opted;
  launch_cluster(attention_kernel<kSkip, kRows, kCluster>, grid,
                 dim3(1, 1, kCluster ? p.cluster : 1), kWarps * 32, smem, stream, p);
}

// Passes of at least this many rows take two rows a block (SALVO_CUDA_ATTENTION_PAIRS=N for A/B
// runs, 0 for never; read at every launch, a graph captures it once). Session 59 on an H100
// (random shapes, 512-token context, pairs from 2 rows against none): the 7B's 16-row pass took
// 26.3 us of attention a layer against 21.5 (3.72 against 3.59 ms a pass), its 32-row pass 5.51
// against 5.43 ms, its 64-row pass 10.07 against 10.19, and a 512-row prefill chunk 198 against
// 252 us a layer (pp512 7191 against 7049 tok/s; the 1.5B 18210 against 17734). Halving the
// blocks lengthens the chain a block waits on (two rows' merges in turn, two passes where the
// rows' last keys differ) more than the shared loads save, until the launch has waves of blocks
// to spare. Both rows' splits now merge in one pass (session 61 on an H100, random 7B, against
// the merges in turn: pp512 7283 against 7206 tok/s, 64-row pass 9.96 against 10.08 ms; with
// pairs from 2 rows the 16-row pass still lost, 3.68 against 3.53 ms).
int pair_rows() { return env_int("SALVO_CUDA_ATTENTION_PAIRS", 64); }
}  // namespace

void attention(const AttentionParams& p, cudaStream_t stream) {
  if (p.batch.n_rows == 0) return;
  const int n_splits = attention_splits(p.kv.capacity);
  int per_launch = attention_rows_per_launch(p.n_head, p.kv.capacity, p.head_dim_v);
  if (p.rows_per_launch > 0) per_launch = std::min(per_launch, p.rows_per_launch);
  const int group = head_group(p.n_head, p.n_head_kv, p.batch.n_rows);
  const int pairs = pair_rows();
  int rows_a_block = pairs > 0 && p.batch.n_rows >= pairs ? 2 : 1;
  const bool serial = serial_attention();
  // SALVO_CUDA_ATTENTION_CLUSTER=C (2 to 8; an A/B form, 0 by default): the splits' blocks in
  // clusters of C, the grid's splits padded to a multiple of C, so that rows whose keys span 2 to C
  // splits merge them through distributed shared memory (cluster_splits()); not with the serial
  // kernel, whose blocks all take their turn at the count. Session 66 on an H100 (random shapes,
  // `salvo bench -p 0 -n 0 -r 3 --verify --verify-rows 1,16 --verify-context 512`, two
  // alternations, ms, clusters of 2 / of 8 / none): it wins only the 1.5B's 1-row pass (1.187,
  // 1.182 / 1.213, 1.224 / 1.226, 1.224) and loses the 7B's (2.647, 2.655 / 2.717 / 2.619,
  // 2.620; at a 128-token context too) and every 16-row pass (1.5B 1.761 / 2.20 / 1.657; 7B
  // 3.56-3.61 / 4.17 / 3.47); pp512 -15% with 8.
  int cluster = std::clamp(env_int("SALVO_CUDA_ATTENTION_CLUSTER", 0), 0, kMaxPortableCluster);
  if (serial || cluster < 2 || n_splits < 2 || !hopper()) cluster = 0;
  if (attention_smem(p.batch.n_rows, rows_a_block, group, p.head_dim_v, n_splits, cluster) >
      kMaxSmem) {
    rows_a_block = 1;
  }
  const size_t smem =
      attention_smem(p.batch.n_rows, rows_a_block, group, p.head_dim_v, n_splits, cluster);
  // Attention's knobs are read at every launch, so that a test runs both forms (knobs.h).
  const int early = env_int("SALVO_CUDA_ATTENTION_EARLY", 2);
  // A row's arithmetic does not depend on which launch or block takes it: the same bits in one
  // launch or many, a row or two a block.
  for (int first = 0; first < p.batch.n_rows; first += per_launch) {
    AttentionParams part = p;
    part.row_base = first;
    part.launch_rows = std::min(per_launch, p.batch.n_rows - first);
    part.group = group;
    part.n_splits = n_splits;
    part.cluster = cluster;
    part.early = early;
    if (first > 0) part.l2_prefetch_bytes = 0;  // once a pass
    const dim3 grid(p.n_head / group, (part.launch_rows + rows_a_block - 1) / rows_a_block,
                    cluster > 1 ? (n_splits + cluster - 1) / cluster * cluster : n_splits);
    if (rows_a_block == 2) {
      if (serial) {
        launch_attention<false, 2>(grid, smem, stream, part);
      } else if (cluster > 1) {
        launch_attention<true, 2, true>(grid, smem, stream, part);
      } else {
        launch_attention<true, 2>(grid, smem, stream, part);
      }
    } else if (serial) {
      launch_attention<false, 1>(grid, smem, stream, part);
    } else if (cluster > 1) {
      launch_attention<true, 1, true>(grid, smem, stream, part);
    } else {
      launch_attention<true, 1>(grid, smem, stream, part);
    }
  }
}

void commit_kv(uint16_t* k, uint16_t* v, int64_t k_layer_stride, int64_t v_layer_stride,
               int n_layer, int k_width, int v_width, const int32_t* from, const int32_t* to,
               int n_moves, cudaStream_t stream) {
  if (n_moves == 0) return;
  const int width = k_width > v_width ? k_width : v_width;
  const dim3 grid((width + 127) / 128, n_layer);
  launch(commit_kv_kernel, grid, 128, 0, stream, k, v, k_layer_stride, v_layer_stride, k_width,
         v_width, from, to, n_moves);
}

}  // namespace salvo::cuda
