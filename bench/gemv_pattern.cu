// Weight-streaming patterns of a one-row GEMV, without the arithmetic: how fast can a kernel that
// copies each warp's units of 32 output rows into shared memory (as the dp4a kernel does) read a
// matrix, with the rows where the GGUF puts them ("rows": 32 pieces of one unit, a row apart) or
// with each 32-row tile's unit stored contiguously ("tiled"), at 2 or 4 stages, against a plain
// streaming read. Not a test; prints us per launch and GB/s.
//   nvcc -O3 -arch=sm_90 bench/gemv_pattern.cu -o gemv_pattern && ./gemv_pattern
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdio>
#include <vector>

#include "../src/backends/cuda/cp_async.cuh"

namespace {

using salvo::cuda::cp_async16;
using salvo::cuda::cp_async_commit;
using salvo::cuda::cp_async_wait;

struct Args {
  const unsigned char* w;
  long row_bytes;  // "rows" layout
  int n_out, units, unit_bytes, splits;
  bool tiled;
  int* out;
};

// grid (tiles, 1, splits), block W warps; warp slice = z * W + warp takes units slice, slice + S...
template <int kStages>
__global__ void stream_units(Args a) {
  extern __shared__ uint4 smem[];
  const int warps = blockDim.x / 32, warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int S = warps * a.splits, slice = blockIdx.z * warps + warp;
  const int granules = a.unit_bytes / 16;  // unit bytes are whole granules here
  const int pitch = 16 * (granules | 1);
  unsigned char* buf = reinterpret_cast<unsigned char*>(smem) + warp * kStages * 32 * pitch;
  const int tile = blockIdx.x;
  const int my_units = slice < a.units ? (a.units - slice + S - 1) / S : 0;
  auto stage = [&](int i) {
    const int u = slice + i * S;
    unsigned char* dst = buf + (i % kStages) * 32 * pitch;
    for (int q = lane; q < 32 * granules; q += 32) {
      const int row = q / granules, g = q % granules;
      const unsigned char* src =
          a.tiled ? a.w + (static_cast<long>(tile) * a.units + u) * 32 * a.unit_bytes +
                        static_cast<long>(row) * a.unit_bytes + 16 * g
                  : a.w + (static_cast<long>(tile) * 32 + row) * a.row_bytes +
                        static_cast<long>(u) * a.unit_bytes + 16 * g;
      cp_async16(dst + row * pitch + 16 * g, src);
    }
  };
  unsigned acc = 0;
  for (int i = 0; i < kStages - 1; ++i) {
    if (i < my_units) stage(i);
    cp_async_commit();
  }
  for (int i = 0; i < my_units; ++i) {
    __syncwarp();
    if (i + kStages - 1 < my_units) stage(i + kStages - 1);
    cp_async_commit();
    cp_async_wait<kStages - 1>();
    __syncwarp();
    const uint4* row =
        reinterpret_cast<const uint4*>(buf + (i % kStages) * 32 * pitch + lane * pitch);
    for (int g = 0; g < granules; ++g) {
      const uint4 v = row[g];
      acc ^= v.x ^ v.y ^ v.z ^ v.w;
    }
  }
  cp_async_wait<0>();
  if (acc == 0x7fffffffu) *a.out = acc;
}

__global__ void stream_plain(const int4* p, long n, int* out) {
  int acc = 0;
  for (long i = blockIdx.x * static_cast<long>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<long>(gridDim.x) * blockDim.x) {
    const int4 v = __ldcs(p + i);
    acc ^= v.x ^ v.y ^ v.z ^ v.w;
  }
  if (acc == 0x7fffffff) *out = acc;
}

__global__ void empty_kernel() {}

struct Shape {
  const char* name;
  int n_out, n_in, elems, block_bytes, unit_blocks;
};

// salvo's slices(): warps per block and blocks per tile from the shape (16-row tiles, 48 warps
// an SM, 8 warps a block, up to 8 blocks a tile).
void slices(int tiles16, int units, int sms, int& warps, int& splits) {
  const int target = 48 * sms;
  int s = 1;
  while (s < 8 && 2 * s <= units && tiles16 * s < target) s *= 2;
  if (s == 8) {
    while (s < 64 && 2 * s <= units && tiles16 * 2 * s <= target) s *= 2;
  }
  warps = std::min(s, 8);
  splits = std::max(1, s / 8);
}

}  // namespace

int main() {
  int sms = 0;
  cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0);
  int* out = nullptr;
  cudaMalloc(&out, sizeof(int));
  const Shape shapes[] = {
      {"1.5b q/o Q4_K", 1536, 1536, 256, 144, 1},
      {"1.5b gate/up Q4_K", 17920, 1536, 256, 144, 1},
      {"1.5b down Q4_K", 1536, 8960, 256, 144, 1},
      {"7b gate/up Q4_K", 37888, 3584, 256, 144, 1},
      {"7b down Q4_K", 3584, 18944, 256, 144, 1},
      {"7b q/o Q4_0 x4", 3584, 3584, 32, 18 * 4 + 8, 1},
  };
  cudaEvent_t e0, e1;
  cudaEventCreate(&e0);
  cudaEventCreate(&e1);
  auto time_us = [&](auto&& launch, int n) {
    std::vector<float> v;
    for (int rep = 0; rep < 7; ++rep) {
      cudaEventRecord(e0);
      for (int i = 0; i < n; ++i) launch(i);
      cudaEventRecord(e1);
      cudaEventSynchronize(e1);
      float ms = 0;
      cudaEventElapsedTime(&ms, e0, e1);
      v.push_back(1000.0f * ms / n);
    }
    std::sort(v.begin(), v.end());
    return v[v.size() / 2];
  };
  const float empty = time_us([&](int) { empty_kernel<<<1, 32>>>(); }, 200);
  std::printf("empty launch %.2f us\n", empty);
  for (const Shape& s : shapes) {
    const int units = s.n_in / s.elems / s.unit_blocks;
    const int unit_bytes = s.block_bytes * s.unit_blocks;
    const long bytes = static_cast<long>(s.n_out) * units * unit_bytes;
    const int copies = static_cast<int>(std::max<long>(2, (200l << 20) / bytes + 1));
    unsigned char* w = nullptr;
    if (cudaMalloc(&w, bytes * copies) != cudaSuccess) return 2;
    cudaMemset(w, 1, bytes * copies);
    int warps = 0, splits = 0;
    slices((s.n_out + 15) / 16, units, sms, warps, splits);
    std::printf("%-20s %6.1f MB  warps %d splits %d\n", s.name, bytes / 1e6, warps, splits);
    for (int tiled = 0; tiled < 2; ++tiled) {
      for (int stages : {2, 4}) {
        const int pitch = 16 * ((unit_bytes / 16) | 1);
        const int smem = warps * stages * 32 * pitch;
        auto kern = stages == 2 ? stream_units<2> : stream_units<4>;
        cudaFuncSetAttribute(kern, cudaFuncAttributeMaxDynamicSharedMemorySize, smem);
        const float us = time_us(
            [&](int i) {
              Args a{w + (i % copies) * bytes,
                     static_cast<long>(units) * unit_bytes,
                     s.n_out,
                     units,
                     unit_bytes,
                     splits,
                     tiled == 1,
                     out};
              kern<<<dim3(s.n_out / 32, 1, splits), 32 * warps, smem>>>(a);
            },
            50);
        std::printf("  %-6s stages %d: %7.2f us %6.0f GB/s\n", tiled ? "tiled" : "rows", stages, us,
                    bytes / (us * 1e3));
      }
    }
    const float us = time_us(
        [&](int i) {
          stream_plain<<<sms * 8, 512>>>(reinterpret_cast<const int4*>(w + (i % copies) * bytes),
                                         bytes / 16, out);
        },
        50);
    std::printf("  plain            : %7.2f us %6.0f GB/s\n", us, bytes / (us * 1e3));
    cudaFree(w);
  }
  const cudaError_t err = cudaGetLastError();
  if (err != cudaSuccess) std::printf("error %s\n", cudaGetErrorString(err));
  return err == cudaSuccess ? 0 : 1;
}
