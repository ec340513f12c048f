// Quantized matmul throughput per SIMD path: weight GB/s for 1-row decode and rows/s for
// batches. Baseline: the portable path in the same run (compare ratios, not absolute times).
//   kernels_bench --benchmark_filter=Q4_K
#include <benchmark/benchmark.h>

#include <memory>
#include <random>
#include <string>
#include <vector>

#include "backends/cpu/dot.h"
#include "backends/cpu/matmul.h"
#include "backends/cpu/packed.h"
#include "quant/fp16.h"

namespace salvo {
namespace {

struct Shape {
  DType type;
  int64_t n_out, n_in;
};

std::vector<uint8_t> random_blocks(DType type, int64_t n_out, int64_t n_in) {
  std::vector<uint8_t> data(row_bytes(type, n_in) * n_out);
  std::mt19937 rng(7);
  for (auto& b : data) b = static_cast<uint8_t>(rng());
  // Finite scales: put a small fp16 over every 2-byte word that could be a scale field. The
  // values only matter for avoiding inf/NaN slow paths, not for speed.
  if (type != DType::kF32 && type != DType::kBF16) {
    auto* h = reinterpret_cast<fp16_t*>(data.data());
    for (size_t i = 0; i < data.size() / 2; ++i) {
      if ((h[i] & 0x7c00) == 0x7c00) h[i] = fp32_to_fp16(0.01f);
    }
  }
  return data;
}

void bm_matmul(benchmark::State& state, const char* path, Shape shape, bool packed) {
  const cpu::CpuKernels* kernels = cpu::cpu_kernels_for(path);
  if (!kernels) {
    state.SkipWithError("path not available");
    return;
  }
  const int64_t n_rows = state.range(0);
  const int threads = static_cast<int>(state.range(1));
  const auto w = random_blocks(shape.type, shape.n_out, shape.n_in);
  std::vector<float> x(n_rows * shape.n_in), y(n_rows * shape.n_out);
  std::mt19937 rng(3);
  std::normal_distribution<float> normal;
  for (auto& v : x) v = normal(rng);
  WeightView view{shape.type, w.data(), shape.n_out, shape.n_in};
  std::unique_ptr<uint8_t[]> packed_buf;
  if (packed) {
    packed_buf = cpu::pack_matrix(view, nullptr);
    view.packed = packed_buf.get();
  }
  ThreadPool pool(threads);
  MatmulScratch scratch;
  for (auto _ : state) {
    cpu::matmul_with(*kernels, pool, view, x.data(), n_rows, y.data(), scratch);
    benchmark::DoNotOptimize(y.data());
  }
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations() * w.size()));
  state.counters["rows/s"] = benchmark::Counter(static_cast<double>(state.iterations() * n_rows),
                                                benchmark::Counter::kIsRate);
}

void register_all() {
  const Shape shapes[] = {
      {DType::kQ4_K, 8960, 1536},
      {DType::kQ6_K, 1536, 8960},
      {DType::kQ6_K, 8960, 1536},
      {DType::kQ4_1, 1536, 576},
      {DType::kQ8_0, 49152, 576},
      {DType::kQ8_0, 1536, 576},
      {DType::kQ5_0, 4864, 896},
      {DType::kQ4_0, 8960, 1536},
      {DType::kQ5_K, 8960, 1536},
      {DType::kF16, 1536, 1536},
      {DType::kBF16, 1536, 1536},
      {DType::kF32, 1536, 1536},
      // Qwen2.5-1.5B's LM head (191 MB): streams from DRAM, as decode does.
      // The other formats stream at 25-28 GB/s a thread in this shape (session 7).
      {DType::kQ6_K, 151936, 1536},
      {DType::kQ4_K, 151936, 1536},
  };
  for (const char* path : {"portable", "avx2", "avx512"}) {
    for (const Shape& s : shapes) {
      const std::string name = std::string(traits(s.type).name) + "_" + std::to_string(s.n_out) +
                               "x" + std::to_string(s.n_in) + "/" + path;
      for (bool packed : {false, true}) {
        if (packed && !cpu::packable(s.type, s.n_out, s.n_in)) continue;
        benchmark::RegisterBenchmark((name + (packed ? "/packed" : "")).c_str(), bm_matmul, path, s,
                                     packed)
            ->ArgsProduct({{1, 4, 8, 16, 64}, {1, 2}})
            ->ArgNames({"rows", "threads"})
            ->UseRealTime()
            ->MinTime(0.2);
      }
    }
  }
}

}  // namespace
}  // namespace salvo

int main(int argc, char** argv) {
  benchmark::Initialize(&argc, argv);
  salvo::register_all();
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
