// The safetensors reader on hand-made files: a valid one read back, and each kind of malformed
// header rejected with a message naming the problem.
#include "io/safetensors.h"

#include <gtest/gtest.h>

#include <cstring>
#include <string>
#include <vector>

namespace salvo {
namespace {

std::vector<uint8_t> file_of(const std::string& header, size_t data_bytes) {
  std::vector<uint8_t> bytes(8 + header.size() + data_bytes, 0);
  const uint64_t n = header.size();
  std::memcpy(bytes.data(), &n, 8);
  std::memcpy(bytes.data() + 8, header.data(), header.size());
  return bytes;
}

std::string error_of(const std::vector<uint8_t>& bytes) {
  auto parsed = SafetensorsFile::parse(bytes.data(), bytes.size());
  return parsed.ok() ? "" : parsed.status().message();
}

TEST(Safetensors, ReadsTensorsAndConverts) {
  std::vector<uint8_t> bytes = file_of(
      R"({"__metadata__": {"format": "pt"},
          "w": {"dtype": "I8", "shape": [2, 2], "data_offsets": [0, 4]},
          "s": {"dtype": "F32", "shape": [2], "data_offsets": [4, 12]},
          "h": {"dtype": "BF16", "shape": [1], "data_offsets": [12, 14]}})",
      14);
  const size_t base = bytes.size() - 14;
  const int8_t q[4] = {1, -2, 3, -127};
  std::memcpy(&bytes[base], q, 4);
  const float s[2] = {0.5f, -4.0f};
  std::memcpy(&bytes[base + 4], s, 8);
  const uint16_t bf16_one = 0x3f80;
  std::memcpy(&bytes[base + 12], &bf16_one, 2);
  auto parsed = SafetensorsFile::parse(bytes.data(), bytes.size());
  ASSERT_TRUE(parsed.ok()) << parsed.status().message();
  const SafetensorsFile& f = **parsed;
  EXPECT_EQ(f.metadata().at("format"), "pt");
  ASSERT_NE(f.find("w"), nullptr);
  EXPECT_EQ(f.find("w")->shape, (std::vector<int64_t>{2, 2}));
  EXPECT_EQ(f.to_f32(*f.find("w")), (std::vector<float>{1, -2, 3, -127}));
  EXPECT_EQ(f.to_f32(*f.find("s")), (std::vector<float>{0.5f, -4.0f}));
  EXPECT_EQ(f.to_f32(*f.find("h")), (std::vector<float>{1.0f}));
  EXPECT_EQ(f.find("missing"), nullptr);
}

TEST(Safetensors, RejectsMalformedFiles) {
  struct Case {
    std::vector<uint8_t> bytes;
    std::string message;
  };
  std::vector<uint8_t> short_file = {1, 2, 3};
  std::vector<uint8_t> huge = file_of("{}", 0);
  const uint64_t big = uint64_t{1} << 40;
  std::memcpy(huge.data(), &big, 8);
  std::vector<uint8_t> past = file_of("{}", 0);
  const uint64_t len = 100;
  std::memcpy(past.data(), &len, 8);
  const Case cases[] = {
      {short_file, "too short"},
      {huge, "exceeds"},
      {past, "runs past the end"},
      {file_of("{not json", 0), "not valid JSON"},
      {file_of("[1, 2]", 0), "not an object"},
      {file_of(std::string(40, '[') + std::string(40, ']'), 0), "nests deeper"},
      {file_of(R"({"a": {"dtype": "F64", "shape": [1], "data_offsets": [0, 8]}})", 8),
       "dtype 'F64' is not supported"},
      {file_of(R"({"a": {"shape": [1], "data_offsets": [0, 4]}})", 4), "'dtype'"},
      {file_of(R"({"a": {"dtype": "F32", "shape": [-1], "data_offsets": [0, 4]}})", 4),
       "non-negative"},
      {file_of(R"({"a": {"dtype": "F32", "shape": [2], "data_offsets": [0, 4]}})", 4),
       "expected 8"},
      {file_of(R"({"a": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]}})", 4),
       "past the end of the data"},
      {file_of(R"({"a": {"dtype": "F32", "shape": [1], "data_offsets": [4, 0]}})", 4), "reversed"},
      {file_of(R"({"a": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]},
                   "b": {"dtype": "F32", "shape": [2], "data_offsets": [4, 12]}})",
               12),
       "overlap"},
      {file_of(R"({"a": {"dtype": "F32", "shape": [4611686018427387904, 4],
                   "data_offsets": [0, 4]}})",
               4),
       "too large"},
  };
  for (const Case& c : cases) {
    const std::string error = error_of(c.bytes);
    EXPECT_NE(error.find(c.message), std::string::npos) << "got '" << error << "'";
  }
}

}  // namespace
}  // namespace salvo
