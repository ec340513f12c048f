// Drafter: proposes a tree of likely continuations of a sequence; the target model verifies the
// whole tree in one forward pass and keeps the path it would have produced itself. A drafter can
// only make decoding faster or slower, never different: correctness does not depend on it.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>

#include "speculative/draft_tree.h"
#include "util/status.h"

namespace salvo {

enum class SpecMode {
  kNone,   // plain decoding: every tree is empty
  kNgram,  // suffix / n-gram lookup over the prompt and the generated text
  // n-gram drafting only on a match of at least two tokens. A stand-in until SpecPolicy sizes
  // trees from measured acceptance and costs.
  kAuto,
  // Adversarial drafters for the equality tests: output must not change whatever they propose.
  kRandom,  // random tree shapes mixing plausible and random tokens, sometimes empty
  kWrong,   // random vocabulary tokens, essentially never accepted
  kDeep,    // one chain as deep as allowed, following the last bigram in the context
};

// Parses "none", "ngram", "auto", and the testing modes "random", "wrong", "deep".
Expected<SpecMode> parse_spec_mode(const std::string& name);
const char* spec_mode_name(SpecMode mode);

struct SpecOptions {
  SpecMode mode = SpecMode::kAuto;  // drafts only while it pays (SpecPolicy)
  int budget = 16;                  // tree nodes per verification pass, not counting the root
  int depth = 8;                    // deepest node below the root

  Status validate() const;
};

class Drafter {
 public:
  virtual ~Drafter() = default;

  // `context`: the whole sequence so far, ending with the root (the last sampled, not yet
  // committed token). Returns continuations after the root: a valid DraftTree of at most
  // `budget` nodes, none deeper than `max_depth`. Consecutive calls usually see the previous
  // context extended, which lets drafters update their state incrementally.
  virtual DraftTree propose(std::span<const int32_t> context, int budget, int max_depth) = 0;
};

// The drafter for `mode` (nullptr for kNone). `seed` makes the testing drafters reproducible.
std::unique_ptr<Drafter> make_drafter(SpecMode mode, int32_t n_vocab, uint64_t seed);

}  // namespace salvo
