// Per-layer key/value cache for several sequences. Each sequence owns `capacity` slots per layer:
// slots [0, committed) hold committed tokens (slot i = position i); the rows of the forward pass
// in flight are written behind them, in batch order (the "suffix"). commit() keeps the accepted
// suffix rows by moving them down into committed slots; everything else in the suffix is simply
// forgotten (rollback costs nothing and nothing is recomputed).
//
// Memory: [n_layer][n_seq][capacity][kv_width] halves (IEEE f16) for K and likewise for V,
// allocated without touching the pages, so RSS grows with the tokens actually used. f16 halves
// the memory and the bytes attention streams per token against f32, at a rounding error
// (2^-11 relative) far below the weights' quantization error; llama.cpp stores f16 too.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "models/config.h"
#include "util/status.h"

namespace salvo {

// A copy of the cache's rows kept elsewhere (a GPU backend's device cache). When a KvCache has
// a mirror, the rows live there: commit() moves the mirror's rows instead of the host ones, and
// the host KvCache only keeps the committed counts that every backend reads.
class KvCacheMirror {
 public:
  virtual ~KvCacheMirror() = default;
  // The same move as KvCache::commit: suffix row accepted[j] (slot base + accepted[j]) goes to
  // slot base + j, in order.
  virtual void commit(int seq, int base, std::span<const int32_t> accepted_suffix_rows) = 0;
};

class KvCache {
 public:
  KvCache(const ModelConfig& config, int n_seq, int capacity);

  int n_seq() const { return n_seq_; }
  int capacity() const { return capacity_; }
  int committed(int seq) const { return committed_[seq]; }
  size_t bytes() const;
  int key_width() const { return kv_width_; }
  int value_width() const { return v_width_; }

  using Elem = uint16_t;  // IEEE half

  // [kv_width] / [v_width] halves of one slot.
  Elem* key(int layer, int seq, int slot) { return k_.get() + offset(layer, seq, slot, kv_width_); }
  Elem* value(int layer, int seq, int slot) {
    return v_.get() + offset(layer, seq, slot, v_width_);
  }
  const Elem* key(int layer, int seq, int slot) const {
    return k_.get() + offset(layer, seq, slot, kv_width_);
  }
  const Elem* value(int layer, int seq, int slot) const {
    return v_.get() + offset(layer, seq, slot, v_width_);
  }

  // Checks that `n_rows` more rows fit behind the committed ones of `seq`.
  Status reserve_suffix(int seq, int n_rows) const;

  // Keeps the given suffix rows (indices into the sequence's rows of the last batch, strictly
  // increasing) as the next committed tokens, in that order.
  void commit(int seq, std::span<const int32_t> accepted_suffix_rows);
  // Keeps the first n suffix rows (a chain or a prefill chunk).
  void commit_prefix(int seq, int n_rows);
  // Forgets the whole sequence.
  void clear(int seq) { committed_[seq] = 0; }
  // Forgets committed tokens from position `keep` on.
  void truncate(int seq, int keep);

  // Hands the rows to a mirror (see KvCacheMirror); the backend that owns it attaches it on its
  // first forward pass with this cache, so sessions need not know which backend runs.
  void set_mirror(std::unique_ptr<KvCacheMirror> mirror) { mirror_ = std::move(mirror); }
  KvCacheMirror* mirror() const { return mirror_.get(); }

 private:
  size_t offset(int layer, int seq, int slot, int width) const {
    return ((static_cast<size_t>(layer) * n_seq_ + seq) * capacity_ + slot) * width;
  }

  int n_layer_, n_seq_, capacity_, kv_width_, v_width_;
  std::unique_ptr<Elem[]> k_, v_;
  std::vector<int> committed_;
  std::unique_ptr<KvCacheMirror> mirror_;
};

}  // namespace salvo
