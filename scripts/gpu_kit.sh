#!/usr/bin/env bash
# Builds a GPU-session kit from binaries built here (DEVELOPERS "A GPU session" item 9): the
# device builds nothing, so a window is a start call, the model pieces (if any) one a call,
# then status calls. Needs build/release configured with -DSALVO_CUDA_TESTS=ON and built
# (salvo cuda_ops_test cuda_model_test cuda_dflash_test dflash_replay_dump).
#
#   scripts/gpu_kit.sh KIT [--ab FILE] [--real] [--drafter] [--alt BUILD_DIR] [--llama] [--texts FILE]
#                      [--shapes "r7"] [--llama-card H200]
#
# KIT (e.g. .gpu/k33a, ignored): gzipped binaries, libfmt, the qwen2 tokenizer (random shapes are
# generated there), the gguf wheel, the benchmark prompts and run.sh (scripts/gpu_kit_run.sh).
# --ab FILE: the A/B forms, a line each: `name VAR=VALUE ...` (`name` alone: the defaults);
# without it only the default is measured. Words for the kit itself: KIT_TARGET=0 (the form
# changes only the drafter: no model tests or sweeps), KIT_PROF=1 (an ncu profile of its drafted
# passes; KIT_PROF_BUDGET=15 profiles 15-node trees instead of 7), KIT_BUDGETS=11,15 (its code
# trace also at those budgets), KIT_AUTO=1 (its code trace also with --spec auto), KIT_SWEEP=1
# (bench_spec --dflash-sweep: chain, best-first and adapter trees at budgets 8-64 per category),
# KIT_DUMP=1 (with KIT_SWEEP=1: tests/dflash_replay_dump on the device over its 16 code texts at
# 64 nodes, the device's candidates for bench/dflash_replay.py, returned as dump_FORM.bin.gz;
# without KIT_SWEEP=1 it dumps the texts of --texts FILE, salvo run --json lines with token ids),
# KIT_TESTS=0 (no CUDA tests for the form), KIT_OPS_ONLY=1 (cuda_ops_test only), KIT_SPEC=0 (no
# bench_spec or code traces), KIT_NCU=1 (ncu's memory, occupancy and stall figures of the kHalf
# launches of 1-, 8- and 16-row passes on the random 1.5B), KIT_NCU7=1 (ncu's per-instruction
# stall samples of the random 7B's 1- and 16-row kHalf launches, summarised by
# ncu_source_summary.py), KIT_TRACE=1 (the kernel timeline of decode steps and 1- and 16-row
# passes on both random shapes, at the card's own clocks: bench/kernel_trace.cc), KIT_BIN=alt.
# --real: the real Qwen2.5-Coder-1.5B in 20 pieces
# (.gpu/q/q00..q19, ~56 MB each) for its model test, sweeps and bench_spec; --drafter: its
# DFlash drafter in two pieces (.gpu/d/d0, d1; move drafters/ out of the tree for the calls).
# --alt BUILD_DIR: another build's binaries (e.g. a branch's) in KIT.alt, for the forms of ab.conf
# with KIT_BIN=alt, so two builds are compared in one window; KIT.alt (~30 MB) travels in a call
# of its own, the second: bash KIT/run.sh piece, carry [KIT/run.sh, KIT.alt]. A BUILD_DIR with
# `salvo` alone will do for alt forms with KIT_TESTS=0: KIT.alt is then ~9 MB and can travel with
# the start call (carry [KIT, KIT.alt]). --shapes: the random shapes the sweeps and traces take
# ("r15 r7" by default; "r7" alone halves the job's timed part). dflash_replay_dump goes in only
# when a form says KIT_DUMP=1 (~8 MB). --llama: llama.cpp's
# source (scripts/llamacpp_source.sh, ~3 MB) in the kit; the job's last step builds llama-bench
# with CUDA (~6 min on 16 cores) and runs tg128 / pp512 on the real model (with --real) and the
# random 7B, so salvo's figures have llama.cpp's of the same window beside them (llama_*.json).
# --llama-card NAME: llama.cpp's build and runs only where nvidia-smi names a card with NAME in it
# (e.g. H200: the issue's card; an H100 window then keeps its minutes for salvo's forms).
# KIT/quick.sh (scripts/gpu_kit_quick.sh): a one-call job for a window with little time left.
# Then, from the device tool, carrying only what each call needs:
#   call 1:     bash KIT/run.sh start 3                 carry [KIT]
#   per piece:  bash KIT/run.sh piece                   carry [KIT/run.sh, .gpu/q/qNN]
#   then:       bash KIT/run.sh status 90               carry [KIT/run.sh]   (returns logs.tgz)
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
kit=${1:?usage: gpu_kit.sh KIT [--ab FILE] [--real] [--drafter] [--alt BUILD_DIR]}
shift
ab="" real=0 drafter=0 alt="" llama=0 llama_card="" texts="" shapes=""
while [[ $# -gt 0 ]]; do
  case $1 in
    --ab) ab=$2; shift 2 ;;
    --real) real=1; shift ;;
    --drafter) drafter=1; shift ;;
    --llama) llama=1; shift ;;
    --llama-card) llama=1; llama_card=$2; shift 2 ;;
    --texts) texts=$2; shift 2 ;;
    --shapes) shapes=$2; shift 2 ;;
    --alt) alt=$(cd "$2" && pwd); shift 2 ;;
    *) echo "gpu_kit.sh: unknown argument '$1'" >&2; exit 2 ;;
  esac
done
models=${SALVO_MODELS:-$root/models}
build=$root/build/release
bins="salvo tests/cuda_ops_test tests/cuda_model_test tests/cuda_dflash_test"
[[ -n $ab ]] && grep -q "KIT_DUMP=1" "$ab" && bins="$bins tests/dflash_replay_dump"
for b in $bins; do
  [[ -x $build/$b ]] || { echo "gpu_kit.sh: $build/$b missing (build with -DSALVO_CUDA_TESTS=ON)" >&2; exit 1; }
done
[[ -z $alt || -x $alt/salvo ]] || { echo "gpu_kit.sh: $alt/salvo missing" >&2; exit 1; }
rm -rf "$kit" "$kit.alt" && mkdir -p "$kit/bin" "$kit/whl"
for b in $bins; do gzip -c "$build/$b" >"$kit/bin/$(basename "$b").gz"; done
if [[ -n $alt ]]; then
  mkdir -p "$kit.alt"
  for b in $bins; do
    if [[ -x $alt/$b ]]; then gzip -c "$alt/$b" >"$kit.alt/$(basename "$b").gz"; fi
  done
fi
[[ -n $shapes ]] && echo "$shapes" >"$kit/shapes"
fmt=$(ldd "$build/salvo" | awk '/libfmt/ {print $3}')
[[ -n $fmt ]] && cp "$fmt" "$kit/bin/"
# KIT_TRACE's CUPTI injection library, and the CUPTI it was linked with (the device's CUDA
# layout is not assumed).
cuda=$(dirname "$(dirname "$(command -v nvcc)")")
g++ -O2 -shared -fPIC -I"$cuda/include" "$root/bench/kernel_trace.cc" \
  -o "$kit/bin/libkernel_trace.so" -L"$cuda/lib" -L"$cuda/lib64" -lcupti
cupti=$(ldd "$kit/bin/libkernel_trace.so" | awk '/libcupti/ {print $3}')
gzip -c "$cupti" >"$kit/bin/$(basename "$cupti").gz"
python3 -m pip download -q --no-deps --only-binary=:all: -d "$kit/whl" gguf==0.19.0
python3 "$root/bench/gen_random_model.py" --extract-tokenizer "$models/qwen2.5-coder-1.5b.gguf" \
  --out "$kit/qwen2.gguf"
cp "$root/../shared/bench/prompts.jsonl" "$kit/prompts.jsonl"
# What is coming in pieces: the job waits for those even when its earlier steps end first.
echo "real=$real drafter=$drafter" >"$kit/expect"
[[ $llama == 1 ]] && "$root/scripts/llamacpp_source.sh" "$kit/llama.tar.gz" &&
  cp "$root/scripts/gpu_llamacpp.sh" "$kit/gpu_llamacpp.sh"
[[ -n $llama_card ]] && echo "$llama_card" >"$kit/llama_card"
[[ -n $texts ]] && cp "$texts" "$kit/texts.jsonl"
cp "$root/scripts/gpu_kit_run.sh" "$kit/run.sh"
cp "$root/scripts/gpu_kit_quick.sh" "$kit/quick.sh"
cp "$root/scripts/ab_summary.py" "$kit/ab_summary.py"
cp "$root/scripts/ncu_source_summary.py" "$kit/ncu_source_summary.py"
cp "$root/scripts/trace_summary.py" "$kit/trace_summary.py"
if [[ -n $ab ]]; then cp "$ab" "$kit/ab.conf"; else echo "default" >"$kit/ab.conf"; fi
if [[ $real == 1 ]]; then
  rm -rf "$root/.gpu/q" && mkdir -p "$root/.gpu/q"
  split -n 20 -d -a 2 "$models/qwen2.5-coder-1.5b.gguf" "$root/.gpu/q/q"
fi
# The drafter moves out of the tree for the calls: a later kit keeps the pieces already cut.
if [[ $drafter == 1 ]] && [[ -d $root/drafters/qwen2.5-coder-1.5b || ! -f $root/.gpu/d/d1 ]]; then
  rm -rf "$root/.gpu/d" && mkdir -p "$root/.gpu/d"
  tar cf "$root/.gpu/d/all.tar" -C "$root" drafters/qwen2.5-coder-1.5b
  split -n 2 -d -a 1 "$root/.gpu/d/all.tar" "$root/.gpu/d/d"
  rm "$root/.gpu/d/all.tar"
fi
du -sh "$kit" ${alt:+"$kit.alt"}
