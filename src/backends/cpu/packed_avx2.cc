// x86 kernels for the packed layouts of packed.h. Compiled on its own as the "avx2"
// path (byte products through maddubs + madd) and included by packed_avx512.cc with
// SALVO_PACK_VNNI defined, where the byte products are single vpdpbusd instructions. Each
// 256-bit lane k holds output row k of the group; activation bytes are broadcast to all lanes.
// The float operations per lane are exactly those of the portable kernels in packed.cc.
#include <immintrin.h>

#include <cstring>
#include <type_traits>

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
// paths: the packed quants are at most 63 (128 for |Q8_0|), so maddubs never saturates.
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

SALVO_PACK_INLINE __m256i load8_u8_as_i32(const uint8_t* p) {
  return _mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(p)));
}

SALVO_PACK_INLINE __m256i load8_i8_as_i32(const int8_t* p) {
  return _mm256_cvtepi8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(p)));
}

// Sub-block sums: the byte products of one sub-block, summed per lane before its scale applies.
// With VNNI they are int32 lanes (one vpdpbusd a step). Without, dot_acc costs maddubs, a madd
// to widen and an add for every step, so the sums stay in int16 lanes, one add a step, for as
// many steps as the caller proves cannot overflow; sub_scale_acc then widens and scales in one
// madd. Exact integer arithmetic either way, so the floats are those of the VNNI path.
SALVO_PACK_INLINE __m256i sub_dot(__m256i acc, __m256i w, __m256i a) {
#ifdef SALVO_PACK_VNNI
  return dot_acc(acc, w, a);
#else
  return _mm256_add_epi16(acc, _mm256_maddubs_epi16(w, a));
#endif
}

// GCC reassociates a chain of int16 or int32 adds into a tree over all the products of a
// sub-block and every row, which needs more than AVX2's 16 ymm registers and spills (q4k with
// four rows ran 1.5x slower). An empty asm that claims to change v keeps the chain in order.
// The VNNI accumulate is one instruction and needs no help.
SALVO_PACK_INLINE __m256i in_register(__m256i v) {
#ifndef SALVO_PACK_VNNI
  __asm__("" : "+x"(v));
#endif
  return v;
}

#ifndef SALVO_PACK_VNNI
// Each int32 lane's low int16 copied to its high half: madd with the result multiplies both
// int16 halves of a sub-block sum by the same scale.
SALVO_PACK_INLINE __m256i dup_low_i16(__m256i v) {
  const __m256i dup = _mm256_setr_epi8(0, 1, 0, 1, 4, 5, 4, 5, 8, 9, 8, 9, 12, 13, 12, 13,  //
                                       0, 1, 0, 1, 4, 5, 4, 5, 8, 9, 8, 9, 12, 13, 12, 13);
  return _mm256_shuffle_epi8(v, dup);
}
#endif

// The scales of eight rows (one per lane) in the form sub_scale_acc takes.
SALVO_PACK_INLINE __m256i sub_scales(const uint8_t* p) {
#ifdef SALVO_PACK_VNNI
  return load8_u8_as_i32(p);
#else
  return dup_low_i16(load8_u8_as_i32(p));
#endif
}

SALVO_PACK_INLINE __m256i sub_scales(const int8_t* p) {
#ifdef SALVO_PACK_VNNI
  return load8_i8_as_i32(p);
#else
  return dup_low_i16(load8_i8_as_i32(p));
#endif
}

// sumi += isum * scale per int32 lane, isum from sub_dot and sc from sub_scales.
SALVO_PACK_INLINE __m256i sub_scale_acc(__m256i sumi, __m256i isum, __m256i sc) {
#ifdef SALVO_PACK_VNNI
  return _mm256_add_epi32(sumi, _mm256_mullo_epi32(isum, sc));
#else
  return _mm256_add_epi32(sumi, _mm256_madd_epi16(isum, sc));
#endif
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
    // scale x sub-block sum, added exactly in int32 over the super-block (at most 8 * 63 * 32 *
    // 15 * 127 < 2^25) and converted once: no int-to-float step and dependent FMA per sub-block.
    __m256i sumi[R];
    for (int r = 0; r < R; ++r) sumi[r] = _mm256_setzero_si256();
    for (int j = 0; j < 8; ++j) {
      // sub_dot in int16 holds the whole sub-block: eight maddubs of quants <= 15 against
      // |a| <= 128 add up to at most 8 * 2 * 15 * 128 = 30720 < 2^15 per lane.
      __m256i isum[R];
      for (int r = 0; r < R; ++r) isum[r] = _mm256_setzero_si256();
      for (int s = 0; s < 4; ++s) {
        const __m256i w = load32(blk.qs[j][s]);
        const __m256i lo = _mm256_and_si256(w, m4);
        const __m256i hi = _mm256_and_si256(_mm256_srli_epi16(w, 4), m4);
        for (int r = 0; r < R; ++r) {
          const int8_t* q = a[r][b].qs + 32 * j + 8 * s;
          isum[r] = sub_dot(isum[r], lo, bcast4(q));
          isum[r] = in_register(sub_dot(isum[r], hi, bcast4(q + 4)));
        }
      }
      const __m256i sc = sub_scales(blk.sc[j]);
      for (int r = 0; r < R; ++r) sumi[r] = sub_scale_acc(sumi[r], isum[r], sc);
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
      acc[r] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(sumi[r]), _mm256_mul_ps(dw, da), acc[r]);
      acc[r] = _mm256_fnmadd_ps(_mm256_cvtepi32_ps(msum), _mm256_mul_ps(dminw, da), acc[r]);
    }
  }
  for (int r = 0; r < R; ++r) _mm256_storeu_ps(out + r * kPackRows, acc[r]);
}

// The Q6_K groups stream from DRAM at a quarter of the Q4_K rate without help (kernels_bench
// 151936x1536, 1 thread: 7.3 against 25.8 GB/s; in cache both compute at ~27-40 GB/s): the
// hardware prefetchers do not follow the two interleaved streams of a block (ql from the front,
// qh from the back, a 1680-byte stride). Fetching the block two ahead, two lines per sub-block,
// gives 28 GB/s. The same for Q4_K (one stream) measured no better.
constexpr int kQ6kPrefetchBlocks = 2;

// sumi -= 32 * sum_j sc[j] * bsums[j] per lane: the -32 offset of every quant, taken out once
// per super-block with a madd per pair of sub-blocks (one vpdpwssd with VNNI) instead of once per
// sub-block and row. Lane k's int16 halves hold 32 * sc[2p][k] and 32 * sc[2p + 1][k] (|.| <=
// 4096), from the scale bytes shuffled into the high byte of each int16 (zero low byte) and
// shifted right arithmetically by 3. Exact: int32 sums of the same integers in another order.
// kernels_bench, 1 thread, VNNI (Zen 4), alternated runs, medians: Q6_K_1536x8960 1 / 4 / 8
// rows 3.79k / 6.90k / 6.80k -> 3.90k / 7.32k / 7.35k rows/s; 151936x1536 (an LM head) 4 / 8
// rows 363 / 347 -> 448 / 400.
template <int R>
SALVO_PACK_INLINE void q6k_sub_offsets(const PackedQ6K& blk, const BlockQ8_K* const* a, int64_t b,
                                       __m256i* sumi) {
  constexpr char kZero = -128;  // pshufb index that writes a zero byte
  // Lane k: sc[2p][k] (byte k of the pair's 16 bytes) then sc[2p + 1][k] (byte 8 + k).
  const __m256i interleave = _mm256_setr_epi8(
      kZero, 0, kZero, 8, kZero, 1, kZero, 9, kZero, 2, kZero, 10, kZero, 3, kZero, 11,  //
      kZero, 4, kZero, 12, kZero, 5, kZero, 13, kZero, 6, kZero, 14, kZero, 7, kZero, 15);
#ifdef SALVO_PACK_VNNI
  // Two chains of four pairs each, off sumi's own (vpdpwssd's latency at one row). Without VNNI
  // the extra registers spill (4 rows 6.0k -> 5.4k rows/s), so sumi takes the madds in turn.
  __m256i off[2][R];
  for (int r = 0; r < R; ++r) off[0][r] = off[1][r] = _mm256_setzero_si256();
#endif
  for (int p = 0; p < 8; ++p) {
    const __m256i pair = _mm256_broadcastsi128_si256(
        _mm_loadu_si128(reinterpret_cast<const __m128i*>(blk.sc[2 * p])));
    const __m256i sc32 = _mm256_srai_epi16(_mm256_shuffle_epi8(pair, interleave), 3);
    for (int r = 0; r < R; ++r) {
      // bsums[2p] and bsums[2p + 1] in the two int16 halves of every lane.
      int32_t bs;
      std::memcpy(&bs, &a[r][b].bsums[2 * p], 4);
#ifdef SALVO_PACK_VNNI
      off[p % 2][r] = madd_acc(off[p % 2][r], sc32, _mm256_set1_epi32(bs));
#else
      sumi[r] =
          in_register(_mm256_sub_epi32(sumi[r], _mm256_madd_epi16(sc32, _mm256_set1_epi32(bs))));
#endif
    }
  }
#ifdef SALVO_PACK_VNNI
  for (int r = 0; r < R; ++r) {
    sumi[r] = _mm256_sub_epi32(sumi[r], _mm256_add_epi32(off[0][r], off[1][r]));
  }
#endif
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
    // As in q4k: int32 over the super-block (at most 16 * 128 * 16 * 32 * 127 < 2^27).
    __m256i sumi[R];
    for (int r = 0; r < R; ++r) sumi[r] = _mm256_setzero_si256();
    const char* ahead = reinterpret_cast<const char*>(p + b + kQ6kPrefetchBlocks);
    for (int j = 0; j < 16; ++j) {
      _mm_prefetch(ahead + 128 * j, _MM_HINT_T0);
      _mm_prefetch(ahead + 128 * j + 64, _MM_HINT_T0);
#ifdef SALVO_PACK_VNNI
      __m256i isum[R];
      for (int r = 0; r < R; ++r) isum[r] = _mm256_setzero_si256();
#else
      const __m256i sc = sub_scales(blk.sc[j]);
#endif
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
#ifdef SALVO_PACK_VNNI
          isum[r] = dot_acc(isum[r], lo, bcast4(q));
          isum[r] = dot_acc(isum[r], hi, bcast4(q + 4));
#else
          // One step in int16: two maddubs of quants <= 63 against |a| <= 128 add up to at
          // most 2 * 2 * 63 * 128 = 32256 < 2^15 per lane (a third could overflow).
          const __m256i step =
              sub_dot(sub_dot(_mm256_setzero_si256(), lo, bcast4(q)), hi, bcast4(q + 4));
          sumi[r] = sub_scale_acc(sumi[r], step, sc);
#endif
        }
      }
#ifdef SALVO_PACK_VNNI
      const __m256i sc = load8_i8_as_i32(blk.sc[j]);
      for (int r = 0; r < R; ++r) sumi[r] = sub_scale_acc(sumi[r], isum[r], sc);
#endif
    }
    q6k_sub_offsets<R>(blk, a, b, sumi);
    const __m256 dw = load8_f16(blk.d);
    for (int r = 0; r < R; ++r) {
      acc[r] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(sumi[r]),
                               _mm256_mul_ps(dw, _mm256_set1_ps(a[r][b].d)), acc[r]);
    }
  }
  for (int r = 0; r < R; ++r) _mm256_storeu_ps(out + r * kPackRows, acc[r]);
}

// acc += four-byte dot products of signed w with signed a: |w| against a carrying w's sign,
// so the unsigned-by-signed products above apply. abs_w = _mm256_sign_epi8(w, w), computed
// once per weight vector. Exact: |w| <= 128, |a| <= 127, pairs stay below 2^15.
SALVO_PACK_INLINE __m256i dot_acc_signed(__m256i acc, __m256i w, __m256i abs_w, __m256i a) {
  return dot_acc(acc, abs_w, _mm256_sign_epi8(a, w));
}

// The sum of a block's 32 activation quants in every lane.
SALVO_PACK_INLINE __m256i act_sum32(const int8_t* q) {
  __m256i t = dot_acc(_mm256_setzero_si256(), _mm256_set1_epi8(1), load32(q));
  t = _mm256_add_epi32(t, _mm256_permute2x128_si256(t, t, 1));
  t = _mm256_add_epi32(t, _mm256_shuffle_epi32(t, 0x4E));
  return _mm256_add_epi32(t, _mm256_shuffle_epi32(t, 0xB1));
}

SALVO_PACK_INLINE __m256 bcast_f16(fp16_t h) {
  return _mm256_cvtph_ps(_mm_set1_epi16(static_cast<int16_t>(h)));
}

// The legacy 32-quant formats (packed.h): same arithmetic as packed_legacy_portable.
template <typename Packed, typename Act, int R>
SALVO_PACK_INLINE void legacy(int64_t n_in, const void* group, const void* acts, size_t stride,
                              float* out) {
  constexpr bool kQ8 = std::is_same_v<Packed, PackedQ8_0>;
  constexpr bool kQ5 = std::is_same_v<Packed, PackedQ5_0>;
  constexpr bool kQ41 = std::is_same_v<Packed, PackedQ4_1>;
  constexpr int kOffsetShift = std::is_same_v<Packed, PackedQ4_0> ? 3 : kQ5 ? 4 : 0;
  const auto* p = static_cast<const Packed*>(group);
  const Act* a[R];
  __m256 acc[R];
  for (int r = 0; r < R; ++r) {
    a[r] = reinterpret_cast<const Act*>(static_cast<const uint8_t*>(acts) + r * stride);
    acc[r] = _mm256_setzero_ps();
  }
  const __m256i m4 = _mm256_set1_epi8(0x0F), m10 = _mm256_set1_epi8(0x10);
  for (int64_t b = 0; b < n_in / kQK; ++b) {
    const Packed& blk = p[b];
    __m256i isum[R];
    for (int r = 0; r < R; ++r) isum[r] = _mm256_setzero_si256();
    if constexpr (kQ8) {
      for (int s = 0; s < 8; ++s) {
        const __m256i w = load32(blk.qs[s]);
        const __m256i abs_w = _mm256_sign_epi8(w, w);
        for (int r = 0; r < R; ++r) {
          isum[r] = dot_acc_signed(isum[r], w, abs_w, bcast4(a[r][b].qs + 4 * s));
        }
      }
    } else {
#ifndef SALVO_PACK_VNNI
      // Steps summed in int16 before widening: quants <= 15 give at most 2 * 15 * 128 = 3840
      // per maddubs lane, so all four steps (eight maddubs, 30720) fit below 2^15; Q5_0's
      // quants <= 31 give 7936, so two steps (31744).
      constexpr int kStepsPer16 = kQ5 ? 2 : 4;
      const __m256i ones16 = _mm256_set1_epi16(1);
      __m256i isum16[R];
      for (int r = 0; r < R; ++r) isum16[r] = _mm256_setzero_si256();
#endif
      __m256i high;
      if constexpr (kQ5) high = load32(blk.qh);
      for (int s = 0; s < 4; ++s) {
        const __m256i w = load32(blk.qs[s]);
        __m256i lo = _mm256_and_si256(w, m4);
        __m256i hi = _mm256_and_si256(_mm256_srli_epi16(w, 4), m4);
        if constexpr (kQ5) {
          // Bits 2s and 2s + 1 of qh moved to bit 4 (epi16 shifts keep bytes apart after the
          // mask: at most 4 places left or 3 right).
          const int left = 4 - 2 * s;
          const __m256i h_lo =
              left >= 0 ? _mm256_slli_epi16(high, left) : _mm256_srli_epi16(high, -left);
          const __m256i h_hi =
              left - 1 >= 0 ? _mm256_slli_epi16(high, left - 1) : _mm256_srli_epi16(high, 1 - left);
          lo = _mm256_or_si256(lo, _mm256_and_si256(h_lo, m10));
          hi = _mm256_or_si256(hi, _mm256_and_si256(h_hi, m10));
        }
        for (int r = 0; r < R; ++r) {
          const int8_t* q = a[r][b].qs + 8 * s;
#ifdef SALVO_PACK_VNNI
          isum[r] = dot_acc(isum[r], lo, bcast4(q));
          isum[r] = dot_acc(isum[r], hi, bcast4(q + 4));
#else
          isum16[r] = sub_dot(isum16[r], lo, bcast4(q));
          isum16[r] = in_register(sub_dot(isum16[r], hi, bcast4(q + 4)));
          if (s % kStepsPer16 == kStepsPer16 - 1) {
            isum[r] = _mm256_add_epi32(isum[r], _mm256_madd_epi16(isum16[r], ones16));
            isum16[r] = _mm256_setzero_si256();
          }
#endif
        }
      }
    }
    const __m256 dw = load8_f16(blk.d);
    __m256 mw;
    if constexpr (kQ41) mw = load8_f16(blk.m);
    for (int r = 0; r < R; ++r) {
      if constexpr (kOffsetShift != 0) {
        isum[r] = _mm256_sub_epi32(isum[r], _mm256_slli_epi32(act_sum32(a[r][b].qs), kOffsetShift));
      }
      const __m256 da = bcast_f16(a[r][b].d);
      acc[r] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(isum[r]), _mm256_mul_ps(dw, da), acc[r]);
      if constexpr (kQ41) acc[r] = _mm256_fmadd_ps(mw, bcast_f16(a[r][b].s), acc[r]);
    }
  }
  for (int r = 0; r < R; ++r) _mm256_storeu_ps(out + r * kPackRows, acc[r]);
}

// Each kernel as a type, so that one dispatch serves them all.
struct Q4K {
  template <int R>
  SALVO_PACK_INLINE static void run(int64_t n, const void* g, const void* a, size_t s, float* out) {
    q4k<R>(n, g, a, s, out);
  }
};
struct Q6K {
  template <int R>
  SALVO_PACK_INLINE static void run(int64_t n, const void* g, const void* a, size_t s, float* out) {
    q6k<R>(n, g, a, s, out);
  }
};
template <typename Packed, typename Act>
struct Legacy {
  template <int R>
  SALVO_PACK_INLINE static void run(int64_t n, const void* g, const void* a, size_t s, float* out) {
    legacy<Packed, Act, R>(n, g, a, s, out);
  }
};
using Q4_0 = Legacy<PackedQ4_0, BlockQ8_0>;
using Q4_1 = Legacy<PackedQ4_1, BlockQ8_1>;
using Q5_0 = Legacy<PackedQ5_0, BlockQ8_0>;
using Q8_0 = Legacy<PackedQ8_0, BlockQ8_0>;

// K's kernel for min(n_acts, Max) rows (n_acts >= 1), as a chain of compares once inlined.
template <class K, int Max>
SALVO_PACK_INLINE void rows_upto(int64_t n, const void* g, const void* a, size_t s, int n_acts,
                                 float* out) {
  if constexpr (Max > 1) {
    if (n_acts < Max) return rows_upto<K, Max - 1>(n, g, a, s, n_acts, out);
  }
  K::template run<Max>(n, g, a, s, out);
}

// Rows per call. With VNNI (32 vector registers) every format takes eight and every count has
// its own kernel: a tree's 5-7 rows cost their share instead of a four-row call plus a whole
// call for the rest, which is compute-bound on a core. Qwen2.5-Coder-1.5B, 2 threads, Zen 4
// (`salvo bench -p 64 -n 0 -r 3 --verify --verify-rows 1,4,5,6,8,16 --verify-context 256`,
// medians of 3 runs, against four rows a call): 5 / 6 / 8 / 16 rows 71.2 / 77.7 / 92.4 / 164.4
// -> 56.5 / 63.3 / 83.9 / 156.1 ms, 4 rows unchanged (46.8 / 46.4), pp64 138 -> 151 tok/s.
// On AVX2 the k-quants take eight, where the int16 sub-block sums leave the registers for it
// (8-9% faster at 8 and 16 rows), and five to seven rows run as four and the rest; the legacy
// kernels take four (they spill at eight, 2x slower).
// The exported kernel of K for up to Max rows a call.
template <class K, int Max>
SALVO_PACK_KERNEL void packed_upto(int64_t n, const void* g, const void* a, size_t s, int n_acts,
                                   float* out) {
  rows_upto<K, Max>(n, g, a, s, n_acts, out);
}
#ifdef SALVO_PACK_VNNI
constexpr int kKQuantRows = 8, kLegacyRows = 8;
template <class K>
constexpr PackedGroupFn packed_kquant = packed_upto<K, kKQuantRows>;
#else
constexpr int kKQuantRows = 8, kLegacyRows = 4;
template <class K>
SALVO_PACK_KERNEL void packed_kquant(int64_t n, const void* g, const void* a, size_t s, int n_acts,
                                     float* out) {
  if (n_acts == 8) return K::template run<8>(n, g, a, s, out);
  if (n_acts > 4) {
    rows_upto<K, 4>(n, g, a, s, 4, out);
    a = static_cast<const uint8_t*>(a) + 4 * s;
    out += 4 * kPackRows;
    n_acts -= 4;
  }
  rows_upto<K, 4>(n, g, a, s, n_acts, out);
}
#endif
template <class K>
constexpr PackedGroupFn packed_legacy = packed_upto<K, kLegacyRows>;

}  // namespace

void SALVO_PACK_FILL(CpuKernels& k) {
  static_assert(kKQuantRows <= kMaxPackedActs && kLegacyRows <= kMaxPackedActs);
  const auto set = [&k](WeightKind kind, PackedGroupFn kernel, int rows) {
    k.packed[static_cast<int>(kind)] = kernel;
    k.packed_rows[static_cast<int>(kind)] = rows;
  };
  set(WeightKind::kQ4_K, packed_kquant<Q4K>, kKQuantRows);
  set(WeightKind::kQ6_K, packed_kquant<Q6K>, kKQuantRows);
  set(WeightKind::kQ4_0, packed_legacy<Q4_0>, kLegacyRows);
  set(WeightKind::kQ4_1, packed_legacy<Q4_1>, kLegacyRows);
  set(WeightKind::kQ5_0, packed_legacy<Q5_0>, kLegacyRows);
  set(WeightKind::kQ8_0, packed_legacy<Q8_0>, kLegacyRows);
}

}  // namespace salvo::cpu
