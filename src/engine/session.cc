#include "engine/session.h"

#include <algorithm>
#include <chrono>

#include "sampling/stop_strings.h"
#include "util/memory.h"

namespace salvo {
namespace {

using Clock = std::chrono::steady_clock;

double ms_since(Clock::time_point start) {
  return std::chrono::duration<double, std::milli>(Clock::now() - start).count();
}

}  // namespace

double GenerationStats::prefill_tokens_per_second() const {
  const int n = prompt_tokens - cached_prompt_tokens;
  return prefill_ms > 0 ? n * 1000.0 / prefill_ms : 0.0;
}

double GenerationStats::decode_tokens_per_second() const {
  return decode_ms > 0 && generated_tokens > 1 ? (generated_tokens - 1) * 1000.0 / decode_ms : 0.0;
}

double GenerationStats::tokens_per_pass() const {
  return forward_passes > 0 ? static_cast<double>(generated_tokens) / forward_passes : 0.0;
}

Session::Session(Model& model, const Tokenizer& tokenizer, ThreadPool& pool, int context_size,
                 int prefill_chunk)
    : model_(model),
      tokenizer_(tokenizer),
      pool_(pool),
      kv_(model.config(), 1, context_size),
      prefill_chunk_(std::max(1, prefill_chunk)) {}

Status Session::prefill(int n_new) {
  const int total = static_cast<int>(history_.size());
  for (int start = total - n_new; start < total; start += prefill_chunk_) {
    const int len = std::min(prefill_chunk_, total - start);
    batch_.clear();
    batch_.add_chain(history_.data() + start, len, start, 0, /*logits_last_only=*/true);
    SALVO_RETURN_IF_ERROR(model_.forward(pool_, batch_, kv_, logits_));
    kv_.commit_prefix(0, len);
  }
  return Status();
}

Expected<GenerationResult> Session::generate(const GenerateRequest& request,
                                             const TextCallback& on_text) {
  const auto start = Clock::now();
  const int n_prompt = static_cast<int>(request.prompt.size());
  if (n_prompt == 0) return Status::error("the prompt is empty");
  if (request.max_tokens < 0) return Status::error("max_tokens must be >= 0");
  if (n_prompt >= context_size()) {
    return Status::error("the prompt has " + std::to_string(n_prompt) +
                         " tokens, which does not fit the context size of " +
                         std::to_string(context_size()) + " (raise --ctx)");
  }
  SALVO_ASSIGN_OR_RETURN(Sampler sampler, Sampler::create(request.sampling, model_.config().n_vocab));

  // Reuse the KV cache of the longest common prefix with the previous turn; at least one prompt
  // token is recomputed so its logits exist.
  size_t common = 0;
  while (common < history_.size() && common < request.prompt.size() - 1 &&
         history_[common] == request.prompt[common]) {
    ++common;
  }
  kv_.truncate(0, static_cast<int>(common));
  history_.assign(request.prompt.begin(), request.prompt.end());

  GenerationResult result;
  GenerationStats& stats = result.stats;
  stats.prompt_tokens = n_prompt;
  stats.cached_prompt_tokens = static_cast<int>(common);
  SALVO_RETURN_IF_ERROR(prefill(n_prompt - static_cast<int>(common)));
  stats.prefill_ms = ms_since(start);
  stats.forward_passes = 1;

  StreamDecoder decoder(tokenizer_, /*render_special=*/false);
  StopStringMatcher stops(request.stop);
  const int max_new = std::min(request.max_tokens, context_size() - n_prompt);
  Clock::time_point first_token_time = start;
  bool cancelled = false;
  auto emit = [&](const std::string& piece) {
    if (piece.empty() || cancelled) return;
    result.text += piece;
    if (on_text && !on_text(piece)) cancelled = true;
  };

  stats.finish_reason = "length";
  for (int i = 0; i < max_new; ++i) {
    const int64_t position = static_cast<int64_t>(history_.size());
    const int32_t token = sampler.sample(logits_, position, history_);
    result.tokens.push_back(token);
    ++stats.generated_tokens;
    if (i == 0) {
      stats.ttft_ms = ms_since(start);
      first_token_time = Clock::now();
    }
    if (!request.ignore_eos && tokenizer_.is_end_of_generation(token)) {
      stats.finish_reason = "stop";
      break;
    }
    const auto matched = stops.feed(decoder.push(token));
    emit(matched.text);
    if (matched.stopped) {
      stats.finish_reason = "stop";
      break;
    }
    if (cancelled) {
      stats.finish_reason = "cancelled";
      break;
    }
    if (i + 1 == max_new) break;  // no logits needed after the last token
    // Decode step: the sampled token becomes a one-row batch.
    history_.push_back(token);
    batch_.clear();
    batch_.add_chain(&token, 1, static_cast<int32_t>(position), 0, /*logits_last_only=*/true);
    SALVO_RETURN_IF_ERROR(model_.forward(pool_, batch_, kv_, logits_));
    kv_.commit_prefix(0, 1);
    ++stats.forward_passes;
  }
  if (!stops.stopped()) emit(stops.feed(decoder.flush()).text + stops.flush());
  if (stats.generated_tokens > 0) stats.decode_ms = std::chrono::duration<double, std::milli>(Clock::now() - first_token_time).count();
  stats.peak_rss_bytes = peak_rss_bytes();
  return result;
}

}  // namespace salvo
