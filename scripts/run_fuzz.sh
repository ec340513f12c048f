#!/usr/bin/env bash
# Builds a fuzzer (clang, libFuzzer, ASan/UBSan) and runs it for a bounded time over a scratch
# copy of its seed corpus (fuzz/corpus for gguf, fuzz/corpus_safetensors for safetensors), so
# the committed seeds never change. Exits non-zero on any crash, leak, sanitizer report or slow
# input; the reproducer is written to fuzz/artifacts/.
#   scripts/run_fuzz.sh [SECONDS] [gguf|safetensors]    (default 60 gguf)
set -euo pipefail

seconds="${1:-60}"
target="${2:-gguf}"
case "$target" in
  gguf) corpus=fuzz/corpus ;;
  safetensors) corpus=fuzz/corpus_safetensors ;;
  *) echo "run_fuzz.sh: unknown fuzzer '$target' (gguf or safetensors)" >&2; exit 2 ;;
esac
repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$repo"

if ! command -v clang++ >/dev/null; then
  echo "run_fuzz.sh: clang++ not found (libFuzzer needs clang)" >&2
  exit 2
fi

cmake --preset fuzz >/dev/null
cmake --build --preset fuzz --target "${target}_fuzz" -j "${SALVO_FUZZ_BUILD_JOBS:-2}"

work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
cp -r "$corpus" "$work/corpus"
mkdir -p fuzz/artifacts

# -timeout flags any single input that takes over 10 s (a hang); -rss_limit_mb any input that
# makes the parser allocate far beyond its size.
status=0
"build/fuzz/fuzz/${target}_fuzz" "$work/corpus" \
  -max_total_time="$seconds" -timeout=10 -rss_limit_mb=2048 -max_len=16384 \
  -print_final_stats=1 -artifact_prefix="$repo/fuzz/artifacts/" || status=$?
if [[ $status -ne 0 ]]; then
  echo "run_fuzz.sh: ${target}_fuzz failed (exit $status); reproducer in fuzz/artifacts/" >&2
  echo "  rerun with: build/fuzz/fuzz/${target}_fuzz fuzz/artifacts/<file>" >&2
fi
exit $status
