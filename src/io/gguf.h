// GGUF v2/v3 reader over a memory map. Everything in the file is untrusted: parse() validates
// magic, version, counts, string lengths, value types, tensor dimensions, type ids, alignment,
// offsets and sizes against the file length, and reports the first problem with its byte offset.
// Tensor data is used in place; nothing is copied.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "quant/types.h"
#include "util/mapped_file.h"
#include "util/status.h"

namespace salvo {

enum class GgufType : uint32_t {
  kUint8 = 0,
  kInt8 = 1,
  kUint16 = 2,
  kInt16 = 3,
  kUint32 = 4,
  kInt32 = 5,
  kFloat32 = 6,
  kBool = 7,
  kString = 8,
  kArray = 9,
  kUint64 = 10,
  kInt64 = 11,
  kFloat64 = 12,
};

std::string_view gguf_type_name(GgufType type);

// One metadata value. Scalars use the field matching their type family; arrays keep their element
// type and fill exactly one of the vectors (nested arrays are kept as `arrays`).
struct GgufValue {
  GgufType type = GgufType::kUint8;
  uint64_t u = 0;                         // kUint*, kBool
  int64_t i = 0;                          // kInt*
  double f = 0;                           // kFloat*
  std::string s;                          // kString
  GgufType elem_type = GgufType::kUint8;  // for kArray
  std::vector<int64_t> ints;              // integer and bool arrays (uint64 above 2^63 is clamped)
  std::vector<double> floats;             // float arrays
  // String arrays, as views into the file's bytes (which outlive the GgufFile's values): a
  // vocabulary and its merges are ~100k strings, and copies of them would stay on the heap for
  // the model's whole life.
  std::vector<std::string_view> strings;
  std::vector<GgufValue> arrays;  // arrays of arrays
  size_t array_size() const;
};

struct GgufKv {
  std::string key;
  GgufValue value;
};

struct GgufTensorInfo {
  std::string name;
  std::vector<int64_t> dims;  // ggml order: dims[0] is the contiguous row length
  DType type = DType::kF32;
  uint64_t offset = 0;  // from the start of the data section
  size_t size_bytes = 0;
  int64_t n_elements = 0;
  int64_t rows() const { return n_elements / (dims.empty() ? 1 : dims[0]); }
};

class GgufFile {
 public:
  // Maps and parses a file; the error names the file.
  static Expected<std::unique_ptr<GgufFile>> open(const std::string& path);
  // Parses bytes the caller keeps alive (used by the fuzzer and tests).
  static Expected<std::unique_ptr<GgufFile>> parse(const uint8_t* data, size_t size);

  uint32_t version() const { return version_; }
  size_t alignment() const { return alignment_; }
  size_t file_size() const { return size_; }
  const std::string& path() const { return path_; }

  const std::vector<GgufKv>& metadata() const { return metadata_; }
  const GgufValue* find(std::string_view key) const;

  // Typed getters: an error says the key is missing or has another type. Integer getters accept
  // any integer type whose value fits; float getters accept F32 and F64.
  Expected<std::string> get_string(std::string_view key) const;
  Expected<int64_t> get_int(std::string_view key) const;
  Expected<double> get_float(std::string_view key) const;
  Expected<bool> get_bool(std::string_view key) const;
  Expected<std::vector<std::string>> get_string_array(std::string_view key) const;
  Expected<std::vector<double>> get_float_array(std::string_view key) const;
  Expected<std::vector<int64_t>> get_int_array(std::string_view key) const;
  int64_t get_int_or(std::string_view key, int64_t fallback) const;
  double get_float_or(std::string_view key, double fallback) const;
  bool get_bool_or(std::string_view key, bool fallback) const;
  std::string get_string_or(std::string_view key, std::string fallback) const;

  const std::vector<GgufTensorInfo>& tensors() const { return tensors_; }
  const GgufTensorInfo* find_tensor(std::string_view name) const;
  const uint8_t* tensor_data(const GgufTensorInfo& info) const {
    return data_ + data_offset_ + info.offset;
  }
  size_t data_offset() const { return data_offset_; }
  // Tells the kernel this process no longer needs the pages wholly inside [p, p + n) of the
  // mapping (a tensor copied elsewhere at load): they leave the resident set, and a later read
  // faults them back in from the file.
  void release_pages(const void* p, size_t n) const;
  // The same for the whole file, once a model and its tokenizer are built: packed matrices and
  // copied vectors no longer read it, and whatever still does (unpacked matrices, embedding
  // rows, metadata) faults back only the pages it touches.
  void release_all_pages() const { release_pages(data_, size_); }

 private:
  GgufFile() = default;
  std::unique_ptr<MappedFile> file_;
  const uint8_t* data_ = nullptr;
  size_t size_ = 0;
  std::string path_;
  uint32_t version_ = 0;
  size_t alignment_ = 32;
  size_t data_offset_ = 0;
  std::vector<GgufKv> metadata_;
  std::vector<GgufTensorInfo> tensors_;
  friend class GgufParser;
};

}  // namespace salvo
