// libFuzzer entry point for the GGUF reader: parse arbitrary bytes, then touch every metadata
// value through every getter and every byte of every tensor, so ASan/UBSan see any bounds or
// arithmetic mistake the validation let through.
#include <cstddef>
#include <cstdint>
#include <string>

#include "io/gguf.h"

namespace {

// Keeps the reads from being optimised away.
volatile uint64_t g_sink = 0;

void touch_value(const salvo::GgufValue& v) {
  uint64_t acc = v.u + static_cast<uint64_t>(v.i) + v.s.size() + v.array_size();
  for (int64_t x : v.ints) acc += static_cast<uint64_t>(x);
  for (double x : v.floats) acc += x == x ? 1 : 0;
  for (std::string_view s : v.strings) acc += s.size() + (s.empty() ? 0 : s.back());
  for (const salvo::GgufValue& inner : v.arrays) touch_value(inner);
  acc += salvo::gguf_type_name(v.type).size() + salvo::gguf_type_name(v.elem_type).size();
  g_sink = g_sink + acc;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  auto parsed = salvo::GgufFile::parse(data, size);
  if (!parsed.ok()) {
    g_sink = g_sink + parsed.status().message().size();
    return 0;
  }
  const salvo::GgufFile& file = *parsed.value();
  uint64_t acc = file.version() + file.alignment() + file.file_size() + file.data_offset();
  for (const salvo::GgufKv& kv : file.metadata()) {
    touch_value(kv.value);
    const salvo::GgufValue* found = file.find(kv.key);
    acc += found == &kv.value;
    acc += file.get_string(kv.key).ok();
    acc += file.get_int(kv.key).ok();
    acc += file.get_float(kv.key).ok();
    acc += file.get_bool(kv.key).ok();
    acc += file.get_string_array(kv.key).ok();
    acc += file.get_float_array(kv.key).ok();
    acc += file.get_int_array(kv.key).ok();
    acc += static_cast<uint64_t>(file.get_int_or(kv.key, 1));
    acc += file.get_float_or(kv.key, 1.0) != 0;
    acc += file.get_bool_or(kv.key, false);
    acc += file.get_string_or(kv.key, "x").size();
  }
  for (const salvo::GgufTensorInfo& t : file.tensors()) {
    acc += file.find_tensor(t.name) == &t;
    acc += static_cast<uint64_t>(t.rows() + t.n_elements) + t.offset + t.dims.size();
    const uint8_t* bytes = file.tensor_data(t);
    for (size_t k = 0; k < t.size_bytes; ++k) acc += bytes[k];
  }
  g_sink = g_sink + acc;
  return 0;
}
