// DflashRunner: one sequence's DFlash drafter forward (dflash_model.h) on some backend: the
// drafter's context K/V for the committed positions, and a draft pass that yields, per depth, the
// few candidates the tree builders read (top-k with log-probabilities, dflash_tree.h) rather
// than whole logit rows. The CPU runner wraps DflashModel; a device runner (cuda::
// dflash_to_device) keeps the context and the pass on the GPU and returns only those numbers.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "speculative/dflash_model.h"
#include "speculative/dflash_tree.h"
#include "util/status.h"
#include "util/thread_pool.h"

namespace salvo {

class DflashRunner {
 public:
  virtual ~DflashRunner() = default;

  // Positions the context holds.
  virtual int32_t n_positions() const = 0;
  // Positions [first, first + n) from their features ([n, feature_width]): the context is
  // truncated to `first` positions, then extended. first > n_positions() is an error (a gap).
  virtual Status observe(int32_t first, int32_t n, const float* features) = 0;
  // The most candidates per depth draft() gives.
  virtual int max_width() const = 0;
  // Rows of the ranked LM head this runner drafts from (DflashModel::head_ids): n_tokens up to
  // this many mean the n_tokens best-ranked ids; 0 (no ranked head): the ids below n_tokens.
  virtual int32_t ranked_rows() const { return 0; }
  // One draft pass for `root` at position n_positions(). depths[d] gets the `width` most likely
  // of the n_tokens ids drafted from (ranked_rows) for depth d + 1 (d < depth <= B - 1), best
  // first, with their log-probabilities (log-softmax over those ids); ties go to the lower id
  // (the better rank).
  virtual void draft(int32_t root, int depth, int width, int32_t n_tokens,
                     std::vector<Candidates>& depths) = 0;
  // After draft(), with an adapter: its logits of `candidates` (a prefix of depths[depth - 1])
  // given the previous token on the branch (the root for depth 1, else one of depths[depth - 2]'s
  // candidates), one per candidate into `scores`.
  virtual void adapter_scores(int depth, int32_t prev, std::span<const int32_t> candidates,
                              float* scores) = 0;
};

// Where a drafter runs when it does not run on the CPU: makes one runner per sequence. It
// reads the drafter's weights once (uploads them) and must not outlive the target model.
class DflashDevice {
 public:
  virtual ~DflashDevice() = default;
  virtual Expected<std::unique_ptr<DflashRunner>> new_runner() const = 0;
};

// A runner for `model`: on its device when one is attached (DflashModel::set_device), else on
// the CPU with `pool` (which must outlive it).
Expected<std::unique_ptr<DflashRunner>> new_dflash_runner(const DflashModel& model,
                                                          ThreadPool& pool);

}  // namespace salvo
