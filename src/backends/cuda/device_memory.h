// Owning handles of device and pinned host memory, and the CUDA error checks of the backend.
#pragma once

#include <cuda_runtime.h>

#include <atomic>
#include <cstddef>
#include <string>
#include <utility>

#include "util/check.h"
#include "util/status.h"

namespace salvo::cuda {

inline Status cuda_status(cudaError_t err, const char* what) {
  if (err == cudaSuccess) return Status();
  return Status::error(std::string("CUDA: ") + what + ": " + cudaGetErrorString(err));
}

// A failing CUDA call inside a forward pass means the device is gone or a kernel is broken:
// an internal invariant, not bad input, so it aborts with the CUDA message.
#define SALVO_CUDA_CHECK(expr)                                                            \
  do {                                                                                    \
    const cudaError_t salvo_cuda_err_ = (expr);                                           \
    SALVO_CHECK_MSG(salvo_cuda_err_ == cudaSuccess, cudaGetErrorString(salvo_cuda_err_)); \
  } while (0)

// Device bytes the DeviceBuffers of this process hold now and have held at most (every device
// allocation of the backend is one): what `salvo run` reports as device memory. The CUDA
// context's own memory is not in it.
class DeviceBytes {
 public:
  static void add(size_t bytes) {
    const size_t now = live().fetch_add(bytes) + bytes;
    size_t seen = peak().load();
    while (now > seen && !peak().compare_exchange_weak(seen, now)) {
    }
  }
  static void remove(size_t bytes) { live().fetch_sub(bytes); }
  static size_t peak_bytes() { return peak().load(); }

 private:
  static std::atomic<size_t>& live() {
    static std::atomic<size_t> v{0};
    return v;
  }
  static std::atomic<size_t>& peak() {
    static std::atomic<size_t> v{0};
    return v;
  }
};

// Device memory; grows (without keeping the contents) through reserve(). A new allocation is
// zeroed (attention's split counts rely on it).
class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  DeviceBuffer(DeviceBuffer&& o) noexcept
      : ptr_(std::exchange(o.ptr_, nullptr)), bytes_(std::exchange(o.bytes_, 0)) {}
  ~DeviceBuffer() { release(); }
  Status reserve(size_t bytes) {
    if (bytes <= bytes_) return Status();
    release();
    SALVO_RETURN_IF_ERROR(cuda_status(cudaMalloc(&ptr_, bytes), "cudaMalloc"));
    bytes_ = bytes;
    DeviceBytes::add(bytes);
    return cuda_status(cudaMemset(ptr_, 0, bytes), "cudaMemset");
  }
  template <typename T = void>
  T* get() const {
    return static_cast<T*>(ptr_);
  }
  size_t bytes() const { return bytes_; }

 private:
  void release() {
    if (ptr_ == nullptr) return;
    cudaFree(ptr_);
    DeviceBytes::remove(bytes_);
    ptr_ = nullptr;
    bytes_ = 0;
  }

  void* ptr_ = nullptr;
  size_t bytes_ = 0;
};

// Page-locked host memory, so device-to-host copies run at full PCIe speed.
class PinnedBuffer {
 public:
  PinnedBuffer() = default;
  PinnedBuffer(const PinnedBuffer&) = delete;
  PinnedBuffer& operator=(const PinnedBuffer&) = delete;
  ~PinnedBuffer() {
    if (ptr_ != nullptr) cudaFreeHost(ptr_);
  }
  Status reserve(size_t bytes) {
    if (bytes <= bytes_) return Status();
    if (ptr_ != nullptr) cudaFreeHost(ptr_);
    ptr_ = nullptr;
    bytes_ = 0;
    SALVO_RETURN_IF_ERROR(cuda_status(cudaMallocHost(&ptr_, bytes), "cudaMallocHost"));
    bytes_ = bytes;
    return Status();
  }
  template <typename T = void>
  T* get() const {
    return static_cast<T*>(ptr_);
  }

 private:
  void* ptr_ = nullptr;
  size_t bytes_ = 0;
};

}  // namespace salvo::cuda
