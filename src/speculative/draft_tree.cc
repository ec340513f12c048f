#include "speculative/draft_tree.h"

#include <algorithm>
#include <utility>

#include "util/check.h"

namespace salvo {

int32_t DraftTree::max_depth() const {
  int32_t depth = 0;
  for (const DraftNode& n : nodes_) depth = std::max(depth, n.depth);
  return depth;
}

int32_t DraftTree::add(int32_t parent, int32_t token) {
  SALVO_CHECK(parent >= -1 && parent < size());
  const int32_t depth = parent < 0 ? 1 : nodes_[parent].depth + 1;
  nodes_.push_back({token, parent, depth});
  order_.clear();  // a tree changed after its order was given has none
  return size() - 1;
}

void DraftTree::set_order(std::vector<int32_t> order) {
  SALVO_CHECK(order.size() == nodes_.size());
  order_ = std::move(order);
}

void DraftTree::add_chain(int32_t parent, const int32_t* tokens, int32_t n) {
  for (int32_t i = 0; i < n; ++i) parent = add(parent, tokens[i]);
}

int32_t DraftTree::find_child(int32_t node, int32_t token) const {
  const int32_t depth = node < 0 ? 0 : nodes_[node].depth;
  // In DFS order the subtree of `node` is the run of following nodes deeper than it.
  for (int32_t i = node + 1; i < size() && nodes_[i].depth > depth; ++i) {
    if (nodes_[i].parent == node && nodes_[i].token == token) return i;
  }
  return -1;
}

bool DraftTree::is_valid() const {
  // `path` is the ancestor chain of the previous node (root first); a node in DFS order must
  // hang below some node on that chain.
  std::vector<int32_t> path = {-1};
  for (int32_t i = 0; i < size(); ++i) {
    const DraftNode& n = nodes_[i];
    if (n.parent < -1 || n.parent >= i) return false;
    while (!path.empty() && path.back() != n.parent) path.pop_back();
    if (path.empty()) return false;
    if (n.depth != static_cast<int32_t>(path.size())) return false;
    if (find_child(n.parent, n.token) != i) return false;  // an earlier sibling has the token
    path.push_back(i);
  }
  return true;
}

int32_t append_draft_rows(const DraftTree& tree, int32_t root_token, int32_t committed_len,
                          int32_t seq_id, TokenBatch& batch) {
  SALVO_DCHECK(tree.is_valid());
  const int32_t root_row = batch.size();
  const int32_t n_rows = tree.size() + 1;
  batch.tokens.push_back(root_token);
  batch.positions.push_back(committed_len);
  batch.parents.push_back(-1);
  for (const DraftNode& n : tree.nodes()) {
    batch.tokens.push_back(n.token);
    batch.positions.push_back(committed_len + n.depth);
    batch.parents.push_back(root_row + 1 + n.parent);
  }
  // A row's subtree ends at its last descendant; children follow their parents in DFS order, so
  // one backward sweep propagates every descendant's end up to its ancestors.
  const size_t end_begin = batch.subtree_end.size();
  for (int32_t r = 0; r < n_rows; ++r) batch.subtree_end.push_back(root_row + r);
  for (int32_t r = n_rows - 1; r > 0; --r) {
    const int32_t parent = batch.parents[root_row + r] - root_row;
    int32_t& end = batch.subtree_end[end_begin + parent];
    end = std::max(end, batch.subtree_end[end_begin + r]);
  }
  batch.seq_ids.insert(batch.seq_ids.end(), n_rows, seq_id);
  batch.want_logits.insert(batch.want_logits.end(), n_rows, 1);
  return root_row;
}

}  // namespace salvo
