"""The Python and Node bindings (bindings/python, bindings/node) over libsalvo's C API.

Greedy continuations through each binding are checked against llama.cpp's on the same GGUF
(test_greedy_llamacpp.compare_greedy: equal, or first different at a near tie); the rest checks
what a binding adds: streaming, cancelling, the chat template, cached prefixes, threads, and
errors that say what was wrong.
"""

import json
import os
import pathlib
import shutil
import subprocess
import sys
import threading

import pytest

from conftest import REPO_ROOT, llama_eos_ids, llama_tokenize, missing, model_path_or_skip
from prompts_greedy import PROMPTS
from test_greedy_llamacpp import N_GEN, compare_greedy

sys.path.insert(0, str(REPO_ROOT / "bindings" / "python"))
MODEL = "smollm2-135m"
GREEDY_PROMPTS = PROMPTS[:4]


def build_dir() -> pathlib.Path:
    build = os.environ.get("SALVO_BUILD_DIR")
    path = pathlib.Path(build) if build else REPO_ROOT / "build" / "release"
    if not (path / "libsalvo.so").exists():
        missing(f"{path / 'libsalvo.so'} is not built")
    return path


@pytest.fixture(scope="module")
def salvo_module():
    os.environ["SALVO_LIB"] = str(build_dir() / "libsalvo.so")
    import salvo

    return salvo


@pytest.fixture(scope="module")
def model(salvo_module):
    m = salvo_module.Model(model_path_or_skip(MODEL), threads=2)
    yield m
    m.close()


def assert_greedy_like_llama(path, results):
    """results: [(prompt, prompt ids, generated ids)] from a binding."""
    eog = llama_eos_ids(path)
    failures = []
    for prompt, prompt_ids, generated in results:
        want = llama_tokenize(path, prompt)
        if list(prompt_ids) != want:
            failures.append(f"{prompt!r}: prompt ids {prompt_ids} != llama.cpp {want}")
            continue
        failure, line = compare_greedy(path, want, list(generated), eog)
        print(f"  {prompt[:30]!r}: {line}")
        if failure:
            failures.append(f"{prompt!r}: {failure}")
    assert not failures, "\n".join(failures)


def test_python_greedy_matches_llama_cpp(model):
    session = model.session()
    results = []
    for prompt in GREEDY_PROMPTS:
        r = session.generate(prompt, raw=True, temperature=0, max_tokens=N_GEN)
        assert r.stats["generated_tokens"] == len(r.tokens)
        results.append((prompt, model.tokenize(prompt), r.tokens))
    assert_greedy_like_llama(model_path_or_skip(MODEL), results)


def test_python_tokenizer_matches_llama_cpp(model):
    path = model_path_or_skip(MODEL)
    for text in PROMPTS + ["", "  spaces  and\ttabs\n", "émoji 🎉 日本語"]:
        ids = model.tokenize(text)
        assert ids == llama_tokenize(path, text), text
        assert model.detokenize(ids) == text  # SmolLM2 adds no BOS


def test_python_stream_cancel_and_chat(model):
    session = model.session()
    whole = session.generate("Tell me about the sea.", temperature=0, max_tokens=48)
    pieces = []
    stream = session.stream("Tell me about the sea.", temperature=0, max_tokens=48)
    while True:
        try:
            pieces.append(next(stream))
        except StopIteration as end:
            result = end.value
            break
    assert "".join(pieces) == whole.text == result.text and len(pieces) > 1
    assert result.stats["cached_prompt_tokens"] > 0  # the same prompt again: its cache is reused

    seen = []
    cut = session.generate("Count from 1 to 100.", temperature=0, max_tokens=200,
                           on_text=lambda piece: seen.append(piece) or len(seen) < 3)
    assert cut.finish_reason == "cancelled" and len(cut.tokens) < 200

    messages = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi!"}]
    chat = session.chat(messages, temperature=0, max_tokens=12)
    rendered = model.apply_chat_template(messages)
    by_ids = session.generate(model.tokenize(rendered, parse_special=True), temperature=0,
                              max_tokens=12)
    assert chat.text == by_ids.text and chat.tokens == by_ids.tokens
    by_system = session.generate("Hi!", system="Be brief.", temperature=0, max_tokens=12)
    assert by_system.tokens == chat.tokens

    stopped = session.generate("List the numbers 1 to 9, one per line.", temperature=0,
                               max_tokens=64, stop=["4"])
    assert "4" not in stopped.text and stopped.finish_reason == "stop"


def test_python_speculation_invariant(model):
    session = model.session()
    for seed in (1, 2):
        texts = {spec: session.generate("Write a limerick about a cat.", temperature=0.9, seed=seed,
                                        max_tokens=40, spec=spec).tokens
                 for spec in ("none", "auto", "ngram")}
        assert texts["none"] == texts["auto"] == texts["ngram"]


def test_python_threads(model):
    """Two threads on two sessions of one model: their generations take turns, each text as alone."""
    prompts = ["Name three rivers.", "Name three mountains."]
    alone = [model.session().generate(p, temperature=0, max_tokens=24).text for p in prompts]
    got = [None, None]

    def work(i):
        got[i] = model.session().generate(prompts[i], temperature=0, max_tokens=24).text

    threads = [threading.Thread(target=work, args=(i,)) for i in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert got == alone


def test_python_errors(salvo_module, model):
    salvo = salvo_module
    session = model.session()
    cases = [
        (lambda: salvo.Model("/no/such/model.gguf"), "neither a file nor a known name"),
        (lambda: salvo.Model(model_path_or_skip(MODEL), device="tpu"), "device"),
        (lambda: salvo.Model(model_path_or_skip(MODEL), threads=-3), "threads"),
        (lambda: session.generate("x", temperature=-1), "temperature"),
        (lambda: session.generate("x", top_p=2), "top_p"),
        (lambda: session.generate("x", max_tokens=-1), "max_tokens"),
        (lambda: session.generate("x", spec="fast"), "fast"),
        (lambda: session.generate("x", spec_budget=100000), "budget"),
        (lambda: session.generate([]), "empty"),
        (lambda: session.generate([1, 2, 1 << 30]), "outside the vocabulary"),
        (lambda: session.chat([{"role": "user"}]), "content"),
        (lambda: session.chat([]), "non-empty"),
        (lambda: model.detokenize([-5]), "outside the vocabulary"),
        (lambda: model.session(8), "context_size"),
        (lambda: model.session(16).generate("word " * 40, raw=True, max_tokens=4), "context"),
    ]
    for call, fragment in cases:
        with pytest.raises(salvo.SalvoError) as info:
            call()
        assert fragment in str(info.value), (fragment, str(info.value))
    with pytest.raises(TypeError, match="max_tokenz"):
        session.generate("x", max_tokenz=5)

    def boom(piece):
        raise ValueError("from on_text")

    with pytest.raises(ValueError, match="from on_text"):
        session.generate("Hello", on_text=boom, max_tokens=8)
    assert session.generate("Hello", temperature=0, max_tokens=4).tokens  # still usable

    other = salvo.Model(model_path_or_skip(MODEL), threads=1)
    kept = other.session()
    other.close()  # closes its sessions first
    with pytest.raises(salvo.SalvoError, match="closed"):
        kept.generate("Hello")
    with pytest.raises(salvo.SalvoError, match="closed"):
        other.tokenize("Hello")


def tsc_or_missing():
    for candidate in (REPO_ROOT / "build" / "deps" / "usr" / "share" / "nodejs" / "typescript" / "bin" / "tsc",
                      pathlib.Path("/usr/share/nodejs/typescript/bin/tsc")):
        if candidate.exists():
            return str(candidate)
    if shutil.which("tsc"):
        return shutil.which("tsc")
    missing("tsc (node-typescript) not found: scripts/setup.sh test unpacks it into build/deps")


def test_node_binding(tmp_path):
    node = shutil.which("node") or missing("node not installed")
    addon = build_dir() / "salvo.node"
    if not addon.exists():
        missing(f"{addon} is not built (node-addon-api missing?)")
    path = model_path_or_skip(MODEL)
    test_ts = REPO_ROOT / "bindings" / "node" / "test" / "test.ts"
    subprocess.run([node, tsc_or_missing(), "--strict", "--target", "es2020", "--module", "commonjs",
                    "--lib", "es2020,dom", "--outDir", str(tmp_path), str(test_ts)],
                   check=True, timeout=300)
    env = dict(os.environ, SALVO_NODE_ADDON=str(addon), SALVO_TEST_MODEL=path,
               SALVO_TEST_PROMPTS=json.dumps(GREEDY_PROMPTS),
               SALVO_NODE_BINDING=str(REPO_ROOT / "bindings" / "node" / "index.js"))
    compiled = next(tmp_path.rglob("test.js"))
    proc = subprocess.run([node, str(compiled)], capture_output=True, text=True, env=env, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    assert out["checks"] >= 25
    assert_greedy_like_llama(path, [(g["prompt"], g["prompt_tokens"], g["tokens"]) for g in out["greedy"]])
