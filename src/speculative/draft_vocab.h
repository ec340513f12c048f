// The draft vocabulary of a DFlash drafter: which of the target's ids its LM head computes. The
// head is the costliest part of a CPU draft pass (82 MB of Qwen2.5's Q6_K head for 65536 ids,
// ~2.3 ms of ~8), so the drafter computes only the ids it is likely to need. Without ranks those
// are the lowest ids (byte-level BPE ids follow merge order, roughly frequency: Qwen2.5's ids
// below 65536 are 97.8% of its generated tokens). A drafter directory may ship
// token_ranks.safetensors instead: the ids by how often the target generated them in the
// trainer's data, most frequent first (its first 16384 are 97.9% of those tokens, its first
// 32768 99.6%). Replayed over session 41's 38 H200 answers (bench/dflash_replay.py --ranks), the
// 65536 best-ranked ids give exactly the whole vocabulary's tokens a pass at every budget, and
// the first 32768 the whole vocabulary's within 1% on code, chat and math (DEVELOPERS "Session
// 45").
//
// The file holds one tensor, "ids": I32 [n], distinct ids below the target's vocabulary size.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "backends/cpu/matmul.h"
#include "util/status.h"

namespace salvo {

// The ranked head's rows: the listed ids in order, then the ids the file does not list in
// ascending order, `rows` in all (rows <= n_vocab). Empty when `path` does not exist; an error
// names what is wrong with a file that does.
Expected<std::vector<int32_t>> read_token_ranks(const std::string& path, int32_t n_vocab,
                                                int32_t rows);

// A copy of `head`'s rows `ids` (in that order) in the same block format, packed for the CPU
// kernels where the format allows; `storage` keeps the bytes alive. The rows lie all over the
// head, so a mapped head's pages come back into memory as they are read: release_source (if
// set) is called to release them, after every ~1 MiB of packed rows (once at the end where the
// format has no packed layout).
WeightView gather_head_rows(const WeightView& head, std::span<const int32_t> ids,
                            std::vector<std::unique_ptr<uint8_t[]>>& storage,
                            const std::function<void()>& release_source = {});

}  // namespace salvo
