// The KvCacheMirror seam: a backend that keeps the K/V rows elsewhere (the CUDA device cache)
// receives every commit as the same ordered moves KvCache would make, while the host cache keeps
// the committed counts that sessions and backends read.
#include <gtest/gtest.h>

#include <utility>
#include <vector>

#include "models/kv_cache.h"

namespace salvo {
namespace {

struct RecordingMirror : KvCacheMirror {
  std::vector<std::pair<int, int>>* moves;  // (from slot, to slot)
  explicit RecordingMirror(std::vector<std::pair<int, int>>* m) : moves(m) {}
  void commit(int seq, int base, std::span<const int32_t> accepted) override {
    for (size_t j = 0; j < accepted.size(); ++j) {
      moves->emplace_back(base + accepted[j], base + static_cast<int>(j));
    }
  }
};

TEST(KvCacheMirror, CommitReachesTheMirrorAndCountsStayOnTheHost) {
  ModelConfig c;
  c.n_layer = 2;
  c.n_head = c.n_head_kv = 1;
  c.head_dim = c.head_dim_v = 8;
  KvCache kv(c, 2, 32);
  std::vector<std::pair<int, int>> moves;
  kv.set_mirror(std::make_unique<RecordingMirror>(&moves));
  kv.commit_prefix(1, 5);
  const std::vector<int32_t> accepted = {0, 2, 3};
  kv.commit(1, accepted);
  EXPECT_EQ(kv.committed(1), 8);
  EXPECT_EQ(kv.committed(0), 0);
  const std::vector<std::pair<int, int>> want = {{5, 5}, {7, 6}, {8, 7}};
  EXPECT_EQ(moves, want);
  kv.truncate(1, 6);
  EXPECT_EQ(kv.committed(1), 6);
}

}  // namespace
}  // namespace salvo
