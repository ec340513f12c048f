// Writes what a DFlash drafter proposes at every position of known greedy texts, for offline
// studies of tree construction (bench/dflash_replay.py): in greedy decoding the text does not
// depend on the trees, and the drafter's pass at a position depends only on the text before it,
// so one pass per position gives every pass any tree policy would run.
//
//   dflash_replay_dump MODEL DRAFTER SEQUENCES OUT [K [BUDGET [DEVICE]]]
//
// DEVICE: cpu (the default) or cuda: the target and the drafter run where `salvo run --device`
// puts them, so a device's candidates can be set beside the CPU's on the same texts.
// SEQUENCES: one text a line, "n_prompt id id ..." (the prompt's ids, then the answer's).
// For each text the target runs once over the whole of it for its hidden states; then, for
// every root position p from n_prompt - 1 to the second-to-last, the drafter (holding positions
// [0, p)) drafts D = B-1 depths, or with BUDGET as deep as the engine drafts for BUDGET-node
// trees (a pass of fewer than DflashConfig::kShortBlock depths runs a shorter block, so its
// candidates differ); the depths not drafted hold id -1.
//
// OUT: a header of int32 [D, K, has_adapter, BUDGET]; then per position int32 [text, p, root,
// reached], where `reached` (BUDGET > 0, else -1) is how deep the text runs down the tree that
// DflashDrafter itself proposes there (adapter trees of BUDGET nodes, as --spec dflash
// --spec-tree adapter builds them), so that the replay's trees can be checked against the
// engine's; then int32 tokens [D][K] and float32 log-probabilities [D][K] (each depth's K best,
// as top_candidates gives them); then float32 adapter scores [D][K][K]: [d][i][j] scores depth
// d+1's candidate j given parent i (the root for d = 0, where every i holds the same row; else
// depth d's candidate i). All little-endian.
#include <algorithm>
#include <cstdio>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "backends/cuda/cuda_backend.h"
#include "engine/engine.h"
#include "models/kv_cache.h"
#include "models/model.h"
#include "models/token_batch.h"
#include "speculative/dflash_drafter.h"
#include "speculative/dflash_model.h"
#include "speculative/dflash_runner.h"
#include "util/thread_pool.h"

namespace {

using namespace salvo;

int fail(const std::string& what) {
  std::fprintf(stderr, "dflash_replay_dump: %s\n", what.c_str());
  return 2;
}

template <typename T>
void put(std::FILE* f, const T* data, size_t n) {
  std::fwrite(data, sizeof(T), n, f);
}

// How deep the text after position p runs down the tree.
int32_t depth_reached(const DraftTree& tree, const std::vector<int32_t>& ids, int32_t p) {
  int32_t at = -1, depth = 0;
  for (;;) {
    if (p + depth + 1 >= static_cast<int32_t>(ids.size())) return depth;
    const int32_t next = tree.find_child(at, ids[p + depth + 1]);
    if (next < 0) return depth;
    at = next;
    ++depth;
  }
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 5) return fail("usage: dflash_replay_dump MODEL DRAFTER SEQUENCES OUT [K [BUDGET]]");
  const int K = argc > 5 ? std::atoi(argv[5]) : 16;
  const int budget = argc > 6 ? std::atoi(argv[6]) : 0;
  if (K <= 0 || K > 256) return fail("K must be in [1, 256]");
  if (budget < 0 || budget > 1024) return fail("BUDGET must be in [0, 1024]");
  // The depths drafted: as deep as the engine drafts for BUDGET-node trees (a shallower pass runs
  // a shorter block, DflashConfig::block_rows, so its candidates differ), all B-1 without one.
  const std::string device = argc > 7 ? argv[7] : "cpu";
  if (device != "cpu" && device != "cuda") return fail("DEVICE must be cpu or cuda");
  auto model = load_model(argv[1]);
  if (!model.ok()) return fail(model.status().message());
  if (device == "cuda") {
    model = cuda::to_device(std::move(*model));
    if (!model.ok()) return fail(model.status().message());
  }
  Model& target = **model;
  auto drafter = DflashModel::load(argv[2], target);
  if (!drafter.ok()) return fail(drafter.status().message());
  if (device == "cuda") {
    auto placed = cuda::dflash_to_device(**drafter, target);
    if (!placed.ok()) return fail(placed.status().message());
    (*drafter)->set_device(std::move(*placed));
  }
  const DflashModel& d = **drafter;
  const DflashConfig& c = d.config();
  const int D = c.max_depth();
  const int depth = budget > 0 ? std::min(D, budget) : D;
  const int32_t n_vocab = target.config().n_vocab;
  ThreadPool pool(default_thread_count());

  std::ifstream in(argv[3]);
  if (!in) return fail(std::string("cannot read ") + argv[3]);
  std::FILE* out = std::fopen(argv[4], "wb");
  if (out == nullptr) return fail(std::string("cannot write ") + argv[4]);
  const int32_t header[4] = {D, K, d.has_adapter() ? 1 : 0, budget};
  put(out, header, 4);

  std::string line;
  std::vector<Candidates> depths;
  std::vector<int32_t> tokens_kk(static_cast<size_t>(D) * K);
  std::vector<float> lps(static_cast<size_t>(D) * K), scores(static_cast<size_t>(D) * K * K);
  for (int32_t text = 0; std::getline(in, line); ++text) {
    std::istringstream words(line);
    int32_t n_prompt = 0;
    words >> n_prompt;
    std::vector<int32_t> ids;
    for (int32_t t; words >> t;) ids.push_back(t);
    const int32_t T = static_cast<int32_t>(ids.size());
    if (n_prompt < 1 || n_prompt >= T)
      return fail("line " + std::to_string(text + 1) + ": bad n_prompt");

    KvCache kv(target.config(), 1, T);
    TokenBatch batch;
    batch.add_chain(ids.data(), T, 0, 0, /*logits_last_only=*/true);
    batch.hidden_layers = c.target_layers;
    std::vector<float> logits, hidden;
    Status st = target.forward(pool, batch, kv, logits, &hidden);
    if (!st.ok()) return fail(st.message());

    auto runner = new_dflash_runner(d, pool);
    if (!runner.ok()) return fail(runner.status().message());
    DflashRunner& r = **runner;
    const size_t fw = c.feature_width();
    st = r.observe(0, n_prompt - 1, hidden.data());
    if (!st.ok()) return fail(st.message());
    // The engine's own drafter, on a runner of its own, for the check column. Both draft every
    // id: the engine's default drafts only ids below 65536 for trees under 48 nodes, which
    // dflash_replay.py replays from this dump with --vocab (-1: that default).
    std::unique_ptr<DflashDrafter> engine;
    if (budget > 0) {
      auto own = new_dflash_runner(d, pool);
      if (!own.ok()) return fail(own.status().message());
      engine = std::make_unique<DflashDrafter>(d, std::move(*own), n_vocab, SpecTree::kAdapter);
      engine->observe(0, n_prompt - 1, hidden.data());
    }
    for (int32_t p = n_prompt - 1; p + 1 < T; ++p) {
      if (p > r.n_positions()) {
        st = r.observe(p - 1, 1, hidden.data() + static_cast<size_t>(p - 1) * fw);
        if (!st.ok()) return fail(st.message());
        if (engine) engine->observe(p - 1, 1, hidden.data() + static_cast<size_t>(p - 1) * fw);
      }
      int32_t reached = -1;
      if (engine) {
        const DraftTree tree =
            engine->propose(std::span<const int32_t>(ids.data(), p + 1), budget, D);
        reached = depth_reached(tree, ids, p);
      }
      const int32_t root = ids[p];
      r.draft(root, depth, std::min(K, r.max_width()), n_vocab, depths);
      std::fill(tokens_kk.begin(), tokens_kk.end(), -1);
      std::fill(lps.begin(), lps.end(), -1e30f);
      std::fill(scores.begin(), scores.end(), 0.0f);
      for (int dd = 0; dd < depth; ++dd) {
        const Candidates& cd = depths[dd];
        for (size_t j = 0; j < cd.size() && j < static_cast<size_t>(K); ++j) {
          tokens_kk[dd * K + j] = cd.tokens[j];
          lps[dd * K + j] = cd.logprobs[j];
        }
        if (!d.has_adapter()) continue;
        const size_t n = std::min<size_t>(cd.size(), K);
        for (int i = 0; i < K; ++i) {
          int32_t prev = root;
          if (dd > 0) {
            if (static_cast<size_t>(i) >= depths[dd - 1].size()) break;
            prev = depths[dd - 1].tokens[i];
          }
          r.adapter_scores(dd + 1, prev, std::span<const int32_t>(cd.tokens.data(), n),
                           scores.data() + (static_cast<size_t>(dd) * K + i) * K);
        }
      }
      const int32_t head[4] = {text, p, root, reached};
      put(out, head, 4);
      put(out, tokens_kk.data(), tokens_kk.size());
      put(out, lps.data(), lps.size());
      put(out, scores.data(), scores.size());
    }
    std::fprintf(stderr, "text %d: %d positions\n", text, T - n_prompt);
  }
  std::fclose(out);
  return 0;
}
