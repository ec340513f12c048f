// 256-bit x86 block dot products. This file is compiled twice: on its own as the "avx2" path
// (maddubs + madd), and included by dot_avx512.cc with SALVO_DOT_VNNI defined, where the same
// kernels are built for AVX-512 machines and the unsigned x signed byte products use VNNI
// (vpdpbusd). Functions carry target attributes instead of the translation unit being built
// with -mavx2, so nothing here can leak wide instructions into generic code (Highway's
// re-include pattern, minus the library).
//
// Row invariance: every kernel is a template over the number of activation rows R. Weight
// blocks are unpacked once and then, for each row, the same instruction sequence runs on that
// row's own accumulators, so a row's result does not depend on R.
#include <immintrin.h>

#include <cmath>
#include <cstring>

#include "backends/cpu/dot.h"
#include "quant/fp16.h"

#ifndef SALVO_DOT_VNNI
#define SALVO_X86_TARGET "avx2,fma,f16c"
#define SALVO_X86_FILL fill_avx2_kernels
#define SALVO_X86_NAME "avx2"
#endif

#define SALVO_KERNEL __attribute__((target(SALVO_X86_TARGET)))
#define SALVO_INLINE inline __attribute__((always_inline, target(SALVO_X86_TARGET)))

namespace salvo::cpu {
namespace {

SALVO_INLINE float hsum(__m256 v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}

// Sums of products of unsigned bytes u with signed bytes s, four adjacent pairs per int32 lane.
// maddubs saturates at int16, which every caller's value ranges stay below.
SALVO_INLINE __m256i mul_sum_us8(__m256i u, __m256i s) {
#ifdef SALVO_DOT_VNNI
  return _mm256_dpbusd_epi32(_mm256_setzero_si256(), u, s);
#else
  return _mm256_madd_epi16(_mm256_maddubs_epi16(u, s), _mm256_set1_epi16(1));
#endif
}

// sum += pairs of int16 products (madd + add; one vpdpwssd with VNNI). Exact either way: the
// callers' products stay far from the int16 * int16 overflow corner.
SALVO_INLINE __m256i madd_acc_i16(__m256i sum, __m256i a, __m256i b) {
#ifdef SALVO_DOT_VNNI
  return _mm256_dpwssd_epi32(sum, a, b);
#else
  return _mm256_add_epi32(sum, _mm256_madd_epi16(a, b));
#endif
}

// Signed x signed bytes via |x| * (y with x's sign): neither side is ever -128 here.
SALVO_INLINE __m256i mul_sum_i8(__m256i x, __m256i y) {
  return mul_sum_us8(_mm256_sign_epi8(x, x), _mm256_sign_epi8(y, x));
}

SALVO_INLINE float f16(fp16_t h) { return _cvtsh_ss(h); }

SALVO_INLINE __m256i load32(const void* p) {
  return _mm256_loadu_si256(static_cast<const __m256i*>(p));
}

// 16 packed nibble bytes -> 32 bytes: low nibbles first (elements 0..15), then high nibbles.
SALVO_INLINE __m256i unpack_nibbles_32(const uint8_t* qs) {
  const __m128i b = _mm_loadu_si128(reinterpret_cast<const __m128i*>(qs));
  const __m256i both = _mm256_set_m128i(_mm_srli_epi16(b, 4), b);
  return _mm256_and_si256(both, _mm256_set1_epi8(0x0F));
}

// Bit i of the 32-bit word -> byte i set to 0xFF (ggml bytes_from_bits_32).
SALVO_INLINE __m256i bytes_from_bits_32(const uint8_t* bits) {
  uint32_t x32;
  std::memcpy(&x32, bits, 4);
  const __m256i shuf = _mm256_set_epi64x(0x0303030303030303, 0x0202020202020202, 0x0101010101010101,
                                         0x0000000000000000);
  __m256i bytes = _mm256_shuffle_epi8(_mm256_set1_epi32(static_cast<int>(x32)), shuf);
  bytes = _mm256_or_si256(bytes, _mm256_set1_epi64x(0x7fbfdfeff7fbfdfe));
  return _mm256_cmpeq_epi8(bytes, _mm256_set1_epi64x(-1));
}

template <typename Act>
SALVO_INLINE const Act* act_row(const void* acts, size_t stride, int r) {
  return reinterpret_cast<const Act*>(static_cast<const uint8_t*>(acts) + r * stride);
}

// ---- float weights -------------------------------------------------------------------------

enum class FloatKind { kF32, kF16, kBF16 };

template <FloatKind K>
SALVO_INLINE __m256 load8_weights(const void* w, int64_t i) {
  if constexpr (K == FloatKind::kF32) {
    return _mm256_loadu_ps(static_cast<const float*>(w) + i);
  } else if constexpr (K == FloatKind::kF16) {
    return _mm256_cvtph_ps(
        _mm_loadu_si128(reinterpret_cast<const __m128i*>(static_cast<const fp16_t*>(w) + i)));
  } else {
    const __m256i h = _mm256_cvtepu16_epi32(
        _mm_loadu_si128(reinterpret_cast<const __m128i*>(static_cast<const bf16_t*>(w) + i)));
    return _mm256_castsi256_ps(_mm256_slli_epi32(h, 16));
  }
}

template <FloatKind K>
SALVO_INLINE float weight_at(const void* w, int64_t i) {
  if constexpr (K == FloatKind::kF32) return static_cast<const float*>(w)[i];
  if constexpr (K == FloatKind::kF16) return f16(static_cast<const fp16_t*>(w)[i]);
  if constexpr (K == FloatKind::kBF16) return bf16_to_fp32(static_cast<const bf16_t*>(w)[i]);
}

template <FloatKind K, int R>
SALVO_INLINE void dot_float(int64_t n, const void* w, const void* acts, size_t stride, float* out) {
  const float* x[R];
  __m256 acc0[R], acc1[R];
  for (int r = 0; r < R; ++r) {
    x[r] = act_row<float>(acts, stride, r);
    acc0[r] = _mm256_setzero_ps();
    acc1[r] = _mm256_setzero_ps();
  }
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    const __m256 w0 = load8_weights<K>(w, i), w1 = load8_weights<K>(w, i + 8);
    for (int r = 0; r < R; ++r) {
      acc0[r] = _mm256_fmadd_ps(w0, _mm256_loadu_ps(x[r] + i), acc0[r]);
      acc1[r] = _mm256_fmadd_ps(w1, _mm256_loadu_ps(x[r] + i + 8), acc1[r]);
    }
  }
  for (int r = 0; r < R; ++r) {
    float sum = hsum(_mm256_add_ps(acc0[r], acc1[r]));
    for (int64_t j = i; j < n; ++j) sum = std::fma(weight_at<K>(w, j), x[r][j], sum);
    out[r] = sum;
  }
}

// ---- legacy 32-element blocks --------------------------------------------------------------

// Unpackers for the 32-element formats: the block's weights as 32 bytes, and whether they are
// signed (Q4_0/Q5_0/Q8_0: sign trick) or unsigned 0..15 (Q4_1: its minimum is added apart).
struct UnpackQ4_0 {
  const BlockQ4_0* w;
  static constexpr bool kSigned = true;
  static constexpr bool kHasMin = false;
  SALVO_INLINE float min(int64_t) const { return 0.0f; }
  SALVO_INLINE __m256i quants(int64_t b) const {
    return _mm256_sub_epi8(unpack_nibbles_32(w[b].qs), _mm256_set1_epi8(8));
  }
  SALVO_INLINE float scale(int64_t b) const { return f16(w[b].d); }
};

struct UnpackQ4_1 {
  const BlockQ4_1* w;
  static constexpr bool kSigned = false;
  static constexpr bool kHasMin = true;
  SALVO_INLINE __m256i quants(int64_t b) const { return unpack_nibbles_32(w[b].qs); }
  SALVO_INLINE float scale(int64_t b) const { return f16(w[b].d); }
  SALVO_INLINE float min(int64_t b) const { return f16(w[b].m); }
};

struct UnpackQ5_0 {
  const BlockQ5_0* w;
  static constexpr bool kSigned = true;
  static constexpr bool kHasMin = false;
  SALVO_INLINE float min(int64_t) const { return 0.0f; }
  SALVO_INLINE __m256i quants(int64_t b) const {
    // (nibble | bit << 4) - 16 == nibble | (bit ? 0 : 0xF0) as a signed byte.
    const __m256i hi = _mm256_andnot_si256(bytes_from_bits_32(w[b].qh), _mm256_set1_epi8(-16));
    return _mm256_or_si256(unpack_nibbles_32(w[b].qs), hi);
  }
  SALVO_INLINE float scale(int64_t b) const { return f16(w[b].d); }
};

struct UnpackQ8_0 {
  const BlockQ8_0* w;
  static constexpr bool kSigned = true;
  static constexpr bool kHasMin = false;
  SALVO_INLINE float min(int64_t) const { return 0.0f; }
  SALVO_INLINE __m256i quants(int64_t b) const { return load32(w[b].qs); }
  SALVO_INLINE float scale(int64_t b) const { return f16(w[b].d); }
};

template <int R, typename Act, typename Unpack>
SALVO_INLINE void legacy_block(const Unpack& u, const Act* const* a, int64_t b, __m256* acc,
                               __m128* acc_min) {
  const __m256i q = u.quants(b);
  const float wd = u.scale(b);
  for (int r = 0; r < R; ++r) {
    const __m256i y = load32(a[r][b].qs);
    const __m256i isum = Unpack::kSigned ? mul_sum_i8(q, y) : mul_sum_us8(q, y);
    const __m256 d = _mm256_set1_ps(wd * f16(a[r][b].d));
    acc[r] = _mm256_fmadd_ps(d, _mm256_cvtepi32_ps(isum), acc[r]);
    if constexpr (Unpack::kHasMin) {
      // Q4_1's minimum times the activation block sum s (lane 0 only), interleaved with the
      // main chain rather than a second pass: short rows are latency-bound.
      acc_min[r] = _mm_fmadd_ss(_mm_set_ss(u.min(b)), _mm_set_ss(f16(a[r][b].s)), acc_min[r]);
    }
  }
}

// Two float accumulators per row (even and odd blocks) hide the FMA latency; they are added
// once at the end, in the same order for every row and every R.
template <int R, typename Act, typename Unpack>
SALVO_INLINE void legacy_dot(int64_t n, const Unpack& u, const void* acts, size_t stride,
                             float* out) {
  const Act* a[R];
  __m256 acc0[R], acc1[R];
  __m128 min0[R], min1[R];
  for (int r = 0; r < R; ++r) {
    a[r] = act_row<Act>(acts, stride, r);
    acc0[r] = acc1[r] = _mm256_setzero_ps();
    min0[r] = min1[r] = _mm_setzero_ps();
  }
  const int64_t nb = n / kQK;
  int64_t b = 0;
  for (; b + 2 <= nb; b += 2) {
    legacy_block<R>(u, a, b, acc0, min0);
    legacy_block<R>(u, a, b + 1, acc1, min1);
  }
  if (b < nb) legacy_block<R>(u, a, b, acc0, min0);
  for (int r = 0; r < R; ++r) {
    out[r] = hsum(_mm256_add_ps(acc0[r], acc1[r]));
    if constexpr (Unpack::kHasMin) out[r] += _mm_cvtss_f32(_mm_add_ss(min0[r], min1[r]));
  }
}

template <int R>
SALVO_INLINE void dot_q4_0(int64_t n, const void* w, const void* acts, size_t stride, float* out) {
  legacy_dot<R, BlockQ8_0>(n, UnpackQ4_0{static_cast<const BlockQ4_0*>(w)}, acts, stride, out);
}

template <int R>
SALVO_INLINE void dot_q4_1(int64_t n, const void* w, const void* acts, size_t stride, float* out) {
  legacy_dot<R, BlockQ8_1>(n, UnpackQ4_1{static_cast<const BlockQ4_1*>(w)}, acts, stride, out);
}

template <int R>
SALVO_INLINE void dot_q5_0(int64_t n, const void* w, const void* acts, size_t stride, float* out) {
  legacy_dot<R, BlockQ8_0>(n, UnpackQ5_0{static_cast<const BlockQ5_0*>(w)}, acts, stride, out);
}

template <int R>
SALVO_INLINE void dot_q8_0(int64_t n, const void* w, const void* acts, size_t stride, float* out) {
  legacy_dot<R, BlockQ8_0>(n, UnpackQ8_0{static_cast<const BlockQ8_0*>(w)}, acts, stride, out);
}

// ---- k-quants (256-element super-blocks, Q8_K activations) ---------------------------------

// The eight 6-bit scales and minimums of a Q4_K/Q5_K block as 16 int16: scales then minimums.
SALVO_INLINE __m256i k4_scales_mins(const uint8_t* packed) {
  uint32_t u[4];
  std::memcpy(u, packed, 12);
  constexpr uint32_t kMask1 = 0x3f3f3f3f, kMask2 = 0x0f0f0f0f, kMask3 = 0x03030303;
  u[3] = ((u[2] >> 4) & kMask2) | (((u[1] >> 6) & kMask3) << 4);
  const uint32_t uaux = u[1] & kMask1;
  u[1] = (u[2] & kMask2) | (((u[0] >> 6) & kMask3) << 4);
  u[2] = uaux;
  u[0] &= kMask1;
  return _mm256_cvtepu8_epi16(_mm_set_epi32(static_cast<int>(u[3]), static_cast<int>(u[2]),
                                            static_cast<int>(u[1]), static_cast<int>(u[0])));
}

// int16 scale j broadcast to every 16-bit lane.
SALVO_INLINE __m256i broadcast_scale(__m256i scales_both_halves, int j) {
  const __m256i idx = _mm256_set1_epi16(static_cast<int16_t>((2 * j + 1) << 8 | (2 * j)));
  return _mm256_shuffle_epi8(scales_both_halves, idx);
}

// Per-row state of Q4_K/Q5_K: float accumulators for the scaled sums and the minimum terms.
template <int R>
struct KAcc {
  const BlockQ8_K* a[R];
  __m256 acc[R], acc_m[R];
  __m256i sumi[R];
  SALVO_INLINE KAcc(const void* acts, size_t stride) {
    for (int r = 0; r < R; ++r) {
      a[r] = act_row<BlockQ8_K>(acts, stride, r);
      acc[r] = acc_m[r] = _mm256_setzero_ps();
    }
  }
  // Starts super-block b: minimum terms -dmin * m_j * (bsums of group j), sums reset.
  SALVO_INLINE void begin(int64_t b, float wdmin, __m256i mins_and_scales) {
    const __m128i mins = _mm256_extracti128_si256(mins_and_scales, 1);
    for (int r = 0; r < R; ++r) {
      const __m256i bsums = load32(a[r][b].bsums);
      const __m128i q8s =
          _mm_hadd_epi16(_mm256_castsi256_si128(bsums), _mm256_extracti128_si256(bsums, 1));
      const __m128i prod = _mm_madd_epi16(mins, q8s);
      const __m256 dmin = _mm256_set1_ps(-a[r][b].d * wdmin);
      acc_m[r] = _mm256_fmadd_ps(dmin, _mm256_cvtepi32_ps(_mm256_castsi128_si256(prod)), acc_m[r]);
      sumi[r] = _mm256_setzero_si256();
    }
  }
  // One 32-element group: unsigned quants q (0..31) times row r's bytes, times the scale.
  SALVO_INLINE void group(int r, int64_t b, int g, __m256i q, __m256i scale) {
    const __m256i p = _mm256_maddubs_epi16(q, load32(a[r][b].qs + 32 * g));
    sumi[r] = madd_acc_i16(sumi[r], scale, p);
  }
  SALVO_INLINE void end(int64_t b, float wd) {
    for (int r = 0; r < R; ++r) {
      const __m256 d = _mm256_set1_ps(a[r][b].d * wd);
      acc[r] = _mm256_fmadd_ps(d, _mm256_cvtepi32_ps(sumi[r]), acc[r]);
    }
  }
  SALVO_INLINE float total(int r) const {
    // acc_m only has its low 4 lanes set (the 128-bit product), the rest stay zero.
    return hsum(acc[r]) + hsum(acc_m[r]);
  }
};

template <int R>
SALVO_INLINE void dot_q4_k(int64_t n, const void* wv, const void* acts, size_t stride, float* out) {
  const auto* w = static_cast<const BlockQ4_K*>(wv);
  KAcc<R> s(acts, stride);
  const __m256i m4 = _mm256_set1_epi8(0xF);
  for (int64_t b = 0; b < n / kQKK; ++b) {
    const __m256i mins_and_scales = k4_scales_mins(w[b].scales);
    const __m256i scales = _mm256_permute2x128_si256(mins_and_scales, mins_and_scales, 0x00);
    s.begin(b, f16(w[b].dmin), mins_and_scales);
    for (int j = 0; j < 4; ++j) {
      const __m256i bits = load32(w[b].qs + 32 * j);
      const __m256i ql = _mm256_and_si256(bits, m4);
      const __m256i qh = _mm256_and_si256(_mm256_srli_epi16(bits, 4), m4);
      const __m256i sl = broadcast_scale(scales, 2 * j), sh = broadcast_scale(scales, 2 * j + 1);
      for (int r = 0; r < R; ++r) {
        s.group(r, b, 2 * j, ql, sl);
        s.group(r, b, 2 * j + 1, qh, sh);
      }
    }
    s.end(b, f16(w[b].d));
  }
  for (int r = 0; r < R; ++r) out[r] = s.total(r);
}

template <int R>
SALVO_INLINE void dot_q5_k(int64_t n, const void* wv, const void* acts, size_t stride, float* out) {
  const auto* w = static_cast<const BlockQ5_K*>(wv);
  KAcc<R> s(acts, stride);
  const __m256i m4 = _mm256_set1_epi8(0xF);
  const __m256i m16 = _mm256_set1_epi8(16);
  for (int64_t b = 0; b < n / kQKK; ++b) {
    const __m256i mins_and_scales = k4_scales_mins(w[b].scales);
    const __m256i scales = _mm256_permute2x128_si256(mins_and_scales, mins_and_scales, 0x00);
    s.begin(b, f16(w[b].dmin), mins_and_scales);
    const __m256i hbits = load32(w[b].qh);
    for (int j = 0; j < 4; ++j) {
      const __m256i bits = load32(w[b].qs + 32 * j);
      // Fifth bit of group 2j is bit 2j of qh, of group 2j+1 bit 2j+1; moved to bit 4.
      const __m256i hl =
          _mm256_and_si256(_mm256_slli_epi16(_mm256_srli_epi16(hbits, 2 * j), 4), m16);
      const __m256i hh =
          _mm256_and_si256(_mm256_slli_epi16(_mm256_srli_epi16(hbits, 2 * j + 1), 4), m16);
      const __m256i ql = _mm256_or_si256(_mm256_and_si256(bits, m4), hl);
      const __m256i qh = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(bits, 4), m4), hh);
      const __m256i sl = broadcast_scale(scales, 2 * j), sh = broadcast_scale(scales, 2 * j + 1);
      for (int r = 0; r < R; ++r) {
        s.group(r, b, 2 * j, ql, sl);
        s.group(r, b, 2 * j + 1, qh, sh);
      }
    }
    s.end(b, f16(w[b].d));
  }
  for (int r = 0; r < R; ++r) out[r] = s.total(r);
}

// 16 int8 scales -> the pair (2i, 2i+1) as int16, each repeated over 16 elements.
SALVO_INLINE __m256i q6_scale_pair(__m128i scales, int i) {
  const __m128i idx =
      _mm_set_epi8(2 * i + 1, 2 * i + 1, 2 * i + 1, 2 * i + 1, 2 * i + 1, 2 * i + 1, 2 * i + 1,
                   2 * i + 1, 2 * i, 2 * i, 2 * i, 2 * i, 2 * i, 2 * i, 2 * i, 2 * i);
  return _mm256_cvtepi8_epi16(_mm_shuffle_epi8(scales, idx));
}

template <int R>
SALVO_INLINE void dot_q6_k(int64_t n, const void* wv, const void* acts, size_t stride, float* out) {
  const auto* w = static_cast<const BlockQ6_K*>(wv);
  const BlockQ8_K* a[R];
  __m256 acc[R];
  for (int r = 0; r < R; ++r) {
    a[r] = act_row<BlockQ8_K>(acts, stride, r);
    acc[r] = _mm256_setzero_ps();
  }
  const __m256i m4 = _mm256_set1_epi8(0xF), m2 = _mm256_set1_epi8(3), m32 = _mm256_set1_epi8(32);
  for (int64_t b = 0; b < n / kQKK; ++b) {
    const __m128i scales = _mm_loadu_si128(reinterpret_cast<const __m128i*>(w[b].scales));
    __m256i sumi[R];
    for (int r = 0; r < R; ++r) sumi[r] = _mm256_setzero_si256();
    for (int j = 0; j < 2; ++j) {
      const __m256i bits1 = load32(w[b].ql + 64 * j), bits2 = load32(w[b].ql + 64 * j + 32);
      const __m256i hbits = load32(w[b].qh + 32 * j);
      __m256i q[4];
      q[0] = _mm256_or_si256(_mm256_and_si256(bits1, m4),
                             _mm256_slli_epi16(_mm256_and_si256(hbits, m2), 4));
      q[1] =
          _mm256_or_si256(_mm256_and_si256(bits2, m4),
                          _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(hbits, 2), m2), 4));
      q[2] =
          _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(bits1, 4), m4),
                          _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(hbits, 4), m2), 4));
      q[3] =
          _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(bits2, 4), m4),
                          _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(hbits, 6), m2), 4));
      for (int k = 0; k < 4; ++k) {
        const __m256i sc = q6_scale_pair(scales, 4 * j + k);
        for (int r = 0; r < R; ++r) {
          // q in 0..63 is unsigned; the -32 offset comes back as 32 * (activation sum).
          const __m256i y = load32(a[r][b].qs + 128 * j + 32 * k);
          const __m256i p =
              _mm256_sub_epi16(_mm256_maddubs_epi16(q[k], y), _mm256_maddubs_epi16(m32, y));
          sumi[r] = madd_acc_i16(sumi[r], sc, p);
        }
      }
    }
    const float wd = f16(w[b].d);
    for (int r = 0; r < R; ++r) {
      acc[r] = _mm256_fmadd_ps(_mm256_set1_ps(wd * a[r][b].d), _mm256_cvtepi32_ps(sumi[r]), acc[r]);
    }
  }
  for (int r = 0; r < R; ++r) out[r] = hsum(acc[r]);
}

// ---- DotFn adapters --------------------------------------------------------------------------

template <void (*K1)(int64_t, const void*, const void*, size_t, float*),
          void (*K2)(int64_t, const void*, const void*, size_t, float*),
          void (*K3)(int64_t, const void*, const void*, size_t, float*),
          void (*K4)(int64_t, const void*, const void*, size_t, float*)>
SALVO_KERNEL void dispatch_rows(int64_t n, const void* w, const void* acts, size_t stride,
                                int n_acts, float* out) {
  switch (n_acts) {
    case 1:
      return K1(n, w, acts, stride, out);
    case 2:
      return K2(n, w, acts, stride, out);
    case 3:
      return K3(n, w, acts, stride, out);
    default:
      return K4(n, w, acts, stride, out);
  }
}

#define SALVO_ROWS(kernel) dispatch_rows<kernel<1>, kernel<2>, kernel<3>, kernel<4>>

template <int R>
SALVO_INLINE void dot_f32(int64_t n, const void* w, const void* a, size_t s, float* out) {
  dot_float<FloatKind::kF32, R>(n, w, a, s, out);
}
template <int R>
SALVO_INLINE void dot_f16(int64_t n, const void* w, const void* a, size_t s, float* out) {
  dot_float<FloatKind::kF16, R>(n, w, a, s, out);
}
template <int R>
SALVO_INLINE void dot_bf16(int64_t n, const void* w, const void* a, size_t s, float* out) {
  dot_float<FloatKind::kBF16, R>(n, w, a, s, out);
}

void fill_x86_256(CpuKernels& k) {
  auto set = [&](WeightKind kind, DotFn fn) { k.dot[static_cast<int>(kind)] = fn; };
  set(WeightKind::kF32, SALVO_ROWS(dot_f32));
  set(WeightKind::kF16, SALVO_ROWS(dot_f16));
  set(WeightKind::kBF16, SALVO_ROWS(dot_bf16));
  set(WeightKind::kQ4_0, SALVO_ROWS(dot_q4_0));
  set(WeightKind::kQ4_1, SALVO_ROWS(dot_q4_1));
  set(WeightKind::kQ5_0, SALVO_ROWS(dot_q5_0));
  set(WeightKind::kQ8_0, SALVO_ROWS(dot_q8_0));
  set(WeightKind::kQ4_K, SALVO_ROWS(dot_q4_k));
  set(WeightKind::kQ5_K, SALVO_ROWS(dot_q5_k));
  set(WeightKind::kQ6_K, SALVO_ROWS(dot_q6_k));
}

#undef SALVO_ROWS

}  // namespace

#ifndef SALVO_DOT_VNNI
void fill_avx2_kernels(CpuKernels& k) {
  k.name = "avx2";
  fill_x86_256(k);
}
#endif

}  // namespace salvo::cpu
