// DflashModel: a DFlash block drafter, format "salvo-dflash" version 1 (shared with the trainer,
// which writes drafters/<model>/; the config fields and tensor names are those load() reads,
// PyTorch [out, in] matrices, no biases). A few transformer layers see the target's hidden
// states at committed positions (projected by `fc`, normalised, turned into per-layer K/V once
// per position) and a block of B inputs [root, MASK, ..., MASK] at positions p .. p+B-1 that
// attend to every context key and to each other (non-causal). Row j's output, through the
// drafter's final norm and the TARGET's LM head, is the drafter's distribution for the token at
// p + j. It shares the target's embedding table and LM head (drafter n_embd == target n_embd).
// Norms are RMSNorm; q and k get a per-head RMSNorm, then NEOX RoPE at absolute positions
// (whatever the target's own RoPE mode); context K/V skip attn_norm. An optional adapter
// rescores depth j's candidates given the previous token:
// u = y_j + b silu(a_h y_j + a_e E(prev)), score(c) = lm_head_row(c) . u.
//
// Files: <dir>/config.json and <dir>/model.safetensors, and optionally the draft vocabulary's
// <dir>/token_ranks.safetensors (draft_vocab.h). Matrices are F32/F16/BF16 or I8 with a
// per-row F32 `<name>.scale`; I8 ones become F16 (q * scale) at load, the rest and the
// adapter's F32.
// The weights are shared by every sequence; each sequence keeps its own DflashState.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "backends/cpu/matmul.h"
#include "models/model.h"
#include "quant/types.h"
#include "util/status.h"
#include "util/thread_pool.h"

namespace salvo {

struct DflashConfig {
  std::string target_name, target_arch, target_sha256;
  int target_n_embd = 0, target_n_vocab = 0, target_n_layer = 0;
  std::vector<int32_t> target_layers;  // blocks whose outputs form the features, in order
  int block_size = 0;                  // B: the root and B-1 drafted positions
  int n_layer = 0, n_embd = 0, n_head = 0, n_head_kv = 0, head_dim = 0, n_ff = 0;
  float rope_base = 10000.0f, rms_eps = 1e-6f;
  int adapter_hidden = 0;  // 0: no adapter
  int adapter_top_k = 0;

  int feature_width() const { return static_cast<int>(target_layers.size()) * target_n_embd; }
  int kv_width() const { return n_head_kv * head_dim; }
  int max_depth() const { return block_size - 1; }
  bool has_adapter() const { return adapter_hidden > 0; }
  // The block rows of a draft pass to `depth`: the root and its MASK rows. A pass to at most
  // kShortBlock - 1 depths (the default 7-node trees) runs a block of kShortBlock rows instead
  // of all B: one 8-row mma tile per matmul instead of two, and the rows past it would only shape
  // the drafted ones through their K/V. A trained 16-row drafter barely notices (Qwen2.5-Coder-
  // 1.5B, 16 code prompts, adapter trees of 7 nodes, CPU F16: 3.618 tokens a pass against 3.636,
  // the same text). SALVO_DFLASH_FULL_BLOCK=1 keeps all B rows (A/B runs).
  static constexpr int kShortBlock = 8;
  int block_rows(int depth) const;
};

// The drafter directory for a model file: <d>/<file stem>/ holding a config.json, for d in
// $SALVO_DRAFTERS, the source tree's drafters/, and <binary>/../share/salvo/drafters; "" if none.
std::string find_drafter_dir(const std::string& model_path);

// Parses and checks config.json; the error names the field.
Expected<DflashConfig> parse_dflash_config(const std::string& json_text);

// One sequence's drafter context: K/V of every committed position for every drafter layer,
// plus the scratch of its passes.
struct DflashState {
  int32_t n_positions = 0;
  std::vector<std::vector<float>> k, v;  // [layer][n_positions * kv_width]
  // Scratch.
  std::vector<float> c, x, h, q, kb, vb, attn, gate, up, y;
  std::vector<int32_t> positions;
  MatmulScratch matmul;
};

class DflashDevice;

// One drafter layer's weights: vectors F32; matrices F16 or F32 for a device to upload, Q8_0
// (packed) where the drafter runs on the CPU (DflashModel::load says why).
struct DflashLayer {
  std::vector<float> attn_norm, q_norm, k_norm, ffn_norm;
  WeightView q, k, v, o, gate, up, down;
};

class DflashModel {
 public:
  // Rows of a ranked LM head (draft_vocab.h): the 65536 best-ranked ids of Qwen2.5 are as good
  // as all 151,936 for every tree budget replayed, at 43% of the head's bytes.
  static constexpr int32_t kRankedHeadRows = 65536;

  // Loads <dir>/config.json and <dir>/model.safetensors and checks them against `target`
  // (hidden size, vocabulary, layer count and indices, architecture); `target` must outlive it.
  // A target on another backend exposes no host embedding or LM head: the drafter then runs
  // only on a device attached with set_device (has_cpu_forward() is false).
  static Expected<std::unique_ptr<DflashModel>> load(const std::string& dir, const Model& target);
  ~DflashModel();

  const DflashConfig& config() const { return config_; }
  const std::string& dir() const { return dir_; }
  bool has_adapter() const { return config_.adapter_hidden > 0; }
  bool has_cpu_forward() const { return embedding_ != nullptr && lm_head_ != nullptr; }

  // Where its runners run (dflash_runner.h); null: the CPU. Set once, before any runner.
  void set_device(std::shared_ptr<const DflashDevice> device) { device_ = std::move(device); }
  const DflashDevice* device() const { return device_.get(); }

  // The weights, for a device to upload. fc: [n_embd, feature_width]; the adapter's matrices
  // are F32 and empty views without an adapter.
  const WeightView& fc() const { return fc_; }
  const std::vector<float>& hidden_norm() const { return hidden_norm_; }
  const std::vector<float>& mask_embd() const { return mask_embd_; }
  const std::vector<float>& output_norm() const { return output_norm_; }
  const std::vector<DflashLayer>& layers() const { return layers_; }
  const WeightView& adapter_a_h() const { return adapter_a_h_; }  // [adapter_hidden, n_embd]
  const WeightView& adapter_a_e() const { return adapter_a_e_; }  // [adapter_hidden, n_embd]
  const WeightView& adapter_b() const { return adapter_b_; }      // [n_embd, adapter_hidden]

  DflashState new_state() const;
  // Positions [first, first + n) from their features ([n, feature_width]): the state is
  // truncated to `first` positions, then extended. first > n_positions is an error (a gap).
  Status observe(ThreadPool& pool, DflashState& state, int32_t first, int32_t n,
                 const float* features) const;
  // One draft pass for `root` at position state.n_positions. Leaves y_j (the final-normed
  // outputs) for j = 1..depth in state.y ([B, n_embd]; the other rows are not computed) and
  // writes logits_1..depth as [depth, head_rows] (depth <= B-1: the LM head, the pass's largest
  // cost, runs only on the depths drafted, and only for ids below head_rows; 0: the whole
  // vocabulary). The block has config.block_rows(depth) rows. Every layer but the last runs all
  // of them (the block is non-causal: the MASK rows past `depth` shape the earlier rows through
  // their K/V); the last one needs only the K/V of the others, so its queries, attention, output
  // projection and FFN run on rows 1..depth alone. The rows computed give the same bits as a
  // pass of the same block to its last depth (the matmuls are row-invariant).
  // With a ranked head (head_ids()) and 0 < head_rows <= its rows, the logits are those of its
  // first head_rows rows: ids head_ids()[0..head_rows) (head_row_ids says which applies).
  void draft_block(ThreadPool& pool, DflashState& state, int32_t root, int depth,
                   std::vector<float>& logits, int64_t head_rows = 0) const;
  // The ids of the ranked head's rows, most frequent first (draft_vocab.h): the drafter
  // directory's token_ranks.safetensors; empty without one. The CPU forward drafts from those
  // rows of the target's LM head (copied at load); a device runner makes its own copy.
  std::span<const int32_t> head_ids() const { return head_ids_; }
  // What logit column i of a draft_block(..., head_rows) pass is: head_ids()[i], or i (null).
  const int32_t* head_row_ids(int64_t head_rows) const {
    return uses_ranked_head(head_rows) ? head_ids_.data() : nullptr;
  }
  // Rows of the CPU forward's ranked head (0: none): head_rows up to this many use it.
  int32_t ranked_head_rows() const { return static_cast<int32_t>(ranked_head_.n_out); }
  // Adapter logits dot(lm_head_row(c), u) of `candidates` for depth j's output `y_j`
  // ([n_embd]) given the previous token on the branch; `scores` gets one value per candidate.
  void adapter_scores(const float* y_j, int32_t prev, std::span<const int32_t> candidates,
                      float* scores) const;
  // The same for every token of the vocabulary, for rows y [n, n_embd] with prev[n] (tests):
  // [n, n_vocab].
  void adapter_logits(ThreadPool& pool, const float* y, const int32_t* prev, int n,
                      std::vector<float>& logits) const;

 private:
  // u = y + b silu(a_h y + a_e E(prev)) for one row, into `u` ([n_embd]).
  void adapter_u(const float* y_j, int32_t prev, float* u) const;
  void rope_heads(float* x, const int32_t* positions, int64_t n, int n_heads) const;
  // w (F16) as Q8_0 rows, packed: the int8 kernels the target's own matrices use.
  WeightView q8_copy(const WeightView& w);
  bool uses_ranked_head(int64_t head_rows) const {
    return head_rows > 0 && head_rows <= ranked_head_.n_out;
  }

  DflashConfig config_;
  std::string dir_;
  const WeightView* embedding_ = nullptr;           // the target's, [n_vocab, n_embd]
  const WeightView* lm_head_ = nullptr;             // the target's, [n_vocab, n_embd]
  std::vector<std::vector<float>> storage_;         // F32 matrices the views point into
  std::vector<std::vector<uint16_t>> f16_storage_;  // F16 matrices (from I8 with row scales)
  std::vector<std::vector<BlockQ8_0>> q8_storage_;  // Q8_0 matrices of a CPU drafter
  std::vector<std::unique_ptr<uint8_t[]>> packed_storage_;  // and their packed layouts
  WeightView fc_;
  std::vector<float> hidden_norm_, mask_embd_, output_norm_;
  std::vector<DflashLayer> layers_;
  WeightView adapter_a_h_, adapter_a_e_, adapter_b_;
  std::vector<int32_t> head_ids_;  // the ranked head's rows (kRankedHeadRows at most)
  WeightView ranked_head_;         // the target's LM head rows head_ids_, packed (CPU forward)
  std::shared_ptr<const DflashDevice> device_;
};

}  // namespace salvo
