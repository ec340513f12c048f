#include "tokenizer/tokenizer.h"

#include <algorithm>
#include <span>
#include <utility>

#include "tokenizer/tokenizer_impl.h"
#include "tokenizer/unicode.h"
#include "util/check.h"

namespace salvo {
namespace {

uint32_t attr_from_type(int32_t type) {
  switch (static_cast<TokenType>(type)) {
    case TokenType::kNormal:
      return kAttrNormal;
    case TokenType::kUnknown:
      return kAttrUnknown;
    case TokenType::kControl:
      return kAttrControl;
    case TokenType::kUserDefined:
      return kAttrUserDefined;
    case TokenType::kUnused:
      return kAttrUnused;
    case TokenType::kByte:
      return kAttrByte;
    default:
      return kAttrUndefined;
  }
}

// Token texts llama.cpp treats as end-of-generation (and forces to control) regardless of
// their type in the file.
constexpr std::string_view kEogTexts[] = {
    "<|eot_id|>",
    "<|im_end|>",
    "<|end|>",
    "<|return|>",
    "<|call|>",
    "<|flush|>",
    "<|calls|>",
    "<end_of_turn>",
    "<|endoftext|>",
    "</s>",
    "<|eom_id|>",
    "<EOT>",
    "_<EOT>",
    "[EOT]",
    "[EOS]",
    "<|end_of_text|>",
    "<end_of_utterance>",
    "<eos>",
    "<turn|>",
    "<|tool_response>",
    "<｜end▁of▁sentence｜>",
    "[e~[",
};
// Texts llama.cpp recognizes as EOT / FIM tokens when the metadata does not name them; they are
// forced to control type, which decides whether they are matched without parse_special.
constexpr std::string_view kEotTexts[] = {"<|eot_id|>",    "<|im_end|>",    "<|end|>",
                                          "<end_of_turn>", "<|endoftext|>", "<|end_of_text|>",
                                          "<EOT>",         "_<EOT>",        "<end_of_utterance>"};
constexpr std::string_view kFimPadTexts[] = {"<|fim_pad|>", "<fim-pad>", "<fim_pad>", "<PAD>"};
constexpr std::string_view kFimRepTexts[] = {"<|fim_repo|>", "<|repo_name|>", "<fim-repo>",
                                             "<REPO>", "<reponame>"};
constexpr std::string_view kFimSepTexts[] = {"<|file_sep|>"};
constexpr std::string_view kFimOtherTexts[] = {
    "<|fim_prefix|>", "<fim-prefix>", "<fim_prefix>", "<PRE>", "▁<PRE>",
    "<|fim_suffix|>", "<fim-suffix>", "<fim_suffix>", "<SUF>", "▁<SUF>",
    "<|fim_middle|>", "<fim-middle>", "<fim_middle>", "<MID>", "▁<MID>"};

template <size_t N>
bool contains(const std::string_view (&list)[N], std::string_view text) {
  return std::find(std::begin(list), std::end(list), text) != std::end(list);
}

}  // namespace

void Tokenizer::Impl::init_special() {
  // Detect EOT/EOM/FIM tokens by text where the metadata is silent, forcing them to control.
  auto force_control = [&](int32_t id) { attrs[id] |= kAttrControl; };
  for (int32_t id = 0; id < n_vocab(); ++id) {
    const std::string& text = tokens[id];
    if (eot_id < 0 && contains(kEotTexts, text)) {
      eot_id = id;
      force_control(id);
    }
    if (eom_id < 0 && text == "<|eom_id|>") {
      eom_id = id;
      force_control(id);
    }
    for (auto [fim_id, texts] :
         {std::pair{&fim_pad_id, std::span<const std::string_view>(kFimPadTexts)},
          std::pair{&fim_rep_id, std::span<const std::string_view>(kFimRepTexts)},
          std::pair{&fim_sep_id, std::span<const std::string_view>(kFimSepTexts)}}) {
      if (*fim_id < 0 && std::find(texts.begin(), texts.end(), text) != texts.end()) {
        *fim_id = id;
        force_control(id);
      }
    }
    if (contains(kFimOtherTexts, text)) force_control(id);
  }
  for (int32_t id : {fim_pad_id, fim_rep_id, fim_sep_id}) {
    if (id >= 0) eog_ids.push_back(id);
  }
  for (int32_t id = 0; id < n_vocab(); ++id) {
    if (contains(kEogTexts, tokens[id])) {
      eog_ids.push_back(id);
      force_control(id);
    }
  }
  for (int32_t id : {eos_id, eot_id, eom_id}) {
    if (id >= 0) eog_ids.push_back(id);
  }
  std::sort(eog_ids.begin(), eog_ids.end());
  eog_ids.erase(std::unique(eog_ids.begin(), eog_ids.end()), eog_ids.end());

  for (int32_t id = 0; id < n_vocab(); ++id) {
    if (attrs[id] & (kAttrControl | kAttrUserDefined | kAttrUnknown)) special_tokens.push_back(id);
  }
  std::stable_sort(special_tokens.begin(), special_tokens.end(),
                   [&](int32_t a, int32_t b) { return tokens[a].size() > tokens[b].size(); });
  special_priority.assign(tokens.size(), -1);
  special_trie.assign(1, TrieNode{});
  for (size_t rank = 0; rank < special_tokens.size(); ++rank) {
    const int32_t id = special_tokens[rank];
    special_priority[id] = static_cast<int32_t>(rank);
    int32_t node = 0;
    for (unsigned char c : tokens[id]) {
      auto& children = special_trie[node].children;
      auto it = std::lower_bound(children.begin(), children.end(), std::make_pair(c, INT32_MIN));
      if (it != children.end() && it->first == c) {
        node = it->second;
      } else {
        const int32_t child = static_cast<int32_t>(special_trie.size());
        children.insert(it, {c, child});
        special_trie.emplace_back();  // invalidates `children`; not used after this
        node = child;
      }
    }
    special_trie[node].token = id;
  }
}

Expected<std::unique_ptr<Tokenizer>> Tokenizer::from_data(TokenizerData data) {
  auto impl = std::make_unique<Impl>();
  if (data.model == "gpt2") {
    impl->kind = VocabKind::kBpe;
    auto pre = pre_tokenizer_from_name(data.pre);
    if (!pre) {
      return Status::error("tokenizer.ggml.pre = '" + data.pre +
                           "': pre-tokenizer not supported (known: smollm, qwen2, gpt-2, "
                           "llama3 and their aliases)");
    }
    impl->pre = *pre;
  } else if (data.model == "llama") {
    impl->kind = VocabKind::kSpm;
  } else {
    return Status::error("tokenizer.ggml.model = '" + data.model +
                         "': not supported (expected 'gpt2' or 'llama')");
  }
  const size_t n = data.tokens.size();
  if (n == 0) return Status::error("tokenizer.ggml.tokens is empty");
  if (n > static_cast<size_t>(INT32_MAX / 2)) return Status::error("vocabulary too large");
  if (!data.scores.empty() && data.scores.size() < n) {
    return Status::error("tokenizer.ggml.scores has " + std::to_string(data.scores.size()) +
                         " entries for " + std::to_string(n) + " tokens");
  }
  if (!data.token_types.empty() && data.token_types.size() < n) {
    return Status::error("tokenizer.ggml.token_type has " +
                         std::to_string(data.token_types.size()) + " entries for " +
                         std::to_string(n) + " tokens");
  }

  impl->tokens = std::move(data.tokens);
  impl->scores = data.scores.empty() ? std::vector<float>(n, 0.0f) : std::move(data.scores);
  impl->scores.resize(n);
  impl->attrs.resize(n);
  impl->ids.reserve(n + data.merges.size() / 8);  // merges add a few strings not in the vocab
  auto text_of = [&](int32_t id) -> std::string_view { return impl->tokens[id]; };
  for (size_t i = 0; i < n; ++i) {
    std::string& text = impl->tokens[i];
    if (text.empty()) text = "[EMPTY_" + std::to_string(i) + "]";  // as llama.cpp names them
    const auto [id, inserted] = impl->ids.insert(text, static_cast<int32_t>(i), text_of);
    if (!inserted) {
      return Status::error("tokenizer.ggml.tokens: duplicate token '" + text + "' at ids " +
                           std::to_string(id) + " and " + std::to_string(i));
    }
    impl->attrs[i] = data.token_types.empty() ? kAttrNormal : attr_from_type(data.token_types[i]);
  }

  // llama.cpp's per-kind defaults, then the metadata.
  const bool spm = impl->kind == VocabKind::kSpm;
  auto valid_or = [&](std::optional<int32_t> id, int32_t fallback) -> int32_t {
    const int32_t value = id.value_or(fallback);
    return value >= 0 && static_cast<size_t>(value) < n ? value : -1;
  };
  impl->bos_id = valid_or(data.bos_id, spm ? 1 : 11);
  impl->eos_id = valid_or(data.eos_id, spm ? 2 : 11);
  impl->unk_id = valid_or(data.unk_id, spm ? 0 : -1);
  impl->eot_id = valid_or(data.eot_id, -1);
  impl->eom_id = valid_or(data.eom_id, -1);
  impl->add_bos = data.add_bos.value_or(spm);
  impl->add_eos = data.add_eos.value_or(false);
  impl->add_space_prefix = spm ? data.add_space_prefix.value_or(true) : false;
  if (impl->add_bos && impl->bos_id < 0) {
    return Status::error("tokenizer.ggml.add_bos_token is true but there is no valid BOS id");
  }
  if (impl->add_eos && impl->eos_id < 0) {
    return Status::error("tokenizer.ggml.add_eos_token is true but there is no valid EOS id");
  }
  impl->fim_pad_id = valid_or(data.fim_pad_id, -1);
  impl->fim_rep_id = valid_or(data.fim_rep_id, -1);
  impl->fim_sep_id = valid_or(data.fim_sep_id, -1);

  if (spm) {
    impl->init_spm();
  } else {
    SALVO_RETURN_IF_ERROR(impl->init_bpe(data.merges));
  }
  impl->init_special();
  return std::unique_ptr<Tokenizer>(new Tokenizer(std::move(impl)));
}

Tokenizer::Tokenizer(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Tokenizer::~Tokenizer() = default;

std::vector<int32_t> Tokenizer::encode(std::string_view text, bool add_special,
                                       bool parse_special) const {
  const Impl& m = *impl_;
  // Special tokens are claimed before any text is tokenized: every occurrence of the
  // highest-priority (longest) token first, then the next token in what is left, and so on.
  // Collecting all occurrences with the trie and claiming them in (priority, position) order
  // gives the same partition as scanning token by token, in one pass over the text.
  struct Match {
    int32_t priority;
    uint32_t pos;
  };
  std::vector<Match> matches;
  if (!m.special_tokens.empty()) {
    for (size_t pos = 0; pos < text.size(); ++pos) {
      int32_t node = 0;
      for (size_t i = pos; i < text.size(); ++i) {
        const auto& children = m.special_trie[node].children;
        const auto c = static_cast<unsigned char>(text[i]);
        auto it = std::lower_bound(children.begin(), children.end(), std::make_pair(c, INT32_MIN));
        if (it == children.end() || it->first != c) break;
        node = it->second;
        const int32_t id = m.special_trie[node].token;
        if (id < 0) continue;
        if (!parse_special && (m.attrs[id] & (kAttrControl | kAttrUnknown))) continue;
        matches.push_back(Match{m.special_priority[id], static_cast<uint32_t>(pos)});
      }
    }
  }
  std::sort(matches.begin(), matches.end(), [](const Match& a, const Match& b) {
    return a.priority != b.priority ? a.priority < b.priority : a.pos < b.pos;
  });
  std::vector<int32_t> claimed_by(text.size(), -1);  // token id owning each byte
  std::vector<std::pair<uint32_t, int32_t>> claims;  // (start, token id)
  for (const Match& match : matches) {
    const int32_t id = m.special_tokens[match.priority];
    const size_t len = m.tokens[id].size();
    bool free = true;
    for (size_t i = match.pos; i < match.pos + len && free; ++i) free = claimed_by[i] < 0;
    if (!free) continue;
    std::fill(claimed_by.begin() + match.pos, claimed_by.begin() + match.pos + len, id);
    claims.emplace_back(match.pos, id);
  }
  std::sort(claims.begin(), claims.end());

  std::vector<int32_t> out;
  out.reserve(text.size() / 3 + 2);
  if (add_special && m.add_bos) out.push_back(m.bos_id);
  bool prev_special = true;  // SentencePiece adds its space prefix at the start and after specials
  auto encode_text = [&](std::string_view piece) {
    if (piece.empty()) return;
    if (m.kind == VocabKind::kBpe) {
      m.encode_bpe(piece, out);
      return;
    }
    std::string escaped;
    escaped.reserve(piece.size() + 8);
    if (m.add_space_prefix && prev_special) escaped += "\xE2\x96\x81";
    for (char c : piece) {
      if (c == ' ') {
        escaped += "\xE2\x96\x81";
      } else {
        escaped += c;
      }
    }
    m.encode_spm(escaped, out);
  };
  size_t cursor = 0;
  for (const auto& [start, id] : claims) {
    encode_text(text.substr(cursor, start - cursor));
    if (start > cursor) prev_special = false;
    out.push_back(id);
    prev_special = true;
    cursor = start + m.tokens[id].size();
  }
  encode_text(text.substr(cursor));
  if (add_special && m.add_eos) out.push_back(m.eos_id);
  return out;
}

std::string Tokenizer::token_piece(int32_t id) const {
  const Impl& m = *impl_;
  if (id < 0 || id >= m.n_vocab()) return {};
  const uint32_t attr = m.attrs[id];
  const std::string& text = m.tokens[id];
  if (attr & (kAttrControl | kAttrUnknown | kAttrUserDefined)) return text;
  if (attr & kAttrByte) {
    // "<0xAB>"
    if (text.size() == 6 && text.compare(0, 3, "<0x") == 0) {
      return std::string(1, static_cast<char>(std::stoi(text.substr(3, 2), nullptr, 16)));
    }
    return text;
  }
  if (!(attr & kAttrNormal)) return {};  // unused and undefined tokens render as nothing
  std::string piece;
  if (m.kind == VocabKind::kSpm) {
    piece.reserve(text.size());
    for (size_t i = 0; i < text.size(); ++i) {
      if (text.compare(i, 3, "\xE2\x96\x81") == 0) {
        piece += ' ';
        i += 2;
      } else {
        piece += text[i];
      }
    }
    return piece;
  }
  for (uint32_t cp : unicode::decode_utf8(text)) {
    const int byte = unicode::bpe_char_to_byte(cp);
    if (byte >= 0) {
      piece += static_cast<char>(byte);
    } else {
      unicode::append_utf8(cp, piece);  // not from the byte alphabet: keep it as written
    }
  }
  return piece;
}

std::string Tokenizer::decode(std::span<const int32_t> ids, bool render_special) const {
  std::string text;
  for (size_t i = 0; i < ids.size(); ++i) {
    if (!render_special && is_control(ids[i])) continue;
    std::string piece = token_piece(ids[i]);
    // SentencePiece encoding added a space in front of the text; take it back.
    if (i == 0 && impl_->add_space_prefix && !piece.empty() && piece[0] == ' ') piece.erase(0, 1);
    text += piece;
  }
  return text;
}

int32_t Tokenizer::n_vocab() const { return impl_->n_vocab(); }

Status Tokenizer::check_ids(std::span<const int32_t> ids) const {
  const int32_t n = n_vocab();
  for (int32_t id : ids) {
    if (id < 0 || id >= n) {
      return Status::error("token id " + std::to_string(id) + " is outside the vocabulary (0.." +
                           std::to_string(n - 1) + ")");
    }
  }
  return Status();
}
int32_t Tokenizer::bos_id() const { return impl_->bos_id; }
int32_t Tokenizer::eos_id() const { return impl_->eos_id; }
bool Tokenizer::add_bos() const { return impl_->add_bos; }
bool Tokenizer::add_eos() const { return impl_->add_eos; }

bool Tokenizer::is_end_of_generation(int32_t id) const {
  return std::binary_search(impl_->eog_ids.begin(), impl_->eog_ids.end(), id);
}

bool Tokenizer::is_control(int32_t id) const {
  return id >= 0 && id < n_vocab() && (impl_->attrs[id] & kAttrControl);
}

std::optional<int32_t> Tokenizer::find_token(std::string_view piece) const {
  return impl_->lookup(piece);
}

const std::string& Tokenizer::token_text(int32_t id) const {
  SALVO_CHECK(id >= 0 && id < n_vocab());
  return impl_->tokens[id];
}

}  // namespace salvo
