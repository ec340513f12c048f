// Drafter: proposes a tree of likely continuations of a sequence; the target model verifies the
// whole tree in one forward pass and keeps the path it would have produced itself. A drafter can
// only make decoding faster or slower, never different: correctness does not depend on it.
#pragma once

#include <climits>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <utility>

#include "models/model.h"
#include "speculative/draft_tree.h"
#include "util/status.h"
#include "util/thread_pool.h"

namespace salvo {

enum class SpecMode {
  kNone,   // plain decoding: every tree is empty
  kNgram,  // suffix / n-gram lookup over the prompt and the generated text
  kDraft,  // a smaller model with the same vocabulary (--draft-model)
  // The draft model when there is one, else n-gram drafting on matches of at least two tokens;
  // SpecPolicy sizes the trees from measured acceptance and costs and drafts only while it pays.
  kAuto,
  // A DFlash block drafter (drafters/<model>/ or --drafter): a few layers on the target's
  // hidden states draft a whole block in one pass; a tree is built from its distributions.
  kDflash,
  // Adversarial drafters for the equality tests: output must not change whatever they propose.
  kRandom,  // random tree shapes mixing plausible and random tokens, sometimes empty
  kWrong,   // random vocabulary tokens, essentially never accepted
  kDeep,    // one chain as deep as allowed, following the last bigram in the context
};

// Whether `mode` drafts with a DFlash drafter found for the model (drafters/<model>/): --spec
// dflash, and auto unless a draft model was named (auto drafts with that one instead).
inline bool uses_found_drafter(SpecMode mode, bool has_draft_model) {
  return mode == SpecMode::kDflash || (mode == SpecMode::kAuto && !has_draft_model);
}

// Parses "none", "ngram", "draft", "auto", "dflash", and the testing modes "random", "wrong",
// "deep".
Expected<SpecMode> parse_spec_mode(const std::string& name);
const char* spec_mode_name(SpecMode mode);

// How a DFlash drafter turns its per-depth distributions into a tree (--spec-tree).
enum class SpecTree {
  kAuto,     // adapter when the drafter has one, else best
  kBest,     // best-first on cumulative marginal log-probability
  kAdapter,  // best-first with children rescored by the adapter given the parent's token
  kChain,    // each depth's most likely token
};
Expected<SpecTree> parse_spec_tree(const std::string& name);
const char* spec_tree_name(SpecTree tree);

// --spec-vocab's help (salvo run and salvo-serve).
inline constexpr char kSpecVocabHelp[] =
    "DFlash: draft only N token ids, the frequent ones: the N best-ranked where the drafter ships "
    "token ranks and N <= 65536, else the ids below N (0: all; default: 32768 ranked or below "
    "65536 for trees under 48 nodes, 65536 ranked or all for larger ones; --json says -1)";

struct SpecOptions {
  // budget / depth: the drafter's own caps (Drafter::default_caps).
  static constexpr int kDrafterCaps = -1;
  SpecMode mode = SpecMode::kAuto;  // drafts only while it pays (SpecPolicy)
  int budget = kDrafterCaps;        // tree nodes per verification pass, not counting the root
  int depth = kDrafterCaps;         // deepest node below the root
  SpecTree tree = SpecTree::kAuto;  // DFlash only
  // DFlash only: the ids the drafter may propose. Its LM head, the costliest part of a draft
  // (15 rows x 151936 x 1536 for Qwen2.5), computes only their rows. N > 0: ids below N; 0: the
  // whole vocabulary; kVocabByTree: ids below DflashDrafter::kFrequentIds for trees under
  // DflashDrafter::kLargeTree nodes, every id for larger trees, whose verification
  // passes dwarf the head's extra rows. Byte-level BPE ids follow merge order, so the low ids
  // are the frequent tokens: ids below 65536 are 97.7% of Qwen2.5's tokens on code and 97.5%
  // on prose (measured on Python stdlib sources and /usr/share/doc); a rarer token is simply
  // never drafted. A drafter that ships token ranks (draft_vocab.h) drafts its best-ranked ids
  // instead: N <= 65536 the N best-ranked, kVocabByTree 32768 of them for small trees and 65536
  // for large ones (CPU and CUDA alike).
  static constexpr int32_t kVocabByTree = -1;
  int32_t vocab = kVocabByTree;

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
  // What drafts, for statistics ("draft model Qwen2.5 ...", "n-gram lookup").
  virtual std::string name() const = 0;
  // The tree caps where the request names none (SpecOptions::kDrafterCaps): {budget, depth}.
  virtual std::pair<int, int> default_caps() const { return {16, 8}; }
  // Whether one pass of the drafter gives every depth (a DFlash block pass), so that a deeper
  // tree costs it about as much as a shallow one; otherwise it runs once per level (a draft
  // model). SpecPolicy then sizes its trees by node budget (SpecPolicy's budget trees).
  virtual bool drafts_all_depths_at_once() const { return false; }

  // Drafters conditioned on the target's hidden states (DFlash): the target blocks whose
  // outputs they read. The Sequence then asks every pass for them and calls observe() with
  // the committed rows: the prompt rows after each prefill chunk, the root and the accepted
  // path after each verification.
  virtual std::span<const int32_t> hidden_layers() const { return {}; }
  // Features of committed positions [first, first + n): [n, hidden_layers().size() * n_embd].
  // What the drafter held from `first` on is replaced.
  virtual void observe(int32_t first, int32_t n, const float* features) {}
  // How many leading positions the drafter holds features for (a cached prompt prefix is
  // reused only that far).
  virtual int32_t observed() const { return INT32_MAX; }

  // Called once a prompt is prefilled, with the prompt. A drafter with state of its own (a draft
  // model's KV cache) builds it here, as part of prompt processing: otherwise the first drafted
  // pass would carry it, and a policy deciding whether drafting pays would weigh a one-time
  // prefill against one pass.
  virtual void prepare(std::span<const int32_t> /*prompt*/) {}
};

class DflashModel;

// What drafters may need besides the mode.
struct DrafterResources {
  int32_t n_vocab = 0;                  // ids the drafters may propose (the tokenizer's vocabulary)
  uint64_t seed = 0;                    // makes the testing drafters reproducible
  Model* draft_model = nullptr;         // for kDraft (required) and kAuto (optional)
  ThreadPool* pool = nullptr;           // runs the draft model
  int context_size = 4096;              // of the session: the draft model's cache matches it
  const DflashModel* dflash = nullptr;  // for kDflash (required) and kAuto (preferred)
  SpecTree tree = SpecTree::kAuto;
  int32_t dflash_vocab = 0;  // SpecOptions::vocab (0: the whole vocabulary)
};

// The drafter for `mode` (nullptr for kNone). kDraft without a draft model is an error.
Expected<std::unique_ptr<Drafter>> make_drafter(SpecMode mode, const DrafterResources& resources);

// What make_drafter drafts with in `mode`, given what was loaded: "none", "ngram", "draft model
// <name>", "dflash <dir>", or the testing mode's name (for statistics and the server's metrics).
std::string drafter_description(SpecMode mode, const DflashModel* dflash, const Model* draft_model);

}  // namespace salvo
