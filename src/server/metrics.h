// Server metrics in Prometheus text format. Counters are updated by the scheduler (per pass and
// per finished request) and the HTTP layer (per response); one mutex guards them all, which is
// cheap next to a forward pass.
#pragma once

#include <map>
#include <mutex>
#include <string>
#include <vector>

#include "engine/sequence.h"

namespace salvo::server {

// Cumulative histogram with fixed upper bounds (seconds).
struct Histogram {
  explicit Histogram(std::vector<double> bounds);
  void observe(double value);

  std::vector<double> bounds;
  std::vector<uint64_t> counts;  // per bound, cumulative is computed on output
  uint64_t count = 0;
  double sum = 0;
};

class Metrics {
 public:
  Metrics();

  void record_response(int status);
  void record_pass(int rows, int sequences);
  void record_request(const GenerationStats& stats, double latency_s);
  void set_queue(int waiting, int active_slots);
  // The --spec mode and what drafts (drafter_description), shown as salvo_speculation_info.
  void set_speculation(std::string mode, std::string drafter);

  std::string prometheus() const;

 private:
  mutable std::mutex mu_;
  std::map<int, uint64_t> responses_;  // HTTP status -> count
  uint64_t requests_ = 0, prompt_tokens_ = 0, cached_prompt_tokens_ = 0, generated_tokens_ = 0;
  uint64_t sequence_passes_ = 0;  // forward passes summed over requests (their usage figure)
  uint64_t forward_passes_ = 0, batch_rows_ = 0, batch_sequences_ = 0;
  uint64_t drafted_ = 0, accepted_ = 0;
  int waiting_ = 0, active_ = 0;
  std::string spec_mode_, drafter_;
  Histogram latency_, ttft_;
};

}  // namespace salvo::server
