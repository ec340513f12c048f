// A timeline of every kernel a process runs on the GPU, graphs and programmatic dependent launches
// included, at the card's own clocks: what nsys would give, for a machine without nsys. A CUPTI
// injection library: the driver loads it at cuInit when CUDA_INJECTION64_PATH names it, so the
// traced program is unchanged. At exit it writes one line a kernel to KERNEL_TRACE_OUT (default
// kernel_trace.txt): start and end (ns, GPU clock), stream, graph and graph node (0 outside a
// graph), grid x y z, block x, registers, name. scripts/trace_summary.py turns it into a decode
// step's time per launch.
//   g++ -O2 -shared -fPIC -I/usr/local/cuda/include bench/kernel_trace.cc
//       -o libkernel_trace.so -L/usr/local/cuda/lib64 -lcupti
//   CUDA_INJECTION64_PATH=$PWD/libkernel_trace.so salvo bench --device cuda ...
#include <cupti.h>
#include <cxxabi.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <string>
#include <vector>

namespace {

struct Kernel {
  uint64_t start, end;
  uint32_t stream, graph;
  uint64_t node;
  int grid_x, grid_y, grid_z, block_x, regs;
  std::string name;
};

std::mutex mu;
std::vector<Kernel>* kernels = new std::vector<Kernel>;  // never freed: used from atexit
bool written = false;

constexpr size_t kBufferBytes = 8 << 20;

void CUPTIAPI buffer_requested(uint8_t** buffer, size_t* size, size_t* max_records) {
  // CUPTI wants 8-byte alignment; malloc gives 16.
  *buffer = static_cast<uint8_t*>(malloc(kBufferBytes));
  *size = *buffer != nullptr ? kBufferBytes : 0;
  *max_records = 0;
}

std::string demangled(const char* name) {
  int status = 0;
  char* d = abi::__cxa_demangle(name, nullptr, nullptr, &status);
  std::string s = status == 0 && d != nullptr ? d : name;
  free(d);
  return s;
}

void CUPTIAPI buffer_completed(CUcontext, uint32_t, uint8_t* buffer, size_t, size_t valid) {
  CUpti_Activity* rec = nullptr;
  std::vector<Kernel> got;
  while (cuptiActivityGetNextRecord(buffer, valid, &rec) == CUPTI_SUCCESS) {
    if (rec->kind != CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL) continue;
    const auto* k = reinterpret_cast<const CUpti_ActivityKernel10*>(rec);
    got.push_back({k->start, k->end, k->streamId, k->graphId, k->graphNodeId, k->gridX, k->gridY,
                   k->gridZ, k->blockX, k->registersPerThread, demangled(k->name)});
  }
  free(buffer);
  std::lock_guard<std::mutex> lock(mu);
  kernels->insert(kernels->end(), got.begin(), got.end());
}

void write_trace() {
  cuptiActivityFlushAll(1);
  std::lock_guard<std::mutex> lock(mu);
  if (written) return;
  written = true;
  const char* path = getenv("KERNEL_TRACE_OUT");
  if (path == nullptr || *path == '\0') path = "kernel_trace.txt";
  FILE* f = fopen(path, "w");
  if (f == nullptr) {
    fprintf(stderr, "kernel_trace: cannot write %s: %s\n", path, strerror(errno));
    return;
  }
  for (const Kernel& k : *kernels) {
    // The name last: a demangled name holds spaces and commas, never a newline.
    fprintf(f, "%llu %llu %u %u %llu %d %d %d %d %d %s\n", static_cast<unsigned long long>(k.start),
            static_cast<unsigned long long>(k.end), k.stream, k.graph,
            static_cast<unsigned long long>(k.node), k.grid_x, k.grid_y, k.grid_z, k.block_x,
            k.regs, k.name.c_str());
  }
  fclose(f);
  fprintf(stderr, "kernel_trace: %zu kernels to %s\n", kernels->size(), path);
}

}  // namespace

// Called by the CUDA driver at initialisation (CUDA_INJECTION64_PATH); nonzero: success.
extern "C" int InitializeInjection() {
  if (cuptiActivityRegisterCallbacks(buffer_requested, buffer_completed) != CUPTI_SUCCESS ||
      cuptiActivityEnable(CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL) != CUPTI_SUCCESS) {
    fprintf(stderr, "kernel_trace: CUPTI activity tracing could not be enabled\n");
    return 0;
  }
  atexit(write_trace);
  return 1;
}
