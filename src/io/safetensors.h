// safetensors reader over a memory map (drafters, unquantized weights). The format: an 8-byte
// little-endian header length N, N bytes of JSON mapping tensor names to
// {"dtype", "shape", "data_offsets": [begin, end]} (offsets into the data after the header),
// and an optional "__metadata__" object of strings. Everything is untrusted: parse() checks the
// length, that the header is a JSON object, each entry's dtype, shape and offsets, that sizes
// match dtype x shape, that data lies inside the file, and that no two tensors overlap.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "util/mapped_file.h"
#include "util/status.h"

namespace salvo {

enum class StDType { kF32, kF16, kBF16, kI8, kI32 };

const char* st_dtype_name(StDType type);
size_t st_dtype_size(StDType type);

struct StTensorInfo {
  std::string name;
  StDType dtype = StDType::kF32;
  std::vector<int64_t> shape;  // row-major, outermost first (PyTorch order)
  size_t offset = 0;           // from the start of the data section
  size_t size_bytes = 0;
  int64_t n_elements = 0;
};

class SafetensorsFile {
 public:
  // Maps and parses a file; the error names the file.
  static Expected<std::unique_ptr<SafetensorsFile>> open(const std::string& path);
  // Parses bytes the caller keeps alive (the fuzzer, tests).
  static Expected<std::unique_ptr<SafetensorsFile>> parse(const uint8_t* data, size_t size);

  const std::vector<StTensorInfo>& tensors() const { return tensors_; }
  const StTensorInfo* find(std::string_view name) const;
  const uint8_t* tensor_data(const StTensorInfo& info) const {
    return data_ + data_offset_ + info.offset;
  }
  const std::map<std::string, std::string>& metadata() const { return metadata_; }
  size_t data_offset() const { return data_offset_; }
  size_t file_size() const { return size_; }

  // The tensor's elements as float32 (F32, F16, BF16, I8 and I32 converted).
  std::vector<float> to_f32(const StTensorInfo& info) const;

 private:
  SafetensorsFile() = default;
  std::unique_ptr<MappedFile> file_;
  const uint8_t* data_ = nullptr;
  size_t size_ = 0;
  size_t data_offset_ = 0;
  std::vector<StTensorInfo> tensors_;
  std::map<std::string, std::string> metadata_;
};

}  // namespace salvo
