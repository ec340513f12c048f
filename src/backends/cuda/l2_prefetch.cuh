// Asking later launches' weights into L2 from a kernel whose own work is a latency chain (HBM
// idles there): bulk prefetches that change no value and hold no registers.
#pragma once

#include <cstdint>

namespace salvo::cuda {

// Block `block` of `blocks` asks its share of bytes [0, bytes) at base into L2, a bulk prefetch
// of up to 16 KB a thread; the blocks cover the range in order. Weights are never a kernel's
// output, so it may go before the kernel's PDL wait.
__device__ __forceinline__ void prefetch_l2(const void* base, int64_t bytes, int64_t block,
                                            int64_t blocks) {
#if __CUDA_ARCH__ >= 900
  if (bytes <= 0) return;
  constexpr int64_t kPiece = 16 << 10;
  const int64_t share = (bytes / blocks + 15) & ~int64_t{15};
  const int64_t begin = block * share, end = min(bytes, begin + share);
  for (int64_t at = begin + threadIdx.x * kPiece; at < end; at += blockDim.x * kPiece) {
    const uint32_t n = static_cast<uint32_t>(min(kPiece, end - at)) & ~15u;
    if (n == 0) break;
    asm volatile(
        "cp.async.bulk.prefetch.L2.global [%0], %1;" ::"l"(static_cast<const char*>(base) + at),
        "r"(n)
        : "memory");
  }
#endif
}

}  // namespace salvo::cuda
