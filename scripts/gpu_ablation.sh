#!/usr/bin/env bash
# Where a CUDA decode step goes: tg128 with each kernel class left out of the pass in turn
# (SALVO_CUDA_SKIP, profiling only: the outputs are wrong), and what the step saves without it.
# ncu times kernels one at a time; this measures what a class costs inside the graph, with the
# launches overlapping (session 11: attention 21 us a layer in the step, 11 in ncu).
#
#   scripts/gpu_ablation.sh SALVO_BINARY MODEL.gguf [REPEATS]
set -euo pipefail
salvo=${1:?salvo binary} model=${2:?model} reps=${3:-2}
step_ms() {  # mean ms of a tg128 decode step with SALVO_CUDA_SKIP=$1
  SALVO_CUDA_SKIP=$1 "$salvo" bench --device cuda --model "$model" -p 0 -n 128 -r 3 --json \
    2>/dev/null | python3 -c "import json, sys; print(1000 / json.load(sys.stdin)['results'][0]['tps_mean'])"
}
printf '%-8s %9s %9s\n' class "step ms" "saved ms"
for _ in $(seq "$reps"); do
  base=$(step_ms "")
  printf '%-8s %9.3f\n' none "$base"
  for class in norm qkv rope attn wo gateup act down head; do
    ms=$(step_ms "$class")
    printf '%-8s %9.3f %9.3f\n' "$class" "$ms" "$(python3 -c "print($base - $ms)")"
  done
done
