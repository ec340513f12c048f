// Unicode helpers for the tokenizers: UTF-8 decoding that never fails (the way llama.cpp does
// it, so token ids match), category groups for the pre-tokenizer regexes, and GPT-2's reversible
// byte <-> printable-character mapping used by byte-level BPE vocabularies.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace salvo::unicode {

// Major general-category groups (\p{L}, \p{N}, ...). kUnassigned is Cn.
enum class UnicodeCategory : uint8_t {
  kUnassigned,
  kLetter,
  kNumber,
  kPunctuation,
  kMark,
  kSymbol,
  kSeparator,
  kControl,
};

UnicodeCategory category(uint32_t cp);
// White_Space property (what regex \s matches in the tokenizer regexes).
bool is_whitespace(uint32_t cp);
inline bool is_letter(uint32_t cp) { return category(cp) == UnicodeCategory::kLetter; }
inline bool is_number(uint32_t cp) { return category(cp) == UnicodeCategory::kNumber; }

// Byte length of the UTF-8 sequence a lead byte announces; continuation and invalid bytes
// count as 1 so a scan always advances.
size_t utf8_sequence_length(uint8_t lead);

// Decodes UTF-8; each byte that does not start a well-formed sequence becomes U+FFFD on its
// own, so arbitrary bytes never fail (matches llama.cpp's unicode_cpts_from_utf8).
std::vector<uint32_t> decode_utf8(std::string_view text);
void append_utf8(uint32_t cp, std::string& out);

// GPT-2 byte-level BPE alphabet: every byte maps to one printable code point (as UTF-8).
const std::string& byte_to_bpe_char(uint8_t byte);
// Inverse mapping; returns -1 for a code point that is not in the alphabet.
int bpe_char_to_byte(uint32_t cp);

}  // namespace salvo::unicode
