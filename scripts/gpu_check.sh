#!/usr/bin/env bash
# The CUDA checks and benchmarks, on a GPU machine: builds salvo with CUDA, generates
# random-weight models of real shapes, runs the `cuda` ctest label (ops vs the CPU reference,
# models vs the CPU backend, row invariance, speculation invariant, hidden states and the DFlash
# drafter's device runner vs the CPU), checks through the CLI that
# `--spec ngram` and `--spec none` give the same ids, benchmarks pp512 / tg128 / k-row
# verification, and prints a summary table. Exits non-zero when a check fails.
#
#   scripts/gpu_check.sh [--deps DIR] [--tokenizers DIR] [--work DIR] [--quick]
#                        [--real DIR] [--llamacpp SRC.tar.gz] [--phase tests|bench|all]
#
# --deps: header-only dependencies and googletest sources from scripts/gpu_pack.sh, for machines
# without the -dev packages. --tokenizers: smollm2.gguf, qwen2.gguf and gemma3.gguf with the real
# models' tokenizer metadata (gpu_pack.sh writes them; without gemma3.gguf the gemma3 models take
# qwen2's vocabulary). --quick: no 7B model, fewer repetitions.
# --real: a folder with real GGUF files (smollm2-135m.gguf, qwen2.5-coder-1.5b.gguf, ...), which
# join the tests and the benchmarks. --llamacpp: llama.cpp's source (scripts/llamacpp_source.sh);
# llama-bench is built with CUDA (unless WORK already holds it) and measured on the same models,
# and the summary prints salvo's ratios to it and its share of the HBM bandwidth. --phase: the
# checks only (tests) or the benchmarks only (bench), e.g. to keep the timings away from other
# GPU work; both build first (incrementally). SALVO_BENCH_VARIANTS: the matmul variants
# (SALVO_CUDA_MATMUL) benchmarked beside the default, "float" unless set.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
deps="" tok="$root/tok" work=/tmp/salvo_gpu quick=0 real="" llamacpp="" phase=all
variants=${SALVO_BENCH_VARIANTS:-float}  # matmul variants benchmarked beside the default
while [[ $# -gt 0 ]]; do
  case $1 in
    --deps) deps=$2; shift 2 ;;
    --tokenizers) tok=$2; shift 2 ;;
    --work) work=$2; shift 2 ;;
    --quick) quick=1; shift ;;
    --phase) phase=$2; shift 2 ;;
    --real) real=$2; shift 2 ;;
    --llamacpp) llamacpp=$2; shift 2 ;;
    *) echo "gpu_check.sh: unknown argument '$1'" >&2; exit 2 ;;
  esac
done
mkdir -p "$work/models"
log() { printf '\n== %s\n' "$*"; }
failures=()

log "device"
nvidia-smi --query-gpu=name,memory.total,driver_version,clocks.sm,clocks.mem --format=csv
nvcc --version | tail -1

log "build"
args=(-S "$root" -B "$work/build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DSALVO_CUDA_TESTS=ON
  -DSALVO_SERVER=OFF)
if [[ -n $deps ]]; then
  for p in fmt CLI11 nlohmann_json GTest; do args+=("-D${p}_DIR=$deps/cmake"); done
fi
cmake "${args[@]}" >"$work/cmake.log" 2>&1 || { cat "$work/cmake.log"; exit 1; }
start=$(date +%s)
cmake --build "$work/build" -j"$(nproc)" --target salvo cuda_ops_test cuda_model_test \
  cuda_dflash_test cuda_matmul_bench
echo "build: $(($(date +%s) - start)) s"
salvo=$work/build/salvo

log "random-weight models of real shapes"
gen() {  # name shape mix tokenizer [extra gen_random_model.py arguments]
  local out=$work/models/$1.gguf
  [[ -f $out ]] && return
  python3 "$root/bench/gen_random_model.py" --shape "$2" --mix "$3" --tokenizer "$tok/$4.gguf" \
    "${@:5}" --out "$out"
  ls -la "$out"
}
gemma_tok=gemma3
if [[ ! -f $tok/gemma3.gguf ]]; then
  gemma_tok=qwen2
  echo "no $tok/gemma3.gguf: the gemma3 models get qwen2's vocabulary"
fi
gen smollm2-135m-q4_1 smollm2-135m q4_1 smollm2
gen qwen2.5-1.5b-q4_k_m qwen2.5-1.5b q4_k_m qwen2
gen qwen2.5-0.5b-mixed qwen2.5-0.5b mixed qwen2
gen gemma3-270m-q4_k_m gemma3-270m q4_k_m $gemma_tok
# The same shape with a 32-position sliding window, so the tests' short contexts cross it.
gen gemma3-270m-sw32 gemma3-270m q4_k_m $gemma_tok --sliding-window 32
[[ $quick == 1 ]] || gen qwen2.5-7b-q4_k_m qwen2.5-7b q4_k_m qwen2
m=$work/models

real_models=()
if [[ -n $real ]]; then
  for name in smollm2-135m qwen2.5-coder-1.5b qwen2.5-coder-0.5b gemma3-270m; do
    [[ -f $real/$name.gguf ]] && { ln -sf "$(realpath "$real/$name.gguf")" "$m/$name.gguf"; real_models+=("$name"); }
  done
fi
echo "real models: ${real_models[*]:-none}"
if [[ $phase != bench ]]; then
log "ctest -L cuda"
export SALVO_CUDA_TEST_MODELS="$m/smollm2-135m-q4_1.gguf:$m/qwen2.5-0.5b-mixed.gguf:$m/qwen2.5-1.5b-q4_k_m.gguf"
SALVO_CUDA_TEST_MODELS+=":$m/gemma3-270m-sw32.gguf"
for name in "${real_models[@]}"; do SALVO_CUDA_TEST_MODELS+=":$m/$name.gguf"; done
# cuda_dflash_test writes a random DFlash drafter per model here (used by the CLI check below).
export SALVO_CUDA_TEST_DRAFTERS=$work/drafters
ctest --test-dir "$work/build" -L cuda --output-on-failure -V 2>&1 | tee "$work/ctest.log" |
  grep -E "NMSE|spec |top-1|argmax|tests passed|Failed|FAILED|OK \]|Passed" || true
grep -q "100% tests passed" "$work/ctest.log" || failures+=("ctest -L cuda")

log "matmul kernels: every type x Qwen2.5-1.5B/7B shapes x rows 1..64 (NMSE, bitwise row invariance, GB/s)"
mm_args=()
[[ $quick == 1 ]] && mm_args=(--reps 10)
"$work/build/cuda_matmul_bench" "${mm_args[@]}" >"$work/matmul_bench.log" 2>&1 ||
  failures+=("cuda_matmul_bench")
grep -E "FAIL|^LAYER|check\(s\) failed" "$work/matmul_bench.log" || true

log "speculation invariant through the CLI (--spec ngram / dflash vs --spec none, greedy, same seed)"
prompt="The quick brown fox jumps over the lazy dog. The quick brown fox jumps over the lazy dog."
# run MODEL TAG N FLAGS...: one greedy generation of N tokens into $work/run_MODEL_TAG.json.
run() {
  "$salvo" run --device cuda --model "$m/$1.gguf" --raw -m "$prompt" --temperature 0 --seed 7 \
    --ignore-eos -n "$3" --json "${@:4}" >"$work/run_$1_$2.json"
}
# same_ids MODEL PLAIN_TAG TAG: prints both runs' passes; fails unless the token ids are equal.
same_ids() {
  python3 - "$work/run_$1_$2.json" "$work/run_$1_$3.json" "$3" <<'PY'
import json, sys
a, b = (json.load(open(p)) for p in sys.argv[1:3])
print(f"  {a['model']}: none {a['n_generated']} tokens / {a['forward_passes']} passes, "
      f"{sys.argv[3]} {b['n_generated']} tokens / {b['forward_passes']} passes; "
      f"ids {'identical' if a['tokens'] == b['tokens'] else 'DIFFER'}")
sys.exit(0 if a["tokens"] == b["tokens"] else 1)
PY
}
for model in smollm2-135m-q4_1 qwen2.5-1.5b-q4_k_m gemma3-270m-sw32; do
  run "$model" none 96 --spec none && run "$model" ngram 96 --spec ngram &&
    same_ids "$model" none ngram || failures+=("spec invariant $model")
done
# A draft model (placed on the device beside its target; same qwen2 vocabulary).
run qwen2.5-1.5b-q4_k_m draft 96 --spec draft --draft-model "$m/qwen2.5-0.5b-mixed.gguf" &&
  same_ids qwen2.5-1.5b-q4_k_m none draft || failures+=("spec invariant draft model")

log "DFlash on CUDA through the CLI (--spec dflash vs --spec none, random drafters)"
for model in smollm2-135m-q4_1 qwen2.5-1.5b-q4_k_m; do
  drafter=$SALVO_CUDA_TEST_DRAFTERS/$model.random
  if [[ ! -f $drafter/config.json ]]; then
    failures+=("dflash CLI $model: no drafter (cuda_dflash_test writes it)")
    continue
  fi
  run "$model" none64 64 --spec none || { failures+=("dflash CLI $model none"); continue; }
  for tree in chain adapter; do
    run "$model" "dflash_$tree" 64 --spec dflash --spec-tree "$tree" --drafter "$drafter" &&
      same_ids "$model" none64 "dflash_$tree" || failures+=("dflash spec invariant $model $tree")
  done
done

fi  # tests

if [[ $phase != tests ]]; then
log "benchmarks (salvo bench --device cuda)"
reps=5
[[ $quick == 1 ]] && reps=2
bench_models=(smollm2-135m-q4_1 qwen2.5-1.5b-q4_k_m gemma3-270m-q4_k_m)
[[ $quick == 1 ]] || bench_models+=(qwen2.5-7b-q4_k_m)
for name in "${real_models[@]}"; do
  case $name in smollm2-135m | qwen2.5-coder-1.5b) bench_models+=("$name") ;; esac
done
for model in "${bench_models[@]}"; do
  "$salvo" bench --device cuda --model "$m/$model.gguf" -p 512 -n 128 -r "$reps" --verify --json \
    >"$work/bench_$model.json"
  # Other matmul variants for every weight type, for comparison (model@variant in the summary).
  for variant in $variants; do
    SALVO_CUDA_MATMUL=$variant "$salvo" bench --device cuda --model "$m/$model.gguf" -p 512 -n 128 \
      -r "$reps" --verify --json >"$work/bench_$model@$variant.json"
  done
done

log "HBM bandwidth"
nvcc -O3 -arch=sm_90 "$root/bench/hbm_bandwidth.cu" -o "$work/hbm_bandwidth"
"$work/hbm_bandwidth" | tee "$work/hbm.txt"
hbm=$(sed -n 's/^hbm_gbps //p' "$work/hbm.txt")

if [[ -n $llamacpp ]]; then
  log "llama.cpp (CUDA) on the same models"
  [[ -x $work/llama.cpp/build/bin/llama-bench ]] || "$root/scripts/gpu_llamacpp.sh" build "$llamacpp" "$work"
  paths=()
  for model in "${bench_models[@]}"; do paths+=("$m/$model.gguf"); done
  "$root/scripts/gpu_llamacpp.sh" bench "$work" "$reps" "${paths[@]}"
fi

log "summary"
stems=()
for model in "${bench_models[@]}"; do
  stems+=("$model")
  for variant in $variants; do stems+=("$model@$variant"); done
done
python3 "$root/bench/gpu_compare.py" "$work" "$hbm" "${stems[@]}"

fi  # bench

if [[ ${#failures[@]} -gt 0 ]]; then
  printf '\nFAILED: %s\n' "${failures[@]}"
  exit 1
fi
echo "all CUDA checks passed"
