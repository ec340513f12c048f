#include "tokenizer/tokenizer.h"
#include "tokenizer/unicode.h"

namespace salvo {

size_t utf8_complete_prefix(std::string_view bytes) {
  // Only the last three bytes can belong to an unfinished character. Walk back to the last
  // lead byte and hold it back if the sequence it announces is still incomplete.
  const size_t n = bytes.size();
  for (size_t back = 1; back <= 3 && back <= n; ++back) {
    const auto b = static_cast<uint8_t>(bytes[n - back]);
    if ((b & 0xC0) == 0x80) continue;     // continuation byte: keep looking for the lead
    if (b < 0xC0 || b >= 0xF8) return n;  // ASCII or a byte no sequence starts with
    const size_t need = unicode::utf8_sequence_length(b);
    return need > back ? n - back : n;
  }
  return n;  // only continuation bytes at the end: nothing can complete them
}

std::string StreamDecoder::push(int32_t id) {
  if (!render_special_ && tokenizer_.is_control(id)) return {};
  pending_ += tokenizer_.token_piece(id);
  const size_t ready = utf8_complete_prefix(pending_);
  std::string out = pending_.substr(0, ready);
  pending_.erase(0, ready);
  return out;
}

std::string StreamDecoder::flush() {
  std::string out;
  out.swap(pending_);
  return out;
}

}  // namespace salvo
