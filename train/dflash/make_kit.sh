#!/bin/bash
# Builds the ignored kit that a one-command training window carries (DEVELOPERS "Session 56"):
# .gpu/df (device.sh as dev.sh, train/dflash/*.py in code/, the gguf wheel in whl/, four
# prompt-only data files for qwen2.5-coder-1.5b) and .gpu/q (the GGUF in 18 pieces). A fresh
# checkout has none of it, since .gpu/ is ignored. Needs build/release/salvo (make_data.py
# tokenizes with it), models/qwen2.5-coder-1.5b.gguf and the network (pip, apt).
#   bash train/dflash/make_kit.sh
set -euo pipefail
cd "$(dirname "$0")/../.."
name=qwen2.5-coder-1.5b
gguf=models/$name.gguf
sha=$(python3 -c "import sys; sys.path.insert(0, 'scripts'); import models; print(models.MODELS['$name'][2])")
[ -x build/release/salvo ] || { echo "make_kit: build salvo first (build/release/salvo)" >&2; exit 1; }
[ -f $gguf ] || { echo "make_kit: $gguf missing: python3 scripts/models.py $name" >&2; exit 1; }
rm -rf .gpu/df/code  # a module removed from train/dflash must not linger in the kit
mkdir -p .gpu/df/code .gpu/df/whl .gpu/q
cp train/dflash/*.py .gpu/df/code/
cp train/dflash/device.sh .gpu/df/dev.sh
ls .gpu/df/whl/gguf-*.whl >/dev/null 2>&1 || pip download -q gguf --no-deps -d .gpu/df/whl

# The prompts of earlier runs' kept continuations, without the continuations: QREGEN=1 generates
# them again on the device, and the three files are 8.4 MB without their continuations, ~34 with.
# Written under another name and moved: an interrupted run must not leave a truncated file that
# the next run takes as done.
strip() { # src dst
  python3 - "$1" "$2" <<'EOF'
import gzip, json, os, sys
data = json.load(gzip.open(sys.argv[1], "rt"))
for p in data["prompts"]:
    p.pop("gen", None)
with gzip.open(sys.argv[2] + ".tmp", "wt") as f:
    json.dump(data, f)
os.replace(sys.argv[2] + ".tmp", sys.argv[2])
print(f"{sys.argv[2]}: {len(data['prompts'])} prompts")
EOF
}
d=.gpu/df/data_$name
[ -f $d.json.gz ] || strip drafters/$name/generated_s41.json.gz $d.json.gz
[ -f $d.s35.json.gz ] || strip drafters/$name/generated.json.gz $d.s35.json.gz
if [ ! -f $d.s33.json.gz ]; then
  git show 7455377:drafters/$name/generated.json.gz > .gpu/s33.tmp.json.gz
  strip .gpu/s33.tmp.json.gz $d.s33.json.gz
  rm .gpu/s33.tmp.json.gz
fi
if [ ! -f $d.s6.json.gz ]; then
  # The chat prompts draw on the dictionary; without it the scan finds no words.
  [ -f /usr/share/dict/american-english ] || apt-get install -y -q wamerican >/dev/null
  python3 train/dflash/make_data.py --model $name --n 38000 --heldout 320 --weights 0.6,0.1,0.1,0.2 \
    --seed 6 --bench ../shared/bench/prompts.jsonl --sources-cache /tmp/src.json --out $d.s6.json.gz
fi

if [ "$(ls .gpu/q | wc -l)" -ne 18 ]; then
  rm -f .gpu/q/q*
  split -n 18 -d -a 2 $gguf .gpu/q/q
fi
got=$(cat .gpu/q/q* | sha256sum | cut -d' ' -f1)
[ "$got" = "$sha" ] || { echo "make_kit: the pieces join to $got, not $sha" >&2; exit 1; }
du -sh .gpu/df .gpu/q
