#include "io/safetensors.h"

#include <algorithm>
#include <bit>
#include <cstring>
#include <limits>
#include <nlohmann/json.hpp>

#include "quant/fp16.h"

namespace salvo {

static_assert(std::endian::native == std::endian::little,
              "the safetensors reader needs a little-endian host");

namespace {

// The reference implementation refuses headers over 100 MB; a drafter's is a few KB.
constexpr uint64_t kMaxHeaderBytes = 100u << 20;
// JSON nesting deeper than this is never a safetensors header; the bound keeps a hostile file
// from costing stack in the JSON library.
constexpr int kMaxJsonDepth = 16;
constexpr size_t kMaxDims = 8;

struct DTypeName {
  StDType type;
  const char* name;
  size_t size;
};
constexpr DTypeName kDTypes[] = {
    {StDType::kF32, "F32", 4}, {StDType::kF16, "F16", 2}, {StDType::kBF16, "BF16", 2},
    {StDType::kI8, "I8", 1},   {StDType::kI32, "I32", 4},
};

// Depth of bracket nesting outside strings, or -1 past kMaxJsonDepth.
int json_depth(const char* p, size_t n) {
  int depth = 0, max_depth = 0;
  bool in_string = false;
  for (size_t i = 0; i < n; ++i) {
    const char ch = p[i];
    if (in_string) {
      if (ch == '\\') {
        ++i;
      } else if (ch == '"') {
        in_string = false;
      }
    } else if (ch == '"') {
      in_string = true;
    } else if (ch == '{' || ch == '[') {
      max_depth = std::max(max_depth, ++depth);
      if (max_depth > kMaxJsonDepth) return -1;
    } else if (ch == '}' || ch == ']') {
      --depth;
    }
  }
  return max_depth;
}

Status entry_error(const std::string& name, const std::string& what) {
  return Status::error("tensor '" + name + "': " + what);
}

}  // namespace

const char* st_dtype_name(StDType type) {
  for (const auto& d : kDTypes) {
    if (d.type == type) return d.name;
  }
  return "?";
}

size_t st_dtype_size(StDType type) {
  for (const auto& d : kDTypes) {
    if (d.type == type) return d.size;
  }
  return 0;
}

Expected<std::unique_ptr<SafetensorsFile>> SafetensorsFile::open(const std::string& path) {
  SALVO_ASSIGN_OR_RETURN(std::unique_ptr<MappedFile> mapped, MappedFile::open(path));
  auto parsed = parse(mapped->data(), mapped->size());
  if (!parsed.ok()) return parsed.status().with_context(path);
  parsed.value()->file_ = std::move(mapped);
  return parsed;
}

Expected<std::unique_ptr<SafetensorsFile>> SafetensorsFile::parse(const uint8_t* data,
                                                                  size_t size) {
  if (size < 8) {
    return Status::error("file of " + std::to_string(size) +
                         " bytes is too short for a safetensors header length (8 bytes)");
  }
  uint64_t header_len = 0;
  std::memcpy(&header_len, data, 8);
  if (header_len > kMaxHeaderBytes) {
    return Status::error("header length " + std::to_string(header_len) +
                         " exceeds the 100 MB limit (not a safetensors file?)");
  }
  if (header_len > size - 8) {
    return Status::error("header length " + std::to_string(header_len) +
                         " runs past the end of the " + std::to_string(size) + "-byte file");
  }
  const char* text = reinterpret_cast<const char*>(data + 8);
  if (json_depth(text, header_len) < 0) {
    return Status::error("header JSON nests deeper than " + std::to_string(kMaxJsonDepth) +
                         " levels");
  }
  const nlohmann::json header =
      nlohmann::json::parse(text, text + header_len, nullptr, /*allow_exceptions=*/false);
  if (header.is_discarded()) return Status::error("header is not valid JSON");
  if (!header.is_object()) return Status::error("header JSON is not an object");

  std::unique_ptr<SafetensorsFile> f(new SafetensorsFile());
  f->data_ = data;
  f->size_ = size;
  f->data_offset_ = 8 + header_len;
  const uint64_t data_size = size - f->data_offset_;
  for (const auto& [name, entry] : header.items()) {
    if (name == "__metadata__") {
      if (!entry.is_object()) return Status::error("'__metadata__' is not an object");
      for (const auto& [key, value] : entry.items()) {
        if (!value.is_string()) {
          return Status::error("'__metadata__' value of '" + key + "' is not a string");
        }
        f->metadata_[key] = value.get<std::string>();
      }
      continue;
    }
    if (!entry.is_object()) return entry_error(name, "entry is not an object");
    StTensorInfo info;
    info.name = name;
    const auto dtype = entry.find("dtype");
    if (dtype == entry.end() || !dtype->is_string()) {
      return entry_error(name, "missing string field 'dtype'");
    }
    const std::string dtype_name = dtype->get<std::string>();
    const auto known = std::find_if(std::begin(kDTypes), std::end(kDTypes),
                                    [&](const DTypeName& d) { return dtype_name == d.name; });
    if (known == std::end(kDTypes)) {
      return entry_error(
          name, "dtype '" + dtype_name + "' is not supported (supported: F32, F16, BF16, I8, I32)");
    }
    info.dtype = known->type;
    const auto shape = entry.find("shape");
    if (shape == entry.end() || !shape->is_array()) {
      return entry_error(name, "missing array field 'shape'");
    }
    if (shape->size() > kMaxDims) {
      return entry_error(name, "shape has " + std::to_string(shape->size()) + " dimensions");
    }
    // Element count with overflow checks: each dimension and the product stay below 2^62.
    uint64_t n_elements = 1;
    for (const auto& dim : *shape) {
      if (!dim.is_number_unsigned()) {
        return entry_error(name, "shape holds a value that is not a non-negative integer");
      }
      const uint64_t d = dim.get<uint64_t>();
      constexpr uint64_t kLimit = uint64_t{1} << 62;
      if (d >= kLimit || (d != 0 && n_elements > kLimit / d)) {
        return entry_error(name, "shape is too large");
      }
      n_elements *= d;
      info.shape.push_back(static_cast<int64_t>(d));
    }
    info.n_elements = static_cast<int64_t>(n_elements);
    const auto offsets = entry.find("data_offsets");
    if (offsets == entry.end() || !offsets->is_array() || offsets->size() != 2 ||
        !(*offsets)[0].is_number_unsigned() || !(*offsets)[1].is_number_unsigned()) {
      return entry_error(name, "'data_offsets' must be two non-negative integers");
    }
    const uint64_t begin = (*offsets)[0].get<uint64_t>();
    const uint64_t end = (*offsets)[1].get<uint64_t>();
    if (begin > end) {
      return entry_error(name, "data_offsets [" + std::to_string(begin) + ", " +
                                   std::to_string(end) + "] are reversed");
    }
    if (end > data_size) {
      return entry_error(name, "data_offsets end " + std::to_string(end) +
                                   " runs past the end of the data (" + std::to_string(data_size) +
                                   " bytes)");
    }
    if (end - begin != n_elements * known->size) {
      return entry_error(name, std::to_string(end - begin) + " bytes of data for " +
                                   std::to_string(n_elements) + " " + dtype_name +
                                   " elements (expected " +
                                   std::to_string(n_elements * known->size) + ")");
    }
    info.offset = begin;
    info.size_bytes = end - begin;
    f->tensors_.push_back(std::move(info));
  }
  // No two tensors may share bytes (empty tensors occupy none).
  std::vector<const StTensorInfo*> by_offset;
  for (const StTensorInfo& t : f->tensors_) {
    if (t.size_bytes > 0) by_offset.push_back(&t);
  }
  std::sort(by_offset.begin(), by_offset.end(),
            [](const StTensorInfo* a, const StTensorInfo* b) { return a->offset < b->offset; });
  for (size_t i = 1; i < by_offset.size(); ++i) {
    if (by_offset[i]->offset < by_offset[i - 1]->offset + by_offset[i - 1]->size_bytes) {
      return Status::error("tensors '" + by_offset[i - 1]->name + "' and '" + by_offset[i]->name +
                           "' overlap");
    }
  }
  return f;
}

const StTensorInfo* SafetensorsFile::find(std::string_view name) const {
  for (const StTensorInfo& t : tensors_) {
    if (t.name == name) return &t;
  }
  return nullptr;
}

std::vector<float> SafetensorsFile::to_f32(const StTensorInfo& info) const {
  std::vector<float> out(static_cast<size_t>(info.n_elements));
  const uint8_t* p = tensor_data(info);
  for (size_t i = 0; i < out.size(); ++i) {
    switch (info.dtype) {
      case StDType::kF32:
        std::memcpy(&out[i], p + 4 * i, 4);
        break;
      case StDType::kF16: {
        uint16_t h;
        std::memcpy(&h, p + 2 * i, 2);
        out[i] = fp16_to_fp32(h);
        break;
      }
      case StDType::kBF16: {
        uint16_t h;
        std::memcpy(&h, p + 2 * i, 2);
        out[i] = bf16_to_fp32(h);
        break;
      }
      case StDType::kI8:
        out[i] = static_cast<float>(static_cast<int8_t>(p[i]));
        break;
      case StDType::kI32: {
        int32_t v;
        std::memcpy(&v, p + 4 * i, 4);
        out[i] = static_cast<float>(v);
        break;
      }
    }
  }
  return out;
}

}  // namespace salvo
