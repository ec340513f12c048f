// Text <-> token ids for the vocabularies GGUF files carry: byte-level BPE ("gpt2": SmolLM,
// Qwen2, ...) and SentencePiece with scores ("llama": Gemma, Llama 2, ...). The output matches
// llama.cpp's llama_tokenize id for id, so prompts and KV caches are interchangeable with it.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "util/status.h"

namespace salvo {

class GgufFile;

// GGUF's tokenizer.ggml.token_type values.
enum class TokenType : int32_t {
  kUndefined = 0,
  kNormal = 1,
  kUnknown = 2,
  kControl = 3,
  kUserDefined = 4,
  kUnused = 5,
  kByte = 6,
};

// Everything a tokenizer is built from, independent of the file format. Optional fields take
// llama.cpp's defaults for the model kind when absent.
struct TokenizerData {
  std::string model;  // "gpt2" (byte-level BPE) or "llama" (SentencePiece)
  std::string pre;    // pre-tokenizer name for BPE: "smollm", "qwen2", "gpt-2", "llama3", ...
  std::vector<std::string> tokens;
  std::vector<float> scores;         // SentencePiece merge priorities; empty means all 0
  std::vector<int32_t> token_types;  // TokenType values; empty means all normal
  std::vector<std::string> merges;   // BPE merges "left right", best first
  std::optional<int32_t> bos_id, eos_id, eot_id, eom_id, unk_id, pad_id, sep_id;
  std::optional<int32_t> fim_pad_id, fim_rep_id, fim_sep_id;
  std::optional<bool> add_bos, add_eos, add_space_prefix;
};

// Reads the tokenizer.ggml.* metadata. Missing or mistyped keys are errors naming the key.
Expected<TokenizerData> tokenizer_data_from_gguf(const GgufFile& gguf);

class Tokenizer {
 public:
  static Expected<std::unique_ptr<Tokenizer>> from_gguf(const GgufFile& gguf);
  static Expected<std::unique_ptr<Tokenizer>> from_data(TokenizerData data);
  ~Tokenizer();

  // add_special: prepend BOS (and append EOS) when the model's metadata says so.
  // parse_special: control tokens written in the text ("<|im_start|>") become those tokens;
  // user-defined tokens are always matched, as in llama.cpp and Hugging Face tokenizers.
  std::vector<int32_t> encode(std::string_view text, bool add_special, bool parse_special) const;

  // The bytes a token stands for: byte-level BPE decoded, SentencePiece "▁" as a space,
  // <0xAB> as that byte, control and user-defined tokens as their text. May be a fragment of
  // a UTF-8 character. Out-of-range ids give an empty string.
  std::string token_piece(int32_t id) const;
  // Concatenated pieces. With render_special false, control tokens contribute nothing.
  std::string decode(std::span<const int32_t> ids, bool render_special = true) const;

  int32_t n_vocab() const;
  // Rejects ids from a caller (an API's token prompt) that are outside the vocabulary.
  Status check_ids(std::span<const int32_t> ids) const;
  int32_t bos_id() const;  // -1 when the model has none
  int32_t eos_id() const;
  bool add_bos() const;
  bool add_eos() const;
  bool is_end_of_generation(int32_t id) const;
  bool is_control(int32_t id) const;
  std::optional<int32_t> find_token(std::string_view piece) const;
  // The vocabulary entry as stored in the file (e.g. "Ġthe", "▁the", "<0x0A>").
  const std::string& token_text(int32_t id) const;

  struct Impl;

 private:
  explicit Tokenizer(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

// Turns a stream of token ids into text chunks that never end inside a UTF-8 character, for
// printing while generating. Bytes that can never complete a character are passed through.
class StreamDecoder {
 public:
  explicit StreamDecoder(const Tokenizer& tokenizer, bool render_special = true)
      : tokenizer_(tokenizer), render_special_(render_special) {}
  // Returns the text that became complete with this token (possibly empty).
  std::string push(int32_t id);
  // Returns whatever is still held back (an incomplete trailing character).
  std::string flush();

 private:
  const Tokenizer& tokenizer_;
  bool render_special_;
  std::string pending_;
};

// Length of the longest prefix of `bytes` that does not end inside an incomplete UTF-8
// sequence which later bytes could still complete.
size_t utf8_complete_prefix(std::string_view bytes);

}  // namespace salvo
