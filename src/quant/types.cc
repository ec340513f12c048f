#include "quant/types.h"

#include <array>
#include <string>

#include "util/check.h"

namespace salvo {
namespace {

constexpr std::array<DTypeTraits, 12> kTraits = {{
    {DType::kF32, "F32", 1, 4},
    {DType::kF16, "F16", 1, 2},
    {DType::kQ4_0, "Q4_0", kQK, sizeof(BlockQ4_0)},
    {DType::kQ4_1, "Q4_1", kQK, sizeof(BlockQ4_1)},
    {DType::kQ5_0, "Q5_0", kQK, sizeof(BlockQ5_0)},
    {DType::kQ8_0, "Q8_0", kQK, sizeof(BlockQ8_0)},
    {DType::kQ8_1, "Q8_1", kQK, sizeof(BlockQ8_1)},
    {DType::kQ4_K, "Q4_K", kQKK, sizeof(BlockQ4_K)},
    {DType::kQ5_K, "Q5_K", kQKK, sizeof(BlockQ5_K)},
    {DType::kQ6_K, "Q6_K", kQKK, sizeof(BlockQ6_K)},
    {DType::kQ8_K, "Q8_K", kQKK, sizeof(BlockQ8_K)},
    {DType::kBF16, "BF16", 1, 2},
}};

}  // namespace

std::optional<DTypeTraits> dtype_traits(uint32_t type_id) {
  for (const auto& t : kTraits) {
    if (static_cast<uint32_t>(t.type) == type_id) return t;
  }
  return std::nullopt;
}

const DTypeTraits& traits(DType type) {
  for (const auto& t : kTraits) {
    if (t.type == type) return t;
  }
  SALVO_CHECK_MSG(false, "unknown DType");
}

std::string_view dtype_name(uint32_t type_id) {
  auto t = dtype_traits(type_id);
  if (t) return t->name;
  static thread_local std::string unknown;
  unknown = "type " + std::to_string(type_id);
  return unknown;
}

size_t row_bytes(DType type, int64_t n) {
  const auto& t = traits(type);
  SALVO_CHECK(n % t.block_size == 0);
  return static_cast<size_t>(n / t.block_size) * t.block_bytes;
}

}  // namespace salvo
