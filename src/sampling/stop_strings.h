// Streaming stop-string matching over detokenized text. Text arrives in pieces (one per token,
// and a stop string may span several); the matcher releases text as soon as it cannot be the
// start of a stop string, so streaming clients see output with the least possible delay while
// a stop string itself is never emitted.
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace salvo {

class StopStringMatcher {
 public:
  struct Result {
    std::string text;      // safe to emit now
    bool stopped = false;  // a stop string matched; `text` ends right before it
  };

  // Empty stop strings are ignored (they would match before any output).
  explicit StopStringMatcher(std::vector<std::string> stop_strings);

  // Appends a piece. Holds back the longest tail that is a proper prefix of some stop string.
  // When several stop strings match, the one starting earliest wins. Once stopped, every later
  // call returns {"", true}.
  Result feed(std::string_view piece);
  // End of generation: returns the held-back text (empty once stopped).
  std::string flush();

  bool stopped() const { return stopped_; }
  // Index into the constructor's list of the stop string that matched, or -1.
  int matched_index() const { return matched_index_; }

 private:
  size_t held_suffix_length() const;

  std::vector<std::string> stop_strings_;
  std::vector<int> original_index_;  // stop_strings_[i] was argument number original_index_[i]
  std::string pending_;              // held-back text, never contains a whole stop string
  bool stopped_ = false;
  int matched_index_ = -1;
};

}  // namespace salvo
