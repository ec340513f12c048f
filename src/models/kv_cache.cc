#include "models/kv_cache.h"

#include <cstring>
#include <string>

#include "util/check.h"

namespace salvo {

KvCache::KvCache(const ModelConfig& config, int n_seq, int capacity)
    : n_layer_(config.n_layer),
      n_seq_(n_seq),
      capacity_(capacity),
      kv_width_(config.kv_width()),
      v_width_(config.v_width()),
      // new[] without () leaves the halves uninitialised: untouched pages cost no memory.
      k_(new Elem[static_cast<size_t>(n_layer_) * n_seq * capacity * kv_width_]),
      v_(new Elem[static_cast<size_t>(n_layer_) * n_seq * capacity * v_width_]),
      committed_(n_seq, 0) {}

size_t KvCache::bytes() const {
  return static_cast<size_t>(n_layer_) * n_seq_ * capacity_ * (kv_width_ + v_width_) * sizeof(Elem);
}

Status KvCache::reserve_suffix(int seq, int n_rows) const {
  if (seq < 0 || seq >= n_seq_) {
    return Status::error("sequence id " + std::to_string(seq) + " out of range [0, " +
                         std::to_string(n_seq_) + ")");
  }
  if (committed_[seq] + n_rows > capacity_) {
    return Status::error("context is full: " + std::to_string(committed_[seq]) + " tokens + " +
                         std::to_string(n_rows) + " new exceed the context size of " +
                         std::to_string(capacity_) + " (raise --ctx)");
  }
  return Status();
}

void KvCache::commit(int seq, std::span<const int32_t> accepted_suffix_rows) {
  const int base = committed_[seq];
  if (mirror_ != nullptr) {
    for (size_t j = 0; j < accepted_suffix_rows.size(); ++j) {
      SALVO_CHECK(accepted_suffix_rows[j] >= static_cast<int32_t>(j) &&
                  base + accepted_suffix_rows[j] < capacity_);
    }
    mirror_->commit(seq, base, accepted_suffix_rows);
    committed_[seq] = base + static_cast<int>(accepted_suffix_rows.size());
    return;
  }
  for (size_t j = 0; j < accepted_suffix_rows.size(); ++j) {
    const int from = base + accepted_suffix_rows[j];
    const int to = base + static_cast<int>(j);
    SALVO_CHECK(from >= to && from < capacity_);
    if (from == to) continue;
    for (int layer = 0; layer < n_layer_; ++layer) {
      std::memcpy(key(layer, seq, to), key(layer, seq, from), kv_width_ * sizeof(Elem));
      std::memcpy(value(layer, seq, to), value(layer, seq, from), v_width_ * sizeof(Elem));
    }
  }
  committed_[seq] = base + static_cast<int>(accepted_suffix_rows.size());
}

void KvCache::commit_prefix(int seq, int n_rows) {
  SALVO_CHECK(committed_[seq] + n_rows <= capacity_);
  committed_[seq] += n_rows;
}

void KvCache::truncate(int seq, int keep) {
  SALVO_CHECK(keep >= 0);
  if (keep < committed_[seq]) committed_[seq] = keep;
}

}  // namespace salvo
