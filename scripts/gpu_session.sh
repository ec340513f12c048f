#!/bin/bash
# One session on the GPU machine (DEVELOPERS.md "A GPU session"), run by every device call as
# `bash scripts/gpu_session.sh [wait SECONDS]` with .gpu/ carried. Idempotent:
# - moves the model pieces that came with the call (.gpu/up/*/qpieceNN, spieceNN) to .gpu/q, .gpu/s
#   for train/dflash/device.sh (copied to .gpu/df/dev.sh with the trainer and its data);
# - on the first call that carries .gpu/pack (scripts/gpu_pack.sh), copies the checkout to
#   /root/src, starts salvo's CUDA build and checks (gpu_check.sh --phase tests) and llama.cpp's
#   CUDA build in the background; the timed part (--phase bench) is started by hand once no
#   training shares the GPU;
# - runs the DFlash training driver, which starts a model's training once all its pieces are here.
export PYTHONPATH=/root/site  # the gguf wheel, installed there by device.sh
mkdir -p .gpu/s .gpu/q /root/g
for f in .gpu/up/*/*; do
  [ -f "$f" ] || continue
  case $(basename "$f") in qpiece*) mv "$f" .gpu/q/ ;; spiece*) mv "$f" .gpu/s/ ;; esac
done
if [ -d .gpu/pack ] && [ ! -f /root/started_builds ]; then
  touch /root/started_builds
  rm -rf /root/src && mkdir -p /root/src
  tar cf - --exclude=./.gpu --exclude=./build --exclude=./models . | tar xf - -C /root/src
  cp -r .gpu/pack /root/pack
  chk="/root/src/scripts/gpu_check.sh --deps /root/pack/deps --tokenizers /root/pack/tok --work /root/g"
  setsid nohup bash -c "cd /root/src && $chk --phase tests > /root/g/tests.log 2>&1; echo \$? > /root/g/tests.done" >/dev/null 2>&1 &
  setsid nohup bash -c "nice -n 10 /root/src/scripts/gpu_llamacpp.sh build /root/pack/llamacpp.tar.gz /root/g > /root/g/llama_build_out.log 2>&1; echo \$? > /root/g/llama.done" >/dev/null 2>&1 &
fi
[ -f .gpu/df/dev.sh ] && bash .gpu/df/dev.sh "$@"
echo "tests: $(cat /root/g/tests.done 2>/dev/null || echo running) | llama.cpp build: $(cat /root/g/llama.done 2>/dev/null || echo running)"
tail -n 2 /root/g/tests.log 2>/dev/null
