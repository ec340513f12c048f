// Entry points of the CUDA backend. The stub build returns an error from each.
#pragma once

#include <string>

#include "util/status.h"

namespace salvo::cuda {

// Checks that a CUDA device can be used; the stub says the build has no CUDA.
Status check_available();

}  // namespace salvo::cuda
