// What a forward pass hands back for its logit rows, in the cheapest form every sequence of the
// pass can sample from: argmax ids when all decode greedily; each row's kTopLogits largest
// logits when all sample with top-k below that and the backend selects them where the logits
// are (a device: 2 KB a row cross instead of 600 KB for a 151936-word vocabulary); else the
// logits. Session and the server's scheduler run their passes through it.
#pragma once

#include <cstdint>
#include <vector>

#include "models/kv_cache.h"
#include "models/model.h"
#include "models/token_batch.h"
#include "sampling/sampler.h"
#include "util/status.h"
#include "util/thread_pool.h"

namespace salvo {

enum class LogitsForm { kLogits, kArgmax, kTop };
inline constexpr int kTopLogits = 256;

class PassOutput {
 public:
  // The form for a pass whose sequences all have argmax_suffices() (all_argmax) or all have
  // top_logits_suffice(kTopLogits) (all_top).
  static LogitsForm choose(const Model& model, bool all_argmax, bool all_top);

  Status run(Model& model, ThreadPool& pool, const TokenBatch& batch, KvCache& kv, LogitsForm form,
             std::vector<float>* hidden);
  // Logit rows [first, first + n) of the last pass, in its form.
  LogitRows rows(int first, int n) const;
  // The logit rows of the last pass.
  int n_rows() const { return n_rows_; }

 private:
  LogitsForm form_ = LogitsForm::kLogits;
  int n_rows_ = 0;
  int n_vocab_ = 0;
  std::vector<float> logits_;
  std::vector<int32_t> argmax_;
  std::vector<int32_t> top_ids_;
  std::vector<float> top_values_;
};

}  // namespace salvo
