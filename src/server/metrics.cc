#include "server/metrics.h"

#include <fmt/format.h>

#include <algorithm>

namespace salvo::server {
namespace {

std::vector<double> latency_bounds() {
  return {0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300};
}

void write_histogram(std::string& out, const std::string& name, const std::string& help,
                     const Histogram& h) {
  out += fmt::format("# HELP {} {}\n# TYPE {} histogram\n", name, help, name);
  uint64_t cumulative = 0;
  for (size_t i = 0; i < h.bounds.size(); ++i) {
    cumulative += h.counts[i];
    out += fmt::format("{}_bucket{{le=\"{}\"}} {}\n", name, h.bounds[i], cumulative);
  }
  out += fmt::format("{}_bucket{{le=\"+Inf\"}} {}\n{}_sum {}\n{}_count {}\n", name, h.count, name,
                     h.sum, name, h.count);
}

void write_scalar(std::string& out, const std::string& name, const std::string& type,
                  const std::string& help, double value) {
  out += fmt::format("# HELP {} {}\n# TYPE {} {}\n{} {}\n", name, help, name, type, name, value);
}

// A label value in the text format: backslash, double quote and newline escaped.
std::string label_value(const std::string& s) {
  std::string out;
  for (char c : s) {
    if (c == '\\' || c == '"') out += '\\';
    out += c == '\n' ? std::string("\\n") : std::string(1, c);
  }
  return out;
}

}  // namespace

Histogram::Histogram(std::vector<double> b) : bounds(std::move(b)), counts(bounds.size(), 0) {}

void Histogram::observe(double value) {
  const auto it = std::lower_bound(bounds.begin(), bounds.end(), value);
  if (it != bounds.end()) ++counts[it - bounds.begin()];
  ++count;
  sum += value;
}

Metrics::Metrics() : latency_(latency_bounds()), ttft_(latency_bounds()) {}

void Metrics::record_response(int status) {
  std::lock_guard lock(mu_);
  ++responses_[status];
}

void Metrics::record_pass(int rows, int sequences) {
  std::lock_guard lock(mu_);
  ++forward_passes_;
  batch_rows_ += rows;
  batch_sequences_ += sequences;
}

void Metrics::record_request(const GenerationStats& stats, double latency_s) {
  std::lock_guard lock(mu_);
  ++requests_;
  prompt_tokens_ += stats.prompt_tokens;
  cached_prompt_tokens_ += stats.cached_prompt_tokens;
  generated_tokens_ += stats.generated_tokens;
  sequence_passes_ += stats.forward_passes;
  drafted_ += stats.drafted_nodes;
  accepted_ += stats.accepted_draft_tokens;
  latency_.observe(latency_s);
  if (stats.generated_tokens > 0) ttft_.observe(stats.ttft_ms / 1000.0);
}

void Metrics::set_queue(int waiting, int active_slots) {
  std::lock_guard lock(mu_);
  waiting_ = waiting;
  active_ = active_slots;
}

void Metrics::set_speculation(std::string mode, std::string drafter) {
  std::lock_guard lock(mu_);
  spec_mode_ = std::move(mode);
  drafter_ = std::move(drafter);
}

std::string Metrics::prometheus() const {
  std::lock_guard lock(mu_);
  std::string out;
  if (!spec_mode_.empty()) {
    out += fmt::format(
        "# HELP salvo_speculation_info Speculative decoding: the --spec mode and what drafts.\n"
        "# TYPE salvo_speculation_info gauge\n"
        "salvo_speculation_info{{mode=\"{}\",drafter=\"{}\"}} 1\n",
        label_value(spec_mode_), label_value(drafter_));
  }
  out +=
      "# HELP salvo_http_responses_total HTTP responses by status code.\n"
      "# TYPE salvo_http_responses_total counter\n";
  for (const auto& [status, n] : responses_) {
    out += fmt::format("salvo_http_responses_total{{code=\"{}\"}} {}\n", status, n);
  }
  write_scalar(out, "salvo_requests_total", "counter", "Generation requests finished.", requests_);
  write_scalar(out, "salvo_prompt_tokens_total", "counter", "Prompt tokens of finished requests.",
               prompt_tokens_);
  write_scalar(out, "salvo_cached_prompt_tokens_total", "counter",
               "Prompt tokens reused from a slot's KV cache.", cached_prompt_tokens_);
  write_scalar(out, "salvo_generated_tokens_total", "counter", "Generated tokens.",
               generated_tokens_);
  write_scalar(out, "salvo_forward_passes_total", "counter",
               "Forward passes of the model (each may serve several requests).", forward_passes_);
  write_scalar(out, "salvo_batch_rows_total", "counter", "Rows over all forward passes.",
               batch_rows_);
  write_scalar(out, "salvo_batch_sequences_total", "counter",
               "Sequences over all forward passes (average batch = this / passes).",
               batch_sequences_);
  write_scalar(
      out, "salvo_tokens_per_pass", "gauge",
      "Generated tokens per forward pass of a request, over all finished requests.",
      sequence_passes_ > 0 ? static_cast<double>(generated_tokens_) / sequence_passes_ : 0.0);
  write_scalar(out, "salvo_draft_tokens_total", "counter", "Draft tokens verified.", drafted_);
  write_scalar(out, "salvo_draft_tokens_accepted_total", "counter", "Draft tokens accepted.",
               accepted_);
  write_scalar(out, "salvo_draft_acceptance_ratio", "gauge", "Accepted / verified draft tokens.",
               drafted_ > 0 ? static_cast<double>(accepted_) / drafted_ : 0.0);
  write_scalar(out, "salvo_queue_depth", "gauge", "Requests waiting for a slot.", waiting_);
  write_scalar(out, "salvo_active_slots", "gauge", "Slots generating now.", active_);
  write_histogram(out, "salvo_request_duration_seconds",
                  "Time from admission to the last token of a request.", latency_);
  write_histogram(out, "salvo_time_to_first_token_seconds",
                  "Time from a request's start in a slot to its first token.", ttft_);
  return out;
}

}  // namespace salvo::server
