// The packed k-quant kernels of packed_avx2.cc for AVX-512 VNNI machines: the same 256-bit
// code with vpdpbusd / vpdpwssd for the byte and word products.
#define SALVO_PACK_VNNI 1
#define SALVO_PACK_TARGET "avx512f,avx512bw,avx512vl,avx512dq,avx512vnni,avx2,fma,f16c"
#define SALVO_PACK_FILL fill_avx512_packed
#include "backends/cpu/packed_avx2.cc"  // NOLINT(build/include): re-included per target
