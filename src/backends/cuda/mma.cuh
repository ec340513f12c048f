// The fp16 tensor-core instruction shared by kHalf's matmul and attention: mma.m16n8k16, fp16
// inputs, fp32 accumulation. Fragments (PTX ISA, lane = 4 g + t): A a0 = (row g, cols 2t, 2t + 1),
// a1 = row g + 8, a2 = (row g, cols 2t + 8, 2t + 9), a3 = row g + 8; B b0 = (rows 2t, 2t + 1,
// col g), b1 = rows 2t + 8, 2t + 9; C c0, c1 = (row g, cols 2t, 2t + 1), c2, c3 = row g + 8. The
// lower half of a register is the lower column (A) or row (B).
#pragma once

#include <cuda_fp16.h>

#include <cstdint>

namespace salvo::cuda {

__device__ __forceinline__ void mma16816(float (&c)[4], const uint32_t (&a)[4], uint32_t b0,
                                         uint32_t b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
      "{%8,%9}, {%0,%1,%2,%3};\n"
      : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

// Two floats as one fp16 pair register (round to nearest even), lo in the lower half.
__device__ __forceinline__ uint32_t half2_bits(float lo, float hi) {
  const __half2 h = __floats2half2_rn(lo, hi);
  return *reinterpret_cast<const uint32_t*>(&h);
}

}  // namespace salvo::cuda
