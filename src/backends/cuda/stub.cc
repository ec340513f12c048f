#include "backends/cuda/cuda_backend.h"

namespace salvo::cuda {

Status check_available() {
  return Status::error(
      "this salvo was built without CUDA (nvcc was not found at configure time); use --device cpu");
}

Expected<std::unique_ptr<Model>> to_device(std::unique_ptr<Model>) { return check_available(); }

Expected<std::shared_ptr<const DflashDevice>> dflash_to_device(const DflashModel&, const Model&) {
  return check_available();
}

}  // namespace salvo::cuda
