// Kernel launches with programmatic dependent launch (PDL, sm_90).
//
// A decode step is ~10 launches a layer, most of a few microseconds, so the gap between one
// kernel's end and the next one's start (the launch, the blocks' scheduling) is a visible share of
// the step. Launched through launch(), a kernel may be scheduled while the kernel before it in
// the stream still runs: its blocks become resident and wait in pdl_wait() until the previous
// grid has finished and its writes are visible. The contract for every kernel of the backend:
//   - pdl_wait() before any load of data another kernel writes and before any store (a store
//     could otherwise land while the previous kernel still reads the buffer);
//   - pdl_launch_dependents() after that wait: the next kernel is let in once this one runs, not
//     before (one kernel of lookahead, so waiting blocks never pile up). So a kernel starts
//     only once every kernel before the previous one has finished: only the previous kernel's
//     outputs need the wait (attention's early form reads older data before it).
// Both are no-ops for a kernel launched without the attribute (SALVO_CUDA_PDL=0, older GPUs), and
// the arithmetic is the same either way. Graph captures keep the programmatic edges.
// Measured on the H200 (session 10, tg128, two alternations): real Qwen2.5-Coder-1.5B 428 -> 447
// tok/s, the random 7B shape 252 -> 252. Prefetching the next matmul's weights into L2 before the
// wait (cp.async.bulk.prefetch.L2) added nothing at one round of the warps' loads and lost 7% on
// the 7B shape for whole tiles. What does pay is the matmul kernels' first weight unit read into
// shared memory or registers before pdl_wait() (weights are never a kernel's output): session 21,
// real Qwen2.5-Coder-1.5B tg128 810 -> 859 tok/s, random 7B shape 408 -> 428. Loading committed
// K rows and the batch metadata before the wait in attention lost (more registers: 8-row passes
// +9%, pp512 -10%); session 60's form of it holds no registers (the metadata, then an L2
// prefetch of the committed rows: SALVO_CUDA_ATTENTION_EARLY=2, the default since session 62;
// 1-row and 16-row passes of the random 7B -1.1% on an H100).
#pragma once

#include <cuda_runtime.h>

#include <utility>

#include "backends/cuda/device_memory.h"
#include "backends/cuda/knobs.h"

namespace salvo::cuda {

__device__ __forceinline__ void pdl_wait() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
}

__device__ __forceinline__ void pdl_launch_dependents() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#endif
}

// pdl_wait() then pdl_launch_dependents(): the first statement of every kernel.
__device__ __forceinline__ void pdl_enter() {
  pdl_wait();
  pdl_launch_dependents();
}

// For kernels whose blocks each write a partial result that one block then merges (attention's
// splits, split-k matmuls): called by every thread of a block once its partial writes are
// issued; true in the block that arrives last among `n` at `*count` (the others' writes are then
// visible to it through L2: read them with __ldcg), which resets the count for the next launch.
__device__ __forceinline__ bool last_to_arrive(int* count, int n) {
  __threadfence();  // this block's writes are visible device-wide before it is counted
  __syncthreads();
  __shared__ bool last;
  if (threadIdx.x == 0) {
    last = atomicAdd(count, 1) == n - 1;
    if (last) *count = 0;
  }
  __syncthreads();
  return last;
}

// Compute capability 9.0 or later: PDL and thread-block clusters.
inline bool hopper() {
  static const bool yes = [] {
    int dev = 0, major = 0;
    if (cudaGetDevice(&dev) != cudaSuccess) return false;
    if (cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev) != cudaSuccess) {
      return false;
    }
    return major >= 9;
  }();
  return yes;
}

// SALVO_CUDA_PDL=0 turns the attribute off (for A/B runs).
inline bool pdl_enabled() {
  static const bool on = env_on("SALVO_CUDA_PDL") && hopper();
  return on;
}

// Blocks a thread-block cluster may hold without the non-portable size attribute.
constexpr int kMaxPortableCluster = 8;

// launch() in thread-block clusters of `cluster` blocks (1 x 1 x 1: none; grid a multiple of it).
template <class... Params, class... Args>
void launch_cluster(void (*kernel)(Params...), dim3 grid, dim3 cluster, dim3 block, size_t smem,
                    cudaStream_t stream, Args&&... args) {
  cudaLaunchConfig_t config = {};
  config.gridDim = grid;
  config.blockDim = block;
  config.dynamicSmemBytes = smem;
  config.stream = stream;
  cudaLaunchAttribute attr[2];
  int n_attr = 0;
  if (pdl_enabled()) {
    attr[n_attr].id = cudaLaunchAttributeProgrammaticStreamSerialization;
    attr[n_attr++].val.programmaticStreamSerializationAllowed = 1;
  }
  if (cluster.x * cluster.y * cluster.z > 1) {
    attr[n_attr].id = cudaLaunchAttributeClusterDimension;
    attr[n_attr].val.clusterDim.x = cluster.x;
    attr[n_attr].val.clusterDim.y = cluster.y;
    attr[n_attr++].val.clusterDim.z = cluster.z;
  }
  config.attrs = attr;
  config.numAttrs = n_attr;
  SALVO_CUDA_CHECK(cudaLaunchKernelEx(&config, kernel, static_cast<Params>(args)...));
}

// kernel<<<grid, block, smem, stream>>>(args...), allowed to overlap the previous kernel.
template <class... Params, class... Args>
void launch(void (*kernel)(Params...), dim3 grid, dim3 block, size_t smem, cudaStream_t stream,
            Args&&... args) {
  launch_cluster(kernel, grid, dim3(1, 1, 1), block, smem, stream, std::forward<Args>(args)...);
}

}  // namespace salvo::cuda
