// Internal kernel table of the CPU backend: one set of block dot products per SIMD path,
// chosen once at startup (or forced with SALVO_CPU_PATH=portable|avx2|avx512).
//
// Contract shared by every kernel: a DotFn computes out[r] = dot(W row, activation row r) for
// r < n_acts (1..kMaxDotActs) and performs, for each r, exactly the same sequence of floating-
// point operations it performs when n_acts == 1. That is what makes matmul row invariant: the
// batch size only changes how many rows share each unpacked weight block, never the arithmetic.
// Integer block sums are exact on every path; only the float accumulation across blocks (lane
// layout, final horizontal sum) differs between paths, so paths agree to a few ulps of the sum
// of |terms|, not bit for bit.
#pragma once

#include <cstddef>
#include <cstdint>

#include "backends/cpu/matmul.h"
#include "quant/types.h"

namespace salvo::cpu {

inline constexpr int kMaxDotActs = 4;

// n_in: row length in elements. w_row: one weight row in its block format. acts: n_acts
// activation rows act_stride bytes apart (quantized blocks, or float for F32/F16/BF16 weights).
using DotFn = void (*)(int64_t n_in, const void* w_row, const void* acts, size_t act_stride,
                       int n_acts, float* out);

// Weight types with a dot kernel, dense index into CpuKernels::dot.
enum class WeightKind : int {
  kF32,
  kF16,
  kBF16,
  kQ4_0,
  kQ4_1,
  kQ5_0,
  kQ8_0,
  kQ4_K,
  kQ5_K,
  kQ6_K,
  kCount,
};

// A kernel over one packed group of rows (packed.h): out[r * kPackRows + k].
using PackedGroupFn = void (*)(int64_t n_in, const void* group, const void* acts, size_t act_stride,
                               int n_acts, float* out);

struct CpuKernels {
  const char* name = nullptr;
  DotFn dot[static_cast<int>(WeightKind::kCount)] = {};
  // Kernels for weights repacked at load (packed.h); null where the type has no packed layout.
  PackedGroupFn packed[static_cast<int>(WeightKind::kCount)] = {};
  // The activation rows each packed kernel takes per call (1..kMaxPackedActs): the most that
  // fit its registers, so each unpacked weight step serves as many rows as it can.
  int packed_rows[static_cast<int>(WeightKind::kCount)] = {};
};

// The dense kind of a weight type; SALVO_CHECKs that the type is supported as a weight.
WeightKind weight_kind(DType type);

// Each fills the entries it implements and leaves the others untouched, so a wider path can
// start from a narrower table and override what it accelerates.
void fill_portable_kernels(CpuKernels& k);
void fill_avx2_kernels(CpuKernels& k);
void fill_avx512_kernels(CpuKernels& k);
void fill_portable_packed(CpuKernels& k);
void fill_avx2_packed(CpuKernels& k);
void fill_avx512_packed(CpuKernels& k);

// The table in use (chosen on first call).
const CpuKernels& cpu_kernels();

// Tests and benchmarks: the table of a named path, or nullptr if this machine cannot run it.
const CpuKernels* cpu_kernels_for(const char* path);

// matmul on an explicit kernel table (tests compare paths in one process).
void matmul_with(const CpuKernels& kernels, ThreadPool& pool, const WeightView& w, const float* x,
                 int64_t n_rows, float* y, MatmulScratch& scratch);
void matmul_multi_with(const CpuKernels& kernels, ThreadPool& pool, const WeightView* const* w,
                       float* const* y, int n_w, const float* x, int64_t n_rows,
                       MatmulScratch& scratch);

}  // namespace salvo::cpu
