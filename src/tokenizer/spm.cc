// SentencePiece-style BPE over scores (Llama 2, Gemma): start from UTF-8 characters and keep
// merging the adjacent pair whose concatenation is the vocabulary entry with the highest
// score (leftmost on ties), as llama.cpp's SPM tokenizer does. Characters left without a token
// fall back to <0xXX> byte tokens.
#include <queue>
#include <string_view>
#include <vector>

#include "tokenizer/tokenizer_impl.h"
#include "tokenizer/unicode.h"

namespace salvo {
namespace {

struct Symbol {
  int32_t prev;
  int32_t next;
  size_t offset;  // into the text being encoded
  size_t length;  // 0 once merged into the symbol on its left
};

struct Bigram {
  float score;
  int32_t left;
  int32_t right;
  size_t length;  // combined byte length when queued; a mismatch later means it is stale
};

struct BigramWorse {
  bool operator()(const Bigram& a, const Bigram& b) const {
    return a.score < b.score || (a.score == b.score && a.left > b.left);
  }
};

}  // namespace

void Tokenizer::Impl::init_spm() {
  for (int b = 0; b < 256; ++b) {
    static const char* kHex = "0123456789ABCDEF";
    const char name[7] = {'<', '0', 'x', kHex[b >> 4], kHex[b & 15], '>', 0};
    byte_token[b] = lookup(name).value_or(-1);
  }
}

void Tokenizer::Impl::encode_spm(std::string_view text, std::vector<int32_t>& out) const {
  std::vector<Symbol> symbols;
  symbols.reserve(text.size());
  for (size_t offset = 0; offset < text.size();) {
    const size_t length =
        std::min(unicode::utf8_sequence_length(text[offset]), text.size() - offset);
    const int32_t index = static_cast<int32_t>(symbols.size());
    symbols.push_back(
        Symbol{index - 1, offset + length < text.size() ? index + 1 : -1, offset, length});
    offset += length;
  }

  std::priority_queue<Bigram, std::vector<Bigram>, BigramWorse> queue;
  auto add_bigram = [&](int32_t left, int32_t right) {
    if (left < 0 || right < 0) return;
    const size_t length = symbols[left].length + symbols[right].length;
    const auto id = lookup(text.substr(symbols[left].offset, length));
    if (!id) return;
    queue.push(Bigram{scores[*id], left, right, length});
  };
  for (int32_t i = 1; i < static_cast<int32_t>(symbols.size()); ++i) add_bigram(i - 1, i);

  while (!queue.empty()) {
    const Bigram bigram = queue.top();
    queue.pop();
    Symbol& left = symbols[bigram.left];
    Symbol& right = symbols[bigram.right];
    if (left.length == 0 || right.length == 0 || left.length + right.length != bigram.length) {
      continue;
    }
    left.length += right.length;
    right.length = 0;
    left.next = right.next;
    if (right.next >= 0) symbols[right.next].prev = bigram.left;
    add_bigram(left.prev, bigram.left);
    add_bigram(bigram.left, left.next);
  }

  for (int32_t i = symbols.empty() ? -1 : 0; i >= 0; i = symbols[i].next) {
    const std::string_view piece = text.substr(symbols[i].offset, symbols[i].length);
    if (auto id = lookup(piece)) {
      out.push_back(*id);
      continue;
    }
    for (unsigned char c : piece) {
      const int32_t byte_id = byte_token[c] >= 0 ? byte_token[c] : unk_id;
      if (byte_id >= 0) out.push_back(byte_id);
    }
  }
}

}  // namespace salvo
