// GGUF reader: real models, an in-memory round trip of every value type, and hand-broken files
// that must each fail with a message (never crash, never read out of bounds).
#include "io/gguf.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <functional>
#include <limits>
#include <optional>
#include <string>
#include <vector>

namespace salvo {
namespace {

// ---- a tiny GGUF writer, independent of the reader ------------------------------------------

class Bytes {
 public:
  template <typename T>
  void put(T v) {
    const auto* p = reinterpret_cast<const uint8_t*>(&v);
    data.insert(data.end(), p, p + sizeof(T));
  }
  void str(std::string_view s) {
    put<uint64_t>(s.size());
    data.insert(data.end(), s.begin(), s.end());
  }
  void append(const std::vector<uint8_t>& more) {
    data.insert(data.end(), more.begin(), more.end());
  }
  std::vector<uint8_t> data;
};

// One metadata entry, encoded; `type_id` is raw so tests can write invalid ones.
std::vector<uint8_t> kv(std::string_view key, uint32_t type_id,
                        const std::function<void(Bytes&)>& value) {
  Bytes b;
  b.str(key);
  b.put<uint32_t>(type_id);
  value(b);
  return b.data;
}

template <typename T>
std::vector<uint8_t> kv_scalar(std::string_view key, GgufType type, T v) {
  return kv(key, static_cast<uint32_t>(type), [&](Bytes& b) { b.put<T>(v); });
}

std::vector<uint8_t> kv_string(std::string_view key, std::string_view s) {
  return kv(key, static_cast<uint32_t>(GgufType::kString), [&](Bytes& b) { b.str(s); });
}

template <typename T>
std::vector<uint8_t> kv_array(std::string_view key, GgufType elem, const std::vector<T>& items) {
  return kv(key, static_cast<uint32_t>(GgufType::kArray), [&](Bytes& b) {
    b.put<uint32_t>(static_cast<uint32_t>(elem));
    b.put<uint64_t>(items.size());
    for (const T& item : items) b.put<T>(item);
  });
}

struct TestTensor {
  std::string name;
  std::vector<uint64_t> dims;
  uint32_t type_id = 0;
  size_t data_bytes = 0;
  std::optional<uint64_t> offset;  // default: packed in order, aligned
};

struct TestFile {
  uint32_t version = 3;
  std::optional<uint64_t> n_tensors;  // override the written counts
  std::optional<uint64_t> n_kv;
  std::vector<std::vector<uint8_t>> kvs;
  std::vector<TestTensor> tensors;
  uint64_t alignment = 32;  // the padding the writer uses; a matching kv is up to the test

  std::vector<uint8_t> build() const {
    Bytes b;
    b.put<uint32_t>(0x46554747);
    b.put<uint32_t>(version);
    b.put<uint64_t>(n_tensors.value_or(tensors.size()));
    b.put<uint64_t>(n_kv.value_or(kvs.size()));
    for (const auto& e : kvs) b.append(e);
    std::vector<uint64_t> offsets;
    uint64_t next = 0;
    for (const auto& t : tensors) {
      const uint64_t offset = t.offset.value_or(next);
      offsets.push_back(offset);
      next = (offset + t.data_bytes + alignment - 1) / alignment * alignment;
      b.str(t.name);
      b.put<uint32_t>(static_cast<uint32_t>(t.dims.size()));
      for (uint64_t d : t.dims) b.put<uint64_t>(d);
      b.put<uint32_t>(t.type_id);
      b.put<uint64_t>(offset);
    }
    while (b.data.size() % alignment != 0) b.put<uint8_t>(0);
    const size_t data_start = b.data.size();
    for (size_t k = 0; k < tensors.size(); ++k) {
      if (tensors[k].offset) continue;  // overridden offsets point wherever the test wants
      b.data.resize(data_start + offsets[k], 0);
      for (size_t j = 0; j < tensors[k].data_bytes; ++j) b.put<uint8_t>(uint8_t(k * 16 + j));
    }
    return b.data;
  }
};

constexpr uint32_t kF32 = 0;
constexpr uint32_t kQ8_0 = 8;

// Every value type, arrays of several element types, an array of arrays, and two tensors.
TestFile valid_file() {
  TestFile f;
  f.kvs.push_back(kv_string("general.architecture", "llama"));
  f.kvs.push_back(kv_scalar<uint8_t>("t.u8", GgufType::kUint8, 200));
  f.kvs.push_back(kv_scalar<int8_t>("t.i8", GgufType::kInt8, -100));
  f.kvs.push_back(kv_scalar<uint16_t>("t.u16", GgufType::kUint16, 60000));
  f.kvs.push_back(kv_scalar<int16_t>("t.i16", GgufType::kInt16, -30000));
  f.kvs.push_back(kv_scalar<uint32_t>("t.u32", GgufType::kUint32, 4000000000u));
  f.kvs.push_back(kv_scalar<int32_t>("t.i32", GgufType::kInt32, -2000000000));
  f.kvs.push_back(kv_scalar<float>("t.f32", GgufType::kFloat32, 0.5f));
  f.kvs.push_back(kv_scalar<uint8_t>("t.bool", GgufType::kBool, 1));
  f.kvs.push_back(kv_string("t.str", "hello \xe2\x9c\x93"));
  f.kvs.push_back(kv_scalar<uint64_t>("t.u64", GgufType::kUint64, uint64_t{1} << 63));
  f.kvs.push_back(kv_scalar<int64_t>("t.i64", GgufType::kInt64, -(int64_t{1} << 40)));
  f.kvs.push_back(kv_scalar<double>("t.f64", GgufType::kFloat64, 1e300));
  f.kvs.push_back(kv_array<int32_t>("t.arr_i32", GgufType::kInt32, {1, -2, 3}));
  f.kvs.push_back(kv_array<uint8_t>("t.arr_bool", GgufType::kBool, {1, 0}));
  f.kvs.push_back(kv_array<uint64_t>("t.arr_u64", GgufType::kUint64, {7, ~uint64_t{0}}));
  f.kvs.push_back(kv_array<float>("t.arr_f32", GgufType::kFloat32, {1.5f, -2.25f}));
  f.kvs.push_back(kv_array<double>("t.arr_f64", GgufType::kFloat64, {}));
  f.kvs.push_back(kv("t.arr_str", static_cast<uint32_t>(GgufType::kArray), [](Bytes& b) {
    b.put<uint32_t>(static_cast<uint32_t>(GgufType::kString));
    b.put<uint64_t>(3);
    b.str("a");
    b.str("");
    b.str("ccc");
  }));
  f.kvs.push_back(kv("t.arr_nested", static_cast<uint32_t>(GgufType::kArray), [](Bytes& b) {
    b.put<uint32_t>(static_cast<uint32_t>(GgufType::kArray));
    b.put<uint64_t>(2);
    b.put<uint32_t>(static_cast<uint32_t>(GgufType::kInt16));
    b.put<uint64_t>(2);
    b.put<int16_t>(5);
    b.put<int16_t>(-6);
    b.put<uint32_t>(static_cast<uint32_t>(GgufType::kString));
    b.put<uint64_t>(1);
    b.str("x");
  }));
  f.kvs.push_back(kv_scalar<uint32_t>("general.alignment", GgufType::kUint32, 32));
  f.tensors.push_back({"tok_embd.weight", {4, 3}, kF32, 4 * 3 * 4, std::nullopt});
  f.tensors.push_back({"blk.0.ffn.weight", {64, 2}, kQ8_0, 4 * 34, std::nullopt});
  return f;
}

Expected<std::unique_ptr<GgufFile>> parse(const std::vector<uint8_t>& bytes) {
  return GgufFile::parse(bytes.data(), bytes.size());
}

// Expects a clean failure whose message mentions `needle`.
void expect_error(const std::vector<uint8_t>& bytes, std::string_view needle) {
  auto r = parse(bytes);
  ASSERT_FALSE(r.ok()) << "expected an error mentioning '" << needle << "'";
  const std::string msg = r.status().message();  // status() returns a copy
  EXPECT_EQ(msg.rfind("gguf: ", 0), 0u) << msg;
  EXPECT_NE(msg.find(needle), std::string::npos) << "message: " << msg;
}

template <typename T>
void patch(std::vector<uint8_t>& bytes, size_t at, T v) {
  ASSERT_LE(at + sizeof(T), bytes.size());
  std::memcpy(bytes.data() + at, &v, sizeof(T));
}

// ---- round trip -----------------------------------------------------------------------------

TEST(GgufTest, RoundTripsEveryValueType) {
  const auto bytes = valid_file().build();
  auto r = parse(bytes);
  ASSERT_TRUE(r.ok()) << r.status().message();
  const GgufFile& g = **r;
  EXPECT_EQ(g.version(), 3u);
  EXPECT_EQ(g.alignment(), 32u);
  EXPECT_EQ(g.metadata().size(), 21u);
  EXPECT_EQ(g.get_string("general.architecture").value(), "llama");
  EXPECT_EQ(g.get_int("t.u8").value(), 200);
  EXPECT_EQ(g.get_int("t.i8").value(), -100);
  EXPECT_EQ(g.get_int("t.u16").value(), 60000);
  EXPECT_EQ(g.get_int("t.i16").value(), -30000);
  EXPECT_EQ(g.get_int("t.u32").value(), 4000000000LL);
  EXPECT_EQ(g.get_int("t.i32").value(), -2000000000);
  EXPECT_EQ(g.get_float("t.f32").value(), 0.5);
  EXPECT_EQ(g.get_bool("t.bool").value(), true);
  EXPECT_EQ(g.get_string("t.str").value(), "hello \xe2\x9c\x93");
  EXPECT_EQ(g.find("t.u64")->u, uint64_t{1} << 63);
  EXPECT_FALSE(g.get_int("t.u64").ok());  // 2^63 does not fit in int64
  EXPECT_EQ(g.get_int("t.i64").value(), -(int64_t{1} << 40));
  EXPECT_EQ(g.get_float("t.f64").value(), 1e300);
  EXPECT_EQ(g.get_int_array("t.arr_i32").value(), (std::vector<int64_t>{1, -2, 3}));
  EXPECT_EQ(g.find("t.arr_bool")->ints, (std::vector<int64_t>{1, 0}));
  EXPECT_EQ(g.get_int_array("t.arr_u64").value(),
            (std::vector<int64_t>{7, std::numeric_limits<int64_t>::max()}));
  EXPECT_EQ(g.get_float_array("t.arr_f32").value(), (std::vector<double>{1.5, -2.25}));
  EXPECT_TRUE(g.get_float_array("t.arr_f64").value().empty());
  EXPECT_EQ(g.get_string_array("t.arr_str").value(), (std::vector<std::string>{"a", "", "ccc"}));
  const GgufValue* nested = g.find("t.arr_nested");
  ASSERT_NE(nested, nullptr);
  EXPECT_EQ(nested->elem_type, GgufType::kArray);
  ASSERT_EQ(nested->array_size(), 2u);
  EXPECT_EQ(nested->arrays[0].elem_type, GgufType::kInt16);
  EXPECT_EQ(nested->arrays[0].ints, (std::vector<int64_t>{5, -6}));
  EXPECT_EQ(nested->arrays[1].strings, (std::vector<std::string_view>{"x"}));

  // Typed getters report missing keys and type mismatches; the _or forms fall back.
  EXPECT_NE(g.get_int("nope").status().message().find("missing"), std::string::npos);
  EXPECT_NE(g.get_int("t.str").status().message().find("has type string"), std::string::npos);
  EXPECT_FALSE(g.get_float("t.u8").ok());
  EXPECT_FALSE(g.get_bool("t.u8").ok());
  EXPECT_FALSE(g.get_string_array("t.arr_i32").ok());
  EXPECT_FALSE(g.get_int_array("t.arr_f32").ok());
  EXPECT_EQ(g.get_int_or("nope", 7), 7);
  EXPECT_EQ(g.get_float_or("t.str", 2.5), 2.5);
  EXPECT_EQ(g.get_bool_or("nope", true), true);
  EXPECT_EQ(g.get_string_or("nope", "dflt"), "dflt");

  ASSERT_EQ(g.tensors().size(), 2u);
  const GgufTensorInfo* a = g.find_tensor("tok_embd.weight");
  const GgufTensorInfo* b = g.find_tensor("blk.0.ffn.weight");
  ASSERT_TRUE(a && b);
  EXPECT_EQ(g.find_tensor("missing"), nullptr);
  EXPECT_EQ(a->dims, (std::vector<int64_t>{4, 3}));
  EXPECT_EQ(a->type, DType::kF32);
  EXPECT_EQ(a->n_elements, 12);
  EXPECT_EQ(a->rows(), 3);
  EXPECT_EQ(a->size_bytes, 48u);
  EXPECT_EQ(a->offset, 0u);
  EXPECT_EQ(b->type, DType::kQ8_0);
  EXPECT_EQ(b->size_bytes, 136u);
  EXPECT_EQ(b->offset, 64u);
  EXPECT_EQ(g.data_offset() % 32, 0u);
  EXPECT_EQ(g.data_offset() + b->offset + b->size_bytes, bytes.size());
  EXPECT_EQ(g.tensor_data(*a), bytes.data() + g.data_offset());
  EXPECT_EQ(g.tensor_data(*b)[0], 16);  // the writer fills tensor k with k*16 + j
  EXPECT_EQ(g.tensor_data(*b)[5], 21);
}

TEST(GgufTest, AcceptsVersion2AndLargerAlignment) {
  TestFile f = valid_file();
  f.version = 2;
  f.alignment = 64;
  f.kvs.back() = kv_scalar<uint32_t>("general.alignment", GgufType::kUint32, 64);
  const auto bytes = f.build();
  auto r = parse(bytes);
  ASSERT_TRUE(r.ok()) << r.status().message();
  EXPECT_EQ((*r)->version(), 2u);
  EXPECT_EQ((*r)->alignment(), 64u);
  EXPECT_EQ((*r)->data_offset() % 64, 0u);
  EXPECT_EQ((*r)->tensors()[1].offset, 64u);
}

TEST(GgufTest, EmptyFileWithNoTensorsOrMetadata) {
  TestFile f;
  auto r = parse(f.build());
  ASSERT_TRUE(r.ok()) << r.status().message();
  EXPECT_TRUE((*r)->tensors().empty());
  EXPECT_TRUE((*r)->metadata().empty());
}

// ---- broken files ---------------------------------------------------------------------------

TEST(GgufTest, TruncationAtEveryOffsetFailsCleanly) {
  const auto bytes = valid_file().build();
  for (size_t n = 0; n < bytes.size(); ++n) {
    // An exact-size heap copy lets ASan builds catch any read past the end.
    std::vector<uint8_t> prefix(bytes.begin(), bytes.begin() + n);
    auto r = GgufFile::parse(prefix.empty() ? nullptr : prefix.data(), n);
    ASSERT_FALSE(r.ok()) << "truncated at " << n << " of " << bytes.size();
    ASSERT_EQ(r.status().message().rfind("gguf: ", 0), 0u) << r.status().message();
  }
}

TEST(GgufTest, RejectsBadMagic) {
  auto bytes = valid_file().build();
  bytes[0] = 'X';
  expect_error(bytes, "bad magic 'XGUF'");
}

TEST(GgufTest, RejectsVersions1And99) {
  auto bytes = valid_file().build();
  patch<uint32_t>(bytes, 4, 1);
  expect_error(bytes, "version 1 is not supported");
  patch<uint32_t>(bytes, 4, 99);
  expect_error(bytes, "unsupported GGUF version 99");
  patch<uint32_t>(bytes, 4, 0x03000000);
  expect_error(bytes, "big-endian");
}

TEST(GgufTest, RejectsHugeCounts) {
  auto bytes = valid_file().build();
  patch<uint64_t>(bytes, 8, uint64_t{1} << 60);
  expect_error(bytes, "tensor count 1152921504606846976 cannot fit");
  bytes = valid_file().build();
  patch<uint64_t>(bytes, 16, ~uint64_t{0});
  expect_error(bytes, "metadata count 18446744073709551615 cannot fit");
  // Individually plausible counts whose sum the file cannot hold.
  TestFile f = valid_file();
  f.n_kv = bytes.size() / 20;
  f.n_tensors = bytes.size() / 40;
  expect_error(f.build(), "cannot fit");
}

TEST(GgufTest, RejectsHugeStringLength) {
  auto bytes = valid_file().build();
  patch<uint64_t>(bytes, 24, uint64_t{1} << 40);  // the first key's length
  expect_error(bytes, "string length 1099511627776 exceeds");
  TestFile f;
  f.kvs.push_back(kv("k", static_cast<uint32_t>(GgufType::kArray), [](Bytes& b) {
    b.put<uint32_t>(static_cast<uint32_t>(GgufType::kString));
    b.put<uint64_t>(1);
    b.put<uint64_t>(~uint64_t{0});
  }));
  expect_error(f.build(), "string length 18446744073709551615 exceeds");
}

TEST(GgufTest, RejectsBadValueTypes) {
  TestFile f;
  f.kvs.push_back(kv("k", 13, [](Bytes& b) { b.put<uint32_t>(0); }));
  expect_error(f.build(), "kv 0 'k': invalid value type 13");
  f.kvs[0] = kv("k", static_cast<uint32_t>(GgufType::kArray), [](Bytes& b) {
    b.put<uint32_t>(0xffffffffu);
    b.put<uint64_t>(0);
  });
  expect_error(f.build(), "invalid value type 4294967295");
  f.kvs[0] = kv_scalar<uint8_t>("k", GgufType::kBool, 2);
  expect_error(f.build(), "bool value 2");
}

TEST(GgufTest, RejectsHugeArraysAndDeepNesting) {
  TestFile f;
  f.kvs.push_back(kv("k", static_cast<uint32_t>(GgufType::kArray), [](Bytes& b) {
    b.put<uint32_t>(static_cast<uint32_t>(GgufType::kUint32));
    b.put<uint64_t>(uint64_t{1} << 61);
  }));
  expect_error(f.build(), "array of 2305843009213693952 uint32 elements cannot fit");
  f.kvs[0] = kv("deep", static_cast<uint32_t>(GgufType::kArray), [](Bytes& b) {
    for (int d = 0; d < 10; ++d) {
      b.put<uint32_t>(static_cast<uint32_t>(GgufType::kArray));
      b.put<uint64_t>(1);
    }
    b.put<uint32_t>(static_cast<uint32_t>(GgufType::kUint8));
    b.put<uint64_t>(0);
  });
  expect_error(f.build(), "nested more than");
}

TEST(GgufTest, RejectsDuplicateKeyAndEmptyKey) {
  TestFile f = valid_file();
  f.kvs.push_back(kv_string("t.str", "again"));
  expect_error(f.build(), "'t.str': duplicate key");
  f = valid_file();
  f.kvs.push_back(kv_string("", "x"));
  expect_error(f.build(), "empty key");
}

TEST(GgufTest, RejectsBadTensorTypeIds) {
  for (uint32_t id : {4u, 23u, 99u, 0xffffffffu}) {
    TestFile f = valid_file();
    f.tensors[1].type_id = id;
    expect_error(f.build(),
                 "tensor 1 'blk.0.ffn.weight': unsupported tensor type id " + std::to_string(id));
  }
}

TEST(GgufTest, RejectsBadDims) {
  TestFile f = valid_file();
  f.tensors[0].dims = {};
  expect_error(f.build(), "n_dims is 0, expected 1..4");
  f.tensors[0].dims = {1, 1, 1, 1, 1};
  expect_error(f.build(), "n_dims is 5, expected 1..4");
  f.tensors[0].dims = {4, 0};
  expect_error(f.build(), "dim 1 is 0");
  f.tensors[0].dims = {uint64_t{1} << 63};
  expect_error(f.build(), "dim 0 is 9223372036854775808");
  f.tensors[0].dims = {uint64_t{1} << 32, uint64_t{1} << 32};
  expect_error(f.build(), "element count overflows int64 at dim 1");
  f.tensors[0].dims = {uint64_t{1} << 40};
  expect_error(f.build(), "larger than the whole file");
  f = valid_file();
  f.tensors[1].dims = {33, 2};
  expect_error(f.build(), "row length 33 is not a multiple of the Q8_0 block size 32");
}

TEST(GgufTest, RejectsMisalignedOffsetAndDataPastEof) {
  TestFile f = valid_file();
  f.tensors[1].offset = 8;
  expect_error(f.build(), "data offset 8 is not a multiple of the alignment 32");
  f.tensors[1].offset = uint64_t{1} << 20;
  expect_error(f.build(), "'blk.0.ffn.weight': data [offset");
  expect_error(f.build(), "ends past the end of the file");
  f.tensors[1].offset = ~uint64_t{0} - 31;  // aligned, and offset + size wraps around
  expect_error(f.build(), "ends past the end of the file");
}

TEST(GgufTest, RejectsBadAlignment) {
  for (uint32_t align : {0u, 3u, 48u, 0x80000000u}) {
    TestFile f = valid_file();
    f.kvs.back() = kv_scalar<uint32_t>("general.alignment", GgufType::kUint32, align);
    expect_error(f.build(), "general.alignment is " + std::to_string(align));
  }
  TestFile f = valid_file();
  f.kvs.back() = kv_string("general.alignment", "32");
  expect_error(f.build(), "general.alignment has type string");
}

TEST(GgufTest, RejectsDuplicateTensorName) {
  TestFile f = valid_file();
  f.tensors[1].name = f.tensors[0].name;
  expect_error(f.build(), "tensor 1 'tok_embd.weight': duplicate tensor name");
}

TEST(GgufTest, ErrorsNameTheByteOffset) {
  auto bytes = valid_file().build();
  patch<uint32_t>(bytes, 4, 7);
  expect_error(bytes, "at byte 4:");
}

TEST(GgufTest, OpenPrefixesThePath) {
  auto r = GgufFile::open("/nonexistent/model.gguf");
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("/nonexistent/model.gguf"), std::string::npos);
  const auto path = std::filesystem::temp_directory_path() / "salvo_gguf_test_bad.gguf";
  {
    auto bytes = valid_file().build();
    bytes.resize(40);
    FILE* out = std::fopen(path.c_str(), "wb");
    ASSERT_NE(out, nullptr);
    std::fwrite(bytes.data(), 1, bytes.size(), out);
    std::fclose(out);
  }
  r = GgufFile::open(path.string());
  std::filesystem::remove(path);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().message().rfind(path.string() + ": gguf: ", 0), 0u) << r.status().message();
}

// Files written by gguf-py's GGUFWriter (fuzz/make_corpus.py), an independent writer.
TEST(GgufTest, ParsesSeedsWrittenByGgufPy) {
  const std::filesystem::path dir = std::filesystem::path(SALVO_SOURCE_DIR) / "fuzz" / "corpus";
  int parsed = 0;
  for (const char* name :
       {"valid_all_types", "valid_tiny_llama", "valid_align64", "valid_no_tensors"}) {
    const auto path = dir / (std::string(name) + ".gguf");
    if (!std::filesystem::exists(path)) continue;
    auto r = GgufFile::open(path.string());
    ASSERT_TRUE(r.ok()) << r.status().message();
    ++parsed;
  }
  if (parsed == 0) GTEST_SKIP() << "no seeds in " << dir;
  auto r = GgufFile::open((dir / "valid_tiny_llama.gguf").string());
  ASSERT_TRUE(r.ok());
  EXPECT_EQ((*r)->tensors().size(), 5u);
  EXPECT_EQ((*r)->find_tensor("blk.0.ffn_up.weight")->type, DType::kQ4_K);
  EXPECT_EQ((*r)->find_tensor("blk.0.ffn_up.weight")->dims, (std::vector<int64_t>{256, 1}));
  EXPECT_EQ((*r)->get_string_array("tokenizer.ggml.tokens").value().size(), 4u);
}

// ---- real models ----------------------------------------------------------------------------

std::string models_dir() {
  if (const char* env = std::getenv("SALVO_MODELS")) return env;
  return std::string(SALVO_SOURCE_DIR) + "/models";
}

struct ModelFacts {
  const char* name;
  const char* arch;
  size_t n_tensors;
  int64_t block_count;
  int64_t embedding_length;
  size_t vocab;
};

class RealModelTest : public ::testing::TestWithParam<ModelFacts> {};

TEST_P(RealModelTest, ParsesAndMatchesKnownValues) {
  const ModelFacts& m = GetParam();
  const std::string path = models_dir() + "/" + m.name + ".gguf";
  if (!std::filesystem::exists(path)) GTEST_SKIP() << path << " not found";
  auto r = GgufFile::open(path);
  ASSERT_TRUE(r.ok()) << r.status().message();
  const GgufFile& g = **r;
  EXPECT_EQ(g.version(), 3u);
  EXPECT_EQ(g.path(), path);
  EXPECT_EQ(g.file_size(), std::filesystem::file_size(path));
  const std::string arch = g.get_string("general.architecture").value();
  EXPECT_EQ(arch, m.arch);
  EXPECT_EQ(g.tensors().size(), m.n_tensors);
  EXPECT_EQ(g.get_int(arch + ".block_count").value(), m.block_count);
  EXPECT_EQ(g.get_int(arch + ".embedding_length").value(), m.embedding_length);
  EXPECT_EQ(g.get_string_array("tokenizer.ggml.tokens").value().size(), m.vocab);
  const GgufTensorInfo* embd = g.find_tensor("token_embd.weight");
  ASSERT_NE(embd, nullptr);
  EXPECT_EQ(embd->dims[0], m.embedding_length);
  EXPECT_EQ(embd->dims[1], static_cast<int64_t>(m.vocab));
  for (const auto& t : g.tensors()) {
    EXPECT_LE(g.data_offset() + t.offset + t.size_bytes, g.file_size()) << t.name;
    EXPECT_EQ(t.size_bytes, row_bytes(t.type, t.dims[0]) * t.rows()) << t.name;
  }
}

INSTANTIATE_TEST_SUITE_P(
    Models, RealModelTest,
    ::testing::Values(ModelFacts{"smollm2-135m", "llama", 272, 30, 576, 49152},
                      ModelFacts{"qwen2.5-coder-1.5b", "qwen2", 339, 28, 1536, 151936},
                      ModelFacts{"qwen2.5-coder-0.5b", "qwen2", 291, 24, 896, 151936},
                      ModelFacts{"gemma3-270m", "gemma3", 236, 18, 640, 262144}),
    [](const auto& info) {
      std::string name = info.param.name;
      for (char& c : name) {
        if (!std::isalnum(static_cast<unsigned char>(c))) c = '_';
      }
      return name;
    });

}  // namespace
}  // namespace salvo
