// Splits template source into text and tag tokens the way Jinja's lexer does, including its
// whitespace rules: `{%-`/`-%}` strip all whitespace on that side, trim_blocks drops the first
// newline after a block or comment tag, lstrip_blocks drops spaces and tabs before a block or
// comment tag that starts a line, `+` disables both, newlines are normalized to "\n" and a single
// trailing newline of the source is dropped (keep_trailing_newline=False).
#include <algorithm>
#include <cctype>
#include <cstdint>

#include "chat/jinja_ast.h"

namespace salvo::jinja {
namespace {

bool is_space(char c) {
  return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v';
}

void append_utf8(uint32_t cp, std::string& out) {
  if (cp < 0x80) {
    out += static_cast<char>(cp);
  } else if (cp < 0x800) {
    out += static_cast<char>(0xc0 | (cp >> 6));
    out += static_cast<char>(0x80 | (cp & 0x3f));
  } else if (cp < 0x10000) {
    out += static_cast<char>(0xe0 | (cp >> 12));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3f));
    out += static_cast<char>(0x80 | (cp & 0x3f));
  } else {
    out += static_cast<char>(0xf0 | (cp >> 18));
    out += static_cast<char>(0x80 | ((cp >> 12) & 0x3f));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3f));
    out += static_cast<char>(0x80 | (cp & 0x3f));
  }
}

class Lexer {
 public:
  Lexer(std::string source, const LexerOptions& options) : src_(std::move(source)), opt_(options) {
    line_starts_.push_back(0);
    for (size_t k = 0; k < src_.size(); ++k) {
      if (src_[k] == '\n') line_starts_.push_back(k + 1);
    }
  }

  std::vector<Token> run() {
    size_t i = 0;
    bool strip_next_text = false;    // the previous tag ended with '-'
    bool trim_next_newline = false;  // the previous block/comment tag is subject to trim_blocks
    while (i <= src_.size()) {
      size_t tag = find_tag(i);
      size_t text_begin = i;
      size_t text_end = tag == std::string::npos ? src_.size() : tag;
      if (strip_next_text) {
        while (text_begin < text_end && is_space(src_[text_begin])) ++text_begin;
      } else if (trim_next_newline && text_begin < text_end && src_[text_begin] == '\n') {
        ++text_begin;
      }
      if (tag == std::string::npos) {
        emit_text(text_begin, text_end);
        break;
      }
      char kind = src_[tag + 1];  // '{', '%' or '#'
      char modifier = tag + 2 < src_.size() ? src_[tag + 2] : '\0';
      if (modifier == '-') {
        while (text_end > text_begin && is_space(src_[text_end - 1])) --text_end;
      } else if (modifier != '+' && kind != '{' && opt_.lstrip_blocks) {
        size_t line_start = text_end;
        while (line_start > text_begin &&
               (src_[line_start - 1] == ' ' || src_[line_start - 1] == '\t')) {
          --line_start;
        }
        bool at_line_start = line_start == 0 || src_[line_start - 1] == '\n';
        if (at_line_start) text_end = line_start;
      }
      emit_text(text_begin, text_end);
      size_t body = tag + 2 + ((modifier == '-' || modifier == '+') ? 1 : 0);
      bool right_strip = false;
      bool right_plus = false;
      if (kind == '#') {
        i = lex_comment(tag, body, &right_strip, &right_plus);
      } else {
        i = lex_tag(tag, body, kind == '%', &right_strip, &right_plus);
      }
      strip_next_text = right_strip;
      trim_next_newline = kind != '{' && opt_.trim_blocks && !right_plus;
    }
    tokens_.push_back({TokenKind::kEof, "", pos_at(src_.size())});
    return std::move(tokens_);
  }

  SourcePos pos_at(size_t offset) const {
    offset = std::min(offset, src_.size());
    auto line = std::upper_bound(line_starts_.begin(), line_starts_.end(), offset) - 1;
    SourcePos pos;
    pos.line = static_cast<int>(line - line_starts_.begin()) + 1;
    for (size_t k = *line; k < offset; ++k) {
      if ((static_cast<unsigned char>(src_[k]) & 0xc0) != 0x80) ++pos.column;
    }
    return pos;
  }

 private:
  [[noreturn]] void fail(size_t offset, const std::string& message) const {
    throw JinjaError(pos_at(offset), message);
  }

  size_t find_tag(size_t from) const {
    for (size_t k = from; k + 1 < src_.size(); ++k) {
      if (src_[k] == '{' && (src_[k + 1] == '{' || src_[k + 1] == '%' || src_[k + 1] == '#'))
        return k;
    }
    return std::string::npos;
  }

  void emit_text(size_t begin, size_t end) {
    if (end > begin)
      tokens_.push_back({TokenKind::kText, src_.substr(begin, end - begin), pos_at(begin)});
  }

  size_t lex_comment(size_t tag, size_t body, bool* right_strip, bool* right_plus) {
    size_t end = src_.find("#}", body);
    if (end == std::string::npos) fail(tag, "unterminated comment: missing '#}'");
    *right_strip = end > body && src_[end - 1] == '-';
    *right_plus = end > body && src_[end - 1] == '+';
    return end + 2;
  }

  // Lexes the inside of {{ }} or {% %} up to the closing delimiter, which only counts outside
  // brackets (so `{{ {'a': {'b': 1}} }}` works, as in Jinja).
  size_t lex_tag(size_t tag, size_t i, bool is_block, bool* right_strip, bool* right_plus) {
    tokens_.push_back({is_block ? TokenKind::kBlockBegin : TokenKind::kVarBegin, "", pos_at(tag)});
    size_t first_token = tokens_.size();
    const char close = is_block ? '%' : '}';
    int depth = 0;
    while (true) {
      while (i < src_.size() && is_space(src_[i])) ++i;
      if (i >= src_.size()) {
        fail(tag,
             is_block ? "unclosed block tag: missing '%}'" : "unclosed expression: missing '}}'");
      }
      if (depth == 0) {
        size_t k = i;
        bool minus = false, plus = false;
        if ((src_[k] == '-' || (is_block && src_[k] == '+')) && k + 2 < src_.size() &&
            src_[k + 1] == close && src_[k + 2] == '}') {
          minus = src_[k] == '-';
          plus = src_[k] == '+';
          ++k;
        }
        if (k + 1 < src_.size() && src_[k] == close && src_[k + 1] == '}') {
          tokens_.push_back({is_block ? TokenKind::kBlockEnd : TokenKind::kVarEnd, "", pos_at(i)});
          *right_strip = minus;
          *right_plus = plus;
          size_t after = k + 2;
          if (is_block && is_raw_block(first_token)) return lex_raw(tag, after);
          return after;
        }
      }
      i = lex_expression_token(i, &depth);
    }
  }

  bool is_raw_block(size_t first_token) const {
    return tokens_.size() == first_token + 2 && tokens_[first_token].kind == TokenKind::kName &&
           tokens_[first_token].text == "raw";
  }

  // {% raw %}...{% endraw %}: the body is text, whatever it contains.
  size_t lex_raw(size_t tag, size_t body) {
    tokens_.resize(tokens_.size() - 3);  // drop {% raw %}
    for (size_t k = body; k + 1 < src_.size(); ++k) {
      if (src_[k] != '{' || src_[k + 1] != '%') continue;
      size_t j = k + 2;
      bool left_strip = j < src_.size() && src_[j] == '-';
      if (j < src_.size() && (src_[j] == '-' || src_[j] == '+')) ++j;
      while (j < src_.size() && is_space(src_[j])) ++j;
      if (src_.compare(j, 6, "endraw") != 0) continue;
      j += 6;
      while (j < src_.size() && is_space(src_[j])) ++j;
      bool right_strip = j < src_.size() && src_[j] == '-';
      if (j < src_.size() && (src_[j] == '-' || src_[j] == '+')) ++j;
      if (src_.compare(j, 2, "%}") != 0) continue;
      size_t text_end = k;
      if (left_strip) {
        while (text_end > body && is_space(src_[text_end - 1])) --text_end;
      }
      emit_text(body, text_end);
      j += 2;
      if (right_strip) {
        while (j < src_.size() && is_space(src_[j])) ++j;
      }
      return j;
    }
    fail(tag, "unclosed raw block: missing '{% endraw %}'");
  }

  size_t lex_expression_token(size_t i, int* depth) {
    char c = src_[i];
    if (std::isalpha(static_cast<unsigned char>(c)) || c == '_') {
      size_t k = i;
      while (k < src_.size() &&
             (std::isalnum(static_cast<unsigned char>(src_[k])) || src_[k] == '_'))
        ++k;
      tokens_.push_back({TokenKind::kName, src_.substr(i, k - i), pos_at(i)});
      return k;
    }
    if (std::isdigit(static_cast<unsigned char>(c))) return lex_number(i);
    if (c == '\'' || c == '"') return lex_string(i);
    static const char* kTwoCharOps[] = {"**", "//", "==", "!=", "<=", ">="};
    for (const char* op : kTwoCharOps) {
      if (src_.compare(i, 2, op) == 0) {
        tokens_.push_back({TokenKind::kOperator, op, pos_at(i)});
        return i + 2;
      }
    }
    static const std::string kOneCharOps = "+-*/%~<>=.,:|()[]{}";
    if (kOneCharOps.find(c) == std::string::npos) {
      fail(i, std::string("unexpected character '") + c + "'");
    }
    if (c == '(' || c == '[' || c == '{') ++*depth;
    if (c == ')' || c == ']' || c == '}') {
      if (*depth == 0) fail(i, std::string("unbalanced '") + c + "'");
      --*depth;
    }
    tokens_.push_back({TokenKind::kOperator, std::string(1, c), pos_at(i)});
    return i + 1;
  }

  size_t lex_number(size_t i) {
    size_t k = i;
    auto digits = [&] {
      while (k < src_.size() &&
             (std::isdigit(static_cast<unsigned char>(src_[k])) || src_[k] == '_'))
        ++k;
    };
    digits();
    bool is_float = false;
    if (k + 1 < src_.size() && src_[k] == '.' &&
        std::isdigit(static_cast<unsigned char>(src_[k + 1]))) {
      is_float = true;
      ++k;
      digits();
    }
    if (k < src_.size() && (src_[k] == 'e' || src_[k] == 'E')) {
      size_t e = k + 1;
      if (e < src_.size() && (src_[e] == '+' || src_[e] == '-')) ++e;
      if (e < src_.size() && std::isdigit(static_cast<unsigned char>(src_[e]))) {
        is_float = true;
        k = e;
        digits();
      }
    }
    std::string text;
    for (size_t j = i; j < k; ++j) {
      if (src_[j] != '_') text += src_[j];
    }
    tokens_.push_back({is_float ? TokenKind::kFloat : TokenKind::kInteger, text, pos_at(i)});
    return k;
  }

  // Python string literal escapes, as Jinja decodes them.
  size_t lex_string(size_t i) {
    char quote = src_[i];
    std::string value;
    size_t k = i + 1;
    while (true) {
      if (k >= src_.size()) fail(i, "unterminated string literal");
      char c = src_[k];
      if (c == quote) break;
      if (c != '\\') {
        value += c;
        ++k;
        continue;
      }
      if (k + 1 >= src_.size()) fail(i, "unterminated string literal");
      char e = src_[k + 1];
      k += 2;
      switch (e) {
        case 'n':
          value += '\n';
          break;
        case 't':
          value += '\t';
          break;
        case 'r':
          value += '\r';
          break;
        case 'b':
          value += '\b';
          break;
        case 'f':
          value += '\f';
          break;
        case 'v':
          value += '\v';
          break;
        case 'a':
          value += '\a';
          break;
        case '0':
          value += '\0';
          break;
        case '\\':
          value += '\\';
          break;
        case '\'':
          value += '\'';
          break;
        case '"':
          value += '"';
          break;
        case '\n':
          break;  // line continuation
        case 'x':
        case 'u':
        case 'U': {
          size_t n = e == 'x' ? 2 : e == 'u' ? 4 : 8;
          if (k + n > src_.size()) fail(k - 2, "truncated \\" + std::string(1, e) + " escape");
          uint32_t cp = 0;
          for (size_t j = 0; j < n; ++j) {
            char h = src_[k + j];
            if (!std::isxdigit(static_cast<unsigned char>(h))) {
              fail(k - 2, "invalid \\" + std::string(1, e) + " escape");
            }
            cp = cp * 16 + (std::isdigit(static_cast<unsigned char>(h))
                                ? h - '0'
                                : (std::tolower(h) - 'a' + 10));
          }
          if (cp > 0x10ffff) fail(k - 2, "escape is not a valid code point");
          append_utf8(cp, value);
          k += n;
          break;
        }
        default:  // Python keeps unknown escapes verbatim
          value += '\\';
          value += e;
      }
    }
    tokens_.push_back({TokenKind::kString, value, pos_at(i)});
    return k + 1;
  }

  std::string src_;
  std::vector<size_t> line_starts_;
  LexerOptions opt_;
  std::vector<Token> tokens_;
};

std::string normalize_newlines(const std::string& source) {
  std::string out;
  out.reserve(source.size());
  for (size_t i = 0; i < source.size(); ++i) {
    if (source[i] == '\r') {
      out += '\n';
      if (i + 1 < source.size() && source[i + 1] == '\n') ++i;
    } else {
      out += source[i];
    }
  }
  if (!out.empty() && out.back() == '\n') out.pop_back();
  return out;
}

}  // namespace

std::vector<Token> tokenize(const std::string& source, const LexerOptions& options) {
  return Lexer(normalize_newlines(source), options).run();
}

}  // namespace salvo::jinja
