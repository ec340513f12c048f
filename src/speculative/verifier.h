// Verifier: walks a verified DraftTree the way the target model would decode.
//
// At the root, the target's token for the next position is sampled from the root row's logits
// with the position-seeded sampler; if a child holds that token the walk moves there and samples
// again from that node's row at the next position, and so on. The first sampled token with no
// matching child is the bonus token: sampled, emitted, but not yet committed (it becomes the root
// of the next pass). Every token is sampled from (seed, position, logits, history) exactly as
// plain decoding would, so the text is the same as long as a row's logits do not depend on the
// other rows of its batch (row invariance).
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "sampling/sampler.h"
#include "speculative/draft_tree.h"

namespace salvo {

struct AcceptResult {
  std::vector<int32_t> path;  // accepted node indices, from the root's child down
  int32_t bonus_token = -1;
  // True when the walk stopped at a node that had children (a draft was rejected at depth
  // path.size() + 1); false when it ran off the tree's leaves or the tree was empty.
  bool rejected_draft = false;

  // The sampled tokens in order: the accepted path's tokens, then the bonus token.
  std::vector<int32_t> tokens(const DraftTree& tree) const;
  // Verification-batch rows to keep (relative to the root's row): the root and the path.
  std::vector<int32_t> kept_rows() const;
};

// `rows`: [tree.size() + 1] rows (logits, or argmax ids when the sampler's argmax_suffices()),
// the root's row first, then one row per node.
// `history`: the committed tokens followed by the root, so its size is the absolute position of
// the token sampled from the root's row. On return the accepted path's tokens are appended to it
// (it then equals what the KV cache holds after committing kept_rows()); the bonus is not.
class Verifier {
 public:
  AcceptResult accept(const DraftTree& tree, const LogitRows& rows, Sampler& sampler,
                      std::vector<int32_t>& history) const;
  AcceptResult accept(const DraftTree& tree, std::span<const float> logits, Sampler& sampler,
                      std::vector<int32_t>& history) const {
    return accept(tree, LogitRows{.logits = logits, .argmax = {}}, sampler, history);
  }
};

}  // namespace salvo
