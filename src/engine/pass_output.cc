#include "engine/pass_output.h"

#include "util/check.h"

namespace salvo {

LogitsForm PassOutput::choose(const Model& model, bool all_argmax, bool all_top) {
  if (all_argmax) return LogitsForm::kArgmax;
  if (all_top && model.selects_top_logits() && model.config().n_vocab >= kTopLogits) {
    return LogitsForm::kTop;
  }
  return LogitsForm::kLogits;
}

Status PassOutput::run(Model& model, ThreadPool& pool, const TokenBatch& batch, KvCache& kv,
                       LogitsForm form, std::vector<float>* hidden) {
  form_ = form;
  n_vocab_ = model.config().n_vocab;
  n_rows_ = 0;
  Status st;
  switch (form) {
    case LogitsForm::kArgmax:
      st = model.forward_argmax(pool, batch, kv, argmax_, hidden);
      break;
    case LogitsForm::kTop:
      st = model.forward_top(pool, batch, kv, kTopLogits, top_ids_, top_values_, hidden);
      break;
    case LogitsForm::kLogits:
      st = model.forward(pool, batch, kv, logits_, hidden);
      break;
  }
  if (st.ok()) n_rows_ = batch.n_logit_rows();
  return st;
}

LogitRows PassOutput::rows(int first, int n) const {
  SALVO_CHECK(first >= 0 && n >= 0 && first + n <= n_rows_);
  switch (form_) {
    case LogitsForm::kArgmax:
      return LogitRows{.argmax = std::span<const int32_t>(argmax_).subspan(first, n)};
    case LogitsForm::kTop: {
      const size_t k = kTopLogits;
      return LogitRows{.top_ids = std::span<const int32_t>(top_ids_).subspan(first * k, n * k),
                       .top_values = std::span<const float>(top_values_).subspan(first * k, n * k),
                       .top_count = kTopLogits};
    }
    case LogitsForm::kLogits:
      break;
  }
  const size_t v = static_cast<size_t>(n_vocab_);
  return LogitRows{.logits = std::span<const float>(logits_).subspan(first * v, n * v)};
}

}  // namespace salvo
