// Tensor element types, numbered as GGUF/ggml numbers them, and their packed block layouts.
// A quantized row of n elements is n / block_size blocks laid end to end.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string_view>

namespace salvo {

enum class DType : uint32_t {
  kF32 = 0,
  kF16 = 1,
  kQ4_0 = 2,
  kQ4_1 = 3,
  kQ5_0 = 6,
  kQ8_0 = 8,
  kQ8_1 = 9,
  kQ4_K = 12,
  kQ5_K = 13,
  kQ6_K = 14,
  kQ8_K = 15,
  kBF16 = 30,
};

using fp16_t = uint16_t;
using bf16_t = uint16_t;

inline constexpr int kQK = 32;    // elements per block of the legacy formats
inline constexpr int kQKK = 256;  // elements per super-block of the k-quants
inline constexpr int kKScaleBytes = 12;

struct BlockQ4_0 {
  fp16_t d;             // scale
  uint8_t qs[kQK / 2];  // 4-bit quants: low nibbles are elements 0..15, high 16..31
};
static_assert(sizeof(BlockQ4_0) == 18);

struct BlockQ4_1 {
  fp16_t d;  // scale
  fp16_t m;  // minimum
  uint8_t qs[kQK / 2];
};
static_assert(sizeof(BlockQ4_1) == 20);

struct BlockQ5_0 {
  fp16_t d;
  uint8_t qh[4];  // fifth bit of each of the 32 quants
  uint8_t qs[kQK / 2];
};
static_assert(sizeof(BlockQ5_0) == 22);

struct BlockQ8_0 {
  fp16_t d;
  int8_t qs[kQK];
};
static_assert(sizeof(BlockQ8_0) == 34);

// Activation format for Q4_1 weights: s = d * sum(qs) lets the weight minimum fold in.
struct BlockQ8_1 {
  fp16_t d;
  fp16_t s;
  int8_t qs[kQK];
};
static_assert(sizeof(BlockQ8_1) == 36);

struct BlockQ4_K {
  fp16_t d;                      // super-block scale for the 6-bit scales
  fp16_t dmin;                   // super-block scale for the 6-bit minimums
  uint8_t scales[kKScaleBytes];  // 8 scales and 8 minimums, 6 bits each
  uint8_t qs[kQKK / 2];
};
static_assert(sizeof(BlockQ4_K) == 144);

// Unpacks the j-th 6-bit scale and minimum of a Q4_K/Q5_K super-block's `scales` (ggml's
// get_scale_min_k4).
inline void scale_min_k4(int j, const uint8_t* q, uint8_t* sc, uint8_t* m) {
  if (j < 4) {
    *sc = q[j] & 63;
    *m = q[j + 4] & 63;
  } else {
    *sc = (q[j + 4] & 0xF) | ((q[j - 4] >> 6) << 4);
    *m = (q[j + 4] >> 4) | ((q[j] >> 6) << 4);
  }
}

struct BlockQ5_K {
  fp16_t d;
  fp16_t dmin;
  uint8_t scales[kKScaleBytes];
  uint8_t qh[kQKK / 8];  // fifth bit of each quant
  uint8_t qs[kQKK / 2];
};
static_assert(sizeof(BlockQ5_K) == 176);

struct BlockQ6_K {
  uint8_t ql[kQKK / 2];      // low 4 bits
  uint8_t qh[kQKK / 4];      // high 2 bits
  int8_t scales[kQKK / 16];  // 8-bit scales of 16-element groups
  fp16_t d;
};
static_assert(sizeof(BlockQ6_K) == 210);

// Activation format for the k-quants: float scale and per-16 sums for the minimum terms.
struct BlockQ8_K {
  float d;
  int8_t qs[kQKK];
  int16_t bsums[kQKK / 16];
};
static_assert(sizeof(BlockQ8_K) == 292);

struct DTypeTraits {
  DType type;
  std::string_view name;
  int block_size;      // elements per block
  size_t block_bytes;  // bytes per block
};

// Traits of a supported type, or nullopt for ids salvo does not handle.
std::optional<DTypeTraits> dtype_traits(uint32_t type_id);
const DTypeTraits& traits(DType type);
std::string_view dtype_name(uint32_t type_id);  // "type 23" style text for unknown ids

// Bytes of a row of n elements; n must be a multiple of the block size.
size_t row_bytes(DType type, int64_t n);

}  // namespace salvo
