// Splits text into the words byte-level BPE merges within, following the pre-tokenizer regexes
// llama.cpp applies for each `tokenizer.ggml.pre` value. Hand-written matchers replace the
// regexes: std::regex has no Unicode classes and is far too slow for long prompts.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace salvo {

enum class PreTokenizer {
  // 's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)
  kGpt2,
  // \p{N} first (every digit its own word), then kGpt2 within the rest: smollm, starcoder, ...
  kGpt2DigitsSplit,
  // (?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}|
  //  ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+  (qwen2, stablelm2)
  kQwen2,
  // As kQwen2 with \p{N}{1,3} (llama3 family).
  kLlama3,
};

// Maps a tokenizer.ggml.pre name to its splitter; nullopt for names salvo does not know.
std::optional<PreTokenizer> pre_tokenizer_from_name(std::string_view name);

// The words of `text` in order, as UTF-8. Their concatenation is `text` with each invalid
// UTF-8 byte replaced by U+FFFD (what llama.cpp feeds its BPE).
std::vector<std::string> pretokenize(PreTokenizer kind, std::string_view text);

}  // namespace salvo
