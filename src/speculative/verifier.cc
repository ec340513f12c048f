#include "speculative/verifier.h"

#include "util/check.h"

namespace salvo {

std::vector<int32_t> AcceptResult::tokens(const DraftTree& tree) const {
  std::vector<int32_t> out;
  out.reserve(path.size() + 1);
  for (int32_t node : path) out.push_back(tree.nodes()[node].token);
  out.push_back(bonus_token);
  return out;
}

std::vector<int32_t> AcceptResult::kept_rows() const {
  std::vector<int32_t> rows = {0};
  for (int32_t node : path) rows.push_back(node + 1);
  return rows;
}

AcceptResult Verifier::accept(const DraftTree& tree, const LogitRows& rows, Sampler& sampler,
                              std::vector<int32_t>& history) const {
  const size_t n_rows = static_cast<size_t>(tree.size()) + 1;
  SALVO_CHECK(
      rows.has_logits()    ? rows.logits.size() >= n_rows * static_cast<size_t>(sampler.n_vocab())
      : rows.top_count > 0 ? rows.top_ids.size() >= n_rows * static_cast<size_t>(rows.top_count)
                           : rows.argmax.size() >= n_rows);
  AcceptResult result;
  int32_t node = -1;  // the root
  for (;;) {
    const int32_t token =
        sampler.sample_row(rows, node + 1, static_cast<int64_t>(history.size()), history);
    const int32_t child = tree.find_child(node, token);
    if (child < 0) {
      result.bonus_token = token;
      // In DFS order a node's first child, if any, directly follows it.
      result.rejected_draft = node + 1 < tree.size() && tree.nodes()[node + 1].parent == node;
      return result;
    }
    result.path.push_back(child);
    history.push_back(token);
    node = child;
  }
}

}  // namespace salvo
