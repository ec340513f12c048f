// CUDA matmul check and microbenchmark (not a test: it needs a GPU and prints a report).
//
// For every weight type, the matrix shapes of Qwen2.5-1.5B and 7B and rows
// {1,2,4,8,16,17,24,32,64}, per matmul variant:
//  1. y against a CPU reference (salvo's CPU dequantization, a double-precision dot with the
//     float activations) on 128 sampled output rows: NMSE under a bound per variant -> PASS/FAIL;
//  2. row invariance, bitwise: row r of an R-row launch equals row r launched alone;
//  3. time per launch (median of --reps samples of up to 32 launches after a warm-up; the
//     launches cycle through copies of the weights holding >= 2x the L2), weight GB/s, and the
//     ratio to rows = 1; then a whole-layer estimate for the 7B shape.
//
// kHalf (Q4_K / Q6_K) reads its own packing of the same weights (pack_half_weights; the
// copies cycled through are of the packed bytes) and fp16 activations; its GB/s count the GGUF
// bytes, like every other variant's.
//
//   cuda_matmul_bench [--variant float|mma|q8|half] [--type Q4_K] [--model 1.5b|7b] [--reps 30]
//                     [--shape q/o|k/v|gate/up|down|lm_head] [--rows 1,4] [--tiled]
//                     [--no-time] [--no-check]
// Exits 1 when any check fails.
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "backends/cpu/matmul.h"
#include "backends/cuda/kernels.h"
#include "quant/types.h"

namespace salvo {
namespace {

#define CK(expr)                                                                         \
  do {                                                                                   \
    const cudaError_t e_ = (expr);                                                       \
    if (e_ != cudaSuccess) {                                                             \
      std::fprintf(stderr, "CUDA error %s at %s:%d\n", cudaGetErrorString(e_), __FILE__, \
                   __LINE__);                                                            \
      std::exit(2);                                                                      \
    }                                                                                    \
  } while (0)

struct Shape {
  const char* model;
  const char* name;
  int n_out, n_in;
};
constexpr Shape kShapes[] = {
    {"1.5b", "q/o", 1536, 1536},       {"1.5b", "k/v", 256, 1536},
    {"1.5b", "gate/up", 8960, 1536},   {"1.5b", "down", 1536, 8960},
    {"1.5b", "lm_head", 151936, 1536}, {"7b", "q/o", 3584, 3584},
    {"7b", "k/v", 512, 3584},          {"7b", "gate/up", 18944, 3584},
    {"7b", "down", 3584, 18944},
};
constexpr DType kTypes[] = {DType::kQ4_0, DType::kQ4_1, DType::kQ5_0, DType::kQ8_0, DType::kQ4_K,
                            DType::kQ5_K, DType::kQ6_K, DType::kF16,  DType::kBF16};
constexpr int kRows[] = {1, 2, 4, 8, 16, 17, 24, 32, 64};
constexpr int kMaxRows = 64;
constexpr int kSampled = 128;  // output rows checked against the CPU reference

double nmse_bound(cuda::MatmulVariant v) {
  // float: fp32 sums of up to 18944 products. mma: the int8 activations (q8_1) add a relative
  // error of about 3e-5 per dot.
  if (v == cuda::MatmulVariant::kHalf) return 1e-5;  // fp16 activations and scales
  return cuda::variant_takes_q8(v) ? 5e-4 : 1e-8;
}

__device__ uint64_t mix(uint64_t z) {
  z += 0x9E3779B97F4A7C15ull;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}
__device__ float unit(uint64_t h) { return static_cast<float>(h >> 40) / 16777216.0f; }

// Random bytes, then sane fp16 scales (the layout of bench/kernels_bench.cc random_blocks and
// tests/cuda/cuda_ops_test.cc random_weights): every block's d in [0.01, 0.1] (Q6_K: x0.01),
// Q4_1's m and the k-quants' dmin likewise; F16/BF16 elements uniform in [-1, 1].
__global__ void fill_weights(uint8_t* w, size_t bytes, DType type, int block_bytes, uint64_t seed) {
  const size_t i = static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (type == DType::kF16 || type == DType::kBF16) {
    if (2 * i + 1 >= bytes) return;
    const float v = 2.0f * unit(mix(seed ^ i)) - 1.0f;
    const uint16_t h = type == DType::kF16 ? __half_as_ushort(__float2half(v))
                                           : static_cast<uint16_t>(__float_as_uint(v) >> 16);
    reinterpret_cast<uint16_t*>(w)[i] = h;
    return;
  }
  const size_t n_blocks = bytes / block_bytes;
  if (i >= n_blocks) return;
  uint8_t* b = w + i * block_bytes;
  uint64_t h = mix(seed ^ (i * 0x100000001B3ull));
  for (int k = 0; k < block_bytes; ++k) {
    if (k % 8 == 0) h = mix(h);
    b[k] = static_cast<uint8_t>(h >> (8 * (k % 8)));
  }
  auto put = [&](int at, float v) {
    const uint16_t x = __half_as_ushort(__float2half(v));
    b[at] = x & 0xFF;
    b[at + 1] = x >> 8;
  };
  const float d = 0.01f + 0.09f * unit(mix(h + 1));
  if (type == DType::kQ6_K) {
    put(208, d * 0.01f);
  } else {
    put(0, d);
    if (type == DType::kQ4_1 || type == DType::kQ4_K || type == DType::kQ5_K) {
      put(2, 0.01f + 0.09f * unit(mix(h + 2)));
    }
  }
}

struct Options {
  std::vector<cuda::MatmulVariant> variants = {cuda::MatmulVariant::kFloat,
                                               cuda::MatmulVariant::kMma, cuda::MatmulVariant::kQ8,
                                               cuda::MatmulVariant::kHalf};
  std::string type, model, shape;
  std::vector<int> rows;  // timed row counts (a subset of kRows); empty: all
  bool tiled = false;     // Q4_K/Q5_K/Q6_K in tile_weights()' layout
  int reps = 30;
  bool time = true, check = true;
};

struct Timing {
  double us[kMaxRows + 1] = {};
};

class Bench {
 public:
  explicit Bench(Options o) : opt_(std::move(o)) {
    CK(cudaStreamCreate(&stream_));
    CK(cudaEventCreate(&ev0_));
    CK(cudaEventCreate(&ev1_));
    int dev = 0;
    CK(cudaGetDevice(&dev));
    CK(cudaDeviceGetAttribute(&l2_bytes_, cudaDevAttrL2CacheSize, dev));
    cudaDeviceProp prop;
    CK(cudaGetDeviceProperties(&prop, dev));
    std::printf("device: %s, %d SMs, L2 %d MB\n", prop.name, prop.multiProcessorCount,
                l2_bytes_ >> 20);
  }

  int run() {
    for (DType type : kTypes) {
      if (!opt_.type.empty() && opt_.type != traits(type).name) continue;
      for (const Shape& s : kShapes) {
        if (!opt_.model.empty() && opt_.model != s.model) continue;
        if (!opt_.shape.empty() && opt_.shape != s.name) continue;
        run_shape(type, s);
      }
    }
    layer_estimate();
    std::printf("\n%d check(s) failed\n", failures_);
    return failures_ == 0 ? 0 : 1;
  }

 private:
  void run_shape(DType type, const Shape& s) {
    const size_t rb = row_bytes(type, s.n_in), bytes = rb * s.n_out;
    const int copies = static_cast<int>(std::min<size_t>(
        4096, std::max<size_t>(1, (2 * static_cast<size_t>(l2_bytes_) + bytes - 1) / bytes)));
    uint8_t* w = nullptr;
    CK(cudaMalloc(&w, bytes * copies));
    const int bb = traits(type).block_bytes;
    const size_t threads = type == DType::kF16 || type == DType::kBF16 ? bytes / 2 : bytes / bb;
    fill_weights<<<static_cast<unsigned>((threads + 255) / 256), 256>>>(w, bytes, type, bb,
                                                                        0x5A17 + s.n_out);
    CK(cudaGetLastError());
    // --tiled: the integer variants read tile_weights()' layout; the reference reads host_w.
    const bool tiled = opt_.tiled && cuda::tiled_layout_supported(type) && s.n_out % 32 == 0;
    std::vector<uint8_t> host_w;
    if (tiled) {
      host_w.resize(bytes);
      CK(cudaMemcpy(host_w.data(), w, bytes, cudaMemcpyDeviceToHost));
      const std::vector<uint8_t> t = cuda::tile_weights(type, host_w.data(), s.n_out, s.n_in);
      CK(cudaMemcpy(w, t.data(), bytes, cudaMemcpyHostToDevice));
    }
    for (int c = 1; c < copies; ++c)
      CK(cudaMemcpy(w + c * bytes, w, bytes, cudaMemcpyDeviceToDevice));

    // Activations: kMaxRows rows, normal(0, 1), and their q8 form.
    std::mt19937 rng(11 + s.n_in);
    std::normal_distribution<float> normal;
    std::vector<float> x(static_cast<size_t>(kMaxRows) * s.n_in);
    for (float& v : x) v = normal(rng);
    float *dx = nullptr, *dy = nullptr, *dy1 = nullptr;
    int8_t* dq = nullptr;
    cuda::Q8Meta* dmeta = nullptr;
    CK(cudaMalloc(&dx, x.size() * 4));
    CK(cudaMemcpy(dx, x.data(), x.size() * 4, cudaMemcpyHostToDevice));
    CK(cudaMalloc(&dy, static_cast<size_t>(kMaxRows) * s.n_out * 4));
    CK(cudaMalloc(&dy1, static_cast<size_t>(kMaxRows) * s.n_out * 4));
    CK(cudaMalloc(&dq, x.size()));
    CK(cudaMalloc(&dmeta, static_cast<size_t>(s.n_in / 32) * kMaxRows * sizeof(cuda::Q8Meta)));
    cuda::quantize_rows(dx, kMaxRows, s.n_in, dq, dmeta, kMaxRows, stream_);
    CK(cudaStreamSynchronize(stream_));

    // The reference on sampled output rows, for all kMaxRows rows.
    std::vector<int> sampled;
    std::vector<double> want;
    if (opt_.check) {
      std::vector<uint8_t> wrow(rb);
      std::vector<float> wf(s.n_in);
      for (int k = 0; k < std::min(kSampled, s.n_out); ++k) {
        const int o =
            static_cast<int>(static_cast<int64_t>(k) * s.n_out / std::min(kSampled, s.n_out));
        sampled.push_back(o);
        if (tiled) {
          std::memcpy(wrow.data(), host_w.data() + o * rb, rb);
        } else {
          CK(cudaMemcpy(wrow.data(), w + o * rb, rb, cudaMemcpyDeviceToHost));
        }
        dequantize_row(type, wrow.data(), wf.data(), s.n_in);
        for (int r = 0; r < kMaxRows; ++r) {
          double acc = 0;
          const float* xr = &x[static_cast<size_t>(r) * s.n_in];
          for (int i = 0; i < s.n_in; ++i) acc += static_cast<double>(wf[i]) * xr[i];
          want.push_back(acc);
        }
      }
    }

    for (cuda::MatmulVariant v : opt_.variants) {
      if (!cuda::variant_supports(v, type)) continue;
      if (v == cuda::MatmulVariant::kHalf) {
        run_half(type, s, w, tiled ? host_w.data() : nullptr, bytes, dx, sampled, want);
        continue;
      }
      if (tiled && !cuda::variant_takes_q8(v)) continue;
      cuda::MatmulParams p;
      p.tiled = tiled;
      p.type = type;
      p.w = w;
      p.n_out = s.n_out;
      p.n_in = s.n_in;
      p.x = dx;
      p.variant = v;
      p.xq = {dq, dmeta, kMaxRows};
      const std::string label = std::string(traits(type).name) + " " + s.model + " " + s.name +
                                " " + std::to_string(s.n_in) + "->" + std::to_string(s.n_out) +
                                " " + cuda::variant_name(v) + (tiled ? " tiled" : "");
      if (opt_.check) check(p, s, sampled, want, label);
      if (opt_.time) time(p, bytes, bytes, copies, label, type, s);
    }
    CK(cudaFree(w));
    CK(cudaFree(dx));
    CK(cudaFree(dy));
    CK(cudaFree(dy1));
    CK(cudaFree(dq));
    CK(cudaFree(dmeta));
  }

  // kHalf on the weights at w (row-major, or host_w when those are tiled): packed, in copies of
  // their own, with the fp16 fragments of the activations.
  void run_half(DType type, const Shape& s, const uint8_t* w, const uint8_t* host_w, size_t bytes,
                const float* dx, const std::vector<int>& sampled, const std::vector<double>& want) {
    if (!cuda::half_supported(type, s.n_out, s.n_in)) return;
    std::vector<uint8_t> host(bytes);
    if (host_w != nullptr) {
      std::memcpy(host.data(), host_w, bytes);
    } else {
      CK(cudaMemcpy(host.data(), w, bytes, cudaMemcpyDeviceToHost));
    }
    float scale = 1.0f;
    const std::vector<uint8_t> packed =
        cuda::pack_half_weights(type, host.data(), s.n_out, s.n_in, &scale);
    const size_t pb = packed.size();
    const int copies = static_cast<int>(std::min<size_t>(
        4096, std::max<size_t>(1, (2 * static_cast<size_t>(l2_bytes_) + pb - 1) / pb)));
    uint8_t* dw = nullptr;
    uint16_t* dh = nullptr;
    CK(cudaMalloc(&dw, pb * copies));
    for (int c = 0; c < copies; ++c) {
      CK(cudaMemcpy(dw + c * pb, packed.data(), pb, cudaMemcpyHostToDevice));
    }
    CK(cudaMalloc(&dh, static_cast<size_t>(kMaxRows) * s.n_in * sizeof(uint16_t)));
    cuda::half_frags(dx, kMaxRows, s.n_in, dh, stream_);
    cuda::MatmulParams p;
    p.type = type;
    p.w = dw;
    p.n_out = s.n_out;
    p.n_in = s.n_in;
    p.x = dx;
    p.variant = cuda::MatmulVariant::kHalf;
    p.xq.h = dh;
    p.half_scale = scale;
    const std::string label = std::string(traits(type).name) + " " + s.model + " " + s.name + " " +
                              std::to_string(s.n_in) + "->" + std::to_string(s.n_out) + " half";
    if (opt_.check) check(p, s, sampled, want, label);
    if (opt_.time) time(p, bytes, pb, copies, label, type, s);
    CK(cudaFree(dw));
    CK(cudaFree(dh));
  }

  std::vector<float> launch(cuda::MatmulParams p, int r0, int n_rows) {
    float* y = nullptr;
    CK(cudaMalloc(&y, static_cast<size_t>(n_rows) * p.n_out * 4));
    p.x += static_cast<int64_t>(r0) * p.n_in;
    if (p.variant == cuda::MatmulVariant::kHalf) {
      p.xq.h = nullptr;  // matmul() converts the rows from r0 (fragments start at 8-row tiles)
    } else {
      p.xq.q += static_cast<int64_t>(r0) * p.n_in;
      p.xq.meta += r0;
    }
    p.n_rows = n_rows;
    p.y = y;
    cuda::matmul(p, stream_);
    CK(cudaGetLastError());
    std::vector<float> out(static_cast<size_t>(n_rows) * p.n_out);
    CK(cudaMemcpyAsync(out.data(), y, out.size() * 4, cudaMemcpyDeviceToHost, stream_));
    CK(cudaStreamSynchronize(stream_));
    CK(cudaFree(y));
    return out;
  }

  void check(const cuda::MatmulParams& p, const Shape& s, const std::vector<int>& sampled,
             const std::vector<double>& want, const std::string& label) {
    std::vector<std::vector<float>> alone(kMaxRows);
    for (int r = 0; r < kMaxRows; ++r) alone[r] = launch(p, r, 1);
    // NMSE of every row (from the 64-row launch) on the sampled outputs.
    const std::vector<float> y64 = launch(p, 0, kMaxRows);
    double err = 0, ref = 0;
    for (size_t k = 0; k < sampled.size(); ++k) {
      for (int r = 0; r < kMaxRows; ++r) {
        const double g = y64[static_cast<size_t>(r) * s.n_out + sampled[k]];
        const double wv = want[k * kMaxRows + r];
        err += (g - wv) * (g - wv);
        ref += wv * wv;
      }
    }
    const double nmse = ref > 0 ? err / ref : err;
    const bool ok = std::isfinite(nmse) && nmse < nmse_bound(p.variant);
    // Bitwise row invariance, for every row count and a launch at an offset.
    std::string bad;
    for (int n : kRows) {
      for (int r0 : {0, kMaxRows - n}) {
        const std::vector<float> y = n == kMaxRows && r0 == 0 ? y64 : launch(p, r0, n);
        for (int r = 0; r < n && bad.empty(); ++r) {
          if (std::memcmp(&y[static_cast<size_t>(r) * s.n_out], alone[r0 + r].data(),
                          s.n_out * 4) != 0) {
            bad = "rows=" + std::to_string(n) + " row " + std::to_string(r0 + r);
          }
        }
      }
    }
    std::printf("CHECK %-40s nmse %.2e (< %.0e) %s | row invariance %s%s\n", label.c_str(), nmse,
                nmse_bound(p.variant), ok ? "PASS" : "FAIL", bad.empty() ? "PASS" : "FAIL ",
                bad.c_str());
    failures_ += !ok + !bad.empty();
  }

  // bytes: the GGUF bytes (for GB/s); stride: the bytes of one copy of p.w.
  void time(cuda::MatmulParams p, size_t bytes, size_t stride, int copies, const std::string& label,
            DType type, const Shape& s) {
    float* y = nullptr;
    CK(cudaMalloc(&y, static_cast<size_t>(kMaxRows) * p.n_out * 4));
    p.y = y;
    const uint8_t* base = static_cast<const uint8_t*>(p.w);
    const int per_sample = std::min(copies, 32);
    Timing& tm = timings_[{type, p.variant, s.n_out, s.n_in}];
    std::printf("TIME  %-40s", label.c_str());
    for (int n : kRows) {
      if (!opt_.rows.empty() &&
          std::find(opt_.rows.begin(), opt_.rows.end(), n) == opt_.rows.end()) {
        continue;
      }
      p.n_rows = n;
      int c = 0;
      auto one = [&] {
        p.w = base + static_cast<size_t>(c) * stride;
        c = (c + 1) % copies;
        cuda::matmul(p, stream_);
      };
      for (int i = 0; i < std::min(copies, 64) + 3; ++i) one();  // warm-up
      std::vector<float> samples;
      for (int rep = 0; rep < opt_.reps; ++rep) {
        CK(cudaEventRecord(ev0_, stream_));
        for (int i = 0; i < per_sample; ++i) one();
        CK(cudaEventRecord(ev1_, stream_));
        CK(cudaEventSynchronize(ev1_));
        float ms = 0;
        CK(cudaEventElapsedTime(&ms, ev0_, ev1_));
        samples.push_back(1000.0f * ms / per_sample);
      }
      CK(cudaGetLastError());
      std::nth_element(samples.begin(), samples.begin() + samples.size() / 2, samples.end());
      tm.us[n] = samples[samples.size() / 2];
      std::printf(" | r%d %.1fus %.0fGB/s x%.2f", n, tm.us[n], bytes / tm.us[n] / 1e3,
                  tm.us[1] > 0 ? tm.us[n] / tm.us[1] : 0.0);
    }
    std::printf("\n");
    if (p.variant == cuda::MatmulVariant::kMma) {  // once per shape
      // The activation quantization that the mma variant needs once per distinct input.
      CK(cudaEventRecord(ev0_, stream_));
      for (int i = 0; i < 20; ++i) {
        cuda::quantize_rows(p.x, 1, s.n_in, const_cast<int8_t*>(p.xq.q),
                            const_cast<cuda::Q8Meta*>(p.xq.meta), kMaxRows, stream_);
      }
      CK(cudaEventRecord(ev1_, stream_));
      CK(cudaEventSynchronize(ev1_));
      float ms = 0;
      CK(cudaEventElapsedTime(&ms, ev0_, ev1_));
      std::printf("      quantize_rows(1 x %d): %.2f us\n", s.n_in, 1000.0f * ms / 20);
      // Restore all rows' quantization (the loop above rewrote row 0 only, identically).
    }
    CK(cudaFree(y));
  }

  // 7B decoder layer: q, k, v, o, gate, up, down (attention and norms not counted).
  void layer_estimate() {
    if (!opt_.time) return;
    const int layer[][2] = {{3584, 3584},  {512, 3584},   {512, 3584},  {3584, 3584},
                            {18944, 3584}, {18944, 3584}, {3584, 18944}};
    std::printf("\n7B layer estimate (7 matmuls of one type; 28 layers, no LM head/attention)\n");
    for (DType type : kTypes) {
      for (cuda::MatmulVariant v : opt_.variants) {
        double us[kMaxRows + 1] = {};
        bool all = true;
        for (const auto& m : layer) {
          auto it = timings_.find({type, v, m[0], m[1]});
          if (it == timings_.end()) {
            all = false;
            break;
          }
          for (int n : kRows) us[n] += it->second.us[n];
        }
        if (!all) continue;
        std::printf(
            "LAYER %-5s %-6s 1 row %.1f us (%.0f tok/s) | 16 rows %.1f us (x%.2f) | 64 rows "
            "%.1f us (x%.2f, %.0f rows/s)\n",
            std::string(traits(type).name).c_str(), cuda::variant_name(v), us[1],
            1e6 / (28 * us[1]), us[16], us[16] / us[1], us[64], us[64] / us[1],
            64e6 / (28 * us[64]));
      }
    }
  }

  Options opt_;
  cudaStream_t stream_ = nullptr;
  cudaEvent_t ev0_ = nullptr, ev1_ = nullptr;
  int l2_bytes_ = 0;
  int failures_ = 0;
  std::map<std::tuple<DType, cuda::MatmulVariant, int, int>, Timing> timings_;
};

}  // namespace
}  // namespace salvo

int main(int argc, char** argv) {
  using namespace salvo;
  std::setvbuf(stdout, nullptr, _IOLBF, 0);  // progress shows through pipes
  Options o;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto next = [&]() -> std::string {
      if (i + 1 >= argc) {
        std::fprintf(stderr, "%s needs a value\n", a.c_str());
        std::exit(2);
      }
      return argv[++i];
    };
    if (a == "--variant") {
      const std::string name = next();
      const cuda::MatmulVariant v =
          name == "half" ? cuda::MatmulVariant::kHalf : cuda::variant_from_name(name.c_str());
      if (v == cuda::MatmulVariant::kAuto) {
        std::fprintf(stderr, "unknown variant '%s' (float, mma, q8, half)\n", name.c_str());
        return 2;
      }
      o.variants = {v};
    } else if (a == "--type") {
      o.type = next();
    } else if (a == "--model") {
      o.model = next();
    } else if (a == "--shape") {
      o.shape = next();
    } else if (a == "--rows") {
      const std::string list = next();
      for (size_t at = 0; at < list.size();) {
        const size_t comma = std::min(list.find(',', at), list.size());
        o.rows.push_back(std::atoi(list.substr(at, comma - at).c_str()));
        at = comma + 1;
      }
    } else if (a == "--reps") {
      o.reps = std::max(1, std::atoi(next().c_str()));
    } else if (a == "--no-time") {
      o.time = false;
    } else if (a == "--tiled") {
      o.tiled = true;
    } else if (a == "--no-check") {
      o.check = false;
    } else {
      std::fprintf(
          stderr,
          "usage: cuda_matmul_bench [--variant float|mma|q8|half] [--type Q4_K] [--model 1.5b|7b]"
          " [--shape gate/up] [--rows 1,4] [--tiled] [--reps 30] [--no-time] [--no-check]\n");
      return 2;
    }
  }
  return Bench(o).run();
}
