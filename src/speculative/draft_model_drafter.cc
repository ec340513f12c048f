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
  // The cache may hold draft tokens beyond the last context (a committed trunk, see propose());
  // those the target accepted are reused. The root is always recomputed for its logits.
  size_t common = 0;
  while (common < cached_.size() && common + 1 < context.size() &&
         cached_[common] == context[common]) {
    ++common;
  }
  kv_.truncate(0, static_cast<int>(common));
  cached_.resize(common);
  for (size_t start = common; start < context.size();) {
    const size_t len = std::min<size_t>(options_.prefill_chunk, context.size() - start);
    batch_.clear();
    batch_.add_chain(context.data() + start, static_cast<int32_t>(len), static_cast<int32_t>(start),
                     0, /*logits_last_only=*/true);
    SALVO_RETURN_IF_ERROR(model_.forward(pool_, batch_, kv_, logits_));
    kv_.commit_prefix(0, static_cast<int>(len));
    cached_.insert(cached_.end(), context.begin() + start, context.begin() + start + len);
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

void DraftModelDrafter::append_uncommitted_rows(const DraftTree& tree, int committed_depth,
                                                int32_t root_position) {
  // The committed trunk is nodes [0, committed_depth) in DFS order (one node per level comes
  // first); the rows are the nodes after it, whose parent -1 is the trunk's last node.
  const auto& nodes = tree.nodes();
  const int32_t n_rows = tree.size() - committed_depth;
  batch_.clear();
  for (int32_t r = 0; r < n_rows; ++r) {
    const DraftNode& n = nodes[committed_depth + r];
    batch_.tokens.push_back(n.token);
    batch_.positions.push_back(root_position + n.depth);
    batch_.seq_ids.push_back(0);
    batch_.parents.push_back(n.parent < committed_depth ? -1 : n.parent - committed_depth);
    batch_.subtree_end.push_back(r);
    batch_.want_logits.push_back(0);
  }
  for (int32_t r = n_rows - 1; r > 0; --r) {
    const int32_t parent = batch_.parents[r];
    if (parent >= 0)
      batch_.subtree_end[parent] = std::max(batch_.subtree_end[parent], batch_.subtree_end[r]);
  }
}

void DraftModelDrafter::prepare(std::span<const int32_t> prompt) {
  if (prompt.empty() || static_cast<int32_t>(prompt.size()) >= kv_.capacity()) return;
  // As in propose(): a failed draft forward only loses the draft.
  if (!sync(prompt).ok()) {
    cached_.clear();
    kv_.clear(0);
  }
}

DraftTree DraftModelDrafter::propose(std::span<const int32_t> context, int budget, int max_depth) {
  grow_.clear();
  const int32_t n_context = static_cast<int32_t>(context.size());
  // The context and every tree row must fit the draft cache.
  budget = std::min(budget, kv_.capacity() - n_context);
  max_depth = std::min(max_depth, budget);
  if (context.empty() || max_depth <= 0) return DraftTree();
  // A failed draft forward only loses the draft; the target decodes on without one.
  if (!sync(context).ok()) {
    cached_.clear();
    kv_.clear(0);
    return DraftTree();
  }
  const int32_t n_vocab = model_.config().n_vocab;
  // While the tree is a chain, each level's node is committed to the draft cache after its
  // pass, so the next pass is one row; from the first branching on, each pass recomputes the
  // nodes below the committed trunk (tree rows are never committed next to each other).
  int committed_depth = 0;
  bool chain = true;
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
    chain = chain && frontier.size() == 1;
    if (frontier.empty() || depth == max_depth || static_cast<int>(grow_.size()) >= budget) break;

    const DraftTree tree = to_dfs(dfs_of);
    append_uncommitted_rows(tree, committed_depth, n_context - 1);
    for (int32_t i : frontier) batch_.want_logits[dfs_of[i] - committed_depth] = 1;
    if (!model_.forward(pool_, batch_, kv_, logits_).ok()) break;
    if (chain) {
      kv_.commit_prefix(0, 1);
      cached_.push_back(grow_[frontier[0]].token);
      committed_depth = depth;
    }
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
