#!/bin/bash
# A short device window (DEVELOPERS.md "A GPU session"): build salvo, cuda_ops_test and
# cuda_matmul_bench, generate a random Qwen2.5-1.5B Q4_K_M, and join the real
# Qwen2.5-Coder-1.5B from whatever pieces (.gpu/up/qNN/qpieceNN) the calls carry. Idempotent;
# never blocks longer than asked. The first call carries .gpu/pack and this script; later calls
# carry one piece each (19 for the real model) or nothing; then run, e.g.:
#   /root/g/build/salvo bench --device cuda --model /root/w/qwen2.5-coder-1.5b.gguf --verify
#   /root/g/build/tests/cuda_ops_test; /root/g/build/cuda_matmul_bench --model 1.5b
# Two minutes from the first call to a built salvo and the random model on 16 cores (session 9).
export PYTHONPATH=/root/site
W=/root/g
mkdir -p $W/models /root/w /root/m/q
for f in .gpu/up/*/qpiece*; do [ -f "$f" ] && mv "$f" /root/m/q/; done
if [ -d .gpu/pack ] && [ ! -f /root/quick.started ]; then
  touch /root/quick.started
  pip install -q --no-index --no-deps --target /root/site .gpu/pack/whl/*.whl >/dev/null 2>&1
  rm -rf /root/src && mkdir -p /root/src
  tar cf - --exclude=./.gpu --exclude=./build --exclude=./models --exclude=./drafters . |
    tar xf - -C /root/src
  cp -r .gpu/pack /root/pack
  d=/root/pack/deps/cmake
  setsid nohup bash -c "cd /root/src && python3 bench/gen_random_model.py --shape qwen2.5-1.5b \
    --mix q4_k_m --tokenizer /root/pack/tok/qwen2.gguf --out $W/models/qwen2.5-1.5b-q4_k_m.gguf \
    > $W/gen.log 2>&1; echo \$? > $W/gen.done" >/dev/null 2>&1 &
  setsid nohup bash -c "cd /root/src && cmake -S . -B $W/build -G Ninja -DCMAKE_BUILD_TYPE=Release \
    -DSALVO_CUDA_TESTS=ON -DSALVO_SERVER=OFF -Dfmt_DIR=$d -DCLI11_DIR=$d -Dnlohmann_json_DIR=$d \
    -DGTest_DIR=$d > $W/build.log 2>&1 && cmake --build $W/build -j\$(nproc) --target salvo \
    cuda_ops_test cuda_matmul_bench >> $W/build.log 2>&1; echo \$? > $W/build.done" \
    >/dev/null 2>&1 &
fi
q=/root/w/qwen2.5-coder-1.5b.gguf
if [ "$(ls /root/m/q | wc -l)" -eq 19 ] && [ ! -f $q.ok ]; then
  cat /root/m/q/* >$q
  sha=cc324af070c2ecbfd324a30884d2f951a7ff756aba85cb811a6ec436933bb046
  [ "$(sha256sum $q | cut -d' ' -f1)" = $sha ] && touch $q.ok || echo "SHA MISMATCH $q"
fi
[[ ${1:-0} =~ ^[0-9]+$ ]] && sleep "${1:-0}"
echo "build: $(cat $W/build.done 2>/dev/null || echo running) | random model: $(cat $W/gen.done \
  2>/dev/null || echo running) | real pieces: $(ls /root/m/q | wc -l)/19$([ -f $q.ok ] && echo ' joined')"
