#include "tokenizer/unicode.h"

#include <algorithm>
#include <array>

namespace salvo::unicode {
namespace {

struct CategoryRange {
  uint32_t start;
  UnicodeCategory category;
};

constexpr CategoryRange kCategoryRanges[] = {
#include "tokenizer/unicode_tables.inc"
};

// The bytes GPT-2 keeps as themselves: printable Latin-1 except space and soft hyphen.
constexpr bool is_printable_byte(int b) {
  return (b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
}

struct ByteAlphabet {
  std::array<std::string, 256> byte_to_char;
  std::array<uint32_t, 256> byte_to_cp{};
  ByteAlphabet() {
    // Non-printable bytes are shifted to U+0100.. in byte order, as GPT-2's bytes_to_unicode.
    uint32_t next_shifted = 256;
    for (int b = 0; b < 256; ++b) {
      byte_to_cp[b] = is_printable_byte(b) ? static_cast<uint32_t>(b) : next_shifted++;
      append_utf8(byte_to_cp[b], byte_to_char[b]);
    }
  }
};

const ByteAlphabet& byte_alphabet() {
  static const ByteAlphabet alphabet;
  return alphabet;
}

}  // namespace

UnicodeCategory category(uint32_t cp) {
  if (cp >= 0x110000) return UnicodeCategory::kUnassigned;
  const auto* end = std::end(kCategoryRanges);
  const auto* it = std::upper_bound(
      std::begin(kCategoryRanges), end, cp,
      [](uint32_t value, const CategoryRange& range) { return value < range.start; });
  return (it - 1)->category;
}

bool is_whitespace(uint32_t cp) {
  // Unicode's White_Space property (PropList.txt); the same set llama.cpp uses for \s.
  if (cp <= 0x20) return cp == 0x20 || (cp >= 0x09 && cp <= 0x0D);
  if (cp < 0x85) return false;
  return cp == 0x85 || cp == 0xA0 || cp == 0x1680 || (cp >= 0x2000 && cp <= 0x200A) ||
         cp == 0x2028 || cp == 0x2029 || cp == 0x202F || cp == 0x205F || cp == 0x3000;
}

size_t utf8_sequence_length(uint8_t lead) {
  static constexpr uint8_t kLengthByHighNibble[16] = {1, 1, 1, 1, 1, 1, 1, 1,
                                                      1, 1, 1, 1, 2, 2, 3, 4};
  return kLengthByHighNibble[lead >> 4];
}

std::vector<uint32_t> decode_utf8(std::string_view text) {
  std::vector<uint32_t> cps;
  cps.reserve(text.size());
  const auto* s = reinterpret_cast<const uint8_t*>(text.data());
  const size_t n = text.size();
  auto is_cont = [&](size_t i) { return i < n && (s[i] & 0xC0) == 0x80; };
  size_t i = 0;
  while (i < n) {
    const uint8_t b = s[i];
    if (b < 0x80) {
      cps.push_back(b);
      i += 1;
    } else if ((b & 0xE0) == 0xC0 && is_cont(i + 1)) {
      cps.push_back(((b & 0x1F) << 6) | (s[i + 1] & 0x3F));
      i += 2;
    } else if ((b & 0xF0) == 0xE0 && is_cont(i + 1) && is_cont(i + 2)) {
      cps.push_back(((b & 0x0F) << 12) | ((s[i + 1] & 0x3F) << 6) | (s[i + 2] & 0x3F));
      i += 3;
    } else if ((b & 0xF8) == 0xF0 && is_cont(i + 1) && is_cont(i + 2) && is_cont(i + 3)) {
      cps.push_back(((b & 0x07) << 18) | ((s[i + 1] & 0x3F) << 12) | ((s[i + 2] & 0x3F) << 6) |
                    (s[i + 3] & 0x3F));
      i += 4;
    } else {
      cps.push_back(0xFFFD);
      i += 1;
    }
  }
  return cps;
}

void append_utf8(uint32_t cp, std::string& out) {
  if (cp < 0x80) {
    out.push_back(static_cast<char>(cp));
  } else if (cp < 0x800) {
    out.push_back(static_cast<char>(0xC0 | (cp >> 6)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else if (cp < 0x10000) {
    out.push_back(static_cast<char>(0xE0 | (cp >> 12)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else {
    // Code points above U+10FFFF only come from 4-byte sequences with an out-of-range lead;
    // re-encoding them with the same bit layout keeps the bytes as they were.
    out.push_back(static_cast<char>(0xF0 | ((cp >> 18) & 0x07)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 12) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  }
}

const std::string& byte_to_bpe_char(uint8_t byte) { return byte_alphabet().byte_to_char[byte]; }

int bpe_char_to_byte(uint32_t cp) {
  if (cp < 256 && is_printable_byte(static_cast<int>(cp))) return static_cast<int>(cp);
  if (cp >= 256 && cp < 256 + 68) {
    // The shifted range holds the 68 non-printable bytes in ascending order.
    const auto& alphabet = byte_alphabet();
    for (int b = 0; b < 256; ++b) {
      if (alphabet.byte_to_cp[b] == cp) return b;
    }
  }
  return -1;
}

}  // namespace salvo::unicode
