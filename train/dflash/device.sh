#!/bin/bash
# Device-side driver used for the shipped drafters (copied to .gpu/df/dev.sh in the main checkout, with
# train/dflash/*.py in .gpu/df/code, the make_data.py JSONs and the gguf wheel). Idempotent: each
# device call carries .gpu/df plus one model piece and runs `bash .gpu/df/dev.sh`; once all pieces of
# a model are there it joins them, checks the sha256 and starts train.py in the background (setsid).
#   bash .gpu/df/dev.sh [wait SECONDS]   # wait: block until the qwen run is done, then export to $OUT
export PYTHONUNBUFFERED=1 PYTHONPATH=/root/site
M=/root/m; W=/root/w; mkdir -p $M/s $M/q $W
[ -d /root/site/gguf ] || pip install -q --no-index --no-deps --target /root/site .gpu/df/whl/*.whl
for f in .gpu/s/* ; do [ -f "$f" ] && mv "$f" $M/s/; done
for f in .gpu/q/* ; do [ -f "$f" ] && mv "$f" $M/q/; done
echo "pieces: s=$(ls $M/s | wc -l) q=$(ls $M/q | wc -l)"
rm -rf $W/code; cp -r .gpu/df/code $W/code; cp .gpu/df/data_*.json $W/
start() { # name gguf sha npieces dir args...
  name=$1; g=$2; sha=$3; n=$4; dir=$5; shift 5
  [ -f $W/$name.started ] && return
  if [ ! -f $g.ok ]; then
    [ $(ls $M/$dir | wc -l) -eq $n ] || return
    cat $M/$dir/* > $g
    got=$(sha256sum $g | cut -d' ' -f1)
    if [ "$got" != "$sha" ]; then echo "SHA MISMATCH $name $got"; return; fi
    echo "sha ok $name"; touch $g.ok; rm -rf $M/$dir
  fi
  touch $W/$name.started
  setsid nohup bash -c "python3 $W/code/train.py --target $name --gguf $g --data $W/data_$name.json --out $W/out_$name --work $W --seed 0 --gen-batch 2400 $* > $W/$name.log 2>&1; echo done > $W/$name.done" >/dev/null 2>&1 &
}
if [ -f .gpu/df/restart_smollm ] && [ ! -f $W/restarted ]; then
  for p in $(pgrep -f "train.py --target smollm2"); do echo "kill $p"; kill $p; done; sleep 1
  touch $W/restarted; rm -f $W/smollm2-135m.started $W/smollm2-135m.gguf.ok.x; touch $W/smollm2-135m.gguf.ok
fi
start smollm2-135m $W/smollm2-135m.gguf b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53 2 s \
  --minutes 3 --adapter-minutes 1 --n-layer 2 --n-ff 1280 --target-layers 2,15,27
start qwen2.5-coder-1.5b $W/qwen2.5-coder-1.5b.gguf cc324af070c2ecbfd324a30884d2f951a7ff756aba85cb811a6ec436933bb046 18 q \
  --minutes ${QMIN:-5} --adapter-minutes 1 --n-layer 1 --n-ff 3072 --target-layers 2,13,24
if [ "${1:-}" = wait ]; then
  end=$((SECONDS + $2)); while [ ! -f $W/qwen2.5-coder-1.5b.done ] && [ $SECONDS -lt $end ]; do sleep 5; done
fi
export_out() { # name tag
  [ -f $W/$1.done ] && [ ! -f $W/$1.exported ] || return
  (cd $W/out_$1 && tar cf $OUT/$2_small.tar config.json train_log.json && cp $W/$1.log $OUT/$2.log && cp reference.safetensors $OUT/$2_reference.safetensors && split -b 15M -d model.safetensors $OUT/$2_model.) && touch $W/$1.exported
}
export_out smollm2-135m s
[ "${1:-}" = wait ] && export_out qwen2.5-coder-1.5b q
nvidia-smi --query-gpu=memory.used,utilization.gpu --format=csv,noheader
for n in smollm2-135m qwen2.5-coder-1.5b; do [ -f $W/$n.log ] && { echo "== $n"; tail -n 6 $W/$n.log; }; done
ls $OUT
