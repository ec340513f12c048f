#include "speculative/dflash_model.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <nlohmann/json.hpp>
#include <sstream>

#include "backends/cpu/matmul.h"
#include "backends/cpu/packed.h"
#include "backends/cpu/quantize_acts.h"
#include "io/safetensors.h"
#include "ops/ops.h"
#include "ops/vec.h"
#include "quant/fp16.h"
#include "quant/quantize.h"
#include "quant/types.h"
#include "speculative/dflash_runner.h"
#include "speculative/draft_vocab.h"
#include "util/check.h"

namespace salvo {
namespace {

// F16 rows [*, cols] replaced by their Q6_K rounding (cols a multiple of 256).
void round_through_q6_k(std::vector<uint16_t>& f16, int64_t cols) {
  std::vector<float> row(cols), back(cols);
  std::vector<BlockQ6_K> blocks(cols / kQKK);
  for (size_t r0 = 0; r0 < f16.size(); r0 += cols) {
    for (int64_t i = 0; i < cols; ++i) row[i] = fp16_to_fp32(f16[r0 + i]);
    quantize_row_q6_k(row.data(), blocks.data(), cols);
    dequantize_row(DType::kQ6_K, blocks.data(), back.data(), cols);
    for (int64_t i = 0; i < cols; ++i) f16[r0 + i] = fp32_to_fp16(back[i]);
  }
}

using nlohmann::json;

// What releases the mapped pages of `head` when it is a tensor of the target's mapped GGUF file
// (a file opened, not bytes parsed: its pages fault back in from the file when read again); an
// empty function otherwise.
std::function<void()> head_page_release(const Model& target, const WeightView& head) {
  const GgufFile& file = target.gguf();
  if (file.path().empty() || head.data == nullptr) return {};
  for (const char* name : {"output.weight", "token_embd.weight"}) {
    const GgufTensorInfo* t = file.find_tensor(name);
    if (t != nullptr && file.tensor_data(*t) == head.data) {
      const size_t bytes = static_cast<size_t>(head.n_out) * row_bytes(head.type, head.n_in);
      return [&file, data = head.data, bytes] { file.release_pages(data, bytes); };
    }
  }
  return {};
}

// Reads a positive integer field of `obj` into `out`.
Status int_field(const json& obj, const char* key, int& out, const std::string& where) {
  const auto it = obj.find(key);
  if (it == obj.end() || !it->is_number_integer() || it->get<int64_t>() <= 0 ||
      it->get<int64_t>() > (1 << 24)) {
    return Status::error(where + "'" + key + "' must be a positive integer");
  }
  out = static_cast<int>(it->get<int64_t>());
  return Status();
}

Status float_field(const json& obj, const char* key, float& out) {
  const auto it = obj.find(key);
  if (it == obj.end() || !it->is_number() || !(it->get<double>() > 0)) {
    return Status::error(std::string("'") + key + "' must be a positive number");
  }
  out = static_cast<float>(it->get<double>());
  return Status();
}

Status string_field(const json& obj, const char* key, std::string& out, const std::string& where) {
  const auto it = obj.find(key);
  if (it == obj.end() || !it->is_string()) {
    return Status::error(where + "'" + key + "' must be a string");
  }
  out = it->get<std::string>();
  return Status();
}

// Dequantizes a tensor of the file to F32 and checks its shape.
class WeightLoader {
 public:
  explicit WeightLoader(const SafetensorsFile& file) : file_(file) {}

  // A matrix [rows, cols]: F32/F16/BF16, or I8 with `<name>.scale` F32 [rows].
  std::vector<float> matrix(const std::string& name, int64_t rows, int64_t cols) {
    std::vector<float> out;
    const StTensorInfo* t = find(name, {rows, cols});
    if (t == nullptr) return out;
    out = file_.to_f32(*t);
    if (t->dtype == StDType::kI8) {
      const StTensorInfo* s = find(name + ".scale", {rows});
      if (s == nullptr) return {};
      if (s->dtype != StDType::kF32) return fail<float>("tensor '" + name + ".scale' must be F32");
      const std::vector<float> scale = file_.to_f32(*s);
      for (int64_t r = 0; r < rows; ++r) {
        for (int64_t c = 0; c < cols; ++c) out[r * cols + c] *= scale[r];
      }
    } else if (t->dtype == StDType::kI32) {
      return fail<float>("tensor '" + name + "' has dtype I32; matrices are F32, F16, BF16 or I8");
    }
    return out;
  }

  // An I8 matrix [rows, cols] with per-row scales as F16 values q * scale: half of F32's bytes
  // per draft pass, float activations (Q8_0 blocks would quarter the bytes but round the
  // activations to int8 too, which moved random drafters' logits by ~2% of their range). Empty
  // when the tensor is not such a matrix (matrix() then reads it, or names what is wrong).
  std::vector<uint16_t> matrix_f16(const std::string& name, int64_t rows, int64_t cols) {
    const StTensorInfo* t = file_.find(name);
    const StTensorInfo* s = file_.find(name + ".scale");
    if (t == nullptr || s == nullptr || t->dtype != StDType::kI8 || s->dtype != StDType::kF32 ||
        t->shape != std::vector<int64_t>{rows, cols} || s->shape != std::vector<int64_t>{rows}) {
      return {};
    }
    const std::vector<float> scale = file_.to_f32(*s);
    const auto* q = reinterpret_cast<const int8_t*>(file_.tensor_data(*t));
    std::vector<uint16_t> out(static_cast<size_t>(rows) * cols);
    for (int64_t r = 0; r < rows; ++r) {
      for (int64_t c = 0; c < cols; ++c) {
        out[r * cols + c] = fp32_to_fp16(static_cast<float>(q[r * cols + c]) * scale[r]);
      }
    }
    return out;
  }

  // A vector [n]: F32 (F16/BF16 accepted).
  std::vector<float> vector(const std::string& name, int64_t n) {
    const StTensorInfo* t = find(name, {n});
    if (t == nullptr) return {};
    if (t->dtype == StDType::kI8 || t->dtype == StDType::kI32) {
      return fail<float>("tensor '" + name + "' has dtype " + st_dtype_name(t->dtype) +
                         "; vectors are F32, F16 or BF16");
    }
    return file_.to_f32(*t);
  }

  const Status& status() const { return status_; }

 private:
  const StTensorInfo* find(const std::string& name, const std::vector<int64_t>& shape) {
    const StTensorInfo* t = file_.find(name);
    if (t == nullptr) {
      fail<float>("tensor '" + name + "' is missing");
      return nullptr;
    }
    if (t->shape != shape) {
      auto dims = [](const std::vector<int64_t>& s) {
        std::string text = "[";
        for (size_t i = 0; i < s.size(); ++i) text += (i ? ", " : "") + std::to_string(s[i]);
        return text + "]";
      };
      fail<float>("tensor '" + name + "' has shape " + dims(t->shape) + ", expected " +
                  dims(shape));
      return nullptr;
    }
    return t;
  }
  template <typename T>
  std::vector<T> fail(const std::string& message) {
    if (status_.ok()) status_ = Status::error(message);
    return {};
  }

  const SafetensorsFile& file_;
  Status status_;
};

float silu(float x) { return x / (1.0f + std::exp(-x)); }

}  // namespace

std::string find_drafter_dir(const std::string& model_path) {
  namespace fs = std::filesystem;
  const std::string stem = fs::path(model_path).stem().string();
  std::vector<fs::path> roots;
  if (const char* env = std::getenv("SALVO_DRAFTERS"); env != nullptr && *env != 0) {
    roots.emplace_back(env);
  }
#ifdef SALVO_SOURCE_DIR
  roots.emplace_back(fs::path(SALVO_SOURCE_DIR) / "drafters");
#endif
  std::error_code ec;
  const fs::path exe = fs::read_symlink("/proc/self/exe", ec);
  if (!ec) roots.push_back(exe.parent_path().parent_path() / "share" / "salvo" / "drafters");
  for (const fs::path& root : roots) {
    const fs::path dir = root / stem;
    if (fs::exists(dir / "config.json", ec)) return dir.string();
  }
  return "";
}

Expected<DflashConfig> parse_dflash_config(const std::string& json_text) {
  const json j = json::parse(json_text, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object()) return Status::error("config.json is not a JSON object");
  DflashConfig c;
  std::string format;
  SALVO_RETURN_IF_ERROR(string_field(j, "format", format, ""));
  if (format != "salvo-dflash") {
    return Status::error("'format' is '" + format + "', expected 'salvo-dflash'");
  }
  const auto version = j.find("version");
  if (version == j.end() || !version->is_number_integer() || version->get<int64_t>() != 1) {
    return Status::error("'version' must be 1 (the only drafter format this salvo reads)");
  }
  const auto target = j.find("target");
  if (target == j.end() || !target->is_object()) {
    return Status::error("'target' must be an object");
  }
  SALVO_RETURN_IF_ERROR(string_field(*target, "name", c.target_name, "target."));
  SALVO_RETURN_IF_ERROR(string_field(*target, "arch", c.target_arch, "target."));
  SALVO_RETURN_IF_ERROR(int_field(*target, "n_embd", c.target_n_embd, "target."));
  SALVO_RETURN_IF_ERROR(int_field(*target, "n_vocab", c.target_n_vocab, "target."));
  SALVO_RETURN_IF_ERROR(int_field(*target, "n_layer", c.target_n_layer, "target."));
  if (target->contains("sha256") && (*target)["sha256"].is_string()) {
    c.target_sha256 = (*target)["sha256"].get<std::string>();
  }
  const auto layers = j.find("target_layers");
  if (layers == j.end() || !layers->is_array() || layers->empty() || layers->size() > 64) {
    return Status::error("'target_layers' must be a non-empty array of layer indices");
  }
  for (const auto& l : *layers) {
    if (!l.is_number_integer() || l.get<int64_t>() < 0 || l.get<int64_t>() >= c.target_n_layer) {
      return Status::error("'target_layers' holds an index outside [0, " +
                           std::to_string(c.target_n_layer) + ")");
    }
    c.target_layers.push_back(static_cast<int32_t>(l.get<int64_t>()));
  }
  SALVO_RETURN_IF_ERROR(int_field(j, "block_size", c.block_size, ""));
  SALVO_RETURN_IF_ERROR(int_field(j, "n_layer", c.n_layer, ""));
  SALVO_RETURN_IF_ERROR(int_field(j, "n_embd", c.n_embd, ""));
  SALVO_RETURN_IF_ERROR(int_field(j, "n_head", c.n_head, ""));
  SALVO_RETURN_IF_ERROR(int_field(j, "n_head_kv", c.n_head_kv, ""));
  SALVO_RETURN_IF_ERROR(int_field(j, "head_dim", c.head_dim, ""));
  SALVO_RETURN_IF_ERROR(int_field(j, "n_ff", c.n_ff, ""));
  SALVO_RETURN_IF_ERROR(float_field(j, "rope_base", c.rope_base));
  SALVO_RETURN_IF_ERROR(float_field(j, "rms_eps", c.rms_eps));
  if (c.block_size < 2 || c.block_size > 256) {
    return Status::error("'block_size' " + std::to_string(c.block_size) + " is outside [2, 256]");
  }
  if (c.n_head % c.n_head_kv != 0) {
    return Status::error("'n_head_kv' does not divide 'n_head'");
  }
  if (c.head_dim % 2 != 0) return Status::error("'head_dim' must be even (RoPE)");
  if (c.n_embd != c.target_n_embd) {
    return Status::error("'n_embd' " + std::to_string(c.n_embd) + " differs from target.n_embd " +
                         std::to_string(c.target_n_embd) + " (format v1 shares the embedding)");
  }
  const auto adapter = j.find("adapter");
  if (adapter != j.end() && !adapter->is_null()) {
    if (!adapter->is_object()) return Status::error("'adapter' must be an object or null");
    SALVO_RETURN_IF_ERROR(int_field(*adapter, "n_hidden", c.adapter_hidden, "adapter."));
    SALVO_RETURN_IF_ERROR(int_field(*adapter, "top_k", c.adapter_top_k, "adapter."));
  }
  return c;
}

Expected<std::unique_ptr<DflashModel>> DflashModel::load(const std::string& dir,
                                                         const Model& target) {
  std::unique_ptr<DflashModel> m(new DflashModel());
  m->dir_ = dir;
  const std::string config_path = dir + "/config.json";
  std::ifstream in(config_path);
  if (!in) return Status::error("cannot read " + config_path);
  std::stringstream text;
  text << in.rdbuf();
  auto parsed = parse_dflash_config(text.str());
  if (!parsed.ok()) return parsed.status().with_context(config_path);
  m->config_ = std::move(parsed.value());
  const DflashConfig& c = m->config_;

  const ModelConfig& t = target.config();
  auto mismatch = [&](const std::string& what, int64_t drafter, int64_t model) {
    return Status::error(config_path + ": the drafter is for a target with " + what + " " +
                         std::to_string(drafter) + ", the model has " + std::to_string(model));
  };
  if (c.target_n_embd != t.n_embd) return mismatch("n_embd", c.target_n_embd, t.n_embd);
  if (c.target_n_vocab != t.n_vocab) return mismatch("n_vocab", c.target_n_vocab, t.n_vocab);
  if (c.target_n_layer != t.n_layer) return mismatch("n_layer", c.target_n_layer, t.n_layer);
  if (c.target_arch != t.arch) {
    return Status::error(config_path + ": the drafter is for a '" + c.target_arch +
                         "' target, the model is '" + t.arch + "'");
  }
  if (t.arch != "llama" && t.arch != "qwen2") {
    return Status::error("DFlash drafting supports llama and qwen2 targets, not '" + t.arch + "'");
  }
  // Null for a target on a device: its runners then read the device's copies.
  m->embedding_ = target.embedding_table();
  m->lm_head_ = target.lm_head();

  const std::string weights_path = dir + "/model.safetensors";
  SALVO_ASSIGN_OR_RETURN(std::unique_ptr<SafetensorsFile> file,
                         SafetensorsFile::open(weights_path));
  WeightLoader load(*file);
  // On the CPU the F16 matrices cost most of a draft pass: float dot products stream 2 bytes a
  // weight and reuse it for only 4 rows (7.7 ms for Qwen's 16-row block against a ~30 ms target
  // pass, so drafting barely paid). A drafter beside a CPU target holds them as Q8_0 instead,
  // each converted as it loads; SALVO_DFLASH_F16=1 keeps F16 (A/B runs, and the CUDA tests
  // that compare a device drafter with the CPU one). A device uploads the F16 form.
  const bool q8 = m->has_cpu_forward() && std::getenv("SALVO_DFLASH_F16") == nullptr;
  // SALVO_DFLASH_Q6K=1 rounds the matrices through Q6_K first (the weights a kHalf drafter on
  // the device would read), to measure what that rounding costs in tokens a pass.
  const bool q6k_round = std::getenv("SALVO_DFLASH_Q6K") != nullptr;
  // Matrices the forward multiplies by (not the adapter's, read as floats).
  auto matrix = [&](const std::string& name, int64_t rows, int64_t cols, bool allow_f16 = true) {
    WeightView view;
    view.n_out = rows;
    view.n_in = cols;
    std::vector<uint16_t> f16 =
        allow_f16 ? load.matrix_f16(name, rows, cols) : std::vector<uint16_t>();
    if (!f16.empty()) {
      if (q6k_round && cols % kQKK == 0) round_through_q6_k(f16, cols);
      view.type = DType::kF16;
      view.data = f16.data();
      if (q8 && cols % kQK == 0) return m->q8_copy(view);
      m->f16_storage_.push_back(std::move(f16));  // the move keeps the data where it is
      return view;
    }
    m->storage_.push_back(load.matrix(name, rows, cols));
    view.type = DType::kF32;
    view.data = m->storage_.back().data();
    return view;
  };
  const int q_width = c.n_head * c.head_dim;
  m->fc_ = matrix("fc.weight", c.n_embd, c.feature_width());
  m->hidden_norm_ = load.vector("hidden_norm.weight", c.n_embd);
  m->mask_embd_ = load.vector("mask_embd", c.n_embd);
  m->output_norm_ = load.vector("output_norm.weight", c.n_embd);
  for (int i = 0; i < c.n_layer; ++i) {
    const std::string p = "layers." + std::to_string(i) + ".";
    DflashLayer& l = m->layers_.emplace_back();
    l.attn_norm = load.vector(p + "attn_norm.weight", c.n_embd);
    l.q = matrix(p + "q.weight", q_width, c.n_embd);
    l.k = matrix(p + "k.weight", c.kv_width(), c.n_embd);
    l.v = matrix(p + "v.weight", c.kv_width(), c.n_embd);
    l.o = matrix(p + "o.weight", c.n_embd, q_width);
    l.q_norm = load.vector(p + "q_norm.weight", c.head_dim);
    l.k_norm = load.vector(p + "k_norm.weight", c.head_dim);
    l.ffn_norm = load.vector(p + "ffn_norm.weight", c.n_embd);
    l.gate = matrix(p + "gate.weight", c.n_ff, c.n_embd);
    l.up = matrix(p + "up.weight", c.n_ff, c.n_embd);
    l.down = matrix(p + "down.weight", c.n_embd, c.n_ff);
  }
  if (m->has_adapter()) {
    m->adapter_a_h_ = matrix("adapter.a_h.weight", c.adapter_hidden, c.n_embd, false);
    m->adapter_a_e_ = matrix("adapter.a_e.weight", c.adapter_hidden, c.n_embd, false);
    m->adapter_b_ = matrix("adapter.b.weight", c.n_embd, c.adapter_hidden, false);
  }
  if (!load.status().ok()) return load.status().with_context(weights_path);
  // A device runner gathers its own copy of the rows (and may leave them: DflashRunner::
  // ranked_rows says what a runner drafts from).
  SALVO_ASSIGN_OR_RETURN(m->head_ids_,
                         read_token_ranks(dir + "/token_ranks.safetensors", t.n_vocab,
                                          std::min<int32_t>(t.n_vocab, kRankedHeadRows)));
  if (!m->head_ids_.empty() && m->has_cpu_forward()) {
    // The ranked rows lie all over the head: copying them faults its mapped pages back in
    // (+295 MB of peak resident memory for the 1.5B, where the copy is 83 MB), so they are
    // released as the copy goes, as the engine released them once the target was packed.
    m->ranked_head_ = gather_head_rows(*m->lm_head_, m->head_ids_, m->packed_storage_,
                                       head_page_release(target, *m->lm_head_));
  }
  return m;
}

WeightView DflashModel::q8_copy(const WeightView& w) {
  const int64_t blocks_per_row = w.n_in / kQK;
  std::vector<BlockQ8_0> blocks(static_cast<size_t>(w.n_out * blocks_per_row));
  std::vector<float> row(static_cast<size_t>(w.n_in));
  const auto* f16 = static_cast<const fp16_t*>(w.data);
  for (int64_t r = 0; r < w.n_out; ++r) {
    for (int64_t i = 0; i < w.n_in; ++i) row[i] = fp16_to_fp32(f16[r * w.n_in + i]);
    cpu::quantize_row_q8_0(row.data(), blocks.data() + r * blocks_per_row, w.n_in);
  }
  WeightView out{.type = DType::kQ8_0, .data = blocks.data(), .n_out = w.n_out, .n_in = w.n_in};
  q8_storage_.push_back(std::move(blocks));  // the move keeps the data where it is
  if (cpu::packable(out.type, out.n_out, out.n_in)) {
    packed_storage_.push_back(cpu::pack_matrix(out, nullptr));
    out.packed = packed_storage_.back().get();
  }
  return out;
}

DflashModel::~DflashModel() = default;

DflashState DflashModel::new_state() const {
  DflashState s;
  s.k.resize(config_.n_layer);
  s.v.resize(config_.n_layer);
  return s;
}

void DflashModel::rope_heads(float* x, const int32_t* positions, int64_t n, int n_heads) const {
  ops::rope(x, positions, n, n_heads, config_.head_dim, config_.head_dim, config_.rope_base,
            RopeMode::kRopeNeox);
}

Status DflashModel::observe(ThreadPool& pool, DflashState& s, int32_t first, int32_t n,
                            const float* features) const {
  const DflashConfig& c = config_;
  if (first < 0 || first > s.n_positions) {
    return Status::error("drafter context has " + std::to_string(s.n_positions) +
                         " positions; cannot append at " + std::to_string(first));
  }
  const size_t kvw = c.kv_width();
  for (int l = 0; l < c.n_layer; ++l) {
    s.k[l].resize(first * kvw);
    s.v[l].resize(first * kvw);
  }
  s.n_positions = first;
  if (n <= 0) return Status();
  // c_t = RMSNorm(fc F_t) * hidden_norm: [n, n_embd]
  s.c.resize(static_cast<size_t>(n) * c.n_embd);
  matmul(pool, fc_, features, n, s.c.data(), s.matmul);
  ops::rms_norm(s.c.data(), hidden_norm_.data(), s.c.data(), n, c.n_embd, c.rms_eps);
  s.positions.resize(n);
  for (int32_t i = 0; i < n; ++i) s.positions[i] = first + i;
  s.kb.resize(n * kvw);
  s.vb.resize(n * kvw);
  for (int l = 0; l < c.n_layer; ++l) {
    const DflashLayer& layer = layers_[l];
    const WeightView* kv[] = {&layer.k, &layer.v};
    float* kv_out[] = {s.kb.data(), s.vb.data()};
    matmul_multi(pool, kv, kv_out, 2, s.c.data(), n, s.matmul);
    ops::rms_norm_heads(s.kb.data(), layer.k_norm.data(), n, c.n_head_kv, c.head_dim, c.rms_eps);
    rope_heads(s.kb.data(), s.positions.data(), n, c.n_head_kv);
    s.k[l].insert(s.k[l].end(), s.kb.begin(), s.kb.end());
    s.v[l].insert(s.v[l].end(), s.vb.begin(), s.vb.end());
  }
  s.n_positions = first + n;
  return Status();
}

int DflashConfig::block_rows(int depth) const {
  static const bool full = [] {
    const char* v = std::getenv("SALVO_DFLASH_FULL_BLOCK");
    return v != nullptr && std::atoi(v) != 0;
  }();
  return !full && depth < kShortBlock ? std::min(block_size, kShortBlock) : block_size;
}

void DflashModel::draft_block(ThreadPool& pool, DflashState& s, int32_t root, int depth,
                              std::vector<float>& logits, int64_t head_rows) const {
  SALVO_CHECK(has_cpu_forward());
  const DflashConfig& c = config_;
  depth = std::clamp(depth, 1, c.max_depth());
  const int B = c.block_rows(depth);
  const int p = s.n_positions;
  const int q_width = c.n_head * c.head_dim;
  const size_t kvw = c.kv_width();
  s.x.resize(static_cast<size_t>(B) * c.n_embd);
  s.h.resize(s.x.size());
  s.q.resize(static_cast<size_t>(B) * q_width);
  s.kb.resize(B * kvw);
  s.vb.resize(B * kvw);
  s.attn.resize(s.q.size());
  s.gate.resize(static_cast<size_t>(B) * c.n_ff);
  s.up.resize(s.gate.size());
  s.positions.resize(B);
  for (int j = 0; j < B; ++j) s.positions[j] = p + j;

  // x: [B, n_embd] = [E(root), mask, ..., mask]
  ops::embed(*embedding_, &root, 1, s.x.data());
  for (int j = 1; j < B; ++j) {
    std::copy(mask_embd_.begin(), mask_embd_.end(), s.x.begin() + j * c.n_embd);
  }
  const int group = c.n_head / c.n_head_kv;
  const float scale = 1.0f / std::sqrt(static_cast<float>(c.head_dim));
  for (int il = 0; il < c.n_layer; ++il) {
    const DflashLayer& l = layers_[il];
    // Rows whose output this layer must compute: all B, or in the last layer only the drafted
    // depths 1..depth (every row still gives its K/V). [first, first + n) of the block.
    const bool last = il == c.n_layer - 1;
    const int first = last ? 1 : 0;
    const int n = last ? depth : B;
    const size_t row0 = static_cast<size_t>(first) * c.n_embd;
    ops::rms_norm(s.x.data(), l.attn_norm.data(), s.h.data(), B, c.n_embd, c.rms_eps);
    if (n == B) {
      const WeightView* qkv[] = {&l.q, &l.k, &l.v};
      float* qkv_out[] = {s.q.data(), s.kb.data(), s.vb.data()};
      matmul_multi(pool, qkv, qkv_out, 3, s.h.data(), B, s.matmul);
    } else {
      const WeightView* kv[] = {&l.k, &l.v};
      float* kv_out[] = {s.kb.data(), s.vb.data()};
      matmul_multi(pool, kv, kv_out, 2, s.h.data(), B, s.matmul);
      matmul(pool, l.q, s.h.data() + row0, n, s.q.data() + static_cast<size_t>(first) * q_width,
             s.matmul);
    }
    float* q_rows = s.q.data() + static_cast<size_t>(first) * q_width;
    ops::rms_norm_heads(q_rows, l.q_norm.data(), n, c.n_head, c.head_dim, c.rms_eps);
    ops::rms_norm_heads(s.kb.data(), l.k_norm.data(), B, c.n_head_kv, c.head_dim, c.rms_eps);
    rope_heads(q_rows, s.positions.data() + first, n, c.n_head);
    rope_heads(s.kb.data(), s.positions.data(), B, c.n_head_kv);
    // Every computed row attends to the p context keys and all B block keys; one task per
    // (row, head).
    const float* ctx_k = s.k[il].data();
    const float* ctx_v = s.v[il].data();
    pool.parallel_for(static_cast<int64_t>(n) * c.n_head, [&](int, int64_t begin, int64_t end) {
      std::vector<float> scores(p + B);
      for (int64_t task = begin; task < end; ++task) {
        const int j = first + static_cast<int>(task / c.n_head);
        const int head = static_cast<int>(task % c.n_head);
        const int kv_head = head / group;
        const float* q = s.q.data() + static_cast<size_t>(j) * q_width + head * c.head_dim;
        auto key = [&](int t) {
          return t < p ? ctx_k + t * kvw + kv_head * c.head_dim
                       : s.kb.data() + (t - p) * kvw + kv_head * c.head_dim;
        };
        auto value = [&](int t) {
          return t < p ? ctx_v + t * kvw + kv_head * c.head_dim
                       : s.vb.data() + (t - p) * kvw + kv_head * c.head_dim;
        };
        float max_score = -INFINITY;
        for (int t = 0; t < p + B; ++t) {
          scores[t] = vec::dot(q, key(t), c.head_dim) * scale;
          max_score = std::max(max_score, scores[t]);
        }
        float sum = 0;
        for (int t = 0; t < p + B; ++t) {
          scores[t] = std::exp(scores[t] - max_score);
          sum += scores[t];
        }
        float* out = s.attn.data() + static_cast<size_t>(j) * q_width + head * c.head_dim;
        std::fill(out, out + c.head_dim, 0.0f);
        for (int t = 0; t < p + B; ++t) vec::axpy(scores[t] / sum, value(t), out, c.head_dim);
      }
    });
    // The residual stream of rows [first, first + n): [n, n_embd].
    float* x = s.x.data() + row0;
    float* h = s.h.data() + row0;
    const size_t width = static_cast<size_t>(n) * c.n_embd;
    matmul(pool, l.o, s.attn.data() + static_cast<size_t>(first) * q_width, n, h, s.matmul);
    ops::add(x, h, width);
    ops::rms_norm(x, l.ffn_norm.data(), h, n, c.n_embd, c.rms_eps);
    const WeightView* gate_up[] = {&l.gate, &l.up};
    float* gate_up_out[] = {s.gate.data(), s.up.data()};
    matmul_multi(pool, gate_up, gate_up_out, 2, h, n, s.matmul);
    ops::silu_mul(s.gate.data(), s.up.data(), static_cast<size_t>(n) * c.n_ff);
    matmul(pool, l.down, s.gate.data(), n, h, s.matmul);
    ops::add(x, h, width);
  }
  // Rows 1..depth: the drafted positions (the last layer computed no others).
  s.y.resize(s.x.size());
  ops::rms_norm(s.x.data() + c.n_embd, output_norm_.data(), s.y.data() + c.n_embd, depth, c.n_embd,
                c.rms_eps);
  // Its first head_rows rows: the best-ranked ids, or the ids below head_rows.
  WeightView head = uses_ranked_head(head_rows) ? ranked_head_ : *lm_head_;
  if (head_rows > 0) head.n_out = std::min(head.n_out, head_rows);
  logits.resize(static_cast<size_t>(depth) * head.n_out);
  matmul(pool, head, s.y.data() + c.n_embd, depth, logits.data(), s.matmul);
}

void DflashModel::adapter_u(const float* y_j, int32_t prev, float* u) const {
  SALVO_CHECK(has_cpu_forward());
  const DflashConfig& c = config_;
  std::vector<float> e(c.n_embd), a(c.adapter_hidden);
  ops::embed(*embedding_, &prev, 1, e.data());
  const float* a_h = static_cast<const float*>(adapter_a_h_.data);
  const float* a_e = static_cast<const float*>(adapter_a_e_.data);
  const float* b = static_cast<const float*>(adapter_b_.data);
  for (int r = 0; r < c.adapter_hidden; ++r) {
    a[r] = silu(vec::dot(a_h + static_cast<size_t>(r) * c.n_embd, y_j, c.n_embd) +
                vec::dot(a_e + static_cast<size_t>(r) * c.n_embd, e.data(), c.n_embd));
  }
  for (int i = 0; i < c.n_embd; ++i) {
    u[i] = y_j[i] +
           vec::dot(b + static_cast<size_t>(i) * c.adapter_hidden, a.data(), c.adapter_hidden);
  }
}

void DflashModel::adapter_scores(const float* y_j, int32_t prev,
                                 std::span<const int32_t> candidates, float* scores) const {
  const int n_embd = config_.n_embd;
  std::vector<float> u(n_embd), row(n_embd);
  adapter_u(y_j, prev, u.data());
  const size_t stride = row_bytes(lm_head_->type, lm_head_->n_in);
  const uint8_t* head = static_cast<const uint8_t*>(lm_head_->data);
  for (size_t i = 0; i < candidates.size(); ++i) {
    dequantize_row(lm_head_->type, head + candidates[i] * stride, row.data(), n_embd);
    scores[i] = vec::dot(row.data(), u.data(), n_embd);
  }
}

void DflashModel::adapter_logits(ThreadPool& pool, const float* y, const int32_t* prev, int n,
                                 std::vector<float>& logits) const {
  const int n_embd = config_.n_embd;
  std::vector<float> u(static_cast<size_t>(n) * n_embd);
  for (int r = 0; r < n; ++r) adapter_u(y + r * n_embd, prev[r], u.data() + r * n_embd);
  logits.resize(static_cast<size_t>(n) * lm_head_->n_out);
  MatmulScratch scratch;
  matmul(pool, *lm_head_, u.data(), n, logits.data(), scratch);
}

}  // namespace salvo
