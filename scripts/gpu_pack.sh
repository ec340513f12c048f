#!/usr/bin/env bash
# Packs what scripts/gpu_check.sh needs on a GPU machine that has nvcc, CMake and Python but
# none of salvo's -dev packages and no network: the source tree, header-only copies of fmt,
# CLI11 and nlohmann-json with small CMake package files, googletest's sources, the gguf wheel
# (pure Python), the tokenizers of the real models (metadata only, a few MiB) and llama.cpp's
# source as llama-cpp-python bundles it (trimmed, ~3 MB; for the llama.cpp CUDA comparison).
#
#   scripts/gpu_pack.sh OUT_DIR        # then, on the GPU machine: OUT_DIR/scripts/gpu_check.sh
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
out=${1:?usage: gpu_pack.sh OUT_DIR}
models=${SALVO_MODELS:-$root/models}
mkdir -p "$out"

# Source: tracked and untracked-but-not-ignored files, without drafters/ (~75 MB: a device call
# carries at most 64 MiB, so a call that needs a drafter carries it on its own) and without
# files the checkout lacks (drafters/ moved aside while pieces travel).
(cd "$root" && git ls-files -co --exclude-standard -z -- . ':!drafters' |
  while IFS= read -r -d '' f; do if [[ -e $f ]]; then printf '%s\0' "$f"; fi; done |
  xargs -0 cp --parents -t "$out")

deps=$out/deps
mkdir -p "$deps/include" "$deps/cmake"
cp -r /usr/include/fmt /usr/include/CLI /usr/include/nlohmann "$deps/include/"
cp -r /usr/src/googletest "$deps/googletest"
for pkg in fmt:fmt::fmt:FMT_HEADER_ONLY=1 CLI11:CLI11::CLI11: nlohmann_json:nlohmann_json::nlohmann_json:; do
  IFS=: read -r name ns1 _ns2 target define <<<"$pkg"
  cat >"$deps/cmake/${name}Config.cmake" <<CFG
# Header-only stand-in written by gpu_pack.sh.
if(NOT TARGET ${ns1}::${target})
  add_library(${ns1}::${target} INTERFACE IMPORTED)
  set_target_properties(${ns1}::${target} PROPERTIES
    INTERFACE_INCLUDE_DIRECTORIES "\${CMAKE_CURRENT_LIST_DIR}/../include"
    INTERFACE_COMPILE_DEFINITIONS "${define}")
endif()
set(${name}_FOUND TRUE)
CFG
done
cat >"$deps/cmake/GTestConfig.cmake" <<'CFG'
# googletest built from source, written by gpu_pack.sh.
if(NOT TARGET GTest::gtest_main)
  set(INSTALL_GTEST OFF CACHE BOOL "" FORCE)
  set(BUILD_GMOCK OFF CACHE BOOL "" FORCE)
  add_subdirectory("${CMAKE_CURRENT_LIST_DIR}/../googletest" "${CMAKE_BINARY_DIR}/_googletest"
                   EXCLUDE_FROM_ALL)
endif()
set(GTest_FOUND TRUE)
CFG

mkdir -p "$out/whl" "$out/tok"
python3 -m pip download -q --no-deps --only-binary=:all: -d "$out/whl" gguf==0.19.0
python3 "$root/bench/gen_random_model.py" --extract-tokenizer "$models/smollm2-135m.gguf" \
  --out "$out/tok/smollm2.gguf"
python3 "$root/bench/gen_random_model.py" --extract-tokenizer "$models/qwen2.5-coder-1.5b.gguf" \
  --out "$out/tok/qwen2.gguf"
python3 "$root/bench/gen_random_model.py" --extract-tokenizer "$models/gemma3-270m.gguf" \
  --out "$out/tok/gemma3.gguf"
"$root/scripts/llamacpp_source.sh" "$out/llamacpp.tar.gz"
du -sh "$out"
