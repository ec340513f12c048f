#include "engine/session.h"

#include <algorithm>
#include <chrono>

namespace salvo {

Session::Session(Model& model, const Tokenizer& tokenizer, ThreadPool& pool, int context_size,
                 int prefill_chunk)
    : model_(model),
      pool_(pool),
      kv_(model.config(), 1, context_size),
      prefill_chunk_(std::max(1, prefill_chunk)),
      sequence_(model, tokenizer, kv_, /*seq_id=*/0) {}

Expected<GenerationResult> Session::generate(const GenerateRequest& request,
                                             const TextCallback& on_text) {
  using Clock = std::chrono::steady_clock;
  SALVO_RETURN_IF_ERROR(sequence_.start(request, on_text));
  while (!sequence_.done()) {
    batch_.clear();
    sequence_.add_rows(batch_, prefill_chunk_);
    const auto pass_start = Clock::now();
    // Greedy decoding reads only each row's argmax, top-k sampling its largest logits: a device
    // backend then returns those instead of the logits.
    const LogitsForm form = PassOutput::choose(model_, sequence_.argmax_suffices(),
                                               sequence_.top_logits_suffice(kTopLogits));
    if (const Status st = output_.run(model_, pool_, batch_, kv_, form, &hidden_); !st.ok()) {
      sequence_.abort_pass();
      return st;
    }
    const LogitRows rows = output_.rows(0, output_.n_rows());
    sequence_.finish_pass(
        rows, std::chrono::duration<double, std::milli>(Clock::now() - pass_start).count(),
        batch_.hidden_layers.empty() ? std::span<const float>() : std::span<const float>(hidden_),
        model_.last_pass_was_warmup());
  }
  return sequence_.take_result();
}

}  // namespace salvo
