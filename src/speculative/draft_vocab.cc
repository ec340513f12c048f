#include "speculative/draft_vocab.h"

#include <cstring>
#include <filesystem>

#include "backends/cpu/packed.h"
#include "io/safetensors.h"
#include "quant/types.h"

namespace salvo {

Expected<std::vector<int32_t>> read_token_ranks(const std::string& path, int32_t n_vocab,
                                                int32_t rows) {
  std::error_code ec;
  if (!std::filesystem::exists(path, ec)) return std::vector<int32_t>();
  SALVO_ASSIGN_OR_RETURN(std::unique_ptr<SafetensorsFile> file, SafetensorsFile::open(path));
  const StTensorInfo* t = file->find("ids");
  auto bad = [&](const std::string& what) { return Status::error(path + ": " + what); };
  if (t == nullptr) return bad("no tensor 'ids'");
  if (t->dtype != StDType::kI32 || t->shape.size() != 1) {
    return bad("tensor 'ids' must be I32 [n], not " + std::string(st_dtype_name(t->dtype)) +
               " with " + std::to_string(t->shape.size()) + " dimensions");
  }
  const int64_t n = t->shape[0];
  if (n > n_vocab) {
    return bad("'ids' lists " + std::to_string(n) + " ids; the model has " +
               std::to_string(n_vocab));
  }
  std::vector<int32_t> listed(static_cast<size_t>(n));
  if (n > 0) std::memcpy(listed.data(), file->tensor_data(*t), listed.size() * sizeof(int32_t));
  std::vector<bool> seen(static_cast<size_t>(n_vocab), false);
  std::vector<int32_t> out;
  out.reserve(static_cast<size_t>(rows));
  for (int64_t i = 0; i < n; ++i) {
    const int32_t id = listed[i];
    if (id < 0 || id >= n_vocab) {
      return bad("'ids'[" + std::to_string(i) + "] = " + std::to_string(id) +
                 " is outside the vocabulary [0, " + std::to_string(n_vocab) + ")");
    }
    if (seen[id]) return bad("id " + std::to_string(id) + " is listed twice");
    seen[id] = true;
    if (static_cast<int32_t>(out.size()) < rows) out.push_back(id);
  }
  for (int32_t id = 0; id < n_vocab && static_cast<int32_t>(out.size()) < rows; ++id) {
    if (!seen[id]) out.push_back(id);
  }
  return out;
}

WeightView gather_head_rows(const WeightView& head, std::span<const int32_t> ids,
                            std::vector<std::unique_ptr<uint8_t[]>>& storage,
                            const std::function<void()>& release_source) {
  WeightView out{.type = head.type, .n_out = static_cast<int64_t>(ids.size()), .n_in = head.n_in};
  if (cpu::packable(out.type, out.n_out, out.n_in)) {
    // Packed straight from the source rows: the kernels read only the packed copy.
    storage.push_back(cpu::pack_rows(head, ids, release_source));
    out.packed = storage.back().get();
    return out;
  }
  const size_t stride = row_bytes(head.type, head.n_in);
  auto rows = std::make_unique<uint8_t[]>(stride * ids.size());
  const auto* src = static_cast<const uint8_t*>(head.data);
  for (size_t i = 0; i < ids.size(); ++i) {
    std::memcpy(rows.get() + i * stride, src + static_cast<size_t>(ids[i]) * stride, stride);
  }
  if (release_source) release_source();
  out.data = rows.get();
  storage.push_back(std::move(rows));
  return out;
}

}  // namespace salvo
