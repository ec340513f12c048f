#include "speculative/spec_policy.h"

#include <algorithm>

namespace salvo {
namespace {

double ema(double old_value, double sample, double alpha) {
  return old_value == 0 ? sample : old_value + alpha * (sample - old_value);
}

}  // namespace

bool SpecPolicy::should_draft() {
  if (!adaptive_ || drafting_) return true;
  if (++plain_passes_since_probe_ < probe_gap_) return false;
  // Probe: one drafted pass refreshes the estimates; record() decides whether to stay.
  plain_passes_since_probe_ = 0;
  probe_gap_ = std::min(2 * probe_gap_, kMaxProbeGap);
  return true;
}

void SpecPolicy::record(int rows, double pass_ms, int tokens_emitted) {
  if (!adaptive_) return;
  if (rows <= 1) {
    plain_ms_ = ema(plain_ms_, pass_ms, kAlpha);
    return;
  }
  draft_ms_ = ema(draft_ms_, pass_ms, kAlpha);
  draft_tokens_ = ema(draft_tokens_, tokens_emitted, kAlpha);
  if (plain_ms_ == 0) return;  // nothing to compare with yet: keep drafting
  // Tokens per millisecond, drafted against plain.
  const bool pays = draft_tokens_ / draft_ms_ > kMargin / plain_ms_;
  if (pays && !drafting_) probe_gap_ = kFirstProbe;
  drafting_ = pays;
}

}  // namespace salvo
