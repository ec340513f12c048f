// GGUF metadata -> TokenizerData. Kept apart from the tokenizer so the tokenizer can be built
// and tested from plain data.
#include "io/gguf.h"
#include "tokenizer/tokenizer.h"

namespace salvo {
namespace {

Expected<std::optional<int32_t>> optional_id(const GgufFile& gguf, std::string_view key) {
  if (gguf.find(key) == nullptr) return std::optional<int32_t>();
  auto value = gguf.get_int(key);
  if (!value.ok()) return value.status();
  if (*value < 0 || *value > INT32_MAX) {
    // llama.cpp ignores out-of-range ids too; the tokenizer treats -1 as "none".
    return std::optional<int32_t>(-1);
  }
  return std::optional<int32_t>(static_cast<int32_t>(*value));
}

Expected<std::optional<bool>> optional_bool(const GgufFile& gguf, std::string_view key) {
  if (gguf.find(key) == nullptr) return std::optional<bool>();
  auto value = gguf.get_bool(key);
  if (!value.ok()) return value.status();
  return std::optional<bool>(*value);
}

}  // namespace

Expected<TokenizerData> tokenizer_data_from_gguf(const GgufFile& gguf) {
  TokenizerData data;
  SALVO_ASSIGN_OR_RETURN(data.model, gguf.get_string("tokenizer.ggml.model"));
  data.pre = gguf.get_string_or("tokenizer.ggml.pre", "default");
  SALVO_ASSIGN_OR_RETURN(data.tokens, gguf.get_string_array("tokenizer.ggml.tokens"));
  if (gguf.find("tokenizer.ggml.scores") != nullptr) {
    // Some converters write integer scores; llama.cpp accepts both.
    auto scores = gguf.get_float_array("tokenizer.ggml.scores");
    if (scores.ok()) {
      data.scores.assign(scores->begin(), scores->end());
    } else {
      SALVO_ASSIGN_OR_RETURN(std::vector<int64_t> int_scores,
                             gguf.get_int_array("tokenizer.ggml.scores"));
      data.scores.assign(int_scores.begin(), int_scores.end());
    }
  }
  if (gguf.find("tokenizer.ggml.token_type") != nullptr) {
    SALVO_ASSIGN_OR_RETURN(std::vector<int64_t> types,
                           gguf.get_int_array("tokenizer.ggml.token_type"));
    data.token_types.reserve(types.size());
    for (int64_t type : types) data.token_types.push_back(static_cast<int32_t>(type));
  }
  if (gguf.find("tokenizer.ggml.merges") != nullptr) {
    SALVO_ASSIGN_OR_RETURN(data.merges, gguf.get_string_array("tokenizer.ggml.merges"));
  } else if (data.model == "gpt2") {
    return Status::error("tokenizer.ggml.merges: missing (a gpt2 tokenizer needs its merges)");
  }
  SALVO_ASSIGN_OR_RETURN(data.bos_id, optional_id(gguf, "tokenizer.ggml.bos_token_id"));
  SALVO_ASSIGN_OR_RETURN(data.eos_id, optional_id(gguf, "tokenizer.ggml.eos_token_id"));
  SALVO_ASSIGN_OR_RETURN(data.eot_id, optional_id(gguf, "tokenizer.ggml.eot_token_id"));
  SALVO_ASSIGN_OR_RETURN(data.eom_id, optional_id(gguf, "tokenizer.ggml.eom_token_id"));
  SALVO_ASSIGN_OR_RETURN(data.unk_id, optional_id(gguf, "tokenizer.ggml.unknown_token_id"));
  SALVO_ASSIGN_OR_RETURN(data.pad_id, optional_id(gguf, "tokenizer.ggml.padding_token_id"));
  SALVO_ASSIGN_OR_RETURN(data.sep_id, optional_id(gguf, "tokenizer.ggml.seperator_token_id"));
  SALVO_ASSIGN_OR_RETURN(data.fim_pad_id, optional_id(gguf, "tokenizer.ggml.fim_pad_token_id"));
  SALVO_ASSIGN_OR_RETURN(data.fim_rep_id, optional_id(gguf, "tokenizer.ggml.fim_rep_token_id"));
  SALVO_ASSIGN_OR_RETURN(data.fim_sep_id, optional_id(gguf, "tokenizer.ggml.fim_sep_token_id"));
  SALVO_ASSIGN_OR_RETURN(data.add_bos, optional_bool(gguf, "tokenizer.ggml.add_bos_token"));
  SALVO_ASSIGN_OR_RETURN(data.add_eos, optional_bool(gguf, "tokenizer.ggml.add_eos_token"));
  SALVO_ASSIGN_OR_RETURN(data.add_space_prefix,
                         optional_bool(gguf, "tokenizer.ggml.add_space_prefix"));
  return data;
}

Expected<std::unique_ptr<Tokenizer>> Tokenizer::from_gguf(const GgufFile& gguf) {
  auto data = tokenizer_data_from_gguf(gguf);
  if (!data.ok()) return data.status().with_context("reading tokenizer from " + gguf.path());
  auto tokenizer = from_data(std::move(data).value());
  if (!tokenizer.ok()) return tokenizer.status().with_context("tokenizer in " + gguf.path());
  return tokenizer;
}

}  // namespace salvo
