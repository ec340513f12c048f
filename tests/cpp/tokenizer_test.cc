// Unit tests of the tokenizer pieces; tests/python/test_tokenizer.py compares whole encodings
// against llama.cpp on real vocabularies.
#include "tokenizer/tokenizer.h"

#include <gtest/gtest.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <vector>

#include "io/gguf.h"
#include "tokenizer/pretokenize.h"
#include "tokenizer/unicode.h"

namespace salvo {
namespace {

using Words = std::vector<std::string>;

TEST(PretokenizeTest, Qwen2SplitsWordsContractionsAndDigits) {
  EXPECT_EQ(pretokenize(PreTokenizer::kQwen2, "Hello world"), (Words{"Hello", " world"}));
  EXPECT_EQ(pretokenize(PreTokenizer::kQwen2, "It's"), (Words{"It", "'s"}));
  EXPECT_EQ(pretokenize(PreTokenizer::kQwen2, "IT'LL"), (Words{"IT", "'LL"}));
  EXPECT_EQ(pretokenize(PreTokenizer::kQwen2, "x12345"), (Words{"x", "1", "2", "3", "4", "5"}));
  EXPECT_EQ(pretokenize(PreTokenizer::kQwen2, "(hello"), (Words{"(hello"}));
  EXPECT_EQ(pretokenize(PreTokenizer::kQwen2, "\thello"), (Words{"\thello"}));
  EXPECT_EQ(pretokenize(PreTokenizer::kQwen2, "a ((!\n\nb"), (Words{"a", " ((!\n\n", "b"}));
}

TEST(PretokenizeTest, Qwen2WhitespaceRuns) {
  // \s+(?!\S) leaves the last space of a run to the next word; at the end it takes all.
  EXPECT_EQ(pretokenize(PreTokenizer::kQwen2, "a   b"), (Words{"a", "  ", " b"}));
  EXPECT_EQ(pretokenize(PreTokenizer::kQwen2, "end  "), (Words{"end", "  "}));
  // \s*[\r\n]+ ends at the last newline of the run.
  EXPECT_EQ(pretokenize(PreTokenizer::kQwen2, "x\n\n  y"), (Words{"x", "\n\n", " ", " y"}));
  EXPECT_EQ(pretokenize(PreTokenizer::kQwen2, "x \r\n y"), (Words{"x", " \r\n", " y"}));
  // Non-ASCII whitespace counts as \s.
  EXPECT_EQ(pretokenize(PreTokenizer::kQwen2, "a\u3000b"), (Words{"a", "\u3000b"}));
}

TEST(PretokenizeTest, SmollmIsolatesDigitsBeforeGpt2Rules) {
  EXPECT_EQ(pretokenize(PreTokenizer::kGpt2DigitsSplit, "abc 123"),
            (Words{"abc", " ", "1", "2", "3"}));
  EXPECT_EQ(pretokenize(PreTokenizer::kGpt2DigitsSplit, "it's"), (Words{"it", "'s"}));
  // GPT-2's contractions are lower-case only.
  EXPECT_EQ(pretokenize(PreTokenizer::kGpt2DigitsSplit, "IT'S"), (Words{"IT", "'", "S"}));
  EXPECT_EQ(pretokenize(PreTokenizer::kGpt2DigitsSplit, " ½x"), (Words{" ", "½", "x"}));
  EXPECT_EQ(pretokenize(PreTokenizer::kGpt2, " 123 !!"), (Words{" 123", " !!"}));
  // Only an ASCII space may prefix a GPT-2 word; a tab stays on its own.
  EXPECT_EQ(pretokenize(PreTokenizer::kGpt2, "a\t\tb"), (Words{"a", "\t", "\t", "b"}));
}

TEST(PretokenizeTest, Llama3GroupsDigitsByThree) {
  EXPECT_EQ(pretokenize(PreTokenizer::kLlama3, "1234567"), (Words{"123", "456", "7"}));
}

TEST(PretokenizeTest, CombiningMarksAreNotLetters) {
  // "e" + U+0301: the mark is not \p{L}, so it starts a new word (as llama.cpp splits it).
  EXPECT_EQ(pretokenize(PreTokenizer::kQwen2, "e\u0301t"), (Words{"e", "\u0301t"}));
}

TEST(PretokenizeTest, InvalidUtf8BecomesReplacementCharacter) {
  EXPECT_EQ(pretokenize(PreTokenizer::kQwen2, "a\xFF"), (Words{"a", "\uFFFD"}));
}

TEST(UnicodeTest, Categories) {
  EXPECT_TRUE(unicode::is_letter('a'));
  EXPECT_TRUE(unicode::is_letter(0x4E2D));  // 中
  EXPECT_TRUE(unicode::is_number('7'));
  EXPECT_TRUE(unicode::is_number(0x00BD));  // ½
  EXPECT_FALSE(unicode::is_letter(0x0301));
  EXPECT_EQ(unicode::category(0x0301), unicode::UnicodeCategory::kMark);
  EXPECT_EQ(unicode::category('!'), unicode::UnicodeCategory::kPunctuation);
  EXPECT_EQ(unicode::category(0x1F600), unicode::UnicodeCategory::kSymbol);
  EXPECT_TRUE(unicode::is_whitespace(0x3000));
  EXPECT_FALSE(unicode::is_whitespace(0x200B));  // zero width space is not White_Space
}

TEST(UnicodeTest, Gpt2ByteMappingIsABijection) {
  EXPECT_EQ(unicode::byte_to_bpe_char(' '), "\u0120");   // Ġ
  EXPECT_EQ(unicode::byte_to_bpe_char('\n'), "\u010A");  // Ċ
  EXPECT_EQ(unicode::byte_to_bpe_char('a'), "a");
  EXPECT_EQ(unicode::byte_to_bpe_char(0xAD), "\u0143");  // soft hyphen is shifted
  for (int b = 0; b < 256; ++b) {
    const auto cps = unicode::decode_utf8(unicode::byte_to_bpe_char(b));
    ASSERT_EQ(cps.size(), 1u);
    EXPECT_EQ(unicode::bpe_char_to_byte(cps[0]), b);
  }
  EXPECT_EQ(unicode::bpe_char_to_byte(0x4E2D), -1);
}

TEST(Utf8Test, CompletePrefixHoldsBackUnfinishedCharacters) {
  EXPECT_EQ(utf8_complete_prefix(""), 0u);
  EXPECT_EQ(utf8_complete_prefix("abc"), 3u);
  EXPECT_EQ(utf8_complete_prefix("a\xE4\xBD"), 1u);      // 你 missing its last byte
  EXPECT_EQ(utf8_complete_prefix("a\xE4\xBD\xA0"), 4u);  // 你 complete
  EXPECT_EQ(utf8_complete_prefix("\xF0\x9F\x98"), 0u);   // 😀 missing a byte
  EXPECT_EQ(utf8_complete_prefix("\x80"), 1u);           // stray continuation: pass it on
  EXPECT_EQ(utf8_complete_prefix("a\xFF"), 2u);          // never a lead byte
}

// A byte-level vocabulary with one token per byte plus a few merges, so every multi-byte
// character is split across tokens.
TokenizerData byte_vocab() {
  TokenizerData data;
  data.model = "gpt2";
  data.pre = "qwen2";
  for (int b = 0; b < 256; ++b) data.tokens.push_back(unicode::byte_to_bpe_char(b));
  const std::string g = unicode::byte_to_bpe_char(' ');
  data.tokens.push_back("he");
  data.tokens.push_back("hel");
  data.tokens.push_back(g + "w");
  data.tokens.push_back("<|ctrl|>");
  data.tokens.push_back("<user>");
  data.token_types.assign(data.tokens.size(), static_cast<int32_t>(TokenType::kNormal));
  data.token_types[259] = static_cast<int32_t>(TokenType::kControl);
  data.token_types[260] = static_cast<int32_t>(TokenType::kUserDefined);
  data.merges = {"h e", "he l", g + " w"};
  data.eos_id = 259;
  return data;
}

TEST(BpeTest, MergesByRank) {
  auto tokenizer = Tokenizer::from_data(byte_vocab());
  ASSERT_TRUE(tokenizer.ok()) << tokenizer.status().message();
  const auto ids = (*tokenizer)->encode("help w", false, false);
  EXPECT_EQ(ids, (std::vector<int32_t>{257, 'p', 258}));
  EXPECT_EQ((*tokenizer)->decode(ids), "help w");
}

TEST(BpeTest, SpecialTokensNeedParseSpecialButUserDefinedDoNot) {
  auto tokenizer = Tokenizer::from_data(byte_vocab());
  ASSERT_TRUE(tokenizer.ok());
  const auto& tok = **tokenizer;
  EXPECT_EQ(tok.encode("a<|ctrl|>b", false, true), (std::vector<int32_t>{'a', 259, 'b'}));
  EXPECT_EQ(tok.encode("<|ctrl|>", false, false).size(), 8u);
  EXPECT_EQ(tok.encode("<user>", false, false), (std::vector<int32_t>{260}));
  EXPECT_TRUE(tok.is_control(259));
  EXPECT_TRUE(tok.is_end_of_generation(259));
  EXPECT_EQ(tok.decode(std::vector<int32_t>{'a', 259}, /*render_special=*/false), "a");
}

TEST(StreamDecoderTest, NeverSplitsAUtf8Character) {
  auto tokenizer = Tokenizer::from_data(byte_vocab());
  ASSERT_TRUE(tokenizer.ok());
  const std::string text = "a你好😀 é\n";
  const auto ids = (*tokenizer)->encode(text, false, false);
  ASSERT_EQ(ids.size(), text.size());  // one token per byte
  StreamDecoder stream(**tokenizer);
  std::string joined;
  std::vector<std::string> chunks;
  for (int32_t id : ids) chunks.push_back(stream.push(id));
  chunks.push_back(stream.flush());
  for (const std::string& chunk : chunks) {
    EXPECT_EQ(utf8_complete_prefix(chunk), chunk.size()) << chunk;
    // Each chunk decodes to whole code points only.
    for (uint32_t cp : unicode::decode_utf8(chunk)) EXPECT_NE(cp, 0xFFFDu);
    joined += chunk;
  }
  EXPECT_EQ(joined, text);
  EXPECT_EQ(chunks[1], "");  // first byte of 你 is held back
  EXPECT_EQ(chunks[3], "你");
}

TokenizerData spm_vocab() {
  TokenizerData data;
  data.model = "llama";
  data.tokens = {"<unk>", "<s>", "</s>", "\u2581", "a", "b", "ab", "\u2581ab", "<start>"};
  data.scores = {0, 0, 0, -1, -2, -2, -1.5f, -0.5f, 0};
  data.token_types = {2, 3, 3, 1, 1, 1, 1, 1, 3};
  for (int b = 0; b < 256; ++b) {
    char name[8];
    std::snprintf(name, sizeof(name), "<0x%02X>", b);
    data.tokens.push_back(name);
    data.scores.push_back(0);
    data.token_types.push_back(static_cast<int32_t>(TokenType::kByte));
  }
  data.add_space_prefix = false;
  return data;
}

TEST(SpmTest, ScoreMergesAndByteFallback) {
  auto tokenizer = Tokenizer::from_data(spm_vocab());
  ASSERT_TRUE(tokenizer.ok()) << tokenizer.status().message();
  const auto& tok = **tokenizer;
  const int32_t byte0 = 9;
  // "ab" merges; " ab" prefers the higher-scored "▁ab"; é has no token: two byte tokens.
  const auto ids = tok.encode("ab abé", /*add_special=*/true, true);
  EXPECT_EQ(ids, (std::vector<int32_t>{1, 6, 7, byte0 + 0xC3, byte0 + 0xA9}));
  EXPECT_EQ(tok.decode(ids, /*render_special=*/false), "ab abé");
  EXPECT_EQ(tok.token_piece(byte0 + 0x41), "A");
  EXPECT_EQ(tok.token_piece(7), " ab");
  EXPECT_EQ(tok.encode("<start>ab", false, true), (std::vector<int32_t>{8, 6}));
}

TEST(SpmTest, SpacePrefixAfterSpecialTokens) {
  TokenizerData data = spm_vocab();
  data.add_space_prefix = true;
  auto tokenizer = Tokenizer::from_data(std::move(data));
  ASSERT_TRUE(tokenizer.ok());
  EXPECT_EQ((*tokenizer)->encode("ab<start>ab", false, true), (std::vector<int32_t>{7, 8, 7}));
  EXPECT_EQ((*tokenizer)->decode(std::vector<int32_t>{7, 6}), "abab");
}

TEST(TokenizerDataTest, RejectsBadInput) {
  TokenizerData data = byte_vocab();
  data.model = "bert";
  EXPECT_FALSE(Tokenizer::from_data(data).ok());
  data = byte_vocab();
  data.pre = "no-such-pre";
  EXPECT_FALSE(Tokenizer::from_data(data).ok());
  data = byte_vocab();
  data.tokens[1] = data.tokens[0];
  EXPECT_FALSE(Tokenizer::from_data(data).ok());
  data = byte_vocab();
  data.merges.push_back("nospace");
  EXPECT_FALSE(Tokenizer::from_data(data).ok());
  data = byte_vocab();
  data.scores = {1.0f};
  EXPECT_FALSE(Tokenizer::from_data(data).ok());
}

// Real vocabulary: a long text round-trips (the time is printed, not asserted: speed is shown
// by benchmarks). Skipped only when the model has not been pulled.
TEST(RealModelTest, EncodesTenThousandTokens) {
  const char* models = std::getenv("SALVO_MODELS");
  const std::string path =
      (models != nullptr ? std::string(models) : std::string(SALVO_SOURCE_DIR) + "/models") +
      "/qwen2.5-coder-0.5b.gguf";
  if (!std::filesystem::exists(path)) GTEST_SKIP() << path << " missing";
  auto gguf = GgufFile::open(path);
  ASSERT_TRUE(gguf.ok()) << gguf.status().message();
  auto tokenizer = Tokenizer::from_gguf(**gguf);
  ASSERT_TRUE(tokenizer.ok()) << tokenizer.status().message();
  std::string text;
  while (text.size() < 45000) {
    text +=
        "def fibonacci(n: int) -> int:\n    if n < 2:\n        return n\n"
        "    return fibonacci(n - 1) + fibonacci(n - 2)  # naïve, 1234 calls 😀\n";
  }
  const auto start = std::chrono::steady_clock::now();
  const auto ids = (*tokenizer)->encode(text, false, true);
  const double ms =
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
  std::printf("encoded %zu bytes into %zu tokens in %.2f ms\n", text.size(), ids.size(), ms);
  EXPECT_GE(ids.size(), 10000u);
  EXPECT_EQ((*tokenizer)->decode(ids), text);
}

}  // namespace
}  // namespace salvo
