// Byte-level BPE (GPT-2 style): each pre-tokenized word is turned into one symbol per byte,
// then the adjacent pair with the best merge rank is merged until no merge applies. Ties go to
// the leftmost pair, as in llama.cpp, so the ids match it exactly.
#include <queue>
#include <string>
#include <vector>

#include "tokenizer/tokenizer_impl.h"
#include "tokenizer/unicode.h"

namespace salvo {
namespace {

uint64_t pair_key(int32_t left, int32_t right) {
  return (static_cast<uint64_t>(static_cast<uint32_t>(left)) << 32) | static_cast<uint32_t>(right);
}

struct Symbol {
  int32_t id;    // interned string id
  int32_t prev;  // index of the previous live symbol, -1 at the start
  int32_t next;  // index of the next live symbol, -1 at the end
  bool alive;
};

struct Bigram {
  int32_t rank;
  int32_t left;
  int32_t right;
  int32_t left_id;
  int32_t right_id;
  int32_t result;
};

// Max-heap order that pops the lowest rank first and, among equal ranks, the leftmost pair.
struct BigramWorse {
  bool operator()(const Bigram& a, const Bigram& b) const {
    return a.rank > b.rank || (a.rank == b.rank && a.left > b.left);
  }
};

}  // namespace

Status Tokenizer::Impl::init_bpe(const std::vector<std::string>& merge_lines) {
  auto text_of = [this](int32_t i) -> std::string_view { return interned_text(i); };
  auto intern = [&](std::string text) -> int32_t {
    const auto [id, inserted] =
        ids.insert(text, n_vocab() + static_cast<int32_t>(interned.size()), text_of);
    if (inserted) interned.push_back(std::move(text));
    return id;
  };
  merges.reserve(merge_lines.size());
  for (size_t i = 0; i < merge_lines.size(); ++i) {
    const std::string& line = merge_lines[i];
    // The separator is the first space after the first character, so a merge whose left part
    // is itself a space character still parses.
    const size_t split = line.find(' ', 1);
    if (split == std::string::npos) {
      return Status::error("tokenizer.ggml.merges[" + std::to_string(i) + "] = '" + line +
                           "': expected two parts separated by a space");
    }
    std::string left = line.substr(0, split);
    std::string right = line.substr(split + 1);
    const int32_t left_id = intern(left);
    const int32_t right_id = intern(right);
    const int32_t result = intern(left + right);
    // A repeated pair keeps its first (best) rank.
    merges.emplace(pair_key(left_id, right_id), BpeMerge{static_cast<int32_t>(i), result});
  }
  for (int b = 0; b < 256; ++b) byte_symbol[b] = intern(unicode::byte_to_bpe_char(b));
  return Status::ok_status();
}

void Tokenizer::Impl::encode_bpe(std::string_view text, std::vector<int32_t>& out) const {
  std::vector<Symbol> symbols;
  std::priority_queue<Bigram, std::vector<Bigram>, BigramWorse> queue;
  auto add_bigram = [&](int32_t left, int32_t right) {
    if (left < 0 || right < 0) return;
    const BpeMerge* merge = merges.find(pair_key(symbols[left].id, symbols[right].id));
    if (merge == nullptr) return;
    queue.push(
        Bigram{merge->rank, left, right, symbols[left].id, symbols[right].id, merge->result});
  };

  for (const std::string& word : pretokenize(pre, text)) {
    if (pre == PreTokenizer::kLlama3) {
      // Llama 3 vocabularies ignore merges for words that are whole tokens already.
      std::string encoded;
      for (unsigned char c : word) encoded += unicode::byte_to_bpe_char(c);
      if (auto id = lookup(encoded)) {
        out.push_back(*id);
        continue;
      }
    }
    symbols.clear();
    const int32_t n = static_cast<int32_t>(word.size());
    for (int32_t i = 0; i < n; ++i) {
      symbols.push_back(
          Symbol{byte_symbol[static_cast<uint8_t>(word[i])], i - 1, i + 1 < n ? i + 1 : -1, true});
    }
    for (int32_t i = 1; i < n; ++i) add_bigram(i - 1, i);

    while (!queue.empty()) {
      const Bigram bigram = queue.top();
      queue.pop();
      Symbol& left = symbols[bigram.left];
      Symbol& right = symbols[bigram.right];
      // Skip pairs that went stale since they were queued (a side was merged away or grew).
      if (!left.alive || !right.alive || left.id != bigram.left_id || right.id != bigram.right_id) {
        continue;
      }
      left.id = bigram.result;
      right.alive = false;
      left.next = right.next;
      if (right.next >= 0) symbols[right.next].prev = bigram.left;
      add_bigram(left.prev, bigram.left);
      add_bigram(bigram.left, left.next);
    }

    for (int32_t i = 0; i >= 0 && i < n; i = symbols[i].next) {
      const int32_t id = symbols[i].id;
      if (id < n_vocab()) {
        out.push_back(id);
        continue;
      }
      // Not a token (possible only with incomplete vocabularies): llama.cpp falls back to
      // single-byte tokens of the symbol's text and drops bytes that have none.
      for (char c : interned_text(id)) {
        if (auto byte_id = lookup(std::string_view(&c, 1))) out.push_back(*byte_id);
      }
    }
  }
}

}  // namespace salvo
