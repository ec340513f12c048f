#include "speculative/dflash_runner.h"

namespace salvo {
namespace {

class CpuDflashRunner : public DflashRunner {
 public:
  CpuDflashRunner(const DflashModel& model, ThreadPool& pool)
      : model_(model), pool_(pool), state_(model.new_state()) {}

  int32_t n_positions() const override { return state_.n_positions; }
  Status observe(int32_t first, int32_t n, const float* features) override {
    return model_.observe(pool_, state_, first, n, features);
  }
  int max_width() const override { return 1 << 20; }
  int32_t ranked_rows() const override { return model_.ranked_head_rows(); }
  void draft(int32_t root, int depth, int width, int32_t n_tokens,
             std::vector<Candidates>& depths) override {
    model_.draft_block(pool_, state_, root, depth, logits_, n_tokens);
    const int32_t n_vocab = static_cast<int32_t>(logits_.size() / depth);
    const int32_t* ids = model_.head_row_ids(n_tokens);  // column -> id; null: the same
    depths.resize(depth);
    for (int d = 0; d < depth; ++d) {
      depths[d] = top_candidates(logits_.data() + static_cast<size_t>(d) * n_vocab, n_vocab,
                                 n_tokens, width);
      if (ids != nullptr) {
        for (int32_t& t : depths[d].tokens) t = ids[t];
      }
    }
  }
  void adapter_scores(int depth, int32_t prev, std::span<const int32_t> candidates,
                      float* scores) override {
    model_.adapter_scores(state_.y.data() + static_cast<size_t>(depth) * model_.config().n_embd,
                          prev, candidates, scores);
  }

 private:
  const DflashModel& model_;
  ThreadPool& pool_;
  DflashState state_;
  std::vector<float> logits_;
};

}  // namespace

Expected<std::unique_ptr<DflashRunner>> new_dflash_runner(const DflashModel& model,
                                                          ThreadPool& pool) {
  if (model.device() != nullptr) return model.device()->new_runner();
  if (!model.has_cpu_forward()) {
    return Status::error(
        "the DFlash drafter's target runs on another backend and no device "
        "runner was attached to the drafter");
  }
  return std::unique_ptr<DflashRunner>(new CpuDflashRunner(model, pool));
}

}  // namespace salvo
