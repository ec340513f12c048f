"""A drafter's token_ranks.safetensors (src/speculative/draft_vocab.h): the target's ids by how
often the target generated them, most frequent first (ties: the lower id first). salvo's CPU
drafter computes its LM head over the best-ranked ids only, so the ranks should come from the
target's own greedy continuations, the text the drafter is asked to predict.

  python3 train/dflash/token_ranks.py OUT_DIR DATA.json.gz [DATA.json.gz ...]

reads the "gen" continuations of make_data.py / generated.json.gz files; train.py writes the file
itself from its data.
"""

import argparse
import collections
import gzip
import json
import os

import numpy as np


def token_ranks(continuations):
    """int32 ids of every token seen, most frequent first (ties: lower id first)."""
    counts = collections.Counter()
    for g in continuations:
        counts.update(g)
    ranked = sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))
    return np.array([t for t, _ in ranked], dtype=np.int32)


def write_token_ranks(out_dir, ids):
    from safetensors.numpy import save_file
    save_file({"ids": np.ascontiguousarray(ids, dtype=np.int32)}, os.path.join(out_dir, "token_ranks.safetensors"))


def continuations_of(path):
    opener = gzip.open if path.endswith(".gz") else open
    with opener(path, "rt") as f:
        data = json.load(f)
    return [p["gen"] for p in data["prompts"] if isinstance(p, dict) and p.get("gen")]


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("out_dir")
    ap.add_argument("data", nargs="+", help="JSON files whose prompts carry 'gen' continuations")
    args = ap.parse_args()
    gens = [g for path in args.data for g in continuations_of(path)]
    if not gens:
        raise SystemExit("token_ranks.py: no 'gen' continuations in " + ", ".join(args.data))
    ids = token_ranks(gens)
    write_token_ranks(args.out_dir, ids)
    print(f"{len(ids)} ids ranked from {sum(len(g) for g in gens)} tokens of {len(gens)} continuations")


if __name__ == "__main__":
    main()
