// Achievable HBM read bandwidth of the GPU: the figure salvo's decode GB/s is compared with.
// Reads a buffer far larger than L2 with 16-byte loads and reduces it (so nothing is optimised
// away); prints the median of 20 passes over several buffer sizes.
//   nvcc -O3 -arch=sm_90 bench/hbm_bandwidth.cu -o hbm_bandwidth && ./hbm_bandwidth
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdio>
#include <vector>

__global__ void read_kernel(const int4* __restrict__ p, size_t n, int* out) {
  int acc = 0;
  for (size_t i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x) {
    const int4 v = __ldcs(p + i);  // streaming: no reuse, do not keep it in L2
    acc ^= v.x ^ v.y ^ v.z ^ v.w;
  }
  if (acc == 0x7fffffff) *out = acc;  // practically never; keeps the loads live
}

int main() {
  int sms = 0;
  cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0);
  int* out = nullptr;
  cudaMalloc(&out, sizeof(int));
  double best = 0;
  for (size_t mib : {512, 2048, 4096}) {
    const size_t bytes = mib << 20, n = bytes / sizeof(int4);
    int4* buf = nullptr;
    if (cudaMalloc(&buf, bytes) != cudaSuccess) break;
    cudaMemset(buf, 1, bytes);
    cudaEvent_t a, b;
    cudaEventCreate(&a);
    cudaEventCreate(&b);
    std::vector<float> ms;
    for (int rep = 0; rep < 22; ++rep) {
      cudaEventRecord(a);
      read_kernel<<<sms * 8, 512>>>(buf, n, out);
      cudaEventRecord(b);
      cudaEventSynchronize(b);
      float t = 0;
      cudaEventElapsedTime(&t, a, b);
      if (rep >= 2) ms.push_back(t);
    }
    std::sort(ms.begin(), ms.end());
    const double gbps = bytes / (ms[ms.size() / 2] * 1e-3) / 1e9;
    best = std::max(best, gbps);
    std::printf("hbm read %5zu MiB: %.0f GB/s (median of %zu)\n", mib, gbps, ms.size());
    cudaFree(buf);
  }
  std::printf("hbm_gbps %.0f\n", best);
  return cudaGetLastError() == cudaSuccess ? 0 : 1;
}
