#include "speculative/dflash_tree.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <queue>
#include <utility>

namespace salvo {
namespace {

// top_candidates keeps up to this many best ids in one scan (insertion into a sorted list);
// more take a partial sort.
constexpr int kScanTopK = 32;

}  // namespace

Candidates top_candidates(const float* logits, int32_t n_vocab, int32_t n_tokens, int k) {
  Candidates c;
  const int32_t n = std::min(n_vocab, n_tokens);
  if (n <= 0 || k <= 0) return c;
  k = std::min<int>(k, n);
  // Called once per drafted depth over the whole vocabulary (49152-151936 ids), so both passes
  // stay cheap: float exponentials summed in double (a double exp per id was ~0.5 ms a depth
  // on a CPU, a tenth of SmolLM2's one-deep draft), and the k best found in one scan.
  float max_logit = -INFINITY;
  for (int32_t i = 0; i < n_vocab; ++i) max_logit = std::max(max_logit, logits[i]);
  double sum = 0;
  for (int32_t i = 0; i < n_vocab; ++i) sum += std::exp(logits[i] - max_logit);
  const float log_z = max_logit + static_cast<float>(std::log(sum));
  // Best first; ties go to the lower id, so the tree does not depend on the scan's whims.
  std::vector<int32_t> ids;
  if (k <= kScanTopK) {
    ids.reserve(k + 1);
    for (int32_t i = 0; i < n; ++i) {
      if (static_cast<int>(ids.size()) == k && !(logits[i] > logits[ids.back()])) continue;
      size_t at = ids.size();
      while (at > 0 && logits[i] > logits[ids[at - 1]]) --at;
      ids.insert(ids.begin() + at, i);
      if (static_cast<int>(ids.size()) > k) ids.pop_back();
    }
  } else {
    ids.resize(n);
    std::iota(ids.begin(), ids.end(), 0);
    std::partial_sort(ids.begin(), ids.begin() + k, ids.end(), [&](int32_t a, int32_t b) {
      return logits[a] > logits[b] || (logits[a] == logits[b] && a < b);
    });
    ids.resize(k);
  }
  for (int32_t id : ids) {
    c.tokens.push_back(id);
    c.logprobs.push_back(logits[id] - log_z);
  }
  return c;
}

DraftTree chain_tree(std::span<const Candidates> depths, int budget, int max_depth) {
  DraftTree tree;
  int32_t parent = -1;
  const int n = std::min({budget, max_depth, static_cast<int>(depths.size())});
  for (int d = 0; d < n && depths[d].size() > 0; ++d)
    parent = tree.add(parent, depths[d].tokens[0]);
  std::vector<int32_t> order(tree.size());
  std::iota(order.begin(), order.end(), 0);  // a smaller budget: a shorter chain
  tree.set_order(std::move(order));
  return tree;
}

DraftTree best_first_tree(std::span<const Candidates> depths, int budget, int max_depth) {
  return best_first_tree(
      [&](int depth, int32_t, std::span<const int32_t>) {
        return depth - 1 < static_cast<int>(depths.size()) ? depths[depth - 1] : Candidates();
      },
      /*root_token=*/-1, budget, max_depth);
}

DraftTree best_first_tree(const ChildScorer& children, int32_t root_token, int budget,
                          int max_depth) {
  DraftTree tree;
  if (budget <= 0 || max_depth <= 0) return tree;
  struct Grown {
    int32_t token;
    int32_t parent;  // index into grown; -1 = root
    int depth;
    double score;  // cumulative log-probability
    Candidates children;
    std::vector<int32_t> kids;  // indices into grown, best first
  };
  struct Entry {
    double score;
    int32_t parent;  // index into grown; -1 = root
    int rank;        // among the parent's children
    bool operator<(const Entry& o) const {
      // Max-heap on score; ties to the earlier parent and rank, for a deterministic tree.
      if (score != o.score) return score < o.score;
      if (parent != o.parent) return parent > o.parent;
      return rank > o.rank;
    }
  };
  std::vector<Grown> grown;
  const Candidates root_children = children(1, root_token, {});
  std::vector<int32_t> path;  // scratch: a node's tokens from depth 1
  std::priority_queue<Entry> queue;
  if (root_children.size() > 0) queue.push({root_children.logprobs[0], -1, 0});
  std::vector<int32_t> root_kids;
  while (static_cast<int>(grown.size()) < budget && !queue.empty()) {
    const Entry e = queue.top();
    queue.pop();
    // Read what is needed of the parent before growing `grown` (which may move it).
    const Candidates& siblings = e.parent < 0 ? root_children : grown[e.parent].children;
    const int32_t token = siblings.tokens[e.rank];
    const bool more_siblings = e.rank + 1 < static_cast<int>(siblings.size());
    const double next_sibling_score =
        more_siblings ? (e.parent < 0 ? 0.0 : grown[e.parent].score) + siblings.logprobs[e.rank + 1]
                      : 0.0;
    const int depth = e.parent < 0 ? 1 : grown[e.parent].depth + 1;
    const int32_t index = static_cast<int32_t>(grown.size());
    grown.push_back({token, e.parent, depth, e.score, {}, {}});
    (e.parent < 0 ? root_kids : grown[e.parent].kids).push_back(index);
    if (more_siblings) queue.push({next_sibling_score, e.parent, e.rank + 1});
    if (depth < max_depth) {
      path.resize(depth);
      for (int32_t g = index; g >= 0; g = grown[g].parent)
        path[grown[g].depth - 1] = grown[g].token;
      Grown& node = grown[index];
      node.children = children(depth + 1, node.token, path);
      if (node.children.size() > 0) queue.push({node.score + node.children.logprobs[0], index, 0});
    }
  }
  // DFS order: every subtree contiguous.
  std::vector<std::pair<int32_t, int32_t>> stack;  // (grown index, tree parent)
  for (auto it = root_kids.rbegin(); it != root_kids.rend(); ++it) stack.push_back({*it, -1});
  std::vector<int32_t> order;  // the grown index of each node: the queue's order
  while (!stack.empty()) {
    const auto [g, parent] = stack.back();
    stack.pop_back();
    const int32_t node = tree.add(parent, grown[g].token);
    order.push_back(g);
    for (auto it = grown[g].kids.rbegin(); it != grown[g].kids.rend(); ++it) {
      stack.push_back({*it, node});
    }
  }
  tree.set_order(std::move(order));
  return tree;
}

std::vector<int32_t> context_next(const NgramIndex& context, std::span<const int32_t> path) {
  // The most recent earlier occurrences looked at.
  constexpr int kMaxOccurrences = 32;
  const std::vector<int32_t>& tokens = context.tokens();
  std::vector<int32_t> next;
  int32_t suffix[4];  // the last `have` tokens of tokens + path
  const int have = static_cast<int>(std::min<size_t>(4, tokens.size() + path.size()));
  for (int i = 0; i < have; ++i) {
    const size_t back = have - i;  // 1: the last token
    suffix[i] = back <= path.size() ? path[path.size() - back]
                                    : tokens[tokens.size() - (back - path.size())];
  }
  const int32_t last = static_cast<int32_t>(tokens.size()) - 1;  // a continuation lies before it
  for (int n = have; n >= 3 && next.empty(); --n) {
    const std::span<const int32_t> ngram(suffix + have - n, n);
    const std::vector<int32_t>* ends = context.ends(ngram);
    if (ends == nullptr) continue;
    int looked = 0;
    for (auto e = ends->rbegin(); e != ends->rend() && looked < kMaxOccurrences; ++e) {
      if (*e >= last || !context.matches(*e, ngram)) continue;
      ++looked;
      const int32_t t = tokens[*e + 1];
      if (std::find(next.begin(), next.end(), t) == next.end()) next.push_back(t);
    }
  }
  return next;
}

void context_boost(const NgramIndex& context, std::span<const int32_t> path, Candidates& children,
                   float boost) {
  const std::vector<int32_t> next = context_next(context, path);
  if (next.empty()) return;
  for (int32_t t : next) {
    auto it = std::find(children.tokens.begin(), children.tokens.end(), t);
    if (it == children.tokens.end()) {
      children.tokens.push_back(t);
      children.logprobs.push_back(kContextJoined);
    } else {
      float& lp = children.logprobs[it - children.tokens.begin()];
      lp = std::min(0.0f, lp + boost);
    }
  }
  sort_best_first(children);
}

void sort_best_first(Candidates& c) {
  std::vector<size_t> order(c.size());
  std::iota(order.begin(), order.end(), size_t{0});
  std::stable_sort(order.begin(), order.end(),
                   [&](size_t a, size_t b) { return c.logprobs[a] > c.logprobs[b]; });
  Candidates sorted;
  for (size_t i : order) {
    sorted.tokens.push_back(c.tokens[i]);
    sorted.logprobs.push_back(c.logprobs[i]);
  }
  c = std::move(sorted);
}

}  // namespace salvo
