// The order every top-logits selection follows (ops::top_logits on the host, cuda::top_logits on
// the device): a float's bits mapped to an unsigned key that sorts as the float does, with NaN
// below everything and -0 equal to +0. One definition, so both backends select the same set.
#pragma once

#include <cstdint>
#include <cstring>

#if defined(__CUDACC__)
#define SALVO_HOST_DEVICE __host__ __device__
#else
#define SALVO_HOST_DEVICE
#endif

namespace salvo {

SALVO_HOST_DEVICE inline uint32_t logit_order_key(float v) {
  if (v != v) return 0;  // NaN
  uint32_t b;
  std::memcpy(&b, &v, sizeof(b));
  if (b == 0x80000000u) b = 0;  // -0 as +0
  return (b & 0x80000000u) ? ~b : (b | 0x80000000u);
}

}  // namespace salvo
