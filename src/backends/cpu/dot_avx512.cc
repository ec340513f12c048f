// Kernels for AVX-512 machines (F, BW, VL, DQ, VNNI). The 256-bit kernels of dot_avx2.cc are
// rebuilt here with VNNI byte products (vpdpbusd) under this file's target; on these parts a
// 256-bit integer loop already outruns memory for a single activation row, which is where the
// quantized kernels spend their time.
#define SALVO_DOT_VNNI 1
#define SALVO_X86_TARGET "avx512f,avx512bw,avx512vl,avx512dq,avx512vnni,avx2,fma,f16c"
#include "backends/cpu/dot_avx2.cc"  // NOLINT(build/include): re-included per target

namespace salvo::cpu {

void fill_avx512_kernels(CpuKernels& k) {
  k.name = "avx512";
  fill_x86_256(k);
}

}  // namespace salvo::cpu
