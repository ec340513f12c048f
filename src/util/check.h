// CHECK is for internal invariants (always on); DCHECK only in debug builds. Never use them
// on untrusted input: that returns a Status.
#pragma once

#include <cstdio>
#include <cstdlib>

namespace salvo::detail {
[[noreturn]] inline void check_failed(const char* file, int line, const char* cond,
                                      const char* message) {
  std::fprintf(stderr, "salvo: internal error at %s:%d: CHECK(%s) failed%s%s\n", file, line, cond,
               message[0] ? ": " : "", message);
  std::abort();
}
}  // namespace salvo::detail

#define SALVO_CHECK_MSG(cond, message)                                                \
  do {                                                                                \
    if (!(cond)) ::salvo::detail::check_failed(__FILE__, __LINE__, #cond, (message)); \
  } while (0)
#define SALVO_CHECK(cond) SALVO_CHECK_MSG(cond, "")

#ifdef NDEBUG
#define SALVO_DCHECK(cond) \
  do {                     \
  } while (0)
#else
#define SALVO_DCHECK(cond) SALVO_CHECK(cond)
#endif
