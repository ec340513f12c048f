// The k largest logits of each row (Model::forward_top), selected where the logits are: a
// sampling pass then copies back 2k numbers a row instead of the whole vocabulary.
//
// Keys: ops/logit_order.h (ops::top_logits's order), ties to the lower id. A radix select finds the
// k-th largest key eight bits at a time from a histogram of the keys that agree with the digits
// chosen so far; an ordered block-wide compaction then writes every element above it and the first
// of those equal to it, in position order. One block per row would leave a 151936-word row to a
// single SM (~0.6 ms); instead each row is cut into up to 32 chunks of at least k elements, each
// chunk's k largest go to a scratch list (in id order), and one block per row selects the k largest
// of those lists.
//
// Each pass over the elements is a loop of loads with atomics and barriers between them, so the
// loads did not overlap: four radix passes and the compaction over a 4748-element chunk from L2
// took ~54 us, as long again for the merge (H200, session 26's ncu of a sampled pass). So a block
// first copies its elements' keys into shared memory in one loop of independent loads, and every
// pass reads them there; only a selected element's value and id are read again. Wider rows than
// kMaxCachedKeys (a merge of k = 1024) read the source every pass, as before.
#include <algorithm>
#include <cstdint>

#include "backends/cuda/kernels.h"
#include "backends/cuda/launch.cuh"
#include "ops/logit_order.h"
#include "util/check.h"

namespace salvo::cuda {
namespace {

constexpr int kChunkThreads = 256, kMergeThreads = 1024, kMaxChunks = 32;
// Keys a block caches: 44 KB of dynamic shared memory, under the 48 KB a launch gets by default.
constexpr int kMaxCachedKeys = 11 * 1024;

// A stretch of a logit row: element i is id first_id + i.
struct RowSource {
  const float* x;
  int first_id;
  __device__ float value(int i) const { return x[i]; }
  __device__ int32_t id(int i) const { return first_id + i; }
};
// The chunks' selections of a row, one after another (ids increase along the list).
struct ListSource {
  const float* values;
  const int32_t* ids;
  __device__ float value(int i) const { return values[i]; }
  __device__ int32_t id(int i) const { return ids[i]; }
};

// The k largest of src's n elements (k <= n), written in position order to out_ids/out_values.
// `cache` (shared memory for n keys, or null) holds the keys for the passes after the first load.
template <int kT, class Src>
__device__ void select_top(const Src& src, int n, int k, int32_t* out_ids, float* out_values,
                           uint32_t* cache) {
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  __shared__ int hist[256];
  __shared__ int chosen_digit, chosen_remaining, warp_above[kT / 32], warp_ties[kT / 32];
  if (cache != nullptr) {
#pragma unroll 4
    for (int i = threadIdx.x; i < n; i += kT) cache[i] = logit_order_key(src.value(i));
    __syncthreads();
  }
  const auto key = [&](int i) {
    return cache != nullptr ? cache[i] : logit_order_key(src.value(i));
  };

  // After the pass at `shift`, `prefix` holds the k-th largest key's digits from bit `shift` up
  // and `remaining` how many of the wanted elements share them.
  uint32_t prefix = 0, mask = 0;
  int remaining = k;
  for (int shift = 24; shift >= 0; shift -= 8) {
    for (int i = threadIdx.x; i < 256; i += kT) hist[i] = 0;
    __syncthreads();
    for (int base = 0; base < n; base += kT) {  // a uniform trip count: whole warps take part
      const int i = base + threadIdx.x;
      const uint32_t u = i < n ? key(i) : 0;
      const bool match = i < n && (u & mask) == prefix;
      const int digit = static_cast<int>((u >> shift) & 0xFF);
      // Logits crowd into a few top digits: one atomic per group of lanes with the same digit.
      const unsigned peers = __match_any_sync(0xffffffffu, match ? digit : 256 + lane);
      if (match && lane == __ffs(peers) - 1) atomicAdd(&hist[digit], __popc(peers));
    }
    __syncthreads();
    // The largest digit at which the count of digits from 255 down reaches `remaining`: lane l
    // sums digits 255 - 8l .. 248 - 8l, a scan over the lanes finds the lane where the count
    // crosses, and that lane walks its eight (not one thread walking up to 256 digits in turn).
    if (warp == 0) {
      int c[8], sum = 0;
#pragma unroll
      for (int j = 0; j < 8; ++j) c[j] = hist[255 - 8 * lane - j], sum += c[j];
      int through = sum;  // elements in the digits of lanes 0..lane
#pragma unroll
      for (int off = 1; off < 32; off *= 2) {
        const int t = __shfl_up_sync(0xffffffffu, through, off);
        if (lane >= off) through += t;
      }
      int above = through - sum;
      if (above < remaining && remaining <= through) {
        int j = 0;
        while (j < 7 && above + c[j] < remaining) above += c[j++];
        chosen_digit = 255 - 8 * lane - j;
        chosen_remaining = remaining - above;
      }
    }
    __syncthreads();
    prefix |= static_cast<uint32_t>(chosen_digit) << shift;
    mask |= 0xFFu << shift;
    remaining = chosen_remaining;
    __syncthreads();  // hist and chosen_* are rewritten by the next pass
  }
  const uint32_t kth = prefix;

  // The selection is every element above kth and the first `remaining` equal to it; an
  // element's slot is the number selected before it.
  int above_before = 0, ties_before = 0;  // over the chunks done; the same in every thread
  for (int base = 0; base < n && above_before + min(ties_before, remaining) < k; base += kT) {
    const int i = base + threadIdx.x;
    const uint32_t u = i < n ? key(i) : 0;
    const bool above = i < n && u > kth, tie = i < n && u == kth;
    const unsigned ballot_above = __ballot_sync(0xffffffffu, above);
    const unsigned ballot_tie = __ballot_sync(0xffffffffu, tie);
    if (lane == 0) warp_above[warp] = __popc(ballot_above), warp_ties[warp] = __popc(ballot_tie);
    __syncthreads();
    int a = above_before, t = ties_before, chunk_above = 0, chunk_ties = 0;
    for (int w = 0; w < kT / 32; ++w) {
      if (w < warp) a += warp_above[w], t += warp_ties[w];
      chunk_above += warp_above[w];
      chunk_ties += warp_ties[w];
    }
    const unsigned lower = (1u << lane) - 1;
    a += __popc(ballot_above & lower);  // selected-above elements before i
    t += __popc(ballot_tie & lower);    // ties before i
    if (above || (tie && t < remaining)) {
      const int slot = a + min(t, remaining);
      out_ids[slot] = src.id(i);
      out_values[slot] = src.value(i);
    }
    above_before += chunk_above;
    ties_before += chunk_ties;
    __syncthreads();  // warp_* are rewritten by the next chunk
  }
}

// Chunks per row: at most kMaxChunks, each at least k long.
int chunks_for(int n_vocab, int k) { return std::max(1, std::min(kMaxChunks, n_vocab / k)); }

__global__ void __launch_bounds__(kChunkThreads)
    chunk_top_kernel(const float* logits, int n_vocab, int k, int n_chunks, bool cached,
                     int32_t* ids, float* values) {
  pdl_enter();
  const int chunk = blockIdx.x, row = blockIdx.y;
  const int len = n_vocab / n_chunks;
  const int begin = chunk * len, end = chunk == n_chunks - 1 ? n_vocab : begin + len;
  const int64_t out = (static_cast<int64_t>(row) * n_chunks + chunk) * k;
  extern __shared__ uint32_t cache[];
  select_top<kChunkThreads>(RowSource{logits + static_cast<int64_t>(row) * n_vocab + begin, begin},
                            end - begin, k, ids + out, values + out, cached ? cache : nullptr);
}

__global__ void __launch_bounds__(kMergeThreads)
    merge_top_kernel(const int32_t* list_ids, const float* list_values, int n_list, int k,
                     bool cached, int32_t* ids, float* values) {
  pdl_enter();
  const int64_t row = blockIdx.x;
  extern __shared__ uint32_t cache[];
  select_top<kMergeThreads>(ListSource{list_values + row * n_list, list_ids + row * n_list}, n_list,
                            k, ids + row * k, values + row * k, cached ? cache : nullptr);
}

}  // namespace

size_t top_logits_scratch_bytes(int64_t n_rows, int n_vocab, int k) {
  const int n_chunks = chunks_for(n_vocab, k);
  if (n_chunks == 1) return 0;
  return static_cast<size_t>(n_rows) * n_chunks * k * (sizeof(int32_t) + sizeof(float));
}

void top_logits(const float* logits, int64_t n_rows, int n_vocab, int k, int32_t* ids,
                float* values, void* scratch, size_t scratch_bytes, cudaStream_t stream) {
  SALVO_CHECK(k > 0 && k <= n_vocab);
  if (n_rows == 0) return;
  const int n_chunks = chunks_for(n_vocab, k);
  // The widest chunk is the last (it takes the remainder).
  const int widest = n_vocab - (n_chunks - 1) * (n_vocab / n_chunks);
  const bool chunk_cached = widest <= kMaxCachedKeys;
  const size_t chunk_smem = chunk_cached ? widest * sizeof(uint32_t) : 0;
  if (n_chunks == 1) {
    launch(chunk_top_kernel, dim3(1, static_cast<unsigned>(n_rows)), kChunkThreads, chunk_smem,
           stream, logits, n_vocab, k, 1, chunk_cached, ids, values);
    return;
  }
  SALVO_CHECK(scratch_bytes >= top_logits_scratch_bytes(n_rows, n_vocab, k));
  const int64_t n_list = static_cast<int64_t>(n_chunks) * k;
  int32_t* list_ids = static_cast<int32_t*>(scratch);
  float* list_values = reinterpret_cast<float*>(list_ids + n_rows * n_list);
  launch(chunk_top_kernel, dim3(n_chunks, static_cast<unsigned>(n_rows)), kChunkThreads, chunk_smem,
         stream, logits, n_vocab, k, n_chunks, chunk_cached, list_ids, list_values);
  const bool merge_cached = n_list <= kMaxCachedKeys;
  const size_t merge_smem = merge_cached ? n_list * sizeof(uint32_t) : 0;
  launch(merge_top_kernel, static_cast<unsigned>(n_rows), kMergeThreads, merge_smem, stream,
         list_ids, list_values, static_cast<int>(n_list), k, merge_cached, ids, values);
}

}  // namespace salvo::cuda
