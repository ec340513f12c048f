// DraftModelDrafter: drafts with a second, smaller model that shares the target's vocabulary.
//
// The draft model has its own KV cache (one sequence). Each proposal first brings that cache in
// line with the new context (common prefix kept, the rest truncated, the missing tokens — usually
// the accepted path and the new root — run in one batch whose last row gives depth 1), then grows
// a tree level by level, one draft forward per level. While the tree is a chain (the draft is
// confident), each new node is committed to the draft cache, so every level costs a one-row
// pass, and a trunk the target accepts is already in the cache next time. Below the first
// branching nothing more is committed (siblings must not see each other) and each level's pass
// recomputes the uncommitted nodes; the trees are small, and a pass of a few rows costs little
// more than one. Nodes are chosen greedily on the draft's own probabilities: a node always gets
// its most likely child and, where that child is uncertain, the runners-up as siblings; each
// level keeps the candidates of highest cumulative probability. The cache is synchronised by
// common prefix at every proposal, so it follows the target's commits and rollbacks.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "models/kv_cache.h"
#include "models/model.h"
#include "models/token_batch.h"
#include "speculative/drafter.h"
#include "tokenizer/tokenizer.h"
#include "util/status.h"
#include "util/thread_pool.h"

namespace salvo {

struct DraftModelOptions {
  int context_size = 4096;  // the draft cache's capacity; contexts beyond it are not drafted
  int prefill_chunk = 512;
  int max_children = 3;          // most children of one node
  float branch_below = 0.8f;     // add siblings where the best child's probability is below this
  float min_child_prob = 0.05f;  // a runner-up below this probability is not worth a row
  float min_path_prob = 0.02f;   // stop growing below this cumulative probability
  int level_width = 4;           // most new nodes per level
};

class DraftModelDrafter : public Drafter {
 public:
  // `n_tokens`: ids the drafter may propose (the shared vocabulary; padded embedding rows of
  // either model are never proposed). The model and the pool must outlive the drafter.
  DraftModelDrafter(Model& model, ThreadPool& pool, int32_t n_tokens,
                    const DraftModelOptions& options = {});

  DraftTree propose(std::span<const int32_t> context, int budget, int max_depth) override;
  std::string name() const override { return "draft model " + model_.config().name; }
  // Prefills the draft cache with the prompt (one batch per prefill_chunk).
  void prepare(std::span<const int32_t> prompt) override;

 private:
  struct Candidate {
    int32_t token;
    float prob;
  };
  struct GrowNode {
    int32_t token;
    int32_t parent;  // index into grow_; -1 = root
    int32_t depth;
    double path_prob;  // product of the draft's probabilities from the root
  };

  // Makes the cache hold `context`, root included, and logits_ the root's logits, running the
  // root and the tokens the cache lacks in one batch.
  Status sync(std::span<const int32_t> context);
  // The most likely next tokens after one logits row, best first, with softmax probabilities.
  std::vector<Candidate> top_candidates(const float* logits) const;
  // Fills batch_ with the nodes of `tree` below its committed trunk of `committed_depth` nodes
  // (the context's root sits at `root_position`), no logits wanted yet.
  void append_uncommitted_rows(const DraftTree& tree, int committed_depth, int32_t root_position);
  // The grown nodes as a DraftTree in DFS order; `dfs_of[i]` is the tree index of grow_[i].
  DraftTree to_dfs(std::vector<int32_t>& dfs_of) const;

  Model& model_;
  ThreadPool& pool_;
  int32_t n_tokens_;
  DraftModelOptions options_;
  KvCache kv_;
  std::vector<int32_t> cached_;  // the tokens kv_ holds: a context, maybe a draft trunk after it
  TokenBatch batch_;
  std::vector<float> logits_;
  std::vector<GrowNode> grow_;
};

// Whether `draft` can draft for `target`: the same token count (a model's embedding rows may
// exceed it, as Qwen pads them), identical token strings for every id and the same BOS/EOS.
// The error names the first difference.
Status check_draft_vocabulary(const Tokenizer& target, const ModelConfig& target_config,
                              const Tokenizer& draft, const ModelConfig& draft_config);

}  // namespace salvo
