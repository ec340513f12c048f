// dequant_tool TYPE_ID N IN_FILE OUT_FILE: reads the raw blocks of N elements of GGML type
// TYPE_ID and writes N float32 values, for comparison against gguf-py's dequantizers.
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "backends/cpu/matmul.h"
#include "quant/types.h"

namespace {

bool read_file(const char* path, std::vector<uint8_t>& out) {
  std::FILE* f = std::fopen(path, "rb");
  if (!f) return false;
  uint8_t buf[1 << 16];
  size_t got;
  while ((got = std::fread(buf, 1, sizeof(buf), f)) > 0) out.insert(out.end(), buf, buf + got);
  std::fclose(f);
  return true;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 5) {
    std::fprintf(stderr, "usage: %s TYPE_ID N IN_FILE OUT_FILE\n", argv[0]);
    return 2;
  }
  const auto type_id = static_cast<uint32_t>(std::strtoul(argv[1], nullptr, 10));
  const int64_t n = std::strtoll(argv[2], nullptr, 10);
  const auto traits = salvo::dtype_traits(type_id);
  if (!traits) {
    std::fprintf(stderr, "unsupported type id %u\n", type_id);
    return 2;
  }
  if (n <= 0 || n % traits->block_size != 0) {
    std::fprintf(stderr, "N=%lld is not a positive multiple of the block size %d\n",
                 static_cast<long long>(n), traits->block_size);
    return 2;
  }
  std::vector<uint8_t> in;
  if (!read_file(argv[3], in)) {
    std::fprintf(stderr, "cannot read %s\n", argv[3]);
    return 1;
  }
  const size_t need = salvo::row_bytes(traits->type, n);
  if (in.size() != need) {
    std::fprintf(stderr, "%s holds %zu bytes; %lld elements of %s need %zu\n", argv[3], in.size(),
                 static_cast<long long>(n), std::string(traits->name).c_str(), need);
    return 1;
  }
  std::vector<float> out(static_cast<size_t>(n));
  salvo::dequantize_row(traits->type, in.data(), out.data(), n);
  std::FILE* f = std::fopen(argv[4], "wb");
  if (!f || std::fwrite(out.data(), sizeof(float), out.size(), f) != out.size()) {
    std::fprintf(stderr, "cannot write %s\n", argv[4]);
    return 1;
  }
  std::fclose(f);
  return 0;
}
