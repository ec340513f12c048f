#!/usr/bin/env bash
# Installs what salvo needs on a fresh Debian machine. Idempotent: packages already present
# are not fetched again.
#   scripts/setup.sh build   compiler, CMake and the C++ libraries
#   scripts/setup.sh test    the above plus clang (fuzzer) and the Python test references
set -euo pipefail
mode=${1:-build}
LLAMA_CPP_VERSION=0.3.36

apt_packages=(cmake g++ make python3 python3-pip libfmt-dev nlohmann-json3-dev libcli11-dev
              libcpp-httplib-dev pkg-config libgtest-dev libgmock-dev libbenchmark-dev)
if [ "$mode" = test ]; then
  apt_packages+=(clang libclang-rt-14-dev)
fi

missing=()
for p in "${apt_packages[@]}"; do
  dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  echo "setup: installing ${missing[*]}"
  SUDO=""
  [ "$(id -u)" -eq 0 ] || SUDO=sudo
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${missing[@]}" >/dev/null
fi

if [ "$mode" = test ] && command -v node >/dev/null; then
  # The Node binding's addon needs node-addon-api's headers and its test needs tsc. Debian's
  # packages depend on Debian's nodejs, so beside another nodejs apt refuses them: then they are
  # unpacked into build/deps (headers and JavaScript only), where CMake and the test look.
  SUDO=""
  [ "$(id -u)" -eq 0 ] || SUDO=sudo
  for pair in node-addon-api:node-addon-api node-typescript:typescript; do
    p=${pair%%:*} dir=${pair#*:}
    dpkg -s "$p" >/dev/null 2>&1 || [ -d "build/deps/usr/share/nodejs/$dir" ] && continue
    if ! DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "$p" >/dev/null 2>&1; then
      echo "setup: unpacking $p into build/deps"
      mkdir -p build/deps/debs
      (cd build/deps/debs && { apt-get download "$p" >/dev/null 2>&1 ||
        { $SUDO apt-get update -qq && apt-get download "$p" >/dev/null 2>&1; }; })
      dpkg-deb -x build/deps/debs/"${p}"_*.deb build/deps
    fi
  done
fi

if [ "$mode" = test ]; then
  # llama-cpp-python builds llama.cpp from its bundled source (several minutes, once).
  py_missing=()
  python3 -c "import numpy" 2>/dev/null || py_missing+=(numpy)
  python3 -c "import gguf" 2>/dev/null || py_missing+=(gguf)
  python3 -c "import pytest" 2>/dev/null || py_missing+=(pytest)
  python3 -c "import jinja2" 2>/dev/null || py_missing+=(jinja2)
  # Random DFlash drafters and their test inputs are written with the reference safetensors
  # writer (tests/python/dflash_ref.py, fuzz/make_safetensors_corpus.py).
  python3 -c "import safetensors" 2>/dev/null || py_missing+=(safetensors)
  # The server tests drive `salvo serve` with the official OpenAI client and parse /metrics
  # with Prometheus' own parser.
  python3 -c "import openai" 2>/dev/null || py_missing+=(openai)
  python3 -c "import prometheus_client" 2>/dev/null || py_missing+=(prometheus-client)
  # The comparison client and load test (tools/compare, bench/load_test.py) speak the OpenAI API
  # through the official client; llama-cpp-python's OpenAI server needs its "server" extras. They
  # are named one by one, not as llama-cpp-python[server], so pip never rebuilds llama.cpp below.
  python3 -c "import fastapi" 2>/dev/null || py_missing+=("fastapi>=0.100.0")
  python3 -c "import uvicorn" 2>/dev/null || py_missing+=("uvicorn>=0.22.0")
  python3 -c "import sse_starlette" 2>/dev/null || py_missing+=("sse-starlette>=1.6.1")
  python3 -c "import starlette_context" 2>/dev/null || py_missing+=("starlette-context>=0.3.6,<0.4")
  python3 -c "import pydantic_settings" 2>/dev/null || py_missing+=("pydantic-settings>=2.0.1")
  python3 -c "import yaml" 2>/dev/null || py_missing+=("PyYAML>=5.1")
  if [ ${#py_missing[@]} -gt 0 ]; then
    echo "setup: pip installing ${py_missing[*]}"
    python3 -m pip install -q --disable-pip-version-check "${py_missing[@]}"
  fi
  # llama.cpp's AMX matmul (compiled in by -march=native on Sapphire Rapids) segfaults on this
  # kind of machine, so the peer is built for the ISA extensions the CPU reports, without AMX:
  # each GGML_* option is on only when /proc/cpuinfo lists its flag (AMD EPYC machines have
  # AVX-512 VNNI but not AVX-VNNI, which would be an illegal instruction there). A marker file
  # records the options the installed copy was built with; other options rebuild it.
  cpu_flags=" $(grep -m1 '^flags' /proc/cpuinfo 2>/dev/null | cut -d: -f2) "
  llama_args="-DGGML_NATIVE=OFF"
  for pair in avx:AVX avx2:AVX2 fma:FMA f16c:F16C bmi2:BMI2 avx512f:AVX512 avx512vbmi:AVX512_VBMI \
    avx512_vnni:AVX512_VNNI avx512_bf16:AVX512_BF16 avx_vnni:AVX_VNNI; do
    flag=${pair%%:*} option=${pair#*:}
    if [[ $cpu_flags == *" $flag "* ]]; then llama_args+=" -DGGML_$option=ON"; else llama_args+=" -DGGML_$option=OFF"; fi
  done
  marker=$(python3 -c "import site; print(site.getsitepackages()[0])")/llama_cpp_salvo_build
  if ! python3 -c "import llama_cpp" 2>/dev/null || [ "$(cat "$marker" 2>/dev/null)" != "$llama_args" ]; then
    echo "setup: building llama-cpp-python ${LLAMA_CPP_VERSION} (several minutes, once): $llama_args"
    CMAKE_ARGS="$llama_args" python3 -m pip install -q --disable-pip-version-check --force-reinstall \
      --no-deps --no-cache-dir "llama-cpp-python==${LLAMA_CPP_VERSION}"
    python3 -m pip install -q --disable-pip-version-check "llama-cpp-python==${LLAMA_CPP_VERSION}"
    echo "$llama_args" >"$marker"
  fi
fi
