// matmul: quantize the activations once, then every thread takes a contiguous share of weight
// rows. Within a share, weight rows are walked in small tiles that stay in L1/L2 while the
// activation rows pass over them in groups of kMaxDotActs, so each unpacked weight block serves
// several activation rows and a weight row is streamed from memory once per call.
#include "backends/cpu/matmul.h"

#include <algorithm>
#include <cstdlib>
#include <cstring>

#include "backends/cpu/dot.h"
#include "backends/cpu/packed.h"
#include "backends/cpu/quantize_acts.h"
#include "util/check.h"

namespace salvo {
namespace cpu {
namespace {

// Weight bytes per tile: small enough to stay in L1 (48 KiB here) next to kMaxDotActs
// activation rows, large enough that the per-tile loop overhead is negligible.
constexpr size_t kTileWeightBytes = 24 * 1024;

bool machine_has_avx2() {
  return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") &&
         __builtin_cpu_supports("f16c");
}

bool machine_has_avx512() {
  return machine_has_avx2() && __builtin_cpu_supports("avx512f") &&
         __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512vl") &&
         __builtin_cpu_supports("avx512dq") && __builtin_cpu_supports("avx512vnni");
}

struct KernelTables {
  CpuKernels portable, avx2, avx512;
  bool has_avx2 = false, has_avx512 = false;
  const CpuKernels* chosen = nullptr;
};

const KernelTables& tables() {
  // Immutable after construction: the tables describe the machine, not any session.
  static const KernelTables t = [] {
    KernelTables t;
    __builtin_cpu_init();
    fill_portable_kernels(t.portable);
    fill_portable_packed(t.portable);
    t.has_avx2 = machine_has_avx2();
    t.has_avx512 = machine_has_avx512();
    t.avx2 = t.portable;
    if (t.has_avx2) {
      fill_avx2_kernels(t.avx2);
      fill_avx2_packed(t.avx2);
    }
    t.avx512 = t.avx2;
    if (t.has_avx512) {
      fill_avx512_kernels(t.avx512);
      fill_avx512_packed(t.avx512);
    }
    t.chosen = t.has_avx512 ? &t.avx512 : t.has_avx2 ? &t.avx2 : &t.portable;
    if (const char* forced = std::getenv("SALVO_CPU_PATH")) {
      const CpuKernels* k = nullptr;
      if (std::strcmp(forced, "portable") == 0) k = &t.portable;
      if (std::strcmp(forced, "avx2") == 0 && t.has_avx2) k = &t.avx2;
      if (std::strcmp(forced, "avx512") == 0 && t.has_avx512) k = &t.avx512;
      if (k) {
        t.chosen = k;
      } else {
        std::fprintf(stderr, "salvo: SALVO_CPU_PATH=%s is not available here; using %s\n", forced,
                     t.chosen->name);
      }
    }
    return t;
  }();
  return t;
}

// One packed matrix of a matmul_multi call: its kernel, its groups and where they land.
struct PackedPart {
  PackedGroupFn kernel;
  int rows_per_call;  // CpuKernels::packed_rows
  const uint8_t* groups;
  size_t group_bytes;
  int64_t n_in, n_out;
  int64_t first_group;  // index of its first group among all parts' groups
  float* y;
};

// Threads take contiguous shares of the row groups of all parts together (one pass of the pool
// for Q, K and V); within a share, tiles of groups stay in cache while the activation rows pass
// over them as many at a time as the kernel takes.
void matmul_packed(const PackedPart* parts, int n_parts, ThreadPool& pool, const uint8_t* acts,
                   size_t act_stride, int64_t n_rows) {
  const PackedPart& last = parts[n_parts - 1];
  const int64_t n_groups = last.first_group + last.n_out / kPackRows;
  pool.parallel_for(n_groups, [&](int, int64_t begin, int64_t end) {
    float out[kMaxPackedActs * kPackRows];
    for (int i = 0; i < n_parts; ++i) {
      const PackedPart& p = parts[i];
      const int64_t p_begin = std::max(begin, p.first_group) - p.first_group;
      const int64_t p_end = std::min(end, p.first_group + p.n_out / kPackRows) - p.first_group;
      const int64_t tile =
          std::max<int64_t>(1, static_cast<int64_t>(kTileWeightBytes / p.group_bytes));
      for (int64_t g0 = p_begin; g0 < p_end; g0 += tile) {
        const int64_t g1 = std::min(p_end, g0 + tile);
        for (int64_t r0 = 0; r0 < n_rows; r0 += p.rows_per_call) {
          const int nr = static_cast<int>(std::min<int64_t>(p.rows_per_call, n_rows - r0));
          for (int64_t g = g0; g < g1; ++g) {
            p.kernel(p.n_in, p.groups + g * p.group_bytes, acts + r0 * act_stride, act_stride, nr,
                     out);
            for (int r = 0; r < nr; ++r) {
              std::memcpy(p.y + (r0 + r) * p.n_out + g * kPackRows, out + r * kPackRows,
                          kPackRows * sizeof(float));
            }
          }
        }
      }
    }
  });
}

// Quantizes x into scratch in the activation format of `type` (or passes float rows through).
const uint8_t* prepare_acts(ThreadPool& pool, DType type, int64_t n_in, const float* x,
                            int64_t n_rows, MatmulScratch& scratch, size_t* act_stride) {
  *act_stride = static_cast<size_t>(n_in) * sizeof(float);
  if (activation_type(type) == DType::kF32) return reinterpret_cast<const uint8_t*>(x);
  const size_t stride = activation_row_bytes(type, n_in);
  *act_stride = stride;
  // resize() never gives capacity back, so steady-state decode does not allocate.
  if (scratch.acts.size() < stride * n_rows) scratch.acts.resize(stride * n_rows);
  uint8_t* q = scratch.acts.data();
  auto quantize = [&](int, int64_t begin, int64_t end) {
    for (int64_t r = begin; r < end; ++r) {
      quantize_activation_row(type, x + r * n_in, q + r * stride, n_in);
    }
  };
  if (n_rows == 1) {
    quantize(0, 0, 1);
  } else {
    pool.parallel_for(n_rows, quantize);
  }
  return q;
}

}  // namespace

WeightKind weight_kind(DType type) {
  switch (type) {
    case DType::kF32:
      return WeightKind::kF32;
    case DType::kF16:
      return WeightKind::kF16;
    case DType::kBF16:
      return WeightKind::kBF16;
    case DType::kQ4_0:
      return WeightKind::kQ4_0;
    case DType::kQ4_1:
      return WeightKind::kQ4_1;
    case DType::kQ5_0:
      return WeightKind::kQ5_0;
    case DType::kQ8_0:
      return WeightKind::kQ8_0;
    case DType::kQ4_K:
      return WeightKind::kQ4_K;
    case DType::kQ5_K:
      return WeightKind::kQ5_K;
    case DType::kQ6_K:
      return WeightKind::kQ6_K;
    default:
      SALVO_CHECK_MSG(false, "weight type has no CPU matmul kernel");
  }
}

const CpuKernels& cpu_kernels() { return *tables().chosen; }

const CpuKernels* cpu_kernels_for(const char* path) {
  const KernelTables& t = tables();
  if (std::strcmp(path, "portable") == 0) return &t.portable;
  if (std::strcmp(path, "avx2") == 0) return t.has_avx2 ? &t.avx2 : nullptr;
  if (std::strcmp(path, "avx512") == 0) return t.has_avx512 ? &t.avx512 : nullptr;
  return nullptr;
}

void matmul_with(const CpuKernels& kernels, ThreadPool& pool, const WeightView& w, const float* x,
                 int64_t n_rows, float* y, MatmulScratch& scratch) {
  SALVO_CHECK((w.data != nullptr || w.packed != nullptr) && w.n_out > 0 && w.n_in > 0 &&
              n_rows >= 0);
  if (n_rows == 0) return;
  const DotFn dot = kernels.dot[static_cast<int>(weight_kind(w.type))];
  SALVO_CHECK(dot != nullptr);
  const int64_t n_in = w.n_in, n_out = w.n_out;

  size_t act_stride = 0;
  const uint8_t* acts = prepare_acts(pool, w.type, n_in, x, n_rows, scratch, &act_stride);

  if (w.packed != nullptr) {
    const int kind = static_cast<int>(weight_kind(w.type));
    const PackedGroupFn kernel = kernels.packed[kind];
    const int rows = kernels.packed_rows[kind];
    SALVO_CHECK(kernel != nullptr && n_out % kPackRows == 0);
    SALVO_CHECK(rows >= 1 && rows <= kMaxPackedActs);
    const PackedPart part{kernel,
                          rows,
                          static_cast<const uint8_t*>(w.packed),
                          packed_group_bytes(w.type, n_in),
                          n_in,
                          n_out,
                          0,
                          y};
    matmul_packed(&part, 1, pool, acts, act_stride, n_rows);
    return;
  }

  const size_t w_stride = row_bytes(w.type, n_in);
  const auto* w_base = static_cast<const uint8_t*>(w.data);
  const int64_t tile = std::max<int64_t>(1, static_cast<int64_t>(kTileWeightBytes / w_stride));
  pool.parallel_for(n_out, [&](int, int64_t begin, int64_t end) {
    float out[kMaxDotActs];
    for (int64_t o0 = begin; o0 < end; o0 += tile) {
      const int64_t o1 = std::min(end, o0 + tile);
      for (int64_t r0 = 0; r0 < n_rows; r0 += kMaxDotActs) {
        const int nr = static_cast<int>(std::min<int64_t>(kMaxDotActs, n_rows - r0));
        for (int64_t o = o0; o < o1; ++o) {
          dot(n_in, w_base + o * w_stride, acts + r0 * act_stride, act_stride, nr, out);
          for (int r = 0; r < nr; ++r) y[(r0 + r) * n_out + o] = out[r];
        }
      }
    }
  });
}

void matmul_multi_with(const CpuKernels& kernels, ThreadPool& pool, const WeightView* const* w,
                       float* const* y, int n_w, const float* x, int64_t n_rows,
                       MatmulScratch& scratch) {
  constexpr int kMaxParts = 4;
  bool shared = n_w <= kMaxParts;
  for (int i = 0; i < n_w && shared; ++i) {
    shared = w[i]->packed != nullptr && w[i]->n_in == w[0]->n_in &&
             activation_type(w[i]->type) == activation_type(w[0]->type);
  }
  if (!shared || n_rows == 0) {
    for (int i = 0; i < n_w; ++i) matmul_with(kernels, pool, *w[i], x, n_rows, y[i], scratch);
    return;
  }
  const int64_t n_in = w[0]->n_in;
  size_t act_stride = 0;
  const uint8_t* acts = prepare_acts(pool, w[0]->type, n_in, x, n_rows, scratch, &act_stride);
  PackedPart parts[kMaxParts];
  int64_t first_group = 0;
  for (int i = 0; i < n_w; ++i) {
    const int kind = static_cast<int>(weight_kind(w[i]->type));
    const PackedGroupFn kernel = kernels.packed[kind];
    const int rows = kernels.packed_rows[kind];
    SALVO_CHECK(kernel != nullptr && w[i]->n_out % kPackRows == 0);
    SALVO_CHECK(rows >= 1 && rows <= kMaxPackedActs);
    parts[i] = {kernel,
                rows,
                static_cast<const uint8_t*>(w[i]->packed),
                packed_group_bytes(w[i]->type, n_in),
                n_in,
                w[i]->n_out,
                first_group,
                y[i]};
    first_group += w[i]->n_out / kPackRows;
  }
  matmul_packed(parts, n_w, pool, acts, act_stride, n_rows);
}

}  // namespace cpu

void matmul_multi(ThreadPool& pool, const WeightView* const* w, float* const* y, int n_w,
                  const float* x, int64_t n_rows, MatmulScratch& scratch) {
  cpu::matmul_multi_with(cpu::cpu_kernels(), pool, w, y, n_w, x, n_rows, scratch);
}

void matmul(ThreadPool& pool, const WeightView& w, const float* x, int64_t n_rows, float* y,
            MatmulScratch& scratch) {
  cpu::matmul_with(cpu::cpu_kernels(), pool, w, x, n_rows, y, scratch);
}

const char* cpu_kernel_path() { return cpu::cpu_kernels().name; }

}  // namespace salvo
