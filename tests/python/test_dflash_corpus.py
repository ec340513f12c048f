"""train/dflash/corpus.py: prompt files and earlier runs' continuations joined into one corpus.

The trainer reuses a prompt's continuation only when it came from the same GGUF and --max-new,
takes each token sequence once, and refuses files that are not what it expects, saying which.
"""

import gzip
import json
import pathlib
import sys

import pytest

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[2] / "train" / "dflash"))
import corpus  # noqa: E402

SHA = "ab" * 32
VOCAB = 100


def write(path, data):
    with gzip.open(path, "wt") as f:
        json.dump(data, f)
    return str(path)


def prompts_file(tmp_path, name, prompts, **extra):
    return write(tmp_path / name, {"model": "m", "prompts": prompts, **extra})


def load(paths, sha=SHA, max_new=8, regenerate=False):
    return corpus.load_prompts(paths, "m", VOCAB, sha, max_new, log=lambda *a: None, regenerate=regenerate)


def test_a_written_corpus_comes_back_with_its_continuations(tmp_path):
    prompts = [{"ids": [1, 2], "cat": "code", "split": "train", "extra": 1},
               {"ids": [3], "cat": "math", "split": "bench"}]
    path = str(tmp_path / "gen.json.gz")
    corpus.write_generated(path, "m", SHA, 8, "train.py ...", prompts, [[5, 6, 7], [9]])
    got = load([path])
    assert got == [{"ids": [1, 2], "cat": "code", "split": "train", "gen": [5, 6, 7]},
                   {"ids": [3], "cat": "math", "split": "bench", "gen": [9]}]


def test_continuations_of_another_gguf_or_length_are_dropped(tmp_path):
    prompts = [{"ids": [1, 2], "cat": "code", "gen": [4]}]
    path = prompts_file(tmp_path, "g.json.gz", prompts, gen_target_sha256=SHA, gen_max_new=8)
    assert load([path])[0]["gen"] == [4]
    assert "gen" not in load([path], sha="cd" * 32)[0]
    assert "gen" not in load([path], max_new=16)[0]
    assert load([path], regenerate=True) == [{"ids": [1, 2], "cat": "code"}]  # train.py --regenerate


def test_each_token_sequence_is_taken_once_first_file_first(tmp_path):
    a = prompts_file(tmp_path, "a.json.gz", [{"ids": [1, 2], "cat": "code", "split": "bench", "gen": [3]},
                                             {"ids": [4], "cat": "chat"}],
                     gen_target_sha256=SHA, gen_max_new=8)
    b = prompts_file(tmp_path, "b.json.gz", [{"ids": [1, 2], "cat": "code", "split": "bench"},
                                             {"ids": [5, 6], "cat": "math"}])
    got = load([a, b])
    assert [p["ids"] for p in got] == [[1, 2], [4], [5, 6]]
    assert got[0]["gen"] == [3] and "gen" not in got[2]


@pytest.mark.parametrize("data, says", [
    ({"model": "m", "prompts": []}, "non-empty 'prompts'"),
    ([1, 2], "non-empty 'prompts'"),
    ({"model": "other", "prompts": [{"ids": [1], "cat": "code"}]}, "tokenized for 'other'"),
    ({"model": "m", "prompts": [{"ids": [1, VOCAB], "cat": "code"}]}, "prompt 0 has no category or ids"),
    ({"model": "m", "prompts": [{"ids": [], "cat": "code"}]}, "prompt 0 has no category or ids"),
    ({"model": "m", "prompts": [{"ids": [1]}]}, "prompt 0 has no category or ids"),
    ({"model": "m", "prompts": ["text"]}, "prompt 0 has no category or ids"),
    ({"model": "m", "prompts": [{"ids": [1], "cat": "code", "gen": [-1]}]}, "continuation with ids"),
    ({"model": "m", "prompts": [{"ids": [1], "cat": "code", "gen": "abc"}]}, "continuation with ids"),
])
def test_bad_files_are_refused_with_what_was_wrong(tmp_path, data, says):
    path = write(tmp_path / "bad.json.gz", data)
    with pytest.raises(SystemExit, match=says):
        load([path])


def test_unreadable_files_say_so(tmp_path):
    bad = tmp_path / "trunc.json.gz"
    bad.write_bytes(gzip.compress(b'{"model": "m", "prom')[:-4])
    with pytest.raises(SystemExit, match="trunc.json.gz"):
        load([str(bad)])
    with pytest.raises(SystemExit, match="missing.json"):
        load([str(tmp_path / "missing.json")])


def test_a_corpus_written_in_a_child_is_whole_when_joined(tmp_path):
    prompts = [{"ids": [1, 2, 3], "cat": "code", "split": "train"}]
    path = str(tmp_path / "generated.json.gz")
    join = corpus.in_child(lambda: corpus.write_generated(path, "m", SHA, 8, "cmd", prompts, [[4, 5]]))
    assert join(60) == 0
    got = corpus.load_prompts([path], "m", VOCAB, SHA, 8)
    assert [(p["ids"], p["gen"]) for p in got] == [([1, 2, 3], [4, 5])]


def test_a_failing_child_reports_and_a_hung_one_is_killed(tmp_path):
    said = []
    assert corpus.in_child(lambda: 1 / 0, log=said.append)(60) == 1
    import time
    t = time.time()
    assert corpus.in_child(lambda: time.sleep(60), log=said.append)(1) is None
    assert time.time() - t < 10
    assert said == ["in_child: killed after 1s"]  # the child's own report went to its copy of `said`
