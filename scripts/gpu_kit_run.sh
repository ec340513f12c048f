#!/bin/bash
# A kit's per-call script on the GPU machine (scripts/gpu_kit.sh writes it as KIT/run.sh); run
# from the repository root of the device's copy of the tree.
#   run.sh start N   first call (carries the kit): unpack, start the job, wait N s
#   run.sh piece     a call carrying one model piece (.gpu/q/qNN or .gpu/d/dN), or KIT.alt
#   run.sh status N  wait up to N s (until the job is done), print the job's progress and
#                    summary; logs.tgz into $OUT
# The job (in the background): random Qwen2.5-1.5B and 7B shapes (Q4_K_M) generated there; the
# CUDA tests (ops, model and DFlash on the random 1.5B) for every A/B form of ab.conf; then
# `salvo bench` sweeps (-p 512 -n 128, k-row passes 1-64 at a 512-token context) of every form
# on both shapes, the forms alternated, two runs each; with the real model's 20 pieces, its
# model test and sweeps; with the drafter's 2 pieces, bench_spec (none, auto, dflash:adapter:7)
# per form, then each form's SALVO_SPEC_TRACE over the code prompts (twice, alternated). Each call copies the pieces it carries, so a replaced machine shows as missing ones
# (read `warm` in every result). A form with KIT_BIN=alt runs the binaries of KIT.alt (another
# build, gpu_kit.sh --alt), which come in a call of their own: its steps wait for them.
kit=$(cd "$(dirname "$0")" && pwd)
W=/root/kit
mkdir -p $W/p $W/m $W/logs
for f in .gpu/q/q?? .gpu/d/d?; do [ -f "$f" ] && cp --update=none "$f" $W/p/; done
if [ "$1" = start ] && [ ! -f $W/started ]; then
  touch $W/started
  mkdir -p $W/bin $W/src /root/site
  for f in "$kit"/bin/*.gz; do gunzip -c "$f" >$W/bin/$(basename "$f" .gz); done
  cp "$kit"/bin/*.so* $W/bin/ 2>/dev/null
  chmod +x $W/bin/*
  pip install -q --no-index --no-deps --target /root/site "$kit"/whl/*.whl >/dev/null 2>&1
  cp -r bench tools tests $W/src/ 2>/dev/null
  cp "$kit"/{prompts.jsonl,qwen2.gguf,ab.conf,run.sh,expect} $W/
  cp "$kit"/{ab_summary.py,ncu_source_summary.py,trace_summary.py} $W/
  cp "$kit"/llama.tar.gz "$kit"/gpu_llamacpp.sh "$kit"/texts.jsonl "$kit"/shapes $W/ 2>/dev/null
  # gpu_kit.sh --llama-card NAME: no llama.cpp on other cards.
  if [ -f "$kit"/llama_card ] &&
    ! nvidia-smi --query-gpu=name --format=csv,noheader | grep -q "$(cat "$kit"/llama_card)"; then
    rm -f $W/llama.tar.gz
  fi
  setsid nohup bash $W/run.sh job >$W/logs/job.log 2>&1 </dev/null &
fi
if [ "$(ls $W/p/q?? 2>/dev/null | wc -l)" -eq 20 ] && [ ! -f $W/m/real.ok ]; then
  cat $W/p/q?? >$W/m/qwen2.5-coder-1.5b.gguf
  [ "$(sha256sum $W/m/qwen2.5-coder-1.5b.gguf | cut -d' ' -f1)" = \
    cc324af070c2ecbfd324a30884d2f951a7ff756aba85cb811a6ec436933bb046 ] &&
    touch $W/m/real.ok || echo "SHA MISMATCH: qwen2.5-coder-1.5b"
fi
if [ -d "$kit.alt" ] && [ ! -f $W/alt.ok ]; then
  mkdir -p $W/bin/alt
  for f in "$kit.alt"/*.gz; do gunzip -c "$f" >$W/bin/alt/$(basename "$f" .gz); done
  chmod +x $W/bin/alt/* && touch $W/alt.ok
fi
if [ -f $W/p/d0 ] && [ -f $W/p/d1 ] && [ ! -f $W/drafter.ok ]; then
  cat $W/p/d0 $W/p/d1 | tar xf - -C $W && touch $W/drafter.ok
fi

# form_env NAME: the VAR=VALUE words of form NAME in ab.conf.
form_env() { awk -v n="$1" '$1 == n { $1 = ""; print }' $W/ab.conf; }
forms() { awk 'NF { print $1 }' $W/ab.conf; }
# has_word NAME WORD: whether form NAME's words include WORD (e.g. KIT_DUMP=1).
has_word() { case " $(form_env "$1") " in *" $2 "*) return 0 ;; *) return 1 ;; esac; }
# dump_texts NAME TEXTS: the device's own candidates at every position of TEXTS (salvo run --json
# lines with their token ids; K = 8, and how deep each text runs down the device engine's 64-node
# tree), for bench/dflash_replay.py beside a CPU dump of the same texts. Kept out of logs.tgz
# (~10 MB); status copies dump_NAME.bin.gz and texts_NAME.jsonl into $OUT.
dump_texts() {
  mkdir -p $W/dumps
  cat "$2" >$W/dumps/texts_$1.jsonl
  python3 bench/dflash_replay.py sequences $W/dumps/texts_$1.jsonl >$W/dumps/seqs_$1.txt
  env $(form_env $1) timeout 600 $(bin_of $1)/dflash_replay_dump $W/m/qwen2.5-coder-1.5b.gguf \
    $W/drafters/qwen2.5-coder-1.5b $W/dumps/seqs_$1.txt $W/dumps/dump_$1.bin 8 64 cuda \
    >$L/dump_$1.log 2>&1 && gzip -f $W/dumps/dump_$1.bin
}
# target_forms: the forms whose words lack KIT_TARGET=0. A form that changes only the drafter says
# KIT_TARGET=0, and the target-only steps (the model tests and the sweeps) skip it.
target_forms() { for f in $(forms); do has_word $f KIT_TARGET=0 || echo $f; done; }
# bin_of NAME: the folder of form NAME's binaries (KIT_BIN=alt: the other build's, once here).
bin_of() {
  has_word "$1" KIT_BIN=alt || { echo $W/bin; return; }
  while [ ! -f $W/alt.ok ]; do sleep 1; done
  echo $W/bin/alt
}

if [ "$1" = job ]; then
  export LD_LIBRARY_PATH=$W/bin PYTHONPATH=/root/site
  L=$W/logs
  cd $W/src || exit 1
  echo "job start $(date +%T)"
  gen() {
    python3 bench/gen_random_model.py --shape $1 --mix q4_k_m --tokenizer $W/qwen2.gguf \
      --out $W/m/$2.gguf >$L/gen_$2.log 2>&1
    touch $W/m/$2.ok
  }
  gen qwen2.5-1.5b r15 &
  gen qwen2.5-7b r7 &
  # gpu_kit.sh --llama: llama.cpp's CUDA build (~6 min on 16 cores) runs beside the CUDA tests
  # and the uploads, and every timed step waits for it (below). Session 42 let it run, niced on
  # 12 cores, beside the timed steps too: bench_spec warned that other processes kept more than
  # 20% of the CPUs busy, and code adapter:7 gave 2277 tok/s against 2374-2428 in other windows.
  if [ -f $W/llama.tar.gz ]; then
    echo "llama.cpp build $(date +%T)"
    bash $W/gpu_llamacpp.sh build $W/llama.tar.gz $W >$L/llama_build.log 2>&1 &
    llama_build=$!
  fi
  # KIT_TESTS=0: the form skips the CUDA tests (a window that only measures).
  for f in $(forms); do
    has_word $f KIT_TESTS=0 && continue
    (cd $W && env $(form_env $f) timeout 300 $(bin_of $f)/cuda_ops_test >$L/ops_$f.log 2>&1
      echo "rc $?" >>$L/ops_$f.log)
  done
  while [ ! -f $W/m/r15.ok ]; do sleep 1; done
  export SALVO_CUDA_TEST_DRAFTERS=$W/drt
  for f in $(forms); do
    has_word $f KIT_TESTS=0 && continue
    has_word $f KIT_OPS_ONLY=1 && continue  # cuda_ops_test alone (a kernel form's bits)
    for t in model dflash; do
      [ $t = model ] && ! target_forms | grep -qx $f && continue
      env $(form_env $f) SALVO_CUDA_TEST_MODELS=$W/m/r15.gguf timeout 300 \
        $(bin_of $f)/cuda_${t}_test >$L/${t}_r15_$f.log 2>&1
      echo "rc $?" >>$L/${t}_r15_$f.log
    done
  done
  echo "tests done $(date +%T)"
  if [ -n "${llama_build:-}" ]; then
    wait $llama_build
    echo "llama.cpp built $(date +%T)"
  fi
  sweep() {  # MODEL TAG REP
    for f in $(target_forms); do
      env $(form_env $f) timeout 300 $(bin_of $f)/salvo bench --device cuda --model $1 -p 512 \
        -n 128 -r 3 --verify --verify-rows 1,2,4,8,16,32,64 --verify-context 512 --json \
        >$L/ab_$2_${f}_$3.json 2>>$L/ab.err
    done
  }
  while [ ! -f $W/m/r7.ok ]; do sleep 1; done
  # gpu_kit.sh --shapes: the random shapes swept and traced (both unless the kit says).
  shapes=$(cat $W/shapes 2>/dev/null || echo "r15 r7")
  for rep in 1 2; do for m in $shapes; do sweep $W/m/$m.gguf $m $rep; done; done
  echo "random sweeps done $(date +%T)"
  ncu=$(command -v ncu || echo /usr/local/cuda/bin/ncu)
  # KIT_NCU=1: ncu's throughput, memory, occupancy and warp-state figures of a dozen kHalf
  # launches (two layers and more) of 1-, 8- and 16-row passes on the random 1.5B, as
  # ncu_FORM_rK.csv: whether a matmul waits on DRAM, on L2 or on its own latency.
  stalls=$(for s in long_scoreboard lg_throttle barrier wait short_scoreboard mio_throttle \
    math_pipe_throttle not_selected selected no_instruction drain membar; do
    printf 'smsp__average_warps_issue_stalled_%s_per_issue_active.ratio,' $s; done)
  for f in $(forms); do
    has_word $f KIT_NCU=1 || continue
    for k in 1 8 16; do
      re='regex:half_kernel(I.*Li1E|_[1b]I)'
      [ $k = 16 ] && re='regex:half_kernel_16'
      env $(form_env $f) SALVO_CUDA_GRAPHS=0 timeout 300 $ncu --csv --page details \
        --kernel-name-base mangled -k "$re" --launch-skip 300 --launch-count 12 \
        --clock-control none --section SpeedOfLight --section MemoryWorkloadAnalysis \
        --section Occupancy --section LaunchStats --section WarpStateStats \
        --metrics "${stalls%,}" $(bin_of $f)/salvo bench --device cuda --model $W/m/r15.gguf \
        -p 0 -n 0 -r 1 --verify --verify-rows $k --verify-context 512 \
        >$L/ncu_${f}_r$k.csv 2>$L/ncu_${f}_r$k.err
    done
  done
  # KIT_NCU7=1: where the random 7B's kHalf launches wait, per SASS instruction (ncu's source
  # counters of 8 launches of 1-row passes, then of 16-row passes; graphs off), as the summary
  # of scripts/ncu_source_summary.py in ncu7_FORM_rK.txt beside ncu's own figures (.csv).
  for f in $(forms); do
    has_word $f KIT_NCU7=1 || continue
    for k in 1 16; do
      re='regex:half_kernel_[1b]I'  # the one-row forms, the bulk A/B form included
      [ $k = 16 ] && re='regex:half_kernel_16'
      env $(form_env $f) SALVO_CUDA_GRAPHS=0 timeout 300 $ncu --kernel-name-base mangled -k "$re" \
        --launch-skip 200 --launch-count 8 --clock-control none --section SpeedOfLight \
        --section Occupancy --section LaunchStats --section WarpStateStats \
        --section SourceCounters -f -o $W/ncu7_${f}_r$k $(bin_of $f)/salvo bench --device cuda \
        --model $W/m/r7.gguf -p 0 -n 0 -r 1 --verify --verify-rows $k --verify-context 512 \
        >$L/ncu7_${f}_r$k.err 2>&1
      $ncu -i $W/ncu7_${f}_r$k.ncu-rep --csv --page details >$L/ncu7_${f}_r$k.csv 2>>$L/ncu7_${f}_r$k.err
      $ncu -i $W/ncu7_${f}_r$k.ncu-rep --page source --csv --print-source sass >$W/src7.csv \
        2>>$L/ncu7_${f}_r$k.err
      python3 $W/ncu_source_summary.py $W/src7.csv >$L/ncu7_${f}_r$k.txt 2>&1
    done
  done
  # KIT_TRACE=1: the form's kernel timeline at the card's own clocks, graphs and PDL as in use
  # (bench/kernel_trace.cc, a CUPTI injection library), of 64 decode steps and 1- and 16-row
  # passes on both random shapes; trace_summary.py's time per launch in ktrace_FORM_SHAPE.txt.
  for f in $(forms); do
    has_word $f KIT_TRACE=1 || continue
    for m in $shapes; do
      env $(form_env $f) CUDA_INJECTION64_PATH=$W/bin/libkernel_trace.so \
        KERNEL_TRACE_OUT=$W/ktrace_${f}_$m.txt timeout 300 $(bin_of $f)/salvo bench \
        --device cuda --model $W/m/$m.gguf -p 0 -n 64 -r 1 --verify --verify-rows 1,16 \
        --verify-context 512 >$L/ktrace_${f}_$m.err 2>&1
      python3 $W/trace_summary.py $W/ktrace_${f}_$m.txt >$L/ktrace_${f}_$m.txt 2>&1
    done
  done
  if [ -n "$(ls $W/p/q?? 2>/dev/null)" ] || grep -q real=1 $W/expect 2>/dev/null; then
    while [ ! -f $W/m/real.ok ]; do sleep 1; done
    for f in $(target_forms); do
      has_word $f KIT_TESTS=0 && continue
      env $(form_env $f) SALVO_CUDA_TEST_MODELS=$W/m/qwen2.5-coder-1.5b.gguf timeout 300 \
        $(bin_of $f)/cuda_model_test >$L/model_real_$f.log 2>&1
      echo "rc $?" >>$L/model_real_$f.log
    done
    for rep in 1 2; do sweep $W/m/qwen2.5-coder-1.5b.gguf real $rep; done
    echo "real sweeps done $(date +%T)"
  fi
  if [ -n "$(ls $W/p/d? 2>/dev/null)" ] || grep -q drafter=1 $W/expect 2>/dev/null; then
    while [ ! -f $W/drafter.ok ]; do sleep 1; done
    # KIT_SPEC=0: the form skips bench_spec and the code traces (e.g. a form that only dumps).
    for f in $(forms); do
      has_word $f KIT_SPEC=0 && continue
      env $(form_env $f) timeout 400 python3 bench/bench_spec.py --device cuda --skip-llama \
        --draft-model none --salvo $(bin_of $f)/salvo --models-dir $W/m --model qwen2.5-coder-1.5b \
        --drafter $W/drafters/qwen2.5-coder-1.5b --prompts $W/prompts.jsonl --limit 100 \
        --max-tokens 192 --threads 4 --modes none auto dflash:adapter:7 >$L/spec_$f.log 2>&1
    done
    # KIT_SWEEP=1: that form's tokens a pass and tok/s for chain, best-first and adapter trees
    # at budgets 8, 16, 32 and 64 per category (bench_spec --dflash-sweep), as sweep_FORM.log.
    for f in $(forms); do
      has_word $f KIT_SWEEP=1 || continue
      env $(form_env $f) timeout 900 python3 bench/bench_spec.py --device cuda --skip-llama \
        --draft-model none --salvo $(bin_of $f)/salvo --models-dir $W/m --model qwen2.5-coder-1.5b \
        --drafter $W/drafters/qwen2.5-coder-1.5b --prompts $W/prompts.jsonl --limit 100 \
        --max-tokens 192 --threads 4 --modes none --dflash-sweep >$L/sweep_$f.log 2>&1
      # The texts and per-prompt tokens a pass of 64-node adapter trees, with their token ids,
      # for bench/dflash_replay.py (the device's greedy text is not the CPU's).
      python3 -c 'import json, sys
for r in map(json.loads, open(sys.argv[1])): print(json.dumps({"prompt": r["messages"][0]["content"]}))' \
        $W/prompts.jsonl >$W/all.jsonl
      env $(form_env $f) timeout 300 $(bin_of $f)/salvo run --device cuda --json \
        --model $W/m/qwen2.5-coder-1.5b.gguf --drafter $W/drafters/qwen2.5-coder-1.5b \
        --spec dflash --spec-tree adapter --spec-budget 64 --spec-depth 15 --temperature 0 \
        -n 192 --ctx 2048 --prompts-file $W/all.jsonl >$L/json64_$f.jsonl 2>$L/json64_$f.err
      has_word $f KIT_DUMP=1 && dump_texts $f <(head -n 16 $L/json64_$f.jsonl)
    done
    # KIT_DUMP=1 without KIT_SWEEP=1: the dump runs over the kit's texts (gpu_kit.sh --texts).
    for f in $(forms); do
      has_word $f KIT_DUMP=1 && ! has_word $f KIT_SWEEP=1 && [ -f $W/texts.jsonl ] &&
        dump_texts $f $W/texts.jsonl
    done
    # Where a drafted pass goes, per form: SALVO_SPEC_TRACE over the code prompts, the forms
    # alternated twice (ab_summary.py prints the median verification pass and draft).
    python3 -c 'import json, sys
for r in map(json.loads, open(sys.argv[1])):
    if r["category"] == "code": print(json.dumps({"prompt": r["messages"][0]["content"]}))' \
      $W/prompts.jsonl >$W/code.jsonl
    for rep in 1 2; do
      for f in $(forms); do
        has_word $f KIT_SPEC=0 && continue
        env $(form_env $f) SALVO_SPEC_TRACE=1 timeout 120 $(bin_of $f)/salvo run --device cuda \
          --model $W/m/qwen2.5-coder-1.5b.gguf --drafter $W/drafters/qwen2.5-coder-1.5b \
          --spec dflash --spec-tree adapter --spec-budget 7 --temperature 0 -n 192 \
          --prompts-file $W/code.jsonl >$L/text_${f}_$rep.jsonl 2>$L/trace_${f}_$rep.log
      done
    done
    # KIT_BUDGETS=A,B: that form's trace also at those tree budgets (once each), to see where a
    # cheaper draft moves the best budget.
    for f in $(forms); do
      b=$(form_env $f | tr ' ' '\n' | sed -n 's/^KIT_BUDGETS=//p' | tr ',' ' ')
      for n in $b; do
        env $(form_env $f) SALVO_SPEC_TRACE=1 timeout 120 $(bin_of $f)/salvo run --device cuda \
          --model $W/m/qwen2.5-coder-1.5b.gguf --drafter $W/drafters/qwen2.5-coder-1.5b \
          --spec dflash --spec-tree adapter --spec-budget $n --temperature 0 -n 192 \
          --prompts-file $W/code.jsonl >$L/text_${f}_b$n.jsonl 2>$L/trace_${f}_b$n.log
      done
    done
    # KIT_AUTO=1: that form's trace also with --spec auto (the policy's sizes and plain passes).
    for f in $(forms); do
      has_word $f KIT_AUTO=1 || continue
      env $(form_env $f) SALVO_SPEC_TRACE=1 timeout 120 $(bin_of $f)/salvo run --device cuda \
        --model $W/m/qwen2.5-coder-1.5b.gguf --drafter $W/drafters/qwen2.5-coder-1.5b \
        --spec auto --temperature 0 -n 192 --prompts-file $W/code.jsonl \
        >$L/text_${f}_auto.jsonl 2>$L/trace_${f}_auto.log
    done
    # KIT_PROF=1: ncu's time of every kernel of a few drafted passes of the first code prompt
    # (graphs off, so each kernel runs alone), in launch order, as prof_FORM.csv.
    for f in $(forms); do
      has_word $f KIT_PROF=1 || continue
      head -n 1 $W/code.jsonl >$W/one.jsonl
      env $(form_env $f) SALVO_CUDA_GRAPHS=0 timeout 300 $ncu --csv --log-file $L/prof_$f.csv \
        --cache-control none --clock-control none --metrics gpu__time_duration.sum \
        --launch-skip 3000 --launch-count 1500 $(bin_of $f)/salvo run --device cuda \
        --model $W/m/qwen2.5-coder-1.5b.gguf --drafter $W/drafters/qwen2.5-coder-1.5b \
        --spec dflash --spec-tree adapter --spec-budget $(form_env $f | tr ' ' '\n' |
          sed -n 's/^KIT_PROF_BUDGET=//p' | grep . || echo 7) --temperature 0 -n 128 \
        --prompts-file $W/one.jsonl >/dev/null 2>$L/prof_$f.err
    done
  fi
  # gpu_kit.sh --llama: llama.cpp (CUDA, built above from the source llama-cpp-python bundles)
  # on the same models in the same window, after salvo's steps so the two do not share the GPU.
  if [ -n "${llama_build:-}" ]; then
    # Without the real model the random 1.5B (its shape, so its speed) stands in for it.
    models="$W/m/r15.gguf $W/m/r7.gguf"
    [ -f $W/m/real.ok ] && models="$W/m/qwen2.5-coder-1.5b.gguf $W/m/r7.gguf"
    bash $W/gpu_llamacpp.sh bench $W 3 $models >>$L/llama_build.log 2>&1
    cp $W/llama_*.json $L/ 2>/dev/null
    echo "llama.cpp done $(date +%T)"
  fi
  # The achievable HBM read bandwidth (bench/hbm_bandwidth.cu), and the issue-4 table of the
  # default form's first sweeps (against llama.cpp's, with --llama: bench/gpu_compare.py).
  nvcc -O3 -arch=sm_90 bench/hbm_bandwidth.cu -o $W/hbm_bandwidth >$L/hbm.txt 2>&1 &&
    $W/hbm_bandwidth >>$L/hbm.txt 2>&1
  hbm=$(sed -n 's/^hbm_gbps //p' $L/hbm.txt)
  if [ -f $L/ab_r7_$(forms | head -n 1)_1.json ]; then
    first=$(forms | head -n 1)
    stems=r7
    cp $L/ab_r7_${first}_1.json $W/bench_r7.json
    if [ -f $L/ab_r15_${first}_1.json ]; then
      cp $L/ab_r15_${first}_1.json $W/bench_r15.json
      stems="r15 r7"
    fi
    if [ -f $L/ab_real_${first}_1.json ]; then
      cp $L/ab_real_${first}_1.json $W/bench_qwen2.5-coder-1.5b.json
      stems="qwen2.5-coder-1.5b r7"
    fi
    [ -n "$hbm" ] && python3 bench/gpu_compare.py $W "$hbm" $stems >$L/compare.txt 2>&1
  fi
  echo "job done $(date +%T)"
  exit 0
fi

# Up to N s, less once the job is done (an idle wait still costs device time).
if [[ $2 =~ ^[0-9]+$ ]]; then
  for ((waited = 0; waited < $2; waited += 5)); do
    grep -q "job done" $W/logs/job.log 2>/dev/null && break
    sleep $(($2 - waited < 5 ? $2 - waited : 5))
  done
fi
echo "$(date +%T) | pieces $(ls $W/p | wc -l) | real $([ -f $W/m/real.ok ] && echo yes) |" \
  "drafter $([ -f $W/drafter.ok ] && echo yes)"
tail -n 4 $W/logs/job.log 2>/dev/null
if [ "$1" = status ]; then
  python3 $W/ab_summary.py $W/logs 2>&1 | tail -n 60
  [ -n "$OUT" ] && tar czf $OUT/logs.tgz -C $W logs 2>/dev/null
  [ -n "$OUT" ] && cp $W/dumps/*.gz $W/dumps/texts_*.jsonl $OUT/ 2>/dev/null
fi
exit 0
