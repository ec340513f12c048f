#!/bin/bash
# The background work of scripts/gpu_window.sh, on GPU 0: build and checks on random models,
# then (real models and llama.cpp there) the benchmarks and the real models' logits against the
# CPU. Logs in /root/g.
export PYTHONPATH=/root/site CUDA_VISIBLE_DEVICES=0
W=/root/g
cd /root/src || exit 1
chk="scripts/gpu_check.sh --deps /root/pack/deps --tokenizers /root/pack/tok --work $W"
echo "tests start $(date +%T)"
$chk --phase tests >$W/tests.log 2>&1
echo "tests rc $? $(date +%T)"
while [ ! -f /root/w/qwen2.5-coder-1.5b.gguf.ok ] || [ ! -f /root/w/smollm2-135m.gguf.ok ] ||
  [ ! -f $W/llama.done ]; do sleep 3; done
echo "bench start $(date +%T)"
SALVO_BENCH_VARIANTS=${SALVO_BENCH_VARIANTS:-} $chk --phase bench --real /root/w \
  --llamacpp /root/pack/llamacpp.tar.gz >$W/bench.log 2>&1
echo "bench rc $? $(date +%T)"
touch $W/bench.done
# The matmul slice knobs (SALVO_MMA_WARPS_PER_SM, SALVO_MMA_MIN_UNITS: warps per block along k,
# a function of the shape alone, so every setting keeps the row invariance), alternated, on the
# real 1.5B and the random 7B shape: tg128 from an empty cache and the k-row passes at a
# 512-token context (bench --verify: greedy, top-256 and logits forms).
for rep in 1 2; do
  for knobs in 24:1 48:1 96:1 24:2 12:1; do
    for m in /root/w/qwen2.5-coder-1.5b.gguf $W/models/qwen2.5-7b-q4_k_m.gguf; do
      [ -f $m ] || continue
      SALVO_MMA_WARPS_PER_SM=${knobs%:*} SALVO_MMA_MIN_UNITS=${knobs#*:} $W/build/salvo bench \
        --device cuda --model $m -p 0 -n 128 -r 3 --verify --json \
        >$W/ab_$(basename $m .gguf)_${knobs/:/-}_$rep.json 2>>$W/knobs_ab.log
    done
  done
done
python3 - $W >>$W/knobs_ab.log 2>&1 <<'PY'
import glob, json, os, sys
for f in sorted(glob.glob(os.path.join(sys.argv[1], "ab_*.json"))):
    d = json.load(open(f))
    tg = [r["tps_mean"] for r in d["results"] if r["test"].startswith("tg")]
    v = {x["rows"]: x for x in d.get("verify", [])}
    print(os.path.basename(f), "tg128 %.1f" % tg[0],
          " ".join("v%d %.3f/%.3f/%.3fms" % (k, v[k]["ms"], v[k].get("ms_top", 0), v[k].get("ms_logits", 0))
                   for k in (1, 4, 16, 32, 64) if k in v))
PY
echo "knobs A/B done $(date +%T)"
models=""
for name in smollm2-135m qwen2.5-coder-1.5b gemma3-270m; do
  [ -f /root/w/$name.gguf.ok ] && models+="${models:+:}/root/w/$name.gguf"
done
(cd $W/build/tests && SALVO_CUDA_TEST_MODELS=$models SALVO_CUDA_TEST_DRAFTERS=$W/drafters \
  timeout 300 ./cuda_model_test 2>&1 | grep -E "NMSE|OK \]|FAILED|Failure") >$W/real_model.log
echo "real models done $(date +%T)"
# Where a prefill's time goes, per kernel (the 512-token prefill of the Qwen2.5-1.5B shape).
m=$W/models/qwen2.5-1.5b-q4_k_m.gguf
if [ -f $m ] && [ -x /usr/local/cuda/bin/ncu ]; then
  SALVO_CUDA_GRAPHS=0 timeout 400 /usr/local/cuda/bin/ncu --print-summary per-kernel \
    --metrics gpu__time_duration.sum --cache-control none --clock-control none \
    $W/build/salvo bench --device cuda --model $m -p 512 -n 0 -r 1 >$W/prefill_profile.log 2>&1
  echo "prefill profile rc $? $(date +%T)"
fi
