// The backend's A/B knobs: integers from the environment, for runs that compare two forms of a
// kernel in one window. A knob read once (a function-local static) fixes the form for the
// process; one read at every launch lets a test run both forms (a graph captures it once).
#pragma once

#include <cstdlib>

namespace salvo::cuda {

// The variable's integer value (atoi), or `fallback` when it is unset.
inline int env_int(const char* name, int fallback) {
  const char* v = std::getenv(name);
  return v != nullptr ? std::atoi(v) : fallback;
}

// A switch that is on unless the variable is set to 0.
inline bool env_on(const char* name) { return env_int(name, 1) != 0; }

}  // namespace salvo::cuda
