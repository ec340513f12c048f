// Internal state shared by the tokenizer's translation units (not part of the public API).
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "tokenizer/pretokenize.h"
#include "tokenizer/string_index.h"
#include "tokenizer/tokenizer.h"

namespace salvo {

// Attribute bits, as llama.cpp derives them from token types plus name-based fixes.
enum TokenAttr : uint32_t {
  kAttrUndefined = 0,
  kAttrUnknown = 1u << 0,
  kAttrUnused = 1u << 1,
  kAttrNormal = 1u << 2,
  kAttrControl = 1u << 3,
  kAttrUserDefined = 1u << 4,
  kAttrByte = 1u << 5,
};

// A byte-level BPE merge: ranks order merges (lower first); result is the interned id of the
// merged string.
struct BpeMerge {
  int32_t rank;
  int32_t result;
};

// Merges by (left id, right id) key, open addressing: 16 bytes a slot at most 3/4 full, where
// hash-map nodes cost 32 bytes each plus the bucket array.
class MergeTable {
 public:
  void reserve(size_t n) {
    size_t cap = 16;
    while (cap * 3 < n * 4) cap *= 2;
    if (cap > slots_.size()) rehash(cap);
  }
  // Keeps the first merge stored for a key.
  void emplace(uint64_t key, BpeMerge merge) {
    if ((size_ + 1) * 4 > slots_.size() * 3) rehash(slots_.empty() ? 16 : 2 * slots_.size());
    size_t i = slot_of(key);
    for (; slots_[i].key != kEmpty; i = (i + 1) & (slots_.size() - 1)) {
      if (slots_[i].key == key) return;
    }
    slots_[i] = {key, merge};
    ++size_;
  }
  const BpeMerge* find(uint64_t key) const {
    if (slots_.empty()) return nullptr;
    for (size_t i = slot_of(key); slots_[i].key != kEmpty; i = (i + 1) & (slots_.size() - 1)) {
      if (slots_[i].key == key) return &slots_[i].merge;
    }
    return nullptr;
  }

 private:
  static constexpr uint64_t kEmpty = ~uint64_t{0};  // ids are non-negative int32s
  struct Slot {
    uint64_t key = kEmpty;
    BpeMerge merge{};
  };
  size_t slot_of(uint64_t key) const {
    return static_cast<size_t>((key * 0x9E3779B97F4A7C15ull) >> 32) & (slots_.size() - 1);
  }
  void rehash(size_t cap) {
    std::vector<Slot> old = std::move(slots_);
    slots_.assign(cap, Slot{});
    size_ = 0;
    for (const Slot& s : old) {
      if (s.key != kEmpty) emplace(s.key, s.merge);
    }
  }
  std::vector<Slot> slots_;
  size_t size_ = 0;
};

enum class VocabKind { kBpe, kSpm };

struct Tokenizer::Impl {
  VocabKind kind = VocabKind::kBpe;
  PreTokenizer pre = PreTokenizer::kGpt2;
  std::vector<std::string> tokens;
  std::vector<float> scores;
  std::vector<uint32_t> attrs;

  int32_t bos_id = -1, eos_id = -1, eot_id = -1, eom_id = -1, unk_id = -1;
  int32_t fim_pad_id = -1, fim_rep_id = -1, fim_sep_id = -1;  // end generation too
  bool add_bos = false, add_eos = false, add_space_prefix = false;
  std::vector<int32_t> eog_ids;  // sorted

  // Special tokens in matching priority: longer first, then lower id.
  std::vector<int32_t> special_tokens;
  std::vector<int32_t> special_priority;  // by token id; -1 when not special
  // Byte trie over the special tokens' texts, for finding every occurrence in one pass.
  struct TrieNode {
    std::vector<std::pair<uint8_t, int32_t>> children;  // sorted by byte
    int32_t token = -1;
  };
  std::vector<TrieNode> special_trie;

  // Ids of the tokens and, for BPE, of the other strings that merges produce or consume
  // (interned: ids from n_vocab on).
  StringIndex ids;
  std::vector<std::string> interned;  // only entries past the vocabulary
  MergeTable merges;
  int32_t byte_symbol[256];  // interned id of each byte's GPT-2 character

  // SPM: byte fallback tokens <0x00>..<0xFF>.
  int32_t byte_token[256];

  int32_t n_vocab() const { return static_cast<int32_t>(tokens.size()); }
  const std::string& interned_text(int32_t id) const {
    return id < n_vocab() ? tokens[id] : interned[id - n_vocab()];
  }
  // The token whose text is `text` (interned strings that are not tokens do not count).
  std::optional<int32_t> lookup(std::string_view text) const {
    const auto id =
        ids.find(text, [this](int32_t i) -> std::string_view { return interned_text(i); });
    if (!id || *id >= n_vocab()) return std::nullopt;
    return id;
  }

  Status init_bpe(const std::vector<std::string>& merge_lines);
  void init_spm();
  void init_special();

  void encode_bpe(std::string_view text, std::vector<int32_t>& out) const;
  void encode_spm(std::string_view text, std::vector<int32_t>& out) const;
};

}  // namespace salvo
