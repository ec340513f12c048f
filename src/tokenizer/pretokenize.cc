#include "tokenizer/pretokenize.h"

#include <algorithm>

#include "tokenizer/unicode.h"

namespace salvo {
namespace {

// What the regexes distinguish about a code point. kNone marks positions outside the current
// segment, which no class matches (lookaheads at a segment end see "end of input").
enum class CharClass : uint8_t { kNone, kLetter, kNumber, kSpace, kOther };

CharClass classify(uint32_t cp) {
  if (unicode::is_whitespace(cp)) return CharClass::kSpace;
  switch (unicode::category(cp)) {
    case unicode::UnicodeCategory::kLetter:
      return CharClass::kLetter;
    case unicode::UnicodeCategory::kNumber:
      return CharClass::kNumber;
    default:
      return CharClass::kOther;
  }
}

// One segment [begin, end) of the code point array being split into words.
class Segment {
 public:
  Segment(const std::vector<uint32_t>& cps, const std::vector<CharClass>& classes, size_t begin,
          size_t end)
      : cps_(cps), classes_(classes), begin_(begin), end_(end) {}

  size_t begin() const { return begin_; }
  size_t end() const { return end_; }
  uint32_t cp(size_t i) const { return i < end_ ? cps_[i] : 0xFFFFFFFFu; }
  CharClass cls(size_t i) const { return i < end_ ? classes_[i] : CharClass::kNone; }
  size_t run(size_t i, CharClass c) const {
    while (cls(i) == c) ++i;
    return i;
  }
  size_t whitespace_run(size_t i) const { return run(i, CharClass::kSpace) - i; }

 private:
  const std::vector<uint32_t>& cps_;
  const std::vector<CharClass>& classes_;
  size_t begin_;
  size_t end_;
};

bool is_cr_or_lf(uint32_t cp) { return cp == '\r' || cp == '\n'; }
uint32_t ascii_lower(uint32_t cp) { return (cp >= 'A' && cp <= 'Z') ? cp + 32 : cp; }

// Length of an English contraction ('s 't 're 've 'm 'll 'd) starting at i, or 0.
size_t contraction_length(const Segment& seg, size_t i, bool ignore_case) {
  if (seg.cp(i) != '\'' || i + 1 >= seg.end()) return 0;
  auto fold = [&](uint32_t cp) { return ignore_case ? ascii_lower(cp) : cp; };
  const uint32_t c1 = fold(seg.cp(i + 1));
  if (c1 == 's' || c1 == 't' || c1 == 'm' || c1 == 'd') return 2;
  if (i + 2 >= seg.end()) return 0;
  const uint32_t c2 = fold(seg.cp(i + 2));
  if ((c1 == 'r' && c2 == 'e') || (c1 == 'v' && c2 == 'e') || (c1 == 'l' && c2 == 'l')) return 3;
  return 0;
}

// Word ends (exclusive) for the GPT-2 pattern within one segment.
void split_gpt2(const Segment& seg, std::vector<size_t>& ends) {
  size_t pos = seg.begin();
  while (pos < seg.end()) {
    if (size_t n = contraction_length(seg, pos, /*ignore_case=*/false)) {
      pos += n;
      ends.push_back(pos);
      continue;
    }
    // " ?X+" for X in letters, numbers, other: the optional space is an ASCII space only.
    const bool space_first = seg.cp(pos) == ' ';
    const CharClass head = seg.cls(pos + (space_first ? 1 : 0));
    if (head == CharClass::kLetter || head == CharClass::kNumber || head == CharClass::kOther) {
      pos = seg.run(pos + (space_first ? 1 : 0), head);
      ends.push_back(pos);
      continue;
    }
    // \s+(?!\S): leave the last space of a run to prefix the next word, except at the end.
    const size_t spaces = seg.whitespace_run(pos);
    if (spaces > 1 && pos + spaces < seg.end()) {
      pos += spaces - 1;
    } else {
      pos += spaces > 0 ? spaces : 1;
    }
    ends.push_back(pos);
  }
}

// Word ends for the Qwen2 / Llama 3 pattern: ECMAScript alternation, first alternative that
// matches at the position wins.
void split_qwen2(const Segment& seg, size_t max_digits, std::vector<size_t>& ends) {
  size_t pos = seg.begin();
  while (pos < seg.end()) {
    if (size_t n = contraction_length(seg, pos, /*ignore_case=*/true)) {
      pos += n;
      ends.push_back(pos);
      continue;
    }
    const CharClass c = seg.cls(pos);
    // [^\r\n\p{L}\p{N}]?\p{L}+
    const bool can_prefix =
        c != CharClass::kLetter && c != CharClass::kNumber && !is_cr_or_lf(seg.cp(pos));
    if (c == CharClass::kLetter || (can_prefix && seg.cls(pos + 1) == CharClass::kLetter)) {
      pos = seg.run(pos + 1, CharClass::kLetter);
      ends.push_back(pos);
      continue;
    }
    // \p{N} or \p{N}{1,3}
    if (c == CharClass::kNumber) {
      const size_t run_end = seg.run(pos, CharClass::kNumber);
      pos = std::min(run_end, pos + max_digits);
      ends.push_back(pos);
      continue;
    }
    //  ?[^\s\p{L}\p{N}]+[\r\n]*
    const bool space_first = seg.cp(pos) == ' ' && seg.cls(pos + 1) == CharClass::kOther;
    if (c == CharClass::kOther || space_first) {
      pos = seg.run(pos + (space_first ? 1 : 0), CharClass::kOther);
      while (is_cr_or_lf(seg.cp(pos))) ++pos;
      ends.push_back(pos);
      continue;
    }
    // Only whitespace is left here.
    const size_t spaces = seg.whitespace_run(pos);
    size_t last_newline_end = 0;
    for (size_t i = pos; i < pos + spaces; ++i) {
      if (is_cr_or_lf(seg.cp(i))) last_newline_end = i + 1;
    }
    if (last_newline_end > 0) {
      pos = last_newline_end;  // \s*[\r\n]+
    } else if (spaces > 1 && pos + spaces < seg.end()) {
      pos += spaces - 1;  // \s+(?!\S)
    } else {
      pos += spaces > 0 ? spaces : 1;  // \s+
    }
    ends.push_back(pos);
  }
}

}  // namespace

std::optional<PreTokenizer> pre_tokenizer_from_name(std::string_view name) {
  if (name == "gpt-2" || name == "phi-2" || name == "mpt" || name == "olmo" || name == "jais") {
    return PreTokenizer::kGpt2;
  }
  if (name == "smollm" || name == "starcoder" || name == "refact" || name == "command-r" ||
      name == "codeshell" || name == "exaone" || name == "minerva-7b") {
    return PreTokenizer::kGpt2DigitsSplit;
  }
  if (name == "qwen2" || name == "stablelm2" || name == "deepseek-r1-qwen" || name == "hunyuan") {
    return PreTokenizer::kQwen2;
  }
  if (name == "llama3" || name == "llama-v3" || name == "llama-bpe" || name == "falcon3" ||
      name == "dbrx" || name == "smaug-bpe") {
    return PreTokenizer::kLlama3;
  }
  return std::nullopt;
}

std::vector<std::string> pretokenize(PreTokenizer kind, std::string_view text) {
  const std::vector<uint32_t> cps = unicode::decode_utf8(text);
  std::vector<CharClass> classes(cps.size());
  for (size_t i = 0; i < cps.size(); ++i) classes[i] = classify(cps[i]);

  std::vector<size_t> ends;
  ends.reserve(cps.size() / 3 + 1);
  auto split_segment = [&](size_t begin, size_t end) {
    if (begin >= end) return;
    const Segment seg(cps, classes, begin, end);
    switch (kind) {
      case PreTokenizer::kGpt2:
      case PreTokenizer::kGpt2DigitsSplit:
        split_gpt2(seg, ends);
        break;
      case PreTokenizer::kQwen2:
        split_qwen2(seg, 1, ends);
        break;
      case PreTokenizer::kLlama3:
        split_qwen2(seg, 3, ends);
        break;
    }
  };
  if (kind == PreTokenizer::kGpt2DigitsSplit) {
    // The first regex isolates each \p{N} code point; the text between them forms segments
    // that the second regex cannot match across.
    size_t segment_begin = 0;
    for (size_t i = 0; i < cps.size(); ++i) {
      if (classes[i] == CharClass::kNumber) {
        split_segment(segment_begin, i);
        ends.push_back(i + 1);
        segment_begin = i + 1;
      }
    }
    split_segment(segment_begin, cps.size());
  } else {
    split_segment(0, cps.size());
  }

  std::vector<std::string> words;
  words.reserve(ends.size());
  size_t begin = 0;
  for (size_t end : ends) {
    std::string word;
    for (size_t i = begin; i < end; ++i) unicode::append_utf8(cps[i], word);
    words.push_back(std::move(word));
    begin = end;
  }
  return words;
}

}  // namespace salvo
