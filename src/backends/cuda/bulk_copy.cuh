// Hopper's bulk copies (cp.async.bulk): one thread asks the copy engine for a contiguous run of
// global memory into shared memory, and an mbarrier counts the bytes in; the warps wait on the
// barrier's phase. No registers are held while the bytes come (sm_90 and later).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

namespace salvo::cuda {

__device__ __forceinline__ uint32_t smem_u32(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

// A barrier that completes a phase on one arrival plus the bytes it was told to expect.
__device__ __forceinline__ void mbar_init(uint64_t* bar) {
#if __CUDA_ARCH__ >= 900
  asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;" ::"r"(smem_u32(bar)) : "memory");
  // The initialisation is seen by the copy engine (the async proxy) before any copy.
  asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
#else
  __trap();
#endif
}

// An L2 policy for data read once: evicted first (as ld.global.cs).
__device__ __forceinline__ uint64_t evict_first_policy() {
  uint64_t p = 0;
#if __CUDA_ARCH__ >= 900
  asm volatile("createpolicy.fractional.L2::evict_first.b64 %0, 1.0;" : "=l"(p));
#endif
  return p;
}

// Arrives on bar expecting `bytes`, and copies them from src to dst (both 16-byte aligned, bytes a
// multiple of 16). Generic-proxy reads of dst issued before this by the warp must be ordered by a
// __syncwarp() first: the fence here then orders them before the copy's writes.
__device__ __forceinline__ void bulk_load(void* dst, const void* src, uint32_t bytes, uint64_t* bar,
                                          uint64_t policy) {
#if __CUDA_ARCH__ >= 900
  asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(smem_u32(bar)),
               "r"(bytes)
               : "memory");
  asm volatile(
      "cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes.L2::cache_hint"
      " [%0], [%1], %2, [%3], %4;" ::"r"(smem_u32(dst)),
      "l"(src), "r"(bytes), "r"(smem_u32(bar)), "l"(policy)
      : "memory");
#else
  __trap();
#endif
}

// Waits until bar's phase of parity `parity` has completed. A wait that never ends is a bug in
// the caller (a copy never asked for): it traps after 2^24 tries instead of hanging the GPU.
__device__ __forceinline__ void mbar_wait(uint64_t* bar, uint32_t parity) {
#if __CUDA_ARCH__ >= 900
  for (uint32_t tries = 0;; ++tries) {
    uint32_t done;
    asm volatile(
        "{\n .reg .pred p;\n mbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\n"
        " selp.u32 %0, 1, 0, p;\n}\n"
        : "=r"(done)
        : "r"(smem_u32(bar)), "r"(parity)
        : "memory");
    if (done) return;
    if (tries > (1u << 24)) __trap();
  }
#else
  __trap();
#endif
}

// A 16-byte shared-memory load (the bulk copy's data, after mbar_wait).
__device__ __forceinline__ uint4 ld_shared16(const void* p) {
  uint4 v;
  asm volatile("ld.shared.v4.u32 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
               : "r"(smem_u32(p)));
  return v;
}

}  // namespace salvo::cuda
