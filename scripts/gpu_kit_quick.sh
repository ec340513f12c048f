#!/usr/bin/env bash
# A kit's short job, for a window with little device time left (a start costs 1-2 minutes of
# it): one call that runs cuda_ops_test under each form's environment (a form's variables may
# pick other kernels), then the random 7B's pp512, tg128 and 1- / 16- / 64-row passes and the
# random 1.5B's tg128, 1- and 16-row passes for each form of the kit's ab.conf (its KIT_* words
# ignored but KIT_BIN=alt, which takes KIT.alt's salvo and runs no tests), alternated twice; a
# line a form, shape and run. About 3 minutes on an H100, a minute more a form's tests:
#   bash KIT/quick.sh      carry [KIT] or [KIT, KIT.alt]   (timeout_s a little under the budget)
# QUICK_CTX="127 128 512": instead, each form's 1- and 16-row passes (no tg128 / pp512) at those
# verification contexts on both shapes (a 1-row pass at context C sees C + 1 keys, 128 keys an
# attention split: 127 against 128 times the step to a merged split). QUICK_OPS=0: no
# cuda_ops_test (forms that change no kernel). QUICK_MODEL=1: also cuda_model_test on the random
# 1.5B for each form (a new kernel's whole-model check; ~1 minute a form). QUICK_CONF=FILE: the
# forms of FILE (a path inside the kit) instead of ab.conf. A second call on the warm machine
# reuses the first's models.
# QUICK_NCU=REGEX of a mangled kernel name (e.g. attention_kernelILb1ELi1ELb0E, the verification
# passes' attention; prefill's takes pairs): instead of the timings, where that kernel's warps
# wait in the random 7B's 1- and 16-row passes (ncu's source counters of 8 launches past the
# first 56, graphs off, the default form), summarised by scripts/ncu_source_summary.py, with
# each instruction's source line where the build had -lineinfo (nvdisasm -g of its cubin); the
# source CSVs and the listing come back in $OUT.
set -u
kit=$(cd "$(dirname "$0")" && pwd)
W=/root/quick
mkdir -p $W/bin /root/site
for f in "$kit"/bin/salvo.gz "$kit"/bin/cuda_ops_test.gz "$kit"/bin/cuda_model_test.gz; do
  gunzip -c "$f" >$W/bin/$(basename "$f" .gz)
done
cp "$kit"/bin/*.so* $W/bin/ && chmod +x $W/bin/*
if [ -f "$kit.alt/salvo.gz" ]; then
  mkdir -p $W/alt && gunzip -c "$kit.alt/salvo.gz" >$W/alt/salvo && chmod +x $W/alt/salvo
fi
pip install -q --no-index --no-deps --target /root/site "$kit"/whl/*.whl >/dev/null 2>&1
export LD_LIBRARY_PATH=$W/bin PYTHONPATH=/root/site
nvidia-smi --query-gpu=name,clocks.max.sm --format=csv,noheader
for shape in 7b:r7 1.5b:r15; do
  [ -f $W/${shape#*:}.ok ] && continue  # a warm machine's second call keeps the first's models
  (python3 bench/gen_random_model.py --shape qwen2.5-${shape%:*} --mix q4_k_m \
    --tokenizer "$kit"/qwen2.gguf --out $W/${shape#*:}.gguf >$W/gen_${shape#*:}.log 2>&1
  touch $W/${shape#*:}.ok) &
done
conf=$kit/${QUICK_CONF:-ab.conf}
# A form's variables: its words but the kit's own (KIT_*).
form_vars() { echo "$1" | tr ' ' '\n' | grep -v '^KIT_' | tr '\n' ' '; }
# The CUDA tests under each form's variables, the logs (ops_FORM.log, model_FORM.log) in $OUT.
test_forms() {
  while read -r name words; do
    [ -n "$name" ] || continue
    [[ " $words " == *" KIT_BIN=alt "* ]] && continue  # KIT.alt carries salvo alone
    vars=$(form_vars "$words")
    if [ "$1" = ops ]; then
      (cd $W && env $vars timeout 120 ./bin/cuda_ops_test >$W/ops_$name.log 2>&1
      echo "$name: cuda_ops_test rc $?")
    else
      while [ ! -f $W/r15.ok ]; do sleep 1; done
      (cd $W && env $vars SALVO_CUDA_TEST_MODELS=$W/r15.gguf timeout 200 ./bin/cuda_model_test \
        >$W/model_$name.log 2>&1; echo "$name: cuda_model_test rc $?")
      grep -iE "nmse" $W/model_$name.log | head -6
    fi
    grep -E "^\[  (FAILED|PASSED) |FAILED  \]" $W/${1}_$name.log | head -8
    [ -n "${OUT:-}" ] && cp $W/${1}_$name.log $OUT/
  done <"$conf"
}
[ "${QUICK_OPS:-1}" != 0 ] && test_forms ops
[ "${QUICK_MODEL:-0}" = 1 ] && test_forms model
while [ ! -f $W/r7.ok ] || [ ! -f $W/r15.ok ]; do sleep 1; done
tail -qn 1 $W/gen_r7.log $W/gen_r15.log
# One line of a form's figures: pp512 and tg128 where run, then each pass's ms by rows.
line() {
  echo "$(echo "$1" | grep -oE '(pp512|tg128) \| +[0-9.]+' | tr '\n' ' ') /" \
    "$(echo "$1" | awk -F'|' '$2 ~ /^ (1|16|64) $/ {printf "%s rows %s ms; ", $2, $3}')"
}
if [ -n "${QUICK_NCU:-}" ]; then
  ncu=$(command -v ncu || echo /usr/local/cuda/bin/ncu)
  # The kernel's instructions with their source lines (a -lineinfo build), for the summary.
  lines=()
  mkdir -p $W/cubin && (cd $W/cubin && cuobjdump -xelf all $W/bin/salvo >/dev/null 2>&1)
  for c in $W/cubin/*.cubin; do
    nvdisasm -g "$c" >$W/disasm.txt 2>/dev/null || continue
    grep -q "$QUICK_NCU" $W/disasm.txt && lines=(--lines $W/disasm.txt "$QUICK_NCU") && break
  done
  [ ${#lines[@]} -gt 0 ] || echo "no line map (cuobjdump / nvdisasm, or no -lineinfo)"
  for k in 1 16; do
    SALVO_CUDA_GRAPHS=0 timeout 200 $ncu --kernel-name-base mangled -k "regex:$QUICK_NCU" \
      --launch-skip 56 --launch-count 8 --clock-control none --section SpeedOfLight \
      --section Occupancy --section WarpStateStats --section SourceCounters -f -o $W/ncu_r$k \
      $W/bin/salvo bench --device cuda --model $W/r7.gguf -p 0 -n 0 -r 1 --verify \
      --verify-rows $k --verify-context 512 >$W/ncu_r$k.err 2>&1 || tail -3 $W/ncu_r$k.err
    echo "== $QUICK_NCU, $k rows: ncu's figures (metric, unit, value: launches)"
    keep='"(Duration|DRAM Throughput|L2 Cache Throughput|Achieved Occupancy|Registers Per Thread)"'
    $ncu -i $W/ncu_r$k.ncu-rep --csv --page details 2>/dev/null | grep -E "$keep" |
      awk -F'","' '{print $(NF-2), $(NF-1), $NF}' | sort | uniq -c | head -16
    $ncu -i $W/ncu_r$k.ncu-rep --page source --csv --print-source sass >$W/src_r$k.csv 2>/dev/null
    python3 scripts/ncu_source_summary.py $W/src_r$k.csv 20 "${lines[@]}" 2>&1 | head -30
    [ -n "${OUT:-}" ] && gzip -c $W/src_r$k.csv >$OUT/src_r$k.csv.gz
  done
  [ -n "${OUT:-}" ] && [ ${#lines[@]} -gt 0 ] && gzip -c $W/disasm.txt >$OUT/disasm.txt.gz
  exit 0
fi
for rep in 1 2; do
  while read -r name words; do
    [ -n "$name" ] || continue
    vars=$(form_vars "$words")
    bin=$W/bin
    if [[ " $words " == *" KIT_BIN=alt "* ]]; then bin=$W/alt; fi
    [ -x $bin/salvo ] || { echo "$name: no $bin/salvo (carry KIT.alt)"; continue; }
    if [ -n "${QUICK_CTX:-}" ]; then  # the 1- and 16-row passes at each context
      for m in r15 r7; do
        for c in $QUICK_CTX; do
          out=$(env $vars timeout 60 $bin/salvo bench --device cuda --model $W/$m.gguf -p 0 -n 0 \
            -r 3 --verify --verify-rows 1,16 --verify-context $c 2>&1)
          echo "$name $rep $m ctx $c: $(line "$out")"
        done
      done
      continue
    fi
    out=$(env $vars timeout 60 $bin/salvo bench --device cuda --model $W/r7.gguf -p 512 -n 128 \
      -r 3 --verify --verify-rows 1,16,64 --verify-context 512 2>&1)
    echo "$name $rep r7: $(line "$out")"
    out=$(env $vars timeout 60 $bin/salvo bench --device cuda --model $W/r15.gguf -p 0 -n 128 \
      -r 3 --verify --verify-rows 1,16 --verify-context 512 2>&1)
    echo "$name $rep r15: $(line "$out")"
  done <"$conf"
done
