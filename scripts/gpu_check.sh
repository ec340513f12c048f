#!/usr/bin/env bash
# The CUDA checks and benchmarks, on a GPU machine: builds salvo with CUDA, generates
# random-weight models of real shapes, runs the `cuda` ctest label (ops vs the CPU reference,
# models vs the CPU backend, row invariance, speculation invariant), checks through the CLI that
# `--spec ngram` and `--spec none` give the same ids, benchmarks pp512 / tg128 / k-row
# verification, and prints a summary table. Exits non-zero when a check fails.
#
#   scripts/gpu_check.sh [--deps DIR] [--tokenizers DIR] [--work DIR] [--quick]
#
# --deps: header-only dependencies and googletest sources from scripts/gpu_pack.sh, for machines
# without the -dev packages. --tokenizers: smollm2.gguf and qwen2.gguf with the real models'
# tokenizer metadata (gpu_pack.sh writes them). --quick: no 7B model, fewer repetitions.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
deps="" tok="$root/tok" work=/tmp/salvo_gpu quick=0
while [[ $# -gt 0 ]]; do
  case $1 in
    --deps) deps=$2; shift 2 ;;
    --tokenizers) tok=$2; shift 2 ;;
    --work) work=$2; shift 2 ;;
    --quick) quick=1; shift ;;
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
args=(-S "$root" -B "$work/build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DSALVO_CUDA_TESTS=ON)
if [[ -n $deps ]]; then
  for p in fmt CLI11 nlohmann_json GTest; do args+=("-D${p}_DIR=$deps/cmake"); done
fi
cmake "${args[@]}" >"$work/cmake.log" 2>&1 || { cat "$work/cmake.log"; exit 1; }
start=$(date +%s)
cmake --build "$work/build" -j"$(nproc)" --target salvo cuda_ops_test cuda_model_test \
  cuda_matmul_bench
echo "build: $(($(date +%s) - start)) s"
salvo=$work/build/salvo

log "random-weight models of real shapes"
gen() {  # name shape mix tokenizer [layers]
  local out=$work/models/$1.gguf
  [[ -f $out ]] && return
  python3 "$root/bench/gen_random_model.py" --shape "$2" --mix "$3" --tokenizer "$tok/$4.gguf" \
    ${5:+--layers $5} --out "$out"
  ls -la "$out"
}
gen smollm2-135m-q4_1 smollm2-135m q4_1 smollm2
gen qwen2.5-1.5b-q4_k_m qwen2.5-1.5b q4_k_m qwen2
gen qwen2.5-0.5b-mixed qwen2.5-0.5b mixed qwen2
[[ $quick == 1 ]] || gen qwen2.5-7b-q4_k_m qwen2.5-7b q4_k_m qwen2
m=$work/models

log "ctest -L cuda"
export SALVO_CUDA_TEST_MODELS="$m/smollm2-135m-q4_1.gguf:$m/qwen2.5-0.5b-mixed.gguf:$m/qwen2.5-1.5b-q4_k_m.gguf"
ctest --test-dir "$work/build" -L cuda --output-on-failure -V 2>&1 | tee "$work/ctest.log" |
  grep -E "NMSE|spec |tests passed|Failed|FAILED|OK \]|Passed" || true
grep -q "100% tests passed" "$work/ctest.log" || failures+=("ctest -L cuda")

log "matmul kernels: every type x Qwen2.5-1.5B/7B shapes x rows 1..64 (NMSE, bitwise row invariance, GB/s)"
mm_args=()
[[ $quick == 1 ]] && mm_args=(--reps 10)
"$work/build/cuda_matmul_bench" "${mm_args[@]}" >"$work/matmul_bench.log" 2>&1 ||
  failures+=("cuda_matmul_bench")
grep -E "FAIL|^LAYER|check\(s\) failed" "$work/matmul_bench.log" || true

log "speculation invariant through the CLI (--spec ngram vs --spec none, greedy, same seed)"
prompt="The quick brown fox jumps over the lazy dog. The quick brown fox jumps over the lazy dog."
for model in smollm2-135m-q4_1 qwen2.5-1.5b-q4_k_m; do
  for spec in none ngram; do
    "$salvo" run --device cuda --model "$m/$model.gguf" --raw -m "$prompt" --temperature 0 \
      --seed 7 --ignore-eos -n 96 --spec "$spec" --json >"$work/run_${model}_$spec.json"
  done
  python3 - "$work/run_${model}_none.json" "$work/run_${model}_ngram.json" <<'PY' ||
import json, sys
a, b = (json.load(open(p)) for p in sys.argv[1:3])
print(f"  {a['model']}: none {a['n_generated']} tokens / {a['forward_passes']} passes, "
      f"ngram {b['n_generated']} tokens / {b['forward_passes']} passes; "
      f"ids {'identical' if a['tokens'] == b['tokens'] else 'DIFFER'}")
sys.exit(0 if a["tokens"] == b["tokens"] else 1)
PY
    failures+=("spec invariant $model")
done

log "benchmarks (salvo bench --device cuda)"
reps=5
[[ $quick == 1 ]] && reps=2
bench_models=(smollm2-135m-q4_1 qwen2.5-1.5b-q4_k_m)
[[ $quick == 1 ]] || bench_models+=(qwen2.5-7b-q4_k_m)
for model in "${bench_models[@]}"; do
  "$salvo" bench --device cuda --model "$m/$model.gguf" -p 512 -n 128 -r "$reps" --verify --json \
    >"$work/bench_$model.json"
done

log "summary"
python3 - "$work" "${bench_models[@]}" <<'PY'
import json, sys
work, models = sys.argv[1], sys.argv[2:]
print("| model | weights/pass MiB | pp512 t/s | tg128 t/s | GB/s | v1 ms | v16/v1 | v64/v1 |")
print("| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
for m in models:
    b = json.load(open(f"{work}/bench_{m}.json"))
    r = {x["test"]: x["tps_mean"] for x in b["results"]}
    v = {x["rows"]: x for x in b.get("verify", [])}
    print(f"| {m} | {b['weight_bytes_per_pass'] / 2**20:.0f} | {r.get('pp512', 0):.0f} | "
          f"{r.get('tg128', 0):.1f} | {b['weight_gbps']:.0f} | {v[1]['ms']:.3f} | "
          f"{v[16]['ratio_to_1']:.2f} | {v[64]['ratio_to_1']:.2f} |")
print()
for m in models:
    b = json.load(open(f"{work}/bench_{m}.json"))
    print(m, "verify ms by rows:", ", ".join(f"{x['rows']}: {x['ms']:.3f}" for x in b["verify"]))
PY

if [[ ${#failures[@]} -gt 0 ]]; then
  printf '\nFAILED: %s\n' "${failures[@]}"
  exit 1
fi
echo "all CUDA checks passed"
