// Philox4x32-10 (Salmon et al., "Parallel random numbers: as easy as 1, 2, 3", SC'11), the
// counter-based generator behind the position-seeded sampler. A counter-based RNG has no state:
// the output is a pure function of (key, counter), so the noise for a token can be recomputed
// from (seed, position, token id) anywhere — on any thread, in any batch, during speculative
// verification — and always agrees with plain decoding.
#pragma once

#include <array>
#include <cstdint>

namespace salvo {

using PhiloxCounter = std::array<uint32_t, 4>;
using PhiloxKey = std::array<uint32_t, 2>;

namespace philox_detail {
inline constexpr uint32_t kMultiplier0 = 0xD2511F53u;
inline constexpr uint32_t kMultiplier1 = 0xCD9E8D57u;
// Weyl key increments: the golden ratio and sqrt(3) - 1, as 32-bit fractions.
inline constexpr uint32_t kKeyBump0 = 0x9E3779B9u;
inline constexpr uint32_t kKeyBump1 = 0xBB67AE85u;

constexpr PhiloxCounter philox_round(const PhiloxCounter& counter, const PhiloxKey& key) {
  const uint64_t product0 = static_cast<uint64_t>(kMultiplier0) * counter[0];
  const uint64_t product1 = static_cast<uint64_t>(kMultiplier1) * counter[2];
  const auto hi0 = static_cast<uint32_t>(product0 >> 32);
  const auto lo0 = static_cast<uint32_t>(product0);
  const auto hi1 = static_cast<uint32_t>(product1 >> 32);
  const auto lo1 = static_cast<uint32_t>(product1);
  return {hi1 ^ counter[1] ^ key[0], lo1, hi0 ^ counter[3] ^ key[1], lo0};
}
}  // namespace philox_detail

// Philox4x32 with 10 rounds, bit-exact with Random123's philox4x32_R(10, ctr, key), so its
// published known-answer vectors apply.
constexpr PhiloxCounter philox4x32_10(PhiloxCounter counter, PhiloxKey key) {
  for (int round = 0; round < 10; ++round) {
    if (round > 0) {
      key[0] += philox_detail::kKeyBump0;
      key[1] += philox_detail::kKeyBump1;
    }
    counter = philox_detail::philox_round(counter, key);
  }
  return counter;
}

// A uniform double in the open interval (0, 1) from two 32-bit words: 52 random bits plus a
// half step, so u lies in [2^-53, 1 - 2^-53] — both representable, never 0 or 1, and
// -log(-log(u)) is always finite. (53 bits plus a half step would round the top value to 1.)
constexpr double philox_open_unit_double(uint32_t high_word, uint32_t low_word) {
  const uint64_t bits = ((static_cast<uint64_t>(high_word) << 32) | low_word) >> 12;  // 52 bits
  return (static_cast<double>(bits) + 0.5) * 0x1.0p-52;
}

}  // namespace salvo
