// The k largest logits of each row (Model::forward_top), selected where the logits are: a
// sampling pass then copies back 2k numbers a row instead of the whole vocabulary.
//
// One block per row. A radix select finds the k-th largest key (the float's bits mapped to an
// unsigned order, NaN lowest, -0 as +0: ops::top_logits's order) eight bits at a time, from a
// histogram of the keys that agree with the digits chosen so far; then every element above that
// key is written, and the elements equal to it in index order until there are k (ties go to the
// lower index, as in the sampler's rank order).
#include <cstdint>

#include "backends/cuda/kernels.h"
#include "util/check.h"

namespace salvo::cuda {
namespace {

constexpr int kThreads = 1024;

__device__ __forceinline__ uint32_t order_key(float v) {
  if (v != v) return 0;  // NaN below everything
  uint32_t b = __float_as_uint(v);
  if (b == 0x80000000u) b = 0;
  return (b & 0x80000000u) ? ~b : (b | 0x80000000u);
}

__global__ void __launch_bounds__(kThreads)
    top_logits_kernel(const float* logits, int n_vocab, int k, int32_t* ids, float* values) {
  const int row = blockIdx.x, lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  const float* x = logits + static_cast<int64_t>(row) * n_vocab;
  int32_t* out_ids = ids + static_cast<int64_t>(row) * k;
  float* out_values = values + static_cast<int64_t>(row) * k;
  __shared__ int hist[256];
  __shared__ int chosen_digit, chosen_remaining, count, warp_total[kThreads / 32];

  // Radix select: after the pass at `shift`, `prefix` holds the k-th largest key's digits from
  // bit `shift` up and `remaining` how many of the wanted elements share them.
  uint32_t prefix = 0, mask = 0;
  int remaining = k;
  for (int shift = 24; shift >= 0; shift -= 8) {
    for (int i = threadIdx.x; i < 256; i += kThreads) hist[i] = 0;
    __syncthreads();
    for (int base = 0; base < n_vocab; base += kThreads) {  // uniform trip count: whole warps
      const int i = base + threadIdx.x;
      const uint32_t u = i < n_vocab ? order_key(x[i]) : 0;
      const bool match = i < n_vocab && (u & mask) == prefix;
      const int digit = static_cast<int>((u >> shift) & 0xFF);
      // Logits crowd into a few top digits: one atomic per group of lanes with the same digit.
      const unsigned peers = __match_any_sync(0xffffffffu, match ? digit : 256 + lane);
      if (match && lane == __ffs(peers) - 1) atomicAdd(&hist[digit], __popc(peers));
    }
    __syncthreads();
    if (threadIdx.x == 0) {
      int above = 0, d = 255;
      for (; d > 0 && above + hist[d] < remaining; --d) above += hist[d];
      chosen_digit = d;
      chosen_remaining = remaining - above;
    }
    __syncthreads();
    prefix |= static_cast<uint32_t>(chosen_digit) << shift;
    mask |= 0xFFu << shift;
    remaining = chosen_remaining;
    __syncthreads();  // hist and chosen_* are rewritten by the next pass
  }
  const uint32_t kth = prefix;
  const int n_above = k - remaining;

  // Every element above the k-th key (n_above of them), in any order.
  if (threadIdx.x == 0) count = 0;
  __syncthreads();
  for (int base = 0; base < n_vocab; base += kThreads) {
    const int i = base + threadIdx.x;
    const bool take = i < n_vocab && order_key(x[i]) > kth;
    const unsigned ballot = __ballot_sync(0xffffffffu, take);
    int first = 0;
    if (lane == 0 && ballot != 0) first = atomicAdd(&count, __popc(ballot));
    first = __shfl_sync(0xffffffffu, first, 0);
    if (take) {
      const int slot = first + __popc(ballot & ((1u << lane) - 1));
      out_ids[slot] = i;
      out_values[slot] = x[i];
    }
  }

  // The first `remaining` elements equal to it in index order: a block-wide ordered count per
  // chunk of kThreads elements.
  int taken = 0;
  for (int base = 0; base < n_vocab && taken < remaining; base += kThreads) {
    const int i = base + threadIdx.x;
    const bool tie = i < n_vocab && order_key(x[i]) == kth;
    const unsigned ballot = __ballot_sync(0xffffffffu, tie);
    if (lane == 0) warp_total[warp] = __popc(ballot);
    __syncthreads();
    int before = taken, chunk = 0;
    for (int w = 0; w < kThreads / 32; ++w) {
      if (w < warp) before += warp_total[w];
      chunk += warp_total[w];
    }
    before += __popc(ballot & ((1u << lane) - 1));
    if (tie && before < remaining) {
      out_ids[n_above + before] = i;
      out_values[n_above + before] = x[i];
    }
    taken += chunk;   // the same in every thread: the loop's exit is uniform
    __syncthreads();  // warp_total is rewritten by the next chunk
  }
}

}  // namespace

void top_logits(const float* logits, int64_t n_rows, int n_vocab, int k, int32_t* ids,
                float* values, cudaStream_t stream) {
  SALVO_CHECK(k > 0 && k <= n_vocab);
  if (n_rows == 0) return;
  top_logits_kernel<<<static_cast<unsigned>(n_rows), kThreads, 0, stream>>>(logits, n_vocab, k, ids,
                                                                            values);
}

}  // namespace salvo::cuda
