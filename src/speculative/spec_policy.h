// SpecPolicy: whether drafting pays on this backend right now. A pass over k rows costs more
// than a one-row pass (on a CPU a 17-row pass costs 2-2.6x), so a draft is worth verifying
// only while the tokens it yields per unit of time beat plain decoding. The policy measures
// both from the session's own passes and falls back to plain decoding when drafting loses,
// probing again now and then (with growing intervals) in case the text became predictable.
#pragma once

#include <cstdint>

namespace salvo {

class SpecPolicy {
 public:
  // Non-adaptive policies always draft (the explicit --spec modes).
  explicit SpecPolicy(bool adaptive = true) : adaptive_(adaptive) {}

  // Whether the next pass should carry a draft.
  bool should_draft();
  // A finished pass: how many rows it verified, its time, and the tokens it emitted.
  void record(int rows, double pass_ms, int tokens_emitted);

  double plain_ms() const { return plain_ms_; }
  double draft_ms() const { return draft_ms_; }
  double draft_tokens() const { return draft_tokens_; }

 private:
  static constexpr double kAlpha = 0.25;    // EMA weight of the newest pass
  static constexpr double kMargin = 1.05;   // drafting must win by 5% to be kept
  static constexpr int kFirstProbe = 8;     // plain passes before the first re-probe
  static constexpr int kMaxProbeGap = 512;  // longest wait between probes

  bool adaptive_;
  double plain_ms_ = 0;      // EMA of one-row passes (0 = not measured yet)
  double draft_ms_ = 0;      // EMA of drafted passes
  double draft_tokens_ = 0;  // EMA of tokens a drafted pass emits
  bool drafting_ = true;
  int plain_passes_since_probe_ = 0;
  int probe_gap_ = kFirstProbe;
};

}  // namespace salvo
