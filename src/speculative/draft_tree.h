// DraftTree: the candidate continuations a drafter proposes, as a token tree in DFS order.
//
// The tree hangs below a root that is *not* stored here: the root is the last sampled but not
// yet committed token. The verification batch is [root, node 0, node 1, ...], so batch row r
// (relative to the root's row) holds node r - 1, and row 0's logits give the target's choice
// for depth 1.
//
// Invariants (checked by is_valid(), relied on by the batch layout and the verifier):
//   - nodes[i].parent < i, with -1 meaning the root;
//   - DFS order: the parent of node i is node i - 1 or one of its ancestors (or the root), so
//     every subtree occupies a contiguous range of nodes;
//   - depth = parent's depth + 1 (the root has depth 0);
//   - siblings hold distinct tokens (the verifier walks to "the" child holding a token).
#pragma once

#include <cstdint>
#include <vector>

#include "models/token_batch.h"

namespace salvo {

struct DraftNode {
  int32_t token;
  int32_t parent;  // node index; -1 = the root
  int32_t depth;   // >= 1
};

class DraftTree {
 public:
  const std::vector<DraftNode>& nodes() const { return nodes_; }
  int32_t size() const { return static_cast<int32_t>(nodes_.size()); }
  bool empty() const { return nodes_.empty(); }
  int32_t max_depth() const;
  void clear() {
    nodes_.clear();
    order_.clear();
  }

  // Appends a node below `parent` (-1 = root) and returns its index. Keeps the DFS order only
  // if `parent` is the last node or one of its ancestors; is_valid() tells.
  int32_t add(int32_t parent, int32_t token);
  // Appends a chain below `parent`, each token the child of the previous one.
  void add_chain(int32_t parent, const int32_t* tokens, int32_t n);

  // The order in which a drafter that grows its tree one node at a time chose the nodes: node
  // i was the order(i)-th grown, so the first n grown nodes are the tree it proposes for a
  // budget of n nodes (best-first trees and chains nest that way). With it one verified tree
  // tells what every smaller budget would have yielded. has_order(): the drafter set it.
  void set_order(std::vector<int32_t> order);
  bool has_order() const { return !order_.empty(); }
  int32_t order(int32_t node) const { return order_.empty() ? node : order_[node]; }

  // The child of `node` (-1 = root) holding `token`, or -1. Linear in the subtree of `node`.
  int32_t find_child(int32_t node, int32_t token) const;

  bool is_valid() const;

 private:
  std::vector<DraftNode> nodes_;
  std::vector<int32_t> order_;  // empty: none given
};

// Appends the verification rows of one sequence to `batch`: the root token at position
// `committed_len` (parent -1, i.e. the last committed token), then every node at position
// committed_len + depth with its parent's row, subtree_end from the DFS order, and logits wanted
// on every row. Returns the batch row of the root.
int32_t append_draft_rows(const DraftTree& tree, int32_t root_token, int32_t committed_len,
                          int32_t seq_id, TokenBatch& batch);

}  // namespace salvo
