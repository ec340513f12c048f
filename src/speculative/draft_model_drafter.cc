#include "speculative/draft_model_drafter.h"

#include <algorithm>
#include <cmath>
#include <string>

namespace salvo {

DraftModelDrafter::DraftModelDrafter(Model& model, ThreadPool& pool, int32_t n_tokens,
                                     const DraftModelOptions& options)
    : model_(model),
      pool_(pool),
      n_tokens_(std::min(n_tokens, model.config().n_vocab)),
      options_(options),
      kv_(model.config(), 1, options.context_size) {}

Status DraftModelDrafter::sync(std::span<const int32_t> context) {
  const size_t n_cached = context.size() - 1;  // everything but the root
  size_t common = 0;
  while (common < cached_.size() && common < n_cached && cached_[common] == context[common]) {
    ++common;
  }
  kv_.truncate(0, static_cast<int>(common));
  cached_.resize(common);
  // Rows [common, context.size()): chunks of committed tokens, the last chunk ending with the
  // root, whose row is computed but not committed.
  for (size_t start = common; start < context.size();) {
    const size_t len = std::min<size_t>(options_.prefill_chunk, context.size() - start);
    const bool last = start + len == context.size();
    batch_.clear();
    batch_.add_chain(context.data() + start, static_cast<int32_t>(len), static_cast<int32_t>(start),
                     0, /*logits_last_only=*/true);
    SALVO_RETURN_IF_ERROR(model_.forward(pool_, batch_, kv_, logits_));
    const size_t keep = last ? len - 1 : len;
    kv_.commit_prefix(0, static_cast<int>(keep));
    cached_.insert(cached_.end(), context.begin() + start, context.begin() + start + keep);
    start += len;
  }
  return Status();
}

std::vector<DraftModelDrafter::Candidate> DraftModelDrafter::top_candidates(
    const float* logits) const {
  const int k = std::max(1, options_.max_children);
  std::vector<Candidate> top;  // the k largest logits, best first
  float max_logit = -INFINITY;
  for (int32_t id = 0; id < n_tokens_; ++id) max_logit = std::max(max_logit, logits[id]);
  double sum = 0;
  for (int32_t id = 0; id < n_tokens_; ++id) {
    const float l = logits[id];
    sum += std::exp(static_cast<double>(l - max_logit));
    if (static_cast<int>(top.size()) < k || l > top.back().prob) {
      // Ties keep the lower id first, as greedy sampling does.
      auto at =
          std::find_if(top.begin(), top.end(), [&](const Candidate& c) { return l > c.prob; });
      top.insert(at, {id, l});
      if (static_cast<int>(top.size()) > k) top.pop_back();
    }
  }
  for (Candidate& c : top) c.prob = static_cast<float>(std::exp(c.prob - max_logit) / sum);
  return top;
}

DraftTree DraftModelDrafter::to_dfs(std::vector<int32_t>& dfs_of) const {
  // grow_ is in level order with parents first; children lists keep that (best-first) order.
  std::vector<std::vector<int32_t>> children(grow_.size() + 1);  // [0] = the root's
  for (size_t i = 0; i < grow_.size(); ++i) {
    children[grow_[i].parent + 1].push_back(static_cast<int32_t>(i));
  }
  DraftTree tree;
  dfs_of.assign(grow_.size(), -1);
  std::vector<int32_t> stack(children[0].rbegin(), children[0].rend());
  while (!stack.empty()) {
    const int32_t i = stack.back();
    stack.pop_back();
    const int32_t parent = grow_[i].parent < 0 ? -1 : dfs_of[grow_[i].parent];
    dfs_of[i] = tree.add(parent, grow_[i].token);
    stack.insert(stack.end(), children[i + 1].rbegin(), children[i + 1].rend());
  }
  return tree;
}

DraftTree DraftModelDrafter::propose(std::span<const int32_t> context, int budget, int max_depth) {
  grow_.clear();
  const int n_committed = static_cast<int>(context.size()) - 1;  // the draft cache's length
  // The root and every tree row sit behind the committed context in the draft cache.
  budget = std::min(budget, kv_.capacity() - n_committed - 1);
  max_depth = std::min(max_depth, budget);
  if (context.empty() || max_depth <= 0) return DraftTree();
  // A failed draft forward only loses the draft; the target decodes on without one.
  if (!sync(context).ok()) {
    cached_.clear();
    kv_.clear(0);
    return DraftTree();
  }
  const int32_t n_vocab = model_.config().n_vocab;
  // The nodes whose children the next level chooses from, with their logits rows.
  std::vector<int32_t> frontier = {-1};
  std::vector<const float*> frontier_logits = {logits_.data()};
  std::vector<GrowNode> candidates;
  std::vector<int32_t> dfs_of;
  for (int depth = 1; depth <= max_depth; ++depth) {
    candidates.clear();
    for (size_t f = 0; f < frontier.size(); ++f) {
      const double parent_prob = frontier[f] < 0 ? 1.0 : grow_[frontier[f]].path_prob;
      const std::vector<Candidate> top = top_candidates(frontier_logits[f]);
      for (size_t c = 0; c < top.size(); ++c) {
        if (c > 0 &&
            (top[0].prob >= options_.branch_below || top[c].prob < options_.min_child_prob)) {
          break;
        }
        candidates.push_back({top[c].token, frontier[f], depth, parent_prob * top[c].prob});
      }
    }
    std::stable_sort(
        candidates.begin(), candidates.end(),
        [](const GrowNode& a, const GrowNode& b) { return a.path_prob > b.path_prob; });
    const int room = std::min(options_.level_width, budget - static_cast<int>(grow_.size()));
    frontier.clear();
    for (const GrowNode& c : candidates) {
      if (static_cast<int>(frontier.size()) == room || c.path_prob < options_.min_path_prob) break;
      frontier.push_back(static_cast<int32_t>(grow_.size()));
      grow_.push_back(c);
    }
    if (frontier.empty() || depth == max_depth || static_cast<int>(grow_.size()) >= budget) break;

    // One pass over the root and the whole tree so far; logits for the new level only.
    const DraftTree tree = to_dfs(dfs_of);
    batch_.clear();
    append_draft_rows(tree, context.back(), n_committed, /*seq_id=*/0, batch_);
    std::fill(batch_.want_logits.begin(), batch_.want_logits.end(), 0);
    for (int32_t i : frontier) batch_.want_logits[1 + dfs_of[i]] = 1;
    if (!model_.forward(pool_, batch_, kv_, logits_).ok()) break;
    // Logits rows come in batch-row order.
    std::vector<int32_t> rows;
    for (int32_t i : frontier) rows.push_back(dfs_of[i]);
    std::sort(rows.begin(), rows.end());
    frontier_logits.clear();
    for (int32_t i : frontier) {
      const size_t k = std::lower_bound(rows.begin(), rows.end(), dfs_of[i]) - rows.begin();
      frontier_logits.push_back(logits_.data() + k * n_vocab);
    }
  }
  return to_dfs(dfs_of);
}

Status check_draft_vocabulary(const Tokenizer& target, const ModelConfig& target_config,
                              const Tokenizer& draft, const ModelConfig& draft_config) {
  const std::string pair =
      "draft model '" + draft_config.name + "' cannot draft for '" + target_config.name + "': ";
  if (draft.n_vocab() != target.n_vocab()) {
    return Status::error(pair + "vocabulary sizes differ (" + std::to_string(draft.n_vocab()) +
                         " vs " + std::to_string(target.n_vocab()) + " tokens)");
  }
  if (draft_config.n_vocab < draft.n_vocab() || target_config.n_vocab < target.n_vocab()) {
    return Status::error(pair + "a model has fewer embedding rows than tokens");
  }
  for (int32_t id = 0; id < target.n_vocab(); ++id) {
    if (draft.token_text(id) != target.token_text(id)) {
      return Status::error(pair + "token " + std::to_string(id) + " differs ('" +
                           draft.token_text(id) + "' vs '" + target.token_text(id) + "')");
    }
  }
  if (draft.bos_id() != target.bos_id() || draft.eos_id() != target.eos_id()) {
    return Status::error(pair + "BOS/EOS ids differ (" + std::to_string(draft.bos_id()) + "/" +
                         std::to_string(draft.eos_id()) + " vs " + std::to_string(target.bos_id()) +
                         "/" + std::to_string(target.eos_id()) + ")");
  }
  return Status();
}

}  // namespace salvo
