// TokenBatch: the one input of every forward pass — prefill, one-token decode, chain and tree
// verification, several sequences at once. A chain is a tree with one child per node; plain
// decoding is a tree of one node.
//
// All rows of a batch are uncommitted: their K/V go to the suffix region of their sequence's
// cache, in batch order. Row k is visible to row q (same sequence) iff
// k <= q <= subtree_end[k], i.e. k is q itself or an ancestor of q in DFS order. Every committed
// row of the sequence is visible to every row of that sequence.
#pragma once

#include <cstdint>
#include <vector>

namespace salvo {

struct TokenBatch {
  std::vector<int32_t> tokens;
  std::vector<int32_t> positions;    // absolute: committed length + depth in the tree
  std::vector<int32_t> seq_ids;      // which sequence (session slot) the row belongs to
  std::vector<int32_t> parents;      // batch row of the parent; -1 = the last committed token
  std::vector<int32_t> subtree_end;  // last batch row of this row's subtree (DFS order)
  std::vector<uint8_t> want_logits;  // rows whose logits the caller reads
  // Target blocks whose outputs (the residual stream after block l, before the final norm) the
  // caller reads for every row, e.g. a DFlash drafter's features: [n, size * n_embd], in this
  // order. Empty: none.
  std::vector<int32_t> hidden_layers;

  int32_t size() const { return static_cast<int32_t>(tokens.size()); }
  bool empty() const { return tokens.empty(); }
  void clear() {
    tokens.clear();
    positions.clear();
    seq_ids.clear();
    parents.clear();
    subtree_end.clear();
    want_logits.clear();
    hidden_layers.clear();
  }

  // Appends a chain of tokens for one sequence starting at absolute position `start`:
  // each row's parent is the previous row, and every row's subtree runs to the chain's end.
  void add_chain(const int32_t* ids, int32_t n, int32_t start, int32_t seq_id,
                 bool logits_last_only) {
    const int32_t first = size();
    for (int32_t i = 0; i < n; ++i) {
      tokens.push_back(ids[i]);
      positions.push_back(start + i);
      seq_ids.push_back(seq_id);
      parents.push_back(i == 0 ? -1 : first + i - 1);
      subtree_end.push_back(first + n - 1);
      want_logits.push_back(!logits_last_only || i == n - 1);
    }
  }

  int32_t n_logit_rows() const {
    int32_t n = 0;
    for (uint8_t w : want_logits) n += w;
    return n;
  }
};

}  // namespace salvo
