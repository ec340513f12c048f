// Model::forward_argmax (and forward_top) on the CPU backend: for every row that wants logits, the
// index that std::max_element (first maximum, so ties go to the lowest index) finds in forward()'s
// logits for the same pass, over a prefill and a draft tree on the real models.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <vector>

#include "models/model.h"
#include "ops/ops.h"

namespace salvo {
namespace {

std::string model_path(const char* name) {
  const char* env = std::getenv("SALVO_MODELS");
  return std::string(env ? env : SALVO_SOURCE_DIR "/models") + "/" + name + ".gguf";
}

class ForwardArgmax : public ::testing::TestWithParam<const char*> {};

TEST_P(ForwardArgmax, EqualsArgmaxOfLogits) {
  const std::string path = model_path(GetParam());
  if (!std::filesystem::exists(path)) GTEST_SKIP() << path << " not found (set SALVO_MODELS)";
  auto model = load_model(path);
  ASSERT_TRUE(model.ok()) << model.status().message();
  Model& m = **model;
  const int n_vocab = m.config().n_vocab;
  ThreadPool pool(2);
  std::vector<int32_t> prompt(20);
  for (size_t i = 0; i < prompt.size(); ++i) prompt[i] = static_cast<int32_t>(100 + 37 * i);
  TokenBatch prefill;
  prefill.add_chain(prompt.data(), prompt.size(), 0, 0, /*logits_last_only=*/false);
  // root -> a -> a's child, root -> b (DFS order), behind the prompt.
  const int32_t p = static_cast<int32_t>(prompt.size());
  TokenBatch tree;
  tree.tokens = {11, 22, 33, 44};
  tree.positions = {p, p + 1, p + 2, p + 1};
  tree.seq_ids = {0, 0, 0, 0};
  tree.parents = {-1, 0, 1, 0};
  tree.subtree_end = {3, 2, 2, 3};
  tree.want_logits = {1, 0, 1, 1};  // a row without logits has no id either

  std::vector<float> logits;
  std::vector<int32_t> ids;
  for (const TokenBatch* batch : {&prefill, &tree}) {
    KvCache kv_logits(m.config(), 1, 64), kv_ids(m.config(), 1, 64);
    if (batch == &tree) {
      for (KvCache* kv : {&kv_logits, &kv_ids}) {
        ASSERT_TRUE(m.forward(pool, prefill, *kv, logits).ok());
        kv->commit_prefix(0, p);
      }
    }
    ASSERT_TRUE(m.forward(pool, *batch, kv_logits, logits).ok());
    ASSERT_TRUE(m.forward_argmax(pool, *batch, kv_ids, ids).ok());
    // forward_top: each logit row's k largest, the set ops::top_logits picks from the logits.
    constexpr int kTop = 64;
    std::vector<int32_t> top_ids;
    std::vector<float> top_values;
    KvCache kv_top(m.config(), 1, 64);
    if (batch == &tree) {
      std::vector<float> prefill_logits;
      ASSERT_TRUE(m.forward(pool, prefill, kv_top, prefill_logits).ok());
      kv_top.commit_prefix(0, p);
    }
    ASSERT_TRUE(m.forward_top(pool, *batch, kv_top, kTop, top_ids, top_values).ok());
    ASSERT_EQ(top_ids.size(), static_cast<size_t>(batch->n_logit_rows()) * kTop);
    EXPECT_FALSE(m.forward_top(pool, *batch, kv_top, 0, top_ids, top_values).ok());
    EXPECT_FALSE(m.forward_top(pool, *batch, kv_top, n_vocab + 1, top_ids, top_values).ok());
    ASSERT_EQ(ids.size(), static_cast<size_t>(batch->n_logit_rows()));
    ASSERT_EQ(logits.size(), ids.size() * n_vocab);
    for (size_t r = 0; r < ids.size(); ++r) {
      const float* row = logits.data() + r * n_vocab;
      EXPECT_EQ(ids[r], std::max_element(row, row + n_vocab) - row) << "row " << r;
      std::vector<int32_t> want_ids(kTop);
      std::vector<float> want_values(kTop);
      ops::top_logits(row, n_vocab, kTop, want_ids.data(), want_values.data());
      const std::vector<int32_t> got_ids(top_ids.begin() + r * kTop,
                                         top_ids.begin() + (r + 1) * kTop);
      const std::vector<float> got_values(top_values.begin() + r * kTop,
                                          top_values.begin() + (r + 1) * kTop);
      EXPECT_EQ(got_ids, want_ids) << "row " << r;
      EXPECT_EQ(got_values, want_values) << "row " << r;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Models, ForwardArgmax, ::testing::Values("smollm2-135m", "gemma3-270m"),
                         [](const auto& info) {
                           std::string name = info.param;
                           std::replace(name.begin(), name.end(), '-', '_');
                           std::replace(name.begin(), name.end(), '.', '_');
                           return name;
                         });

}  // namespace
}  // namespace salvo
