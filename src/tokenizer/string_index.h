// An open-addressing index from strings to ids whose texts live elsewhere (the vocabulary, the
// interned merge parts). A slot is 8 bytes (hash, id), where a hash-map node holds its own copy
// of the string plus pointers: for a 49k vocabulary indexed twice that was ~6 MiB of heap.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string_view>
#include <utility>
#include <vector>

namespace salvo {

class StringIndex {
 public:
  // Makes room for n entries without rehashing.
  void reserve(size_t n) {
    size_t cap = 16;
    while (cap < 2 * n) cap *= 2;
    if (cap > slots_.size()) rehash(cap);
  }

  // The id stored for text, or nullopt. text_of(id) gives the text of a stored id.
  template <typename TextOf>
  std::optional<int32_t> find(std::string_view text, const TextOf& text_of) const {
    if (slots_.empty()) return std::nullopt;
    const uint32_t h = hash(text);
    for (size_t i = h & mask(); slots_[i].id >= 0; i = (i + 1) & mask()) {
      if (slots_[i].hash == h && text_of(slots_[i].id) == text) return slots_[i].id;
    }
    return std::nullopt;
  }

  // Stores id for text unless text is present; returns the id now stored for text and whether
  // it was inserted.
  template <typename TextOf>
  std::pair<int32_t, bool> insert(std::string_view text, int32_t id, const TextOf& text_of) {
    if (2 * (size_ + 1) > slots_.size()) rehash(slots_.empty() ? 16 : 2 * slots_.size());
    const uint32_t h = hash(text);
    size_t i = h & mask();
    for (; slots_[i].id >= 0; i = (i + 1) & mask()) {
      if (slots_[i].hash == h && text_of(slots_[i].id) == text) return {slots_[i].id, false};
    }
    slots_[i] = {h, id};
    ++size_;
    return {id, true};
  }

 private:
  struct Slot {
    uint32_t hash = 0;
    int32_t id = -1;  // -1: empty
  };

  static uint32_t hash(std::string_view s) {
    return static_cast<uint32_t>(std::hash<std::string_view>{}(s));
  }
  size_t mask() const { return slots_.size() - 1; }

  void rehash(size_t cap) {
    std::vector<Slot> old = std::move(slots_);
    slots_.assign(cap, Slot{});
    for (const Slot& s : old) {
      if (s.id < 0) continue;
      size_t i = s.hash & mask();
      while (slots_[i].id >= 0) i = (i + 1) & mask();
      slots_[i] = s;
    }
  }

  std::vector<Slot> slots_;
  size_t size_ = 0;
};

}  // namespace salvo
