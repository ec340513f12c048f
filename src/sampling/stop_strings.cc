#include "sampling/stop_strings.h"

#include <algorithm>
#include <utility>

namespace salvo {

StopStringMatcher::StopStringMatcher(std::vector<std::string> stop_strings) {
  for (size_t i = 0; i < stop_strings.size(); ++i) {
    if (stop_strings[i].empty()) continue;
    stop_strings_.push_back(std::move(stop_strings[i]));
    original_index_.push_back(static_cast<int>(i));
  }
}

size_t StopStringMatcher::held_suffix_length() const {
  // Any future match starts at a position whose tail is a proper prefix of a stop string; the
  // longest such tail starts earliest, so everything before it is safe. pending_ never holds
  // a whole stop string here, so checking tails shorter than each stop string suffices.
  size_t longest = 0;
  const std::string_view text = pending_;
  for (const std::string& stop : stop_strings_) {
    const size_t max_length = std::min(stop.size() - 1, text.size());
    for (size_t length = max_length; length > longest; --length) {
      if (text.substr(text.size() - length) == std::string_view(stop).substr(0, length)) {
        longest = length;
        break;
      }
    }
  }
  return longest;
}

StopStringMatcher::Result StopStringMatcher::feed(std::string_view piece) {
  if (stopped_) return {"", true};
  pending_.append(piece);

  size_t match_position = std::string::npos;
  for (size_t i = 0; i < stop_strings_.size(); ++i) {
    const size_t position = pending_.find(stop_strings_[i]);
    if (position < match_position) {
      match_position = position;
      matched_index_ = original_index_[i];
    }
  }
  if (match_position != std::string::npos) {
    stopped_ = true;
    Result result{pending_.substr(0, match_position), true};
    pending_.clear();
    return result;
  }

  const size_t emit_length = pending_.size() - held_suffix_length();
  Result result{pending_.substr(0, emit_length), false};
  pending_.erase(0, emit_length);
  return result;
}

std::string StopStringMatcher::flush() {
  std::string rest;
  rest.swap(pending_);
  return rest;
}

}  // namespace salvo
