#!/bin/bash
# Device-side driver for the DFlash drafters (DEVELOPERS.md "Training a DFlash drafter" lists the
# calls). The checkout carries .gpu/df (this script as dev.sh, train/dflash/*.py in code/, the gzipped
# make_data.py JSONs, the gguf wheel in whl/) and one or more GGUF pieces in .gpu/s/ (smollm),
# .gpu/q/ (qwen 1.5B) and .gpu/p/ (qwen 0.5B). Idempotent: every call moves the pieces that came
# with it to /root/m, and once all pieces of a model are there it joins them, checks the sha256 and
# starts train.py in the background (setsid), so the next uploads and the other runs overlap. A
# model is trained only when its data_<name>.json.gz came along. The runs share the visible GPUs;
# SGPU / QGPU / PGPU put a run on a GPU of its own (CUDA_VISIBLE_DEVICES).
#   bash .gpu/df/dev.sh              # collect pieces, start what can start, report, export finished runs
#   bash .gpu/df/dev.sh wait SECONDS # the same, but first block until both runs are done (or SECONDS pass)
#   bash .gpu/df/dev.sh bench [REPS] / trace [DIR]  # bench_spec / a SALVO_SPEC_TRACE run (below)
#   bash .gpu/df/dev.sh profile SECONDS [ARGS...]   # a QPROFILE run's profile, then again with ARGS
# Exports (one run a call, over several calls) to $OUT: <s|q|p>_small.tar (config.json, token_ranks.safetensors,
# train_log.json), <s|q|p>.log, <s|q|p>_reference.safetensors, then model.safetensors in 15 MB
# pieces <s|q|p>_model.NN, 3 a call (cat them), then the run's generated.json.gz as <s|q|p>_gen.NN.
# Only on the GPU machine: run here, the preamble moves .gpu's pieces into /root and may start a
# run (session 34 did, by testing the trace mode locally).
command -v nvidia-smi >/dev/null || { echo "device.sh: no nvidia-smi; it runs on the GPU machine" >&2; exit 1; }
export PYTHONUNBUFFERED=1 PYTHONPATH=/root/site
M=/root/m; W=/root/w; mkdir -p $M/s $M/q $M/p $M/qi $W
[ -d /root/site/gguf ] || pip install -q --no-index --no-deps --target /root/site .gpu/df/whl/*.whl
for d in s q p qi; do for f in .gpu/$d/*; do [ -f "$f" ] && mv "$f" $M/$d/; done; done
echo "pieces: s=$(ls $M/s | wc -l) q=$(ls $M/q | wc -l) p=$(ls $M/p | wc -l) qi=$(ls $M/qi | wc -l)"
# QINIT=N: the qwen 1.5B run continues a shipped drafter (train.py --init), whose config.json comes in
# .gpu/df/init_config.json and whose model.safetensors in N pieces in .gpu/qi/ (67 MB: two calls).
init_args=""
if [ -n "${QINIT:-}" ]; then
  if [ ! -f $W/init_q/model.safetensors ] && [ $(ls $M/qi | wc -l) -eq $QINIT ]; then
    mkdir -p $W/init_q && cp .gpu/df/init_config.json $W/init_q/config.json &&
      cat $M/qi/* > $W/init_q/.tmp && mv $W/init_q/.tmp $W/init_q/model.safetensors && echo "init drafter joined"
  fi
  init_args="--init $W/init_q --lr ${QLR:-4e-4}${QGROW:+ --grow}"
fi
# Copied again only when it changed: a --precompile started by an earlier call runs from it.
diff -rq -x __pycache__ .gpu/df/code $W/code >/dev/null 2>&1 || { rm -rf $W/code; cp -r .gpu/df/code $W/code; }
# Once, and atomically: a run reads its data ~40 s after it starts, while later calls come by
# (session 8 lost a run to a copy that truncated the file under the reader).
for f in .gpu/df/data_*.json.gz; do
  [ -f "$f" ] && [ ! -f "$W/$(basename "$f")" ] && cp "$f" "$W/.tmp_data" && mv "$W/.tmp_data" "$W/$(basename "$f")"
done
# QGENAUTO=1: gen_bench.py --choose, on random weights of the 1.5B's shapes, starts with the first
# call and picks generation's mode (eager, --gen-graphs, or those with --gen-compile) for this
# machine while the pieces travel (480 s at most); the runs wait for it and take its flags, and
# the wait counts in their --total-minutes (train.py --started). gen_bench writes the best mode so
# far after each mode; once QGENWAIT seconds (default 170, about the uploads' time) have passed since
# it started, a run takes those flags instead of waiting for the compiled mode, and stops it.
if [ -n "${QGENAUTO:-}" ] && [ ! -f $W/genbench.started ]; then
  touch $W/genbench.started; rm -rf $W/gbcode; cp -r .gpu/df/code $W/gbcode
  setsid nohup bash -c "timeout 480 python3 $W/gbcode/gen_bench.py --choose $W/genflags > $W/genbench.log 2>&1
    touch $W/genbench.done" >/dev/null 2>&1 &
fi
start() { # name gguf sha npieces dir gpu ("": the visible ones) args...
  name=$1; g=$2; sha=$3; n=$4; dir=$5; gpu=$6; shift 6
  [ -f $W/$name.started ] && return
  [ -f $W/data_$name.json.gz ] || { echo "no data for $name"; return; }
  case " $* " in *" --init "*) [ -f $W/init_q/model.safetensors ] || return;; esac
  # QPRECOMPILE=1: train.py --precompile compiles the drafter's step on random weights of the
  # target's shapes while the pieces travel (the GPU is idle then), into torch's on-disk caches,
  # where the run's own compile finds it (sessions 53-54: 70-130 s of compiling in the run).
  if [ -n "${QPRECOMPILE:-}" ] && [ ! -f $W/$name.precompile ] && [ ! -f $g.ok ]; then
    touch $W/$name.precompile
    setsid nohup bash -c "timeout 400 python3 $W/code/train.py --precompile --target $name --gguf $g --data - \
      --out $W/precompile_$name $* > $W/$name.precompile.log 2>&1" >/dev/null 2>&1 &
  fi
  if [ ! -f $g.ok ]; then
    [ $(ls $M/$dir | wc -l) -eq $n ] || return
    cat $M/$dir/* > $g
    got=$(sha256sum $g | cut -d' ' -f1)
    if [ "$got" != "$sha" ]; then echo "SHA MISMATCH $name $got"; return; fi
    echo "sha ok $name"; touch $g.ok; rm -rf $M/$dir
  fi
  touch $W/$name.started
  # Earlier runs' prompts with their continuations (their generated.json.gz, kept as
  # data_<name>.<tag>.json.gz) join this run's make_data.py file: only the new prompts are generated.
  data=$W/data_$name.json.gz; for f in $W/data_$name.*.json.gz; do [ -f "$f" ] && data=$data,$f; done
  # A kit's job on this machine (scripts/gpu_kit_run.sh: its A/B runs while the pieces travel)
  # has the GPU first: the run waits for its "job done", at most QKITWAIT seconds (default 900),
  # so the upload calls can all be the same and training starts by itself after the last piece
  # (session 34 lost its run to a separate start call that came too late).
  setsid nohup bash -c "w=0; while [ -f /root/kit/started ] && ! grep -q 'job done' /root/kit/logs/job.log 2>/dev/null \
    && [ \$w -lt ${QKITWAIT:-900} ]; do sleep 3; w=\$((w + 3)); done; echo \$w > $W/$name.kitwait
    t0=\$(date +%s); while [ -f $W/genbench.started ] && [ ! -f $W/genbench.done ] && [ \$w -lt 900 ] &&
      ! { [ -f $W/genflags ] && [ \$((\$(date +%s) - \$(stat -c %Y $W/genbench.started))) -ge ${QGENWAIT:-170} ]; }; do
      sleep 2; w=\$((w + 2)); done; pkill -f \"gbcode/gen_[b]ench\"; sleep 1
    ${gpu:+CUDA_VISIBLE_DEVICES=$gpu} ${launch:-python3} $W/code/train.py --target $name --gguf $g --data $data \
    --out $W/out_$name --work $W --seed 0 --started \$t0 $* \$(cat $W/genflags 2>/dev/null) > $W/$name.log 2>&1; echo \$? > $W/$name.done" >/dev/null 2>&1 &
}
# Budgets (H200, both at once): smollm ~5-7 GPU-min, qwen ~13-15. --passes sets the work; --minutes
# caps the drafter's stepping time should the shared GPU be slower than planned. Session 6 made 12
# passes over 20k prompts with one layer and memorised them (training-sample chain tau 3.63, held
# out 2.49); session 8: 36k prompts, two layers, 5 passes (QFEATGB=90 on a GPU of its own).
# Session 12 shipped 36k prompts, 5 passes, QFEATGB=100 on GPU 1 with QGENGPUS=0 (GPU 0 generates
# half the data: train.py --gen-gpus). Session 16 shipped three layers, 8 passes capped at 8.5
# minutes (7.4 done), QFEATGB=100, on one H200 for everything (15.6 GPU minutes).
# Session 23 continued it on new prompts: QINIT=2 QMINUTES=10.5 QPASSES=14 (lr 4e-4), 18.5 GPU minutes.
# Session 25 continued that on seed-2 prompts: QINIT=2 QMINUTES=9.5 QPASSES=12, 20.2 GPU minutes.
# QPROFILE=N: torch.profiler's table over N of the drafter's steps, in the run's log (with
# QMAXPROMPTS=N, N training prompts only: a short run for the profile). QLOSSVOCAB=N: the loss over
# the N best-ranked ids only (train.py --loss-vocab; session 45, first run in session 47).
# Session 47, from scratch on the kept continuations of sessions 33, 35 and 41 (no generation):
# QMINUTES=12 QPASSES=12 QLOSSVOCAB=32768 QPROFILE=10, 17.3 GPU minutes, 37 ms a step (19251
# steps). QCOMPILE=1: train.py --compile (torch.compile of the step); QFP8=1: --feature-fp8 (float8
# features: with QFEATGB=130 the same data in one shard); QGENCOMPILE=1: --gen-compile (generation's
# decode step compiled; gen_bench ran it in session 53); QGENGRAPHS=1: --gen-graphs (generation's decode
# steps as CUDA graphs, static_decode.py; session 53's H100 failed the second capture in the allocator,
# mended since, not yet rerun). QCOMPILE and QFP8 ran in sessions 50, 52 and 53.
# QTOTAL=M: train.py --total-minutes (the drafter
# steps for what the budget leaves after generation and features, less QRESERVE minutes, default 2, for
# the adapter, evaluation and export); QGENMIN=M: --gen-minutes (generation stops there; the prompts it
# did not reach, a random subset, are left out); QREGEN=1: --regenerate (the data files' kept
# continuations are generated again: one command makes all its data). Session 49 ran QREGEN=1
# QCOMPILE=1 QFP8=1 QFEATGB=130 QTOTAL=16.5 QGENMIN=6: generation (grouped_attention) at 54-66k
# tokens/s in its first four batches (~29k before), then the machine was taken back mid-run. With
# QREGEN only the prompts travel: .gpu/df's data files can be the 8 MB prompt-only ones.
# QLAYERS / QTLAYERS set the qwen drafter's layers and target layers; with QINIT, QGROW=1 grows the
# shipped drafter to them (train.py --grow: it starts as the shipped function).
start smollm2-135m $W/smollm2-135m.gguf b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53 ${SPIECES:-2} s "${SGPU:-}" \
  --n-layer 2 --n-ff 1280 --target-layers 2,15,27 --max-new 256 --gen-batch 4000 --gen-tokens 1200000 \
  --passes ${SPASSES:-10} --minutes ${SMINUTES:-2.5} --adapter-passes 2 --adapter-minutes 0.75 --feature-gb 16 --eval-max 256
# QRANKS=N: the qwen run on N GPUs of the machine through torchrun (train.py's Ranks: each rank
# generates its share, holds its share's features, QFEATGB each, and the gradients are averaged
# every step). QTOTAL is wall minutes: the run's GPU minutes are N times it. Tried on the CPU with
# two gloo ranks and every one-command flag (session 51); not yet on GPUs.
launch=${QRANKS:+torchrun --standalone --nproc_per_node $QRANKS}
start qwen2.5-coder-1.5b $W/qwen2.5-coder-1.5b.gguf cc324af070c2ecbfd324a30884d2f951a7ff756aba85cb811a6ec436933bb046 ${QPIECES:-20} q "${QGPU:-}" \
  --n-layer ${QLAYERS:-3} --n-ff 3072 --target-layers ${QTLAYERS:-2,13,24} --max-new 256 --gen-batch 4000 --gen-tokens 1200000 \
  --passes ${QPASSES:-8} --minutes ${QMINUTES:-8.5} --adapter-passes 1 --adapter-minutes 0.75 --feature-gb ${QFEATGB:-100} --eval-max 256 \
  ${QGENGPUS:+--gen-gpus $QGENGPUS} ${QPROFILE:+--profile-steps $QPROFILE} ${QMAXPROMPTS:+--max-prompts $QMAXPROMPTS} \
  ${QLOSSVOCAB:+--loss-vocab $QLOSSVOCAB} ${QCOMPILE:+--compile} ${QFP8:+--feature-fp8} ${QGENCOMPILE:+--gen-compile} ${QGENGRAPHS:+--gen-graphs} \
  ${QTOTAL:+--total-minutes $QTOTAL} ${QGENMIN:+--gen-minutes $QGENMIN} ${QRESERVE:+--reserve-minutes $QRESERVE} \
  ${QREGEN:+--regenerate} $init_args
launch=
# Qwen2.5-Coder-0.5B (24 layers, 896 wide; features ~52 GB for 36k prompts): the 1.5B's recipe at
# its proportions (n_ff twice the width, layers 2 / middle / 4 from the end). Not yet run.
start qwen2.5-coder-0.5b $W/qwen2.5-coder-0.5b.gguf 1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32 ${PPIECES:-9} p "${PGPU:-}" \
  --n-layer 2 --n-ff 1792 --target-layers 2,11,20 --max-new 256 --gen-batch 4000 --gen-tokens 1200000 \
  --passes ${PPASSES:-5} --minutes ${PMINUTES:-5} --adapter-passes 1 --adapter-minutes 0.75 --feature-gb ${PFEATGB:-60} --eval-max 256
names="smollm2-135m qwen2.5-coder-1.5b qwen2.5-coder-0.5b"
# bench [REPS]: bench_spec.py on the H200 with the drafter just trained (out_qwen...) and the one it
# started from (init_q), alternated REPS times (default 1), in the same window and on the same
# GGUF. Needs .gpu/df/salvo.gz (a CUDA build), .gpu/df/libfmt.so.9 and .gpu/df/prompts.jsonl.
# trace [DRAFTER_DIR]: SALVO_SPEC_TRACE=1 over the benchmark's code prompts with a fixed adapter
# tree (BUDGET nodes, default 7), the trace and its medians to $OUT (session 34: verification 75%
# of a drafted pass, the draft 24.5%). Needs /root/bench/salvo as bench does.
if [ "${1:-}" = trace ]; then
  B=/root/bench; export LD_LIBRARY_PATH=$B:${LD_LIBRARY_PATH:-}
  python3 -c 'import json, sys
for r in map(json.loads, open(sys.argv[1])):
    if r["category"] == "code": print(json.dumps({"prompt": r["messages"][0]["content"]}))' \
    ${PROMPTS:-.gpu/df/prompts.jsonl} > /tmp/code.jsonl
  SALVO_SPEC_TRACE=1 $B/salvo run --device cuda --model $W/qwen2.5-coder-1.5b.gguf --drafter ${2:-$W/out_qwen2.5-coder-1.5b} \
    --spec dflash --spec-tree adapter --spec-budget ${BUDGET:-7} --temperature 0 -n 192 \
    --prompts-file /tmp/code.jsonl > $OUT/trace.jsonl 2> $OUT/trace.txt
  python3 -c 'import re, statistics as st, sys
p = [re.search(r"pass ([\d.]+) ms draft ([\d.]+) ms accepted (\d+)", l) for l in open(sys.argv[1]) if "warm-up" not in l]
p = [m for m in p if m]
print("passes %d, median pass %.3f ms, median draft %.3f ms, %.2f tokens a pass" % (len(p),
      st.median(float(m[1]) for m in p), st.median(float(m[2]) for m in p), sum(int(m[3]) + 1 for m in p) / len(p)))' $OUT/trace.txt
  exit
fi
# prof [DRAFTER_DIR]: ncu's time of every kernel over a few drafted passes of the first code prompt
# (graphs off, so each kernel runs alone without PDL's overlap: sums run over a real pass), as
# $OUT/prof.csv in launch order (SKIP / COUNT launches; the prefill and first passes are skipped).
if [ "${1:-}" = prof ]; then
  B=/root/bench; export LD_LIBRARY_PATH=$B:${LD_LIBRARY_PATH:-}
  python3 -c 'import json, sys
r = [json.loads(l) for l in open(sys.argv[1])]
print(json.dumps({"prompt": next(x for x in r if x["category"] == "code")["messages"][0]["content"]}))' \
    ${PROMPTS:-.gpu/df/prompts.jsonl} > /tmp/one.jsonl
  SALVO_CUDA_GRAPHS=0 $(command -v ncu || echo /usr/local/cuda/bin/ncu) --csv --log-file $OUT/prof.csv \
    --cache-control none --clock-control none --metrics gpu__time_duration.sum --launch-skip ${SKIP:-3000} \
    --launch-count ${COUNT:-1500} $B/salvo run --device cuda --model $W/qwen2.5-coder-1.5b.gguf \
    --drafter ${2:-$W/out_qwen2.5-coder-1.5b} --spec dflash --spec-tree adapter --spec-budget ${BUDGET:-7} \
    --temperature 0 -n 128 --prompts-file /tmp/one.jsonl > /dev/null 2> $OUT/prof.err
  tail -3 $OUT/prof.err; wc -l $OUT/prof.csv
  exit
fi
# profile SECONDS [ARGS...]: for QPROFILE runs. Waits (at most SECONDS) for the qwen run's
# "drafter:" line and prints its profile; with ARGS, then stops that run and starts the same
# train.py command with ARGS added (e.g. --loss-vocab 32768; its log $W/again.log, its output
# $W/out_again) and waits for that run's profile too. Call it again until both are printed: it
# stops waiting the moment a run has ended (session 46's own script waited 443 s of device time on
# a second run that had died at once, started without this script's PYTHONPATH).
if [ "${1:-}" = profile ]; then
  end=$((SECONDS + ${2:-500})); shift $(($# < 2 ? $# : 2)); log1=$W/qwen2.5-coder-1.5b.log; log2=$W/again.log
  wait_for() { # log, status file: until the log has the drafter's summary, the run ends or time is up
    while ! grep -q 'drafter: [0-9]* steps' "$1" 2>/dev/null && [ ! -f "$2" ] && [ $SECONDS -lt $end ]; do sleep 3; done
  }
  show() { echo "== $1"; sed -n '/profile of/,/Self CUDA time total/p' "$1" | head -n 60; grep -E 'features of|drafter:|loss over|rror' "$1" | tail -n 6
    grep -q 'drafter: [0-9]* steps' "$1" 2>/dev/null || tail -n 5 "$1"; }
  wait_for $log1 $W/qwen2.5-coder-1.5b.done; show $log1
  if [ $# -gt 0 ] && grep -q 'drafter: [0-9]* steps' $log1 && [ ! -f $W/again.started ]; then
    cmd=$(ps -eo args | grep -E '^[^ ]*python3[^ ]* [^ ]*code/train\.py' | head -n 1)
    [ -n "$cmd" ] || { echo "profile: the first run is not running; nothing to start again"; exit 0; }
    pkill -f 'code/train.py'; sleep 3; touch $W/again.started
    cmd=${cmd/--out $W\/out_qwen2.5-coder-1.5b/--out $W/out_again}
    echo "again: $cmd $*"
    setsid nohup bash -c "$cmd $* > $log2 2>&1; echo \$? > $W/again.done" >/dev/null 2>&1 &
  fi
  if [ -f $W/again.started ]; then
    wait_for $log2 $W/again.done; show $log2
    grep -q 'drafter: [0-9]* steps' $log2 && pkill -f 'code/train.py'
  fi
  cp $log1 $OUT/ 2>/dev/null; cp $log2 $OUT/ 2>/dev/null
  exit 0
fi
if [ "${1:-}" = bench ]; then
  B=/root/bench; mkdir -p $B
  [ -x $B/salvo ] || { gunzip -c .gpu/df/salvo.gz > $B/salvo && chmod +x $B/salvo && cp .gpu/df/libfmt.so.9 $B/; }
  export LD_LIBRARY_PATH=$B:${LD_LIBRARY_PATH:-}
  g=$W/qwen2.5-coder-1.5b.gguf
  # BENCH_DIRS: the drafters to run (default: the new one and the one it started from); PROMPTS: a
  # prompts file of its own (e.g. one category for a --dflash-sweep, SWEEP=1).
  for r in $(seq ${2:-1}); do for d in ${BENCH_DIRS:-$W/out_qwen2.5-coder-1.5b $W/init_q}; do
    [ -f $d/model.safetensors ] || { echo "no drafter in $d"; continue; }
    echo "== rep $r drafter $d"
    python3 bench/bench_spec.py --salvo $B/salvo --model $g --prompts ${PROMPTS:-.gpu/df/prompts.jsonl} --device cuda --skip-llama \
      --draft-model none --drafter $d --limit 100 --max-tokens 192 --threads 4 \
      --modes ${MODES:-none auto dflash:adapter:7 dflash:adapter:15} ${SWEEP:+--dflash-sweep} 2>&1 | tee -a $OUT/bench.log
  done; done
  exit
fi
running() { for n in $names; do [ -f $W/$n.started ] && [ ! -f $W/$n.done ] && return 0; done; return 1; }
if [ "${1:-}" = wait ]; then  # until every started run is done
  end=$((SECONDS + $2))
  while running && [ $SECONDS -lt $end ]; do sleep 5; done
fi
# One run a call, at most 3 model pieces a call: a call returns at most 8 files and ~64 MiB (the
# three-layer 1.5B drafter is 67 MB, its reference 10 MB; a dropped file is not sent again). The
# first call of a run sends the log, small tar and reference; later calls the next model pieces.
export_out() { # name tag
  [ -z "${exported_one:-}" ] && [ -f $W/$1.done ] && [ ! -f $W/$1.exported ] || return
  exported_one=1
  local P=$W/pieces_$1
  if [ ! -d $P ]; then
    echo "== $1 exit status $(cat $W/$1.done)"; cp $W/$1.log $OUT/$2.log
    # A run that failed after writing its drafter (train.py writes it before the evaluation)
    # still sends it, without train_log.json or reference.safetensors.
    [ -f $W/out_$1/model.safetensors ] || { touch $W/$1.exported; return; }
    mkdir -p $P && (cd $W/out_$1 && tar cf $OUT/$2_small.tar $(ls config.json train_log.json token_ranks.safetensors 2>/dev/null) &&
      { [ ! -f reference.safetensors ] || cp reference.safetensors $OUT/$2_reference.safetensors; } &&
      split -b 15M -d model.safetensors $P/$2_model. &&
      { [ ! -f generated.json.gz ] || [ -f $W/$1.gen_exported ] || split -b 15M -d generated.json.gz $P/$2_gen.; })
    return
  fi
  # The drafter's pieces first, then the run's prompts with their continuations (cat $2_gen.* into
  # a data_<name>.<tag>.json.gz for the next run).
  for f in $( (ls $P | grep _model.; ls $P | grep -v _model.) | head -3); do mv $P/$f $OUT/; done
  [ -z "$(ls $P)" ] && touch $W/$1.exported
}
# A run's generated continuations leave as soon as they are written (the log says so), before the
# drafter steps: they are the costly part, and session 26 lost two runs' worth with the machine.
export_gen() { # name tag
  [ -z "${exported_one:-}" ] && [ ! -f $W/$1.gen_exported ] && grep -q "generated.json.gz:" $W/$1.log 2>/dev/null || return
  exported_one=1
  local P=$W/genpieces_$1
  [ -d $P ] || { mkdir -p $P && split -b 15M -d $W/out_$1/generated.json.gz $P/$2_gen.; }
  for f in $(ls $P | head -3); do mv $P/$f $OUT/; done
  [ -z "$(ls $P)" ] && touch $W/$1.gen_exported
}
export_gen qwen2.5-coder-1.5b q
export_out smollm2-135m s
export_out qwen2.5-coder-1.5b q
export_out qwen2.5-coder-0.5b p
nvidia-smi --query-gpu=memory.used,utilization.gpu --format=csv,noheader
# Every call reports each run's progress so far (session 49 lost its machine in a wait call, and
# only the generation rate that an earlier call had printed came back): the first and last
# generation lines, the milestones, the last loss line and the log's end.
digest() {
  grep -E 'generated [0-9]+/' "$1" | sed -n '1p;$p'
  grep -vE 'generated [0-9]+/' "$1" | grep -E 'generation|features|budget:|drafter:|adapter:|tau|deadline|out of GPU|compile|rror' |
    cut -c1-240 | tail -n 12
  grep -E '\] (drafter|adapter) \{' "$1" | tail -n 1
  tail -n 2 "$1" | cut -c1-240
}
[ -f $W/genbench.log ] && { echo "== gen_bench"; grep -vi warn $W/genbench.log | tail -n 9 | cut -c1-240; }
for f in $W/*.precompile.log; do [ -f "$f" ] && { echo "== $(basename $f)"; grep -E "precompile|rror" "$f" | tail -n 3 | cut -c1-240; }; done
for n in $names; do [ -f $W/$n.log ] && { echo "== $n"; digest $W/$n.log; }; done
ls $OUT
