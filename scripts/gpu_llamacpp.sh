#!/usr/bin/env bash
# llama.cpp with CUDA on the GPU machine, from the source llama-cpp-python bundles
# (scripts/llamacpp_source.sh packs it): builds llama-bench once, then runs it on GGUF files with
# the settings salvo's `bench --device cuda` uses (all layers on the GPU, pp512 and tg128, greedy
# is irrelevant to llama-bench's timing), writing one JSON per model.
#   scripts/gpu_llamacpp.sh build SRC.tar.gz WORK     # ~5-8 min on 16 cores (ggml-cuda)
#   scripts/gpu_llamacpp.sh bench WORK REPS MODEL.gguf...   # -> WORK/llama_<stem>.json
set -euo pipefail
cmd=${1:?usage: gpu_llamacpp.sh build SRC WORK | bench WORK REPS MODEL...}
case $cmd in
  build)
    src=$2 work=$3
    mkdir -p "$work/llama.cpp"
    tar xzf "$src" -C "$work/llama.cpp"
    cmake -S "$work/llama.cpp" -B "$work/llama.cpp/build" -G Ninja -DCMAKE_BUILD_TYPE=Release \
      -DGGML_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90 -DGGML_NATIVE=ON -DLLAMA_CURL=OFF \
      -DLLAMA_OPENSSL=OFF -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF \
      -DLLAMA_BUILD_SERVER=OFF >"$work/llama_cmake.log" 2>&1
    cmake --build "$work/llama.cpp/build" -j"$(nproc)" --target llama-bench >"$work/llama_build.log" 2>&1
    echo "llama-bench built: $work/llama.cpp/build/bin/llama-bench"
    ;;
  bench)
    work=$2 reps=$3
    shift 3
    for model in "$@"; do
      stem=$(basename "$model" .gguf)
      # Flash attention on: llama.cpp's fastest CUDA configuration.
      "$work/llama.cpp/build/bin/llama-bench" -m "$model" -ngl 99 -fa 1 -p 512 -n 128 -r "$reps" \
        -o json >"$work/llama_$stem.json" 2>"$work/llama_$stem.err" ||
        { echo "llama-bench failed on $model:"; tail -5 "$work/llama_$stem.err"; }
    done
    ;;
  *) echo "gpu_llamacpp.sh: unknown command '$cmd'" >&2; exit 2 ;;
esac
