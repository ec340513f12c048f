// A DFlash drafter's draft vocabulary (speculative/draft_vocab.h): token_ranks.safetensors read
// and checked (each malformed file named with what is wrong), and a drafter with ranks drafting
// from the target's own LM head rows: its logit column i is bit for bit the whole head's logit of
// id head_ids()[i], and its runner returns the best of those ids, as ids.
#include "speculative/draft_vocab.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>
#include <string>
#include <vector>

#include "models/model.h"
#include "speculative/dflash_drafter.h"
#include "speculative/dflash_model.h"
#include "speculative/dflash_runner.h"
#include "util/thread_pool.h"

namespace salvo {
namespace {

namespace fs = std::filesystem;

// ctest runs the tests of this file in parallel: each its own folder.
fs::path temp_dir(const std::string& name) {
  const fs::path dir =
      fs::temp_directory_path() / ("salvo_draft_vocab_" + name + "_" + std::to_string(getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir);
  return dir;
}

// A safetensors file of one tensor "name" with the given dtype, shape and raw bytes.
void write_tensor(const fs::path& path, const std::string& name, const std::string& dtype,
                  const std::string& shape, const void* data, size_t bytes) {
  const std::string header = "{\"" + name + "\": {\"dtype\": \"" + dtype +
                             "\", \"shape\": " + shape + ", \"data_offsets\": [0, " +
                             std::to_string(bytes) + "]}}";
  const uint64_t n = header.size();
  std::ofstream out(path, std::ios::binary);
  out.write(reinterpret_cast<const char*>(&n), 8);
  out.write(header.data(), static_cast<std::streamsize>(header.size()));
  out.write(static_cast<const char*>(data), static_cast<std::streamsize>(bytes));
}

void write_ids(const fs::path& path, const std::vector<int32_t>& ids) {
  write_tensor(path, "ids", "I32", "[" + std::to_string(ids.size()) + "]", ids.data(),
               ids.size() * sizeof(int32_t));
}

std::string error_of(const fs::path& path, int32_t n_vocab = 10, int32_t rows = 10) {
  auto r = read_token_ranks(path.string(), n_vocab, rows);
  return r.ok() ? "" : r.status().message();
}

TEST(TokenRanks, ListedIdsFirstThenTheRestInOrder) {
  const fs::path file = temp_dir("order") / "token_ranks.safetensors";
  write_ids(file, {5, 2, 7});
  auto r = read_token_ranks(file.string(), 10, 6);
  ASSERT_TRUE(r.ok()) << r.status().message();
  EXPECT_EQ(*r, (std::vector<int32_t>{5, 2, 7, 0, 1, 3}));
  r = read_token_ranks(file.string(), 10, 2);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(*r, (std::vector<int32_t>{5, 2}));
  r = read_token_ranks(file.string(), 10, 10);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(*r, (std::vector<int32_t>{5, 2, 7, 0, 1, 3, 4, 6, 8, 9}));
  fs::remove_all(file.parent_path());
}

TEST(TokenRanks, NoFileMeansNoRanks) {
  const fs::path dir = temp_dir("none");
  auto r = read_token_ranks((dir / "token_ranks.safetensors").string(), 10, 10);
  ASSERT_TRUE(r.ok());
  EXPECT_TRUE(r->empty());
  fs::remove_all(dir);
}

TEST(TokenRanks, MalformedFilesSayWhatIsWrong) {
  const fs::path dir = temp_dir("bad");
  const fs::path file = dir / "token_ranks.safetensors";
  write_ids(file, {5, 10});
  EXPECT_NE(error_of(file).find("'ids'[1] = 10 is outside the vocabulary [0, 10)"),
            std::string::npos)
      << error_of(file);
  write_ids(file, {5, -1});
  EXPECT_NE(error_of(file).find("is outside the vocabulary"), std::string::npos);
  write_ids(file, {3, 4, 3});
  EXPECT_NE(error_of(file).find("id 3 is listed twice"), std::string::npos) << error_of(file);
  write_ids(file, std::vector<int32_t>(11, 0));
  EXPECT_NE(error_of(file).find("lists 11 ids; the model has 10"), std::string::npos)
      << error_of(file);
  const float f[2] = {1, 2};
  write_tensor(file, "ids", "F32", "[2]", f, sizeof(f));
  EXPECT_NE(error_of(file).find("must be I32 [n], not F32"), std::string::npos) << error_of(file);
  const int32_t two_d[4] = {0, 1, 2, 3};
  write_tensor(file, "ids", "I32", "[2, 2]", two_d, sizeof(two_d));
  EXPECT_NE(error_of(file).find("with 2 dimensions"), std::string::npos) << error_of(file);
  write_tensor(file, "ranks", "I32", "[2]", two_d, 8);
  EXPECT_NE(error_of(file).find("no tensor 'ids'"), std::string::npos) << error_of(file);
  std::ofstream(file, std::ios::binary | std::ios::trunc) << "not a safetensors file";
  EXPECT_NE(error_of(file), "");
  // Every message names the file.
  EXPECT_NE(error_of(file).find(file.string()), std::string::npos) << error_of(file);
  fs::remove_all(dir);
}

TEST(DflashDrafterVocabularies, RankedHeadsDraftTheirBestRankedIds) {
  using V = std::pair<int32_t, int32_t>;  // small trees, large trees
  const int32_t small = DflashDrafter::kRankedSmallTree;
  EXPECT_EQ(DflashDrafter::vocabularies(151936, SpecOptions::kVocabByTree, 65536), V(small, 65536));
  EXPECT_EQ(DflashDrafter::vocabularies(49152, SpecOptions::kVocabByTree, 49152), V(small, 49152));
  EXPECT_EQ(DflashDrafter::vocabularies(151936, 16384, 65536), V(16384, 16384));
  EXPECT_EQ(DflashDrafter::vocabularies(151936, 0, 65536), V(151936, 151936));
}

// The shipped SmolLM2 drafter, loaded once as shipped and once from a copy with ranks (a
// shuffle of the vocabulary's ids: any order must give the same columns).
class RankedDrafter : public ::testing::Test {
 protected:
  void SetUp() override {
    const char* env = std::getenv("SALVO_MODELS");
    const std::string path =
        std::string(env ? env : SALVO_SOURCE_DIR "/models") + "/smollm2-135m.gguf";
    if (!fs::exists(path)) GTEST_SKIP() << path << " not found (set SALVO_MODELS)";
    auto target = load_model(path);
    ASSERT_TRUE(target.ok()) << target.status().message();
    target_ = std::move(*target);
    const fs::path shipped = SALVO_SOURCE_DIR "/drafters/smollm2-135m";
    const fs::path ranked =
        temp_dir(::testing::UnitTest::GetInstance()->current_test_info()->name());
    for (const char* f : {"config.json", "model.safetensors"}) fs::copy(shipped / f, ranked / f);
    std::vector<int32_t> ids(target_->config().n_vocab);
    for (size_t i = 0; i < ids.size(); ++i) ids[i] = static_cast<int32_t>(i);
    std::shuffle(ids.begin(), ids.end(), std::mt19937(7));
    ids.resize(ids.size() / 2);  // the rest follow in ascending order
    write_ids(ranked / "token_ranks.safetensors", ids);
    auto plain = DflashModel::load(shipped.string(), *target_);
    ASSERT_TRUE(plain.ok()) << plain.status().message();
    plain_ = std::move(*plain);
    auto with_ranks = DflashModel::load(ranked.string(), *target_);
    ASSERT_TRUE(with_ranks.ok()) << with_ranks.status().message();
    ranked_ = std::move(*with_ranks);
    listed_ = ids;
    fs::remove_all(ranked);
  }

  // Random features for `n` positions, the same for both drafters.
  std::vector<float> features(int n) const {
    std::vector<float> f(static_cast<size_t>(n) * plain_->config().feature_width());
    std::mt19937 rng(3);
    std::normal_distribution<float> normal(0.0f, 1.0f);
    for (float& x : f) x = normal(rng);
    return f;
  }

  std::unique_ptr<Model> target_;
  std::unique_ptr<DflashModel> plain_, ranked_;
  std::vector<int32_t> listed_;
};

TEST_F(RankedDrafter, ColumnsAreTheWholeHeadsLogitsOfTheRankedIds) {
  const int32_t n_vocab = target_->config().n_vocab;
  const std::span<const int32_t> ids = ranked_->head_ids();
  ASSERT_EQ(static_cast<int32_t>(ids.size()), std::min(n_vocab, DflashModel::kRankedHeadRows));
  EXPECT_TRUE(std::equal(listed_.begin(), listed_.end(), ids.begin()));
  EXPECT_TRUE(plain_->head_ids().empty());
  ThreadPool pool(2);
  const int n = 9, depth = 5;
  const std::vector<float> f = features(n);
  for (int64_t rows : {static_cast<int64_t>(ids.size()), int64_t{4096}}) {
    DflashState a = plain_->new_state(), b = ranked_->new_state();
    ASSERT_TRUE(plain_->observe(pool, a, 0, n, f.data()).ok());
    ASSERT_TRUE(ranked_->observe(pool, b, 0, n, f.data()).ok());
    std::vector<float> whole, part;
    plain_->draft_block(pool, a, 42, depth, whole, 0);
    ranked_->draft_block(pool, b, 42, depth, part, rows);
    ASSERT_EQ(whole.size(), static_cast<size_t>(depth) * n_vocab);
    ASSERT_EQ(part.size(), static_cast<size_t>(depth * rows));
    ASSERT_EQ(ranked_->head_row_ids(rows), ids.data());
    for (int d = 0; d < depth; ++d) {
      for (int64_t i = 0; i < rows; ++i) {
        ASSERT_EQ(part[d * rows + i], whole[static_cast<size_t>(d) * n_vocab + ids[i]])
            << "depth " << d + 1 << " column " << i << " (id " << ids[i] << ")";
      }
    }
  }
  // Asked for every id, or more than the ranked head holds, it drafts from the target's head.
  EXPECT_EQ(ranked_->head_row_ids(0), nullptr);
  EXPECT_EQ(ranked_->head_row_ids(static_cast<int64_t>(ids.size()) + 1), nullptr);
}

TEST_F(RankedDrafter, RunnerGivesTheBestRankedIdsAsIds) {
  ThreadPool pool(2);
  const int n = 9, depth = 4, width = 8, rows = 4096;
  const std::vector<float> f = features(n);
  auto runner = new_dflash_runner(*ranked_, pool);
  ASSERT_TRUE(runner.ok()) << runner.status().message();
  EXPECT_EQ((*runner)->ranked_rows(), static_cast<int32_t>(ranked_->head_ids().size()));
  ASSERT_TRUE((*runner)->observe(0, n, f.data()).ok());
  std::vector<Candidates> depths;
  (*runner)->draft(42, depth, width, rows, depths);
  // The reference: the whole head's logits, the best `width` of the first `rows` ranked ids.
  DflashState s = plain_->new_state();
  ASSERT_TRUE(plain_->observe(pool, s, 0, n, f.data()).ok());
  std::vector<float> whole;
  plain_->draft_block(pool, s, 42, depth, whole, 0);
  const int32_t n_vocab = target_->config().n_vocab;
  const std::span<const int32_t> ids = ranked_->head_ids();
  ASSERT_EQ(depths.size(), static_cast<size_t>(depth));
  for (int d = 0; d < depth; ++d) {
    std::vector<int32_t> order(ids.begin(), ids.begin() + rows);
    const float* row = whole.data() + static_cast<size_t>(d) * n_vocab;
    std::stable_sort(order.begin(), order.end(),
                     [&](int32_t x, int32_t y) { return row[x] > row[y]; });
    order.resize(width);
    EXPECT_EQ(depths[d].tokens, order) << "depth " << d + 1;
  }
}

}  // namespace
}  // namespace salvo
