// DflashDrafter: drafts with a DFlash block drafter (dflash_model.h). It keeps the drafter's
// context K/V for the sequence's committed positions, fed by observe() with the target's hidden
// states; each proposal is one draft pass for the root, whose per-depth distributions become a
// tree (dflash_tree.h): a chain, best-first on cumulative log-probability, or best-first with an
// adapter rescoring each node's children given its token.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "speculative/dflash_model.h"
#include "speculative/dflash_tree.h"
#include "speculative/drafter.h"
#include "util/thread_pool.h"

namespace salvo {

class DflashDrafter : public Drafter {
 public:
  // `n_tokens`: ids the drafter may propose. The model and pool must outlive the drafter.
  DflashDrafter(const DflashModel& model, ThreadPool& pool, int32_t n_tokens, SpecTree tree);

  DraftTree propose(std::span<const int32_t> context, int budget, int max_depth) override;
  std::span<const int32_t> hidden_layers() const override { return model_.config().target_layers; }
  void observe(int32_t first, int32_t n, const float* features) override;
  int32_t observed() const override { return state_.n_positions; }

 private:
  const DflashModel& model_;
  ThreadPool& pool_;
  int32_t n_tokens_;
  SpecTree tree_;
  DflashState state_;
  std::vector<float> logits_;
};

}  // namespace salvo
