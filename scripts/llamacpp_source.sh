#!/usr/bin/env bash
# Writes OUT.tar.gz: the llama.cpp source that the pinned llama-cpp-python sdist bundles, trimmed to
# what llama-bench needs (core, common, the CPU and CUDA backends, llama-bench itself: ~3 MB), so
# that it fits in one call to the GPU machine, which has nvcc but no network.
#   scripts/llamacpp_source.sh OUT.tar.gz
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
out=$(realpath -m "${1:?usage: llamacpp_source.sh OUT.tar.gz}")
version=$(sed -n 's/^LLAMA_CPP_VERSION=//p' "$root/scripts/setup.sh")
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
python3 -m pip download -q --no-deps --no-binary :all: -d "$tmp" "llama-cpp-python==$version"
tar xzf "$tmp"/llama_cpp_python-*.tar.gz -C "$tmp"
src=$(echo "$tmp"/llama_cpp_python-*/vendor/llama.cpp)
cd "$src"
excludes=()
for d in ggml/src/ggml-*/; do
  case $d in */ggml-cpu/ | */ggml-cuda/) ;; *) excludes+=(--exclude="./${d%/}") ;; esac
done
for d in docs models media tests examples benches gguf-py conversion vendor/miniaudio .git; do
  excludes+=(--exclude="./$d")
done
mkdir "$tmp/trim"
tar cf - "${excludes[@]}" . | tar xf - -C "$tmp/trim"
cd "$tmp/trim"
sed -i '/miniaudio/d' vendor/CMakeLists.txt
find tools -mindepth 1 -maxdepth 1 -type d ! -name llama-bench -exec rm -rf {} +
cat >tools/CMakeLists.txt <<'CMAKE'
# Trimmed by salvo's scripts/llamacpp_source.sh: only llama-bench.
find_package(Threads REQUIRED)
llama_add_compile_flags()
add_subdirectory(llama-bench)
CMAKE
echo "llama-cpp-python $version" >SALVO_SOURCE
tar czf "$out" .
echo "llama.cpp source of llama-cpp-python $version: $(du -h "$out" | cut -f1) -> $out"
