// Process memory figures for the statistics `salvo run` and `salvo bench` print.
#pragma once

#include <sys/resource.h>
#include <unistd.h>

#include <cstddef>
#include <cstdio>

namespace salvo {

// Peak resident set size of this process so far, in bytes: the high-water mark of its own
// address space (VmHWM). getrusage's ru_maxrss is not used first because Linux carries into it
// the resident size of the parent at fork time, so salvo started by a large process (a Python
// test or benchmark) would report the parent's memory as its own.
inline size_t peak_rss_bytes() {
  if (std::FILE* f = std::fopen("/proc/self/status", "r")) {
    char line[256];
    long kib = -1;
    while (std::fgets(line, sizeof(line), f) != nullptr) {
      if (std::sscanf(line, "VmHWM: %ld kB", &kib) == 1) break;
    }
    std::fclose(f);
    if (kib >= 0) return static_cast<size_t>(kib) * 1024;
  }
  struct rusage usage {};
  getrusage(RUSAGE_SELF, &usage);
  return static_cast<size_t>(usage.ru_maxrss) * 1024;  // Linux reports KiB
}

// Current resident set size in bytes (0 if /proc is unavailable).
inline size_t current_rss_bytes() {
  std::FILE* f = std::fopen("/proc/self/statm", "r");
  if (f == nullptr) return 0;
  long pages_total = 0, pages_resident = 0;
  const int got = std::fscanf(f, "%ld %ld", &pages_total, &pages_resident);
  std::fclose(f);
  return got == 2 ? static_cast<size_t>(pages_resident) * static_cast<size_t>(sysconf(_SC_PAGESIZE))
                  : 0;
}

}  // namespace salvo
