// Helpers shared by the CUDA tests: the models they run on and how close two backends are.
#pragma once

#include <cstdint>
#include <cstdlib>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "backends/cuda/cuda_backend.h"
#include "models/model.h"

namespace salvo::cuda_test {

// The GGUF paths in SALVO_CUDA_TEST_MODELS (':'-separated; scripts/gpu_check.sh sets it).
inline std::vector<std::string> test_models() {
  const char* env = std::getenv("SALVO_CUDA_TEST_MODELS");
  std::vector<std::string> paths;
  if (env == nullptr) return paths;
  std::stringstream ss(env);
  for (std::string p; std::getline(ss, p, ':');) {
    if (!p.empty()) paths.push_back(p);
  }
  return paths;
}

// Normalised mean squared error of `got` against `want` (the reference).
inline double nmse(const float* got, const float* want, size_t n) {
  double err = 0, ref = 0;
  for (size_t i = 0; i < n; ++i) {
    err += (static_cast<double>(got[i]) - want[i]) * (static_cast<double>(got[i]) - want[i]);
    ref += static_cast<double>(want[i]) * want[i];
  }
  return ref > 0 ? err / ref : err;
}

// n token ids below n_vocab from a fixed LCG: the same prompt on every run and backend.
inline std::vector<int32_t> prompt_tokens(int n, int n_vocab, uint32_t seed = 99) {
  std::vector<int32_t> ids(n);
  uint32_t state = seed;
  for (auto& id : ids) {
    state = state * 1664525u + 1013904223u;
    id = static_cast<int32_t>((state >> 8) % static_cast<uint32_t>(n_vocab));
  }
  return ids;
}

// The same GGUF loaded twice: on the CPU (the reference) and placed on the GPU.
struct ModelPair {
  std::unique_ptr<Model> cpu, gpu;
};
inline Expected<ModelPair> load_cpu_and_gpu(const std::string& path) {
  auto cpu = load_model(path);
  if (!cpu.ok()) return cpu.status();
  auto cpu_copy = load_model(path);
  if (!cpu_copy.ok()) return cpu_copy.status();
  auto gpu = cuda::to_device(std::move(cpu_copy).value());
  if (!gpu.ok()) return gpu.status();
  return ModelPair{std::move(cpu).value(), std::move(gpu).value()};
}

}  // namespace salvo::cuda_test
