// libFuzzer entry point for the safetensors reader: parse arbitrary bytes, then read every
// byte of every tensor and convert it, so ASan/UBSan see any bounds or arithmetic mistake the
// validation let through.
#include <cstddef>
#include <cstdint>

#include "io/safetensors.h"

namespace {

volatile uint64_t g_sink = 0;  // keeps the reads from being optimised away

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  auto parsed = salvo::SafetensorsFile::parse(data, size);
  if (!parsed.ok()) {
    g_sink = g_sink + parsed.status().message().size();
    return 0;
  }
  const salvo::SafetensorsFile& file = *parsed.value();
  uint64_t acc = file.data_offset() + file.metadata().size();
  for (const salvo::StTensorInfo& t : file.tensors()) {
    acc += file.find(t.name) != nullptr;
    const uint8_t* p = file.tensor_data(t);
    for (size_t i = 0; i < t.size_bytes; ++i) acc += p[i];
    for (float x : file.to_f32(t)) acc += x == x ? 1 : 0;
    acc += t.shape.size() + salvo::st_dtype_size(t.dtype);
  }
  g_sink = g_sink + acc;
  return 0;
}
