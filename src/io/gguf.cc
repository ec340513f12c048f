#include "io/gguf.h"

#include <sys/mman.h>

#include <bit>
#include <cstring>
#include <limits>
#include <unordered_set>
#include <utility>

namespace salvo {

// GGUF stores every number little-endian; reading with memcpy is only right on such hosts.
static_assert(std::endian::native == std::endian::little,
              "the GGUF reader needs a little-endian host");

namespace {

constexpr uint32_t kGgufMagic = 0x46554747;  // "GGUF" read as a little-endian u32
constexpr uint32_t kMaxTensorDims = 4;       // GGML_MAX_DIMS
// Nested arrays are legal but no model uses them; the bound keeps recursion (stack) finite.
constexpr int kMaxArrayDepth = 4;
// Each GgufValue costs ~200 bytes of heap for 12 bytes of file, so arrays of arrays are capped
// to keep a hostile file from turning into a memory blow-up many times its size.
constexpr uint64_t kMaxInnerArrays = 1 << 16;
// Alignment is a u32 in the spec; anything above this is nonsense and would make padding huge.
constexpr uint64_t kMaxAlignment = uint64_t{1} << 30;

// Smallest encodings, used to bound counts by the bytes left before allocating anything.
constexpr uint64_t kMinStringBytes = 8;                    // u64 length, empty body
constexpr uint64_t kMinArrayBytes = 4 + 8;                 // element type + count
constexpr uint64_t kMinKvBytes = kMinStringBytes + 4 + 1;  // key, type, 1-byte value
constexpr uint64_t kMinTensorInfoBytes = kMinStringBytes + 4 + 8 + 4 + 8;  // 1 dim

bool is_valid_type(uint32_t id) { return id <= static_cast<uint32_t>(GgufType::kFloat64); }

bool is_integer_type(GgufType t) {
  switch (t) {
    case GgufType::kUint8:
    case GgufType::kInt8:
    case GgufType::kUint16:
    case GgufType::kInt16:
    case GgufType::kUint32:
    case GgufType::kInt32:
    case GgufType::kUint64:
    case GgufType::kInt64:
      return true;
    default:
      return false;
  }
}

bool is_unsigned_type(GgufType t) {
  return t == GgufType::kUint8 || t == GgufType::kUint16 || t == GgufType::kUint32 ||
         t == GgufType::kUint64 || t == GgufType::kBool;
}

bool is_float_type(GgufType t) { return t == GgufType::kFloat32 || t == GgufType::kFloat64; }

// Encoded size of a scalar, or the minimum size of a string/array.
uint64_t min_encoded_bytes(GgufType t) {
  switch (t) {
    case GgufType::kUint8:
    case GgufType::kInt8:
    case GgufType::kBool:
      return 1;
    case GgufType::kUint16:
    case GgufType::kInt16:
      return 2;
    case GgufType::kUint32:
    case GgufType::kInt32:
    case GgufType::kFloat32:
      return 4;
    case GgufType::kUint64:
    case GgufType::kInt64:
    case GgufType::kFloat64:
      return 8;
    case GgufType::kString:
      return kMinStringBytes;
    case GgufType::kArray:
      return kMinArrayBytes;
  }
  return 1;
}

template <typename T>
T load(const uint8_t* p) {
  T v;
  std::memcpy(&v, p, sizeof(T));
  return v;
}

// A decoded number: unsigned types (and bool) fill u, signed types i, float types f.
struct Scalar {
  uint64_t u = 0;
  int64_t i = 0;
  double f = 0;
};

// `p` must have min_encoded_bytes(type) readable bytes; type is a scalar type.
Scalar decode_scalar(GgufType type, const uint8_t* p) {
  Scalar s;
  switch (type) {
    case GgufType::kUint8:
    case GgufType::kBool:
      s.u = load<uint8_t>(p);
      break;
    case GgufType::kUint16:
      s.u = load<uint16_t>(p);
      break;
    case GgufType::kUint32:
      s.u = load<uint32_t>(p);
      break;
    case GgufType::kUint64:
      s.u = load<uint64_t>(p);
      break;
    case GgufType::kInt8:
      s.i = load<int8_t>(p);
      break;
    case GgufType::kInt16:
      s.i = load<int16_t>(p);
      break;
    case GgufType::kInt32:
      s.i = load<int32_t>(p);
      break;
    case GgufType::kInt64:
      s.i = load<int64_t>(p);
      break;
    case GgufType::kFloat32:
      s.f = load<float>(p);
      break;
    case GgufType::kFloat64:
      s.f = load<double>(p);
      break;
    case GgufType::kString:
    case GgufType::kArray:
      break;
  }
  return s;
}

std::string quoted(std::string_view s) {
  // Names come from the file; cap and sanitise them so an error message stays one short line.
  constexpr size_t kMaxShown = 80;
  std::string out = "'";
  for (size_t i = 0; i < s.size() && i < kMaxShown; ++i) {
    unsigned char c = static_cast<unsigned char>(s[i]);
    out += (c >= 0x20 && c < 0x7f) ? static_cast<char>(c) : '?';
  }
  if (s.size() > kMaxShown) out += "...";
  return out + "'";
}

std::string supported_type_names() {
  std::string names;
  for (uint32_t id = 0; id < 64; ++id) {
    if (auto t = dtype_traits(id)) names += (names.empty() ? "" : ", ") + std::string(t->name);
  }
  return names;
}

}  // namespace

std::string_view gguf_type_name(GgufType type) {
  switch (type) {
    case GgufType::kUint8:
      return "uint8";
    case GgufType::kInt8:
      return "int8";
    case GgufType::kUint16:
      return "uint16";
    case GgufType::kInt16:
      return "int16";
    case GgufType::kUint32:
      return "uint32";
    case GgufType::kInt32:
      return "int32";
    case GgufType::kFloat32:
      return "float32";
    case GgufType::kBool:
      return "bool";
    case GgufType::kString:
      return "string";
    case GgufType::kArray:
      return "array";
    case GgufType::kUint64:
      return "uint64";
    case GgufType::kInt64:
      return "int64";
    case GgufType::kFloat64:
      return "float64";
  }
  return "unknown";
}

size_t GgufValue::array_size() const {
  if (type != GgufType::kArray) return 0;
  if (elem_type == GgufType::kString) return strings.size();
  if (elem_type == GgufType::kArray) return arrays.size();
  if (is_float_type(elem_type)) return floats.size();
  return ints.size();
}

// Reads the byte stream front to back. Every read checks the bytes left first, so the parser
// never touches memory past `size_`; every count is bounded by those bytes before anything is
// allocated from it.
class GgufParser {
 public:
  GgufParser(const uint8_t* data, size_t size, GgufFile* out)
      : data_(data), size_(size), out_(out) {}

  Status run();

 private:
  size_t remaining() const { return size_ - pos_; }

  Status error_at(size_t offset, const std::string& what) const {
    return Status::error("gguf: at byte " + std::to_string(offset) + ": " + what);
  }

  Status need(uint64_t n, const std::string& what) const {
    if (n > remaining()) {
      return error_at(pos_, what + " needs " + std::to_string(n) +
                                " bytes but the file ends after " + std::to_string(remaining()) +
                                " (truncated file?)");
    }
    return Status();
  }

  template <typename T>
  Status read(T* value, const std::string& what) {
    SALVO_RETURN_IF_ERROR(need(sizeof(T), what));
    std::memcpy(value, data_ + pos_, sizeof(T));
    pos_ += sizeof(T);
    return Status();
  }

  Status read_string(std::string* s, const std::string& what);
  Status read_string(std::string_view* s, const std::string& what);
  Status read_type(GgufType* type, const std::string& what);
  Status read_value(GgufType type, int depth, GgufValue* value, const std::string& what);
  Status read_array(int depth, GgufValue* value, const std::string& what);
  Status read_kv(uint64_t index, std::unordered_set<std::string>* keys);
  Status apply_alignment();
  Status read_tensor_info(uint64_t index, std::unordered_set<std::string>* names);
  Status check_tensor_data(const GgufTensorInfo& info, size_t index) const;

  const uint8_t* data_;
  size_t size_;
  size_t pos_ = 0;
  GgufFile* out_;
  uint64_t inner_arrays_ = 0;
};

Status GgufParser::read_string(std::string* s, const std::string& what) {
  std::string_view view;
  SALVO_RETURN_IF_ERROR(read_string(&view, what));
  s->assign(view);
  return Status();
}

Status GgufParser::read_string(std::string_view* s, const std::string& what) {
  const size_t at = pos_;
  uint64_t length = 0;
  SALVO_RETURN_IF_ERROR(read(&length, what + " string length"));
  if (length > remaining()) {
    return error_at(at, what + ": string length " + std::to_string(length) + " exceeds the " +
                            std::to_string(remaining()) + " bytes left in the file");
  }
  *s = std::string_view(reinterpret_cast<const char*>(data_ + pos_), static_cast<size_t>(length));
  pos_ += static_cast<size_t>(length);
  return Status();
}

Status GgufParser::read_type(GgufType* type, const std::string& what) {
  const size_t at = pos_;
  uint32_t id = 0;
  SALVO_RETURN_IF_ERROR(read(&id, what + " value type"));
  if (!is_valid_type(id)) {
    return error_at(at, what + ": invalid value type " + std::to_string(id) + " (expected 0..12)");
  }
  *type = static_cast<GgufType>(id);
  return Status();
}

Status GgufParser::read_value(GgufType type, int depth, GgufValue* value, const std::string& what) {
  value->type = type;
  if (type == GgufType::kString) return read_string(&value->s, what);
  if (type == GgufType::kArray) return read_array(depth, value, what);
  const uint64_t bytes = min_encoded_bytes(type);
  SALVO_RETURN_IF_ERROR(need(bytes, what));
  const Scalar scalar = decode_scalar(type, data_ + pos_);
  if (type == GgufType::kBool && scalar.u > 1) {
    return error_at(pos_, what + ": bool value " + std::to_string(scalar.u) + " (expected 0 or 1)");
  }
  value->u = scalar.u;
  value->i = scalar.i;
  value->f = scalar.f;
  pos_ += bytes;
  return Status();
}

Status GgufParser::read_array(int depth, GgufValue* value, const std::string& what) {
  if (depth >= kMaxArrayDepth) {
    return error_at(pos_,
                    what + ": arrays nested more than " + std::to_string(kMaxArrayDepth) + " deep");
  }
  GgufType elem = GgufType::kUint8;
  SALVO_RETURN_IF_ERROR(read_type(&elem, what + " array element"));
  value->elem_type = elem;
  const size_t count_at = pos_;
  uint64_t count = 0;
  SALVO_RETURN_IF_ERROR(read(&count, what + " array length"));
  const uint64_t min_bytes = min_encoded_bytes(elem);
  if (count > remaining() / min_bytes) {
    return error_at(count_at, what + ": array of " + std::to_string(count) + " " +
                                  std::string(gguf_type_name(elem)) +
                                  " elements cannot fit in the " + std::to_string(remaining()) +
                                  " bytes left in the file");
  }
  const size_t n = static_cast<size_t>(count);
  if (elem == GgufType::kString) {
    value->strings.resize(n);
    for (size_t k = 0; k < n; ++k) {
      SALVO_RETURN_IF_ERROR(read_string(&value->strings[k], what + "[" + std::to_string(k) + "]"));
    }
  } else if (elem == GgufType::kArray) {
    inner_arrays_ += count;
    if (inner_arrays_ > kMaxInnerArrays) {
      return error_at(count_at, what + ": more than " + std::to_string(kMaxInnerArrays) +
                                    " nested arrays in the file");
    }
    value->arrays.resize(n);
    for (size_t k = 0; k < n; ++k) {
      // Inner arrays carry no type tag of their own: the element type says they are arrays.
      value->arrays[k].type = GgufType::kArray;
      SALVO_RETURN_IF_ERROR(
          read_array(depth + 1, &value->arrays[k], what + "[" + std::to_string(k) + "]"));
    }
  } else if (is_float_type(elem)) {
    value->floats.resize(n);
    for (size_t k = 0; k < n; ++k) {
      value->floats[k] = elem == GgufType::kFloat32 ? load<float>(data_ + pos_ + 4 * k)
                                                    : load<double>(data_ + pos_ + 8 * k);
    }
    pos_ += n * min_bytes;  // bounded above: count * min_bytes <= remaining()
  } else {
    // Integers and bools: the count bound above already guarantees the bytes are there.
    value->ints.resize(n);
    for (size_t k = 0; k < n; ++k) {
      const Scalar scalar = decode_scalar(elem, data_ + pos_ + k * min_bytes);
      if (elem == GgufType::kBool && scalar.u > 1) {
        return error_at(pos_ + k, what + "[" + std::to_string(k) + "]: bool value " +
                                      std::to_string(scalar.u) + " (expected 0 or 1)");
      }
      if (!is_unsigned_type(elem)) {
        value->ints[k] = scalar.i;
      } else if (scalar.u > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
        value->ints[k] = std::numeric_limits<int64_t>::max();
      } else {
        value->ints[k] = static_cast<int64_t>(scalar.u);
      }
    }
    pos_ += n * min_bytes;
  }
  return Status();
}

Status GgufParser::read_kv(uint64_t index, std::unordered_set<std::string>* keys) {
  const size_t at = pos_;
  GgufKv kv;
  const std::string what = "kv " + std::to_string(index);
  SALVO_RETURN_IF_ERROR(read_string(&kv.key, what + " key"));
  const std::string named = what + " " + quoted(kv.key);
  if (kv.key.empty()) return error_at(at, what + ": empty key");
  if (!keys->insert(kv.key).second) return error_at(at, named + ": duplicate key");
  GgufType type = GgufType::kUint8;
  SALVO_RETURN_IF_ERROR(read_type(&type, named));
  SALVO_RETURN_IF_ERROR(read_value(type, 0, &kv.value, named));
  out_->metadata_.push_back(std::move(kv));
  return Status();
}

Status GgufParser::apply_alignment() {
  const GgufValue* v = out_->find("general.alignment");
  if (v == nullptr) return Status();
  const std::string what = "general.alignment";
  uint64_t align = 0;
  if (is_unsigned_type(v->type) && v->type != GgufType::kBool) {
    align = v->u;
  } else if (is_integer_type(v->type) && v->i > 0) {
    align = static_cast<uint64_t>(v->i);
  } else if (!is_integer_type(v->type)) {
    return Status::error("gguf: " + what + " has type " + std::string(gguf_type_name(v->type)) +
                         ", expected an unsigned integer");
  }
  if (align == 0 || !std::has_single_bit(align) || align > kMaxAlignment) {
    const std::string shown =
        is_unsigned_type(v->type) ? std::to_string(v->u) : std::to_string(v->i);
    return Status::error("gguf: " + what + " is " + shown +
                         ", expected a nonzero power of two no larger than 2^30");
  }
  out_->alignment_ = static_cast<size_t>(align);
  return Status();
}

Status GgufParser::read_tensor_info(uint64_t index, std::unordered_set<std::string>* names) {
  const size_t at = pos_;
  GgufTensorInfo info;
  const std::string what = "tensor " + std::to_string(index);
  SALVO_RETURN_IF_ERROR(read_string(&info.name, what + " name"));
  const std::string named = what + " " + quoted(info.name);
  if (info.name.empty()) return error_at(at, what + ": empty name");
  if (!names->insert(info.name).second) return error_at(at, named + ": duplicate tensor name");

  const size_t dims_at = pos_;
  uint32_t n_dims = 0;
  SALVO_RETURN_IF_ERROR(read(&n_dims, named + " n_dims"));
  if (n_dims == 0 || n_dims > kMaxTensorDims) {
    return error_at(dims_at, named + ": n_dims is " + std::to_string(n_dims) + ", expected 1.." +
                                 std::to_string(kMaxTensorDims));
  }
  int64_t n_elements = 1;
  for (uint32_t d = 0; d < n_dims; ++d) {
    const size_t dim_at = pos_;
    uint64_t dim = 0;
    SALVO_RETURN_IF_ERROR(read(&dim, named + " dim " + std::to_string(d)));
    if (dim == 0 || dim > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
      return error_at(dim_at, named + ": dim " + std::to_string(d) + " is " + std::to_string(dim) +
                                  ", expected 1..2^63-1");
    }
    if (__builtin_mul_overflow(n_elements, static_cast<int64_t>(dim), &n_elements)) {
      return error_at(dim_at,
                      named + ": element count overflows int64 at dim " + std::to_string(d));
    }
    info.dims.push_back(static_cast<int64_t>(dim));
  }
  info.n_elements = n_elements;

  const size_t type_at = pos_;
  uint32_t type_id = 0;
  SALVO_RETURN_IF_ERROR(read(&type_id, named + " type"));
  const auto traits = dtype_traits(type_id);
  if (!traits) {
    return error_at(type_at, named + ": unsupported tensor type id " + std::to_string(type_id) +
                                 " (salvo supports " + supported_type_names() + ")");
  }
  info.type = traits->type;
  if (info.dims[0] % traits->block_size != 0) {
    return error_at(dims_at, named + ": row length " + std::to_string(info.dims[0]) +
                                 " is not a multiple of the " + std::string(traits->name) +
                                 " block size " + std::to_string(traits->block_size));
  }
  const uint64_t blocks = static_cast<uint64_t>(n_elements / traits->block_size);
  uint64_t bytes = 0;
  if (__builtin_mul_overflow(blocks, static_cast<uint64_t>(traits->block_bytes), &bytes) ||
      bytes > size_) {
    return error_at(dims_at, named + ": " + std::to_string(n_elements) + " " +
                                 std::string(traits->name) +
                                 " elements are larger than the whole file (" +
                                 std::to_string(size_) + " bytes)");
  }
  info.size_bytes = static_cast<size_t>(bytes);

  const size_t offset_at = pos_;
  SALVO_RETURN_IF_ERROR(read(&info.offset, named + " data offset"));
  if (info.offset % out_->alignment_ != 0) {
    return error_at(offset_at, named + ": data offset " + std::to_string(info.offset) +
                                   " is not a multiple of the alignment " +
                                   std::to_string(out_->alignment_));
  }
  out_->tensors_.push_back(std::move(info));
  return Status();
}

Status GgufParser::check_tensor_data(const GgufTensorInfo& info, size_t index) const {
  const uint64_t data_start = out_->data_offset_;
  // Compare without forming sums that could wrap: every term is checked against the file size.
  const bool fits =
      info.offset <= size_ - data_start && info.size_bytes <= size_ - data_start - info.offset;
  if (fits) return Status();
  const std::string start = info.offset <= std::numeric_limits<uint64_t>::max() - data_start
                                ? std::to_string(data_start + info.offset)
                                : "data section + " + std::to_string(info.offset);
  return Status::error("gguf: tensor " + std::to_string(index) + " " + quoted(info.name) +
                       ": data [offset " + start + ", " + std::to_string(info.size_bytes) +
                       " bytes] ends past the end of the file (" + std::to_string(size_) +
                       " bytes)");
}

Status GgufParser::run() {
  uint32_t magic = 0;
  SALVO_RETURN_IF_ERROR(read(&magic, "magic"));
  if (magic != kGgufMagic) {
    std::string shown(reinterpret_cast<const char*>(data_), 4);
    return error_at(0, "bad magic " + quoted(shown) + " (expected 'GGUF'): not a GGUF file");
  }
  uint32_t version = 0;
  SALVO_RETURN_IF_ERROR(read(&version, "version"));
  if (version == 1) {
    return error_at(4,
                    "GGUF version 1 is not supported (it uses 32-bit counts); expected 2 or 3 "
                    "- re-convert the model with a current llama.cpp");
  }
  if (version != 2 && version != 3) {
    std::string hint;
    if (version == 0x02000000 || version == 0x03000000) hint = "; the file looks big-endian";
    return error_at(
        4, "unsupported GGUF version " + std::to_string(version) + ", expected 2 or 3" + hint);
  }
  out_->version_ = version;

  const size_t counts_at = pos_;
  uint64_t n_tensors = 0;
  uint64_t n_kv = 0;
  SALVO_RETURN_IF_ERROR(read(&n_tensors, "tensor count"));
  SALVO_RETURN_IF_ERROR(read(&n_kv, "metadata count"));
  // Each entry takes at least a fixed number of bytes, so counts the file cannot hold are lies.
  if (n_tensors > remaining() / kMinTensorInfoBytes) {
    return error_at(counts_at, "tensor count " + std::to_string(n_tensors) + " cannot fit in the " +
                                   std::to_string(remaining()) + " bytes left in the file");
  }
  if (n_kv > remaining() / kMinKvBytes) {
    return error_at(counts_at + 8, "metadata count " + std::to_string(n_kv) +
                                       " cannot fit in the " + std::to_string(remaining()) +
                                       " bytes left in the file");
  }
  if (n_tensors * kMinTensorInfoBytes + n_kv * kMinKvBytes > remaining()) {
    return error_at(counts_at, std::to_string(n_tensors) + " tensors and " + std::to_string(n_kv) +
                                   " metadata entries cannot fit in the " +
                                   std::to_string(remaining()) + " bytes left in the file");
  }

  std::unordered_set<std::string> keys;
  out_->metadata_.reserve(static_cast<size_t>(n_kv));
  for (uint64_t k = 0; k < n_kv; ++k) SALVO_RETURN_IF_ERROR(read_kv(k, &keys));
  SALVO_RETURN_IF_ERROR(apply_alignment());

  std::unordered_set<std::string> names;
  out_->tensors_.reserve(static_cast<size_t>(n_tensors));
  for (uint64_t t = 0; t < n_tensors; ++t) SALVO_RETURN_IF_ERROR(read_tensor_info(t, &names));

  // The data section starts at the next multiple of the alignment after the tensor infos.
  const size_t align = out_->alignment_;
  const uint64_t data_start = (static_cast<uint64_t>(pos_) + align - 1) / align * align;
  if (n_tensors > 0 && data_start > size_) {
    return error_at(pos_, "the data section would start at byte " + std::to_string(data_start) +
                              ", past the end of the file (" + std::to_string(size_) + " bytes)");
  }
  out_->data_offset_ = static_cast<size_t>(data_start);
  for (size_t t = 0; t < out_->tensors_.size(); ++t) {
    SALVO_RETURN_IF_ERROR(check_tensor_data(out_->tensors_[t], t));
  }
  return Status();
}

Expected<std::unique_ptr<GgufFile>> GgufFile::parse(const uint8_t* data, size_t size) {
  std::unique_ptr<GgufFile> file(new GgufFile());
  file->data_ = data;
  file->size_ = size;
  GgufParser parser(data, size, file.get());
  SALVO_RETURN_IF_ERROR(parser.run());
  return file;
}

Expected<std::unique_ptr<GgufFile>> GgufFile::open(const std::string& path) {
  auto mapped = MappedFile::open(path);
  if (!mapped.ok()) return mapped.status();
  std::unique_ptr<MappedFile> mapping = std::move(mapped).value();
  auto parsed = parse(mapping->data(), mapping->size());
  if (!parsed.ok()) return parsed.status().with_context(path);
  std::unique_ptr<GgufFile> file = std::move(parsed).value();
  file->file_ = std::move(mapping);
  file->path_ = path;
  return file;
}

const GgufValue* GgufFile::find(std::string_view key) const {
  for (const auto& kv : metadata_) {
    if (kv.key == key) return &kv.value;
  }
  return nullptr;
}

const GgufTensorInfo* GgufFile::find_tensor(std::string_view name) const {
  for (const auto& t : tensors_) {
    if (t.name == name) return &t;
  }
  return nullptr;
}

namespace {

Status missing_key(std::string_view key) {
  return Status::error("gguf: metadata key '" + std::string(key) + "' is missing");
}

Status wrong_type(std::string_view key, const GgufValue& v, std::string_view expected) {
  std::string actual(gguf_type_name(v.type));
  if (v.type == GgufType::kArray) actual += " of " + std::string(gguf_type_name(v.elem_type));
  return Status::error("gguf: metadata key '" + std::string(key) + "' has type " + actual +
                       ", expected " + std::string(expected));
}

}  // namespace

Expected<std::string> GgufFile::get_string(std::string_view key) const {
  const GgufValue* v = find(key);
  if (v == nullptr) return missing_key(key);
  if (v->type != GgufType::kString) return wrong_type(key, *v, "string");
  return v->s;
}

Expected<int64_t> GgufFile::get_int(std::string_view key) const {
  const GgufValue* v = find(key);
  if (v == nullptr) return missing_key(key);
  if (!is_integer_type(v->type)) return wrong_type(key, *v, "an integer");
  if (is_unsigned_type(v->type)) {
    if (v->u > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
      return Status::error("gguf: metadata key '" + std::string(key) + "' value " +
                           std::to_string(v->u) + " does not fit in int64");
    }
    return static_cast<int64_t>(v->u);
  }
  return v->i;
}

Expected<double> GgufFile::get_float(std::string_view key) const {
  const GgufValue* v = find(key);
  if (v == nullptr) return missing_key(key);
  if (!is_float_type(v->type)) return wrong_type(key, *v, "float32 or float64");
  return v->f;
}

Expected<bool> GgufFile::get_bool(std::string_view key) const {
  const GgufValue* v = find(key);
  if (v == nullptr) return missing_key(key);
  if (v->type != GgufType::kBool) return wrong_type(key, *v, "bool");
  return v->u != 0;
}

Expected<std::vector<std::string>> GgufFile::get_string_array(std::string_view key) const {
  const GgufValue* v = find(key);
  if (v == nullptr) return missing_key(key);
  if (v->type != GgufType::kArray || v->elem_type != GgufType::kString) {
    return wrong_type(key, *v, "array of string");
  }
  return std::vector<std::string>(v->strings.begin(), v->strings.end());
}

Expected<std::vector<double>> GgufFile::get_float_array(std::string_view key) const {
  const GgufValue* v = find(key);
  if (v == nullptr) return missing_key(key);
  if (v->type != GgufType::kArray || !is_float_type(v->elem_type)) {
    return wrong_type(key, *v, "array of float32 or float64");
  }
  return v->floats;
}

Expected<std::vector<int64_t>> GgufFile::get_int_array(std::string_view key) const {
  const GgufValue* v = find(key);
  if (v == nullptr) return missing_key(key);
  if (v->type != GgufType::kArray || !is_integer_type(v->elem_type)) {
    return wrong_type(key, *v, "array of integers");
  }
  return v->ints;
}

int64_t GgufFile::get_int_or(std::string_view key, int64_t fallback) const {
  auto v = get_int(key);
  return v.ok() ? v.value() : fallback;
}

double GgufFile::get_float_or(std::string_view key, double fallback) const {
  auto v = get_float(key);
  return v.ok() ? v.value() : fallback;
}

bool GgufFile::get_bool_or(std::string_view key, bool fallback) const {
  auto v = get_bool(key);
  return v.ok() ? v.value() : fallback;
}

std::string GgufFile::get_string_or(std::string_view key, std::string fallback) const {
  auto v = get_string(key);
  return v.ok() ? std::move(v).value() : std::move(fallback);
}

void GgufFile::release_pages(const void* p, size_t n) const {
  const size_t page = 4096;
  const auto begin = reinterpret_cast<uintptr_t>(p);
  const uintptr_t first = (begin + page - 1) / page * page;
  const uintptr_t last = (begin + n) / page * page;
  // Advice only: a failure leaves the pages resident, which costs memory, not correctness.
  if (last > first) madvise(reinterpret_cast<void*>(first), last - first, MADV_DONTNEED);
}

}  // namespace salvo
