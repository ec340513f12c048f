// x86 kernels for the packed k-quant layouts of packed.h. Compiled on its own as the "avx2"
// path (byte products through maddubs + madd) and included by packed_avx512.cc with
// SALVO_PACK_VNNI defined, where the byte products are single vpdpbusd instructions. Each
// 256-bit lane k holds output row k of the group; activation bytes are broadcast to all lanes.
// The float operations per lane are exactly those of the portable kernels in packed.cc.
#include <immintrin.h>

#include <cstring>

#include "backends/cpu/dot.h"
#include "backends/cpu/packed.h"

#ifndef SALVO_PACK_VNNI
#define SALVO_PACK_TARGET "avx2,fma,f16c"
#define SALVO_PACK_FILL fill_avx2_packed
#endif

#define SALVO_PACK_KERNEL __attribute__((target(SALVO_PACK_TARGET)))
#define SALVO_PACK_INLINE inline __attribute__((always_inline, target(SALVO_PACK_TARGET)))

namespace salvo::cpu {
namespace {

// acc += four-byte dot products of unsigned w with signed a, per int32 lane. Exact on both
// paths: the packed quants are at most 63, so maddubs never saturates.
SALVO_PACK_INLINE __m256i dot_acc(__m256i acc, __m256i w, __m256i a) {
#ifdef SALVO_PACK_VNNI
  return _mm256_dpbusd_epi32(acc, w, a);
#else
  const __m256i p = _mm256_madd_epi16(_mm256_maddubs_epi16(w, a), _mm256_set1_epi16(1));
  return _mm256_add_epi32(acc, p);
#endif
}

SALVO_PACK_INLINE __m256i madd_acc(__m256i acc, __m256i a, __m256i b) {
#ifdef SALVO_PACK_VNNI
  return _mm256_dpwssd_epi32(acc, a, b);
#else
  return _mm256_add_epi32(acc, _mm256_madd_epi16(a, b));
#endif
}

SALVO_PACK_INLINE __m256i bcast4(const int8_t* p) {
  int32_t v;
  std::memcpy(&v, p, 4);
  return _mm256_set1_epi32(v);
}

SALVO_PACK_INLINE __m256i load32(const void* p) {
  return _mm256_loadu_si256(static_cast<const __m256i*>(p));
}

SALVO_PACK_INLINE __m256 load8_f16(const fp16_t* p) {
  return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
}

SALVO_PACK_INLINE __m256 load8_u8_as_float(const uint8_t* p) {
  return _mm256_cvtepi32_ps(
      _mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(p))));
}

SALVO_PACK_INLINE __m256 load8_i8_as_float(const int8_t* p) {
  return _mm256_cvtepi32_ps(
      _mm256_cvtepi8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(p))));
}

template <int R>
SALVO_PACK_INLINE void q4k(int64_t n_in, const void* group, const void* acts, size_t stride,
                           float* out) {
  const auto* p = static_cast<const PackedQ4K*>(group);
  const BlockQ8_K* a[R];
  __m256 acc[R];
  for (int r = 0; r < R; ++r) {
    a[r] = reinterpret_cast<const BlockQ8_K*>(static_cast<const uint8_t*>(acts) + r * stride);
    acc[r] = _mm256_setzero_ps();
  }
  const __m256i m4 = _mm256_set1_epi8(0x0F);
  for (int64_t b = 0; b < n_in / kQKK; ++b) {
    const PackedQ4K& blk = p[b];
    __m256 sumf[R];
    for (int r = 0; r < R; ++r) sumf[r] = _mm256_setzero_ps();
    for (int j = 0; j < 8; ++j) {
      __m256i isum[R];
      for (int r = 0; r < R; ++r) isum[r] = _mm256_setzero_si256();
      for (int s = 0; s < 4; ++s) {
        const __m256i w = load32(blk.qs[j][s]);
        const __m256i lo = _mm256_and_si256(w, m4);
        const __m256i hi = _mm256_and_si256(_mm256_srli_epi16(w, 4), m4);
        for (int r = 0; r < R; ++r) {
          const int8_t* q = a[r][b].qs + 32 * j + 8 * s;
          isum[r] = dot_acc(isum[r], lo, bcast4(q));
          isum[r] = dot_acc(isum[r], hi, bcast4(q + 4));
        }
      }
      const __m256 sc = load8_u8_as_float(blk.sc[j]);
      for (int r = 0; r < R; ++r)
        sumf[r] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(isum[r]), sc, sumf[r]);
    }
    const __m256 dw = load8_f16(blk.d), dminw = load8_f16(blk.dmin);
    for (int r = 0; r < R; ++r) {
      // Sums of 32 activations per sub-block, two sub-blocks per int32 lane.
      const __m256i bs = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(a[r][b].bsums));
      const __m128i pairs =
          _mm_hadd_epi16(_mm256_castsi256_si128(bs), _mm256_extracti128_si256(bs, 1));
      __m256i msum = _mm256_setzero_si256();
      for (int q = 0; q < 4; ++q) {
        const __m256i mins =
            _mm256_cvtepu8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(blk.mins[q])));
        const __m256i pair =
            _mm256_permutevar8x32_epi32(_mm256_castsi128_si256(pairs), _mm256_set1_epi32(q));
        msum = madd_acc(msum, mins, pair);
      }
      const __m256 da = _mm256_set1_ps(a[r][b].d);
      acc[r] = _mm256_fmadd_ps(sumf[r], _mm256_mul_ps(dw, da), acc[r]);
      acc[r] = _mm256_fnmadd_ps(_mm256_cvtepi32_ps(msum), _mm256_mul_ps(dminw, da), acc[r]);
    }
  }
  for (int r = 0; r < R; ++r) _mm256_storeu_ps(out + r * kPackRows, acc[r]);
}

template <int R>
SALVO_PACK_INLINE void q6k(int64_t n_in, const void* group, const void* acts, size_t stride,
                           float* out) {
  const auto* p = static_cast<const PackedQ6K*>(group);
  const BlockQ8_K* a[R];
  __m256 acc[R];
  for (int r = 0; r < R; ++r) {
    a[r] = reinterpret_cast<const BlockQ8_K*>(static_cast<const uint8_t*>(acts) + r * stride);
    acc[r] = _mm256_setzero_ps();
  }
  const __m256i m4 = _mm256_set1_epi8(0x0F), m30 = _mm256_set1_epi8(0x30);
  for (int64_t b = 0; b < n_in / kQKK; ++b) {
    const PackedQ6K& blk = p[b];
    __m256 sumf[R];
    for (int r = 0; r < R; ++r) sumf[r] = _mm256_setzero_ps();
    for (int j = 0; j < 16; ++j) {
      __m256i isum[R];
      for (int r = 0; r < R; ++r) isum[r] = _mm256_setzero_si256();
      const __m256i high = load32(blk.qh[j]);
      // The 2-bit highs, already times 16 (packed.h places them for one shift at most).
      const __m256i h[2][2] = {
          {_mm256_and_si256(high, m30), _mm256_and_si256(_mm256_srli_epi16(high, 2), m30)},
          {_mm256_and_si256(_mm256_slli_epi16(high, 4), m30),
           _mm256_and_si256(_mm256_slli_epi16(high, 2), m30)}};
      for (int s = 0; s < 2; ++s) {
        const __m256i w = load32(blk.ql[j][s]);
        const __m256i h_lo = h[s][0], h_hi = h[s][1];
        const __m256i lo = _mm256_or_si256(_mm256_and_si256(w, m4), h_lo);
        const __m256i hi = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(w, 4), m4), h_hi);
        for (int r = 0; r < R; ++r) {
          const int8_t* q = a[r][b].qs + 16 * j + 8 * s;
          isum[r] = dot_acc(isum[r], lo, bcast4(q));
          isum[r] = dot_acc(isum[r], hi, bcast4(q + 4));
        }
      }
      const __m256 sc = load8_i8_as_float(blk.sc[j]);
      for (int r = 0; r < R; ++r) {
        const __m256i offset = _mm256_set1_epi32(32 * a[r][b].bsums[j]);
        sumf[r] =
            _mm256_fmadd_ps(_mm256_cvtepi32_ps(_mm256_sub_epi32(isum[r], offset)), sc, sumf[r]);
      }
    }
    const __m256 dw = load8_f16(blk.d);
    for (int r = 0; r < R; ++r) {
      acc[r] = _mm256_fmadd_ps(sumf[r], _mm256_mul_ps(dw, _mm256_set1_ps(a[r][b].d)), acc[r]);
    }
  }
  for (int r = 0; r < R; ++r) _mm256_storeu_ps(out + r * kPackRows, acc[r]);
}

#define SALVO_PACK_DISPATCH(name, kernel)                                                    \
  SALVO_PACK_KERNEL void name(int64_t n, const void* g, const void* a, size_t s, int n_acts, \
                              float* out) {                                                  \
    switch (n_acts) {                                                                        \
      case 1:                                                                                \
        return kernel<1>(n, g, a, s, out);                                                   \
      case 2:                                                                                \
        return kernel<2>(n, g, a, s, out);                                                   \
      case 3:                                                                                \
        return kernel<3>(n, g, a, s, out);                                                   \
      default:                                                                               \
        return kernel<4>(n, g, a, s, out);                                                   \
    }                                                                                        \
  }

SALVO_PACK_DISPATCH(packed_q4k, q4k)
SALVO_PACK_DISPATCH(packed_q6k, q6k)

#undef SALVO_PACK_DISPATCH

}  // namespace

void SALVO_PACK_FILL(CpuKernels& k) {
  static_assert(kMaxPackedActs == 4, "the dispatch above covers 1..4 rows");
  k.packed[static_cast<int>(WeightKind::kQ4_K)] = packed_q4k;
  k.packed[static_cast<int>(WeightKind::kQ6_K)] = packed_q6k;
}

}  // namespace salvo::cpu
