// check_draft_vocabulary: which draft models may draft for a target. The real pairs (Qwen 0.5B for
// 1.5B accepted, Gemma for SmolLM refused) are checked end to end by
// tests/python/test_speculative_invariant.py; here each rule is checked on its own.
#include <gtest/gtest.h>

#include <string>

#include "models/config.h"
#include "speculative/draft_model_drafter.h"
#include "tokenizer/tokenizer.h"
#include "tokenizer/unicode.h"

namespace salvo {
namespace {

TokenizerData vocab() {
  TokenizerData data;
  data.model = "gpt2";
  data.pre = "qwen2";
  for (int b = 0; b < 256; ++b) data.tokens.push_back(unicode::byte_to_bpe_char(b));
  data.tokens.push_back("he");
  data.tokens.push_back("<|end|>");
  data.token_types.assign(data.tokens.size(), static_cast<int32_t>(TokenType::kNormal));
  data.token_types[257] = static_cast<int32_t>(TokenType::kControl);
  data.merges = {"h e"};
  data.eos_id = 257;
  return data;
}

ModelConfig config(const std::string& name, int n_vocab) {
  ModelConfig c;
  c.name = name;
  c.n_vocab = n_vocab;
  return c;
}

Status check(const TokenizerData& target, const TokenizerData& draft, int draft_rows = 258) {
  auto t = Tokenizer::from_data(target);
  auto d = Tokenizer::from_data(draft);
  EXPECT_TRUE(t.ok() && d.ok());
  return check_draft_vocabulary(**t, config("target", 258), **d, config("draft", draft_rows));
}

TEST(DraftVocabularyTest, IdenticalVocabulariesAreCompatible) {
  EXPECT_TRUE(check(vocab(), vocab()).ok());
  // Padded embedding rows (as in Qwen's GGUFs) do not matter.
  EXPECT_TRUE(check(vocab(), vocab(), /*draft_rows=*/320).ok());
}

TEST(DraftVocabularyTest, DifferentSizesAreRefused) {
  TokenizerData draft = vocab();
  draft.tokens.push_back("hel");
  draft.token_types.push_back(static_cast<int32_t>(TokenType::kNormal));
  const Status st = check(vocab(), draft, 259);
  ASSERT_FALSE(st.ok());
  EXPECT_NE(st.message().find("vocabulary sizes differ (259 vs 258 tokens)"), std::string::npos)
      << st.message();
  EXPECT_NE(st.message().find("'draft' cannot draft for 'target'"), std::string::npos);
}

TEST(DraftVocabularyTest, ADifferentTokenIsNamed) {
  TokenizerData draft = vocab();
  draft.tokens[256] = "eh";
  const Status st = check(vocab(), draft);
  ASSERT_FALSE(st.ok());
  EXPECT_NE(st.message().find("token 256 differs ('eh' vs 'he')"), std::string::npos)
      << st.message();
}

TEST(DraftVocabularyTest, DifferentEndOfSequenceIsRefused) {
  TokenizerData draft = vocab();
  draft.eos_id = 256;
  const Status st = check(vocab(), draft);
  ASSERT_FALSE(st.ok());
  EXPECT_NE(st.message().find("BOS/EOS"), std::string::npos) << st.message();
}

}  // namespace
}  // namespace salvo
