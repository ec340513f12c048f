"""salvo's chat templates against Python jinja2, the engine transformers' apply_chat_template uses.

For every model the prompt printed by `salvo template` must equal jinja2's rendering of the same
template source with the same variables, byte for byte. jinja2 is configured as transformers does
it (ImmutableSandboxedEnvironment with trim_blocks and lstrip_blocks, loopcontrols, its own tojson,
raise_exception and strftime_now; tools=None and documents=None).
"""

import json
import os
import subprocess
from datetime import datetime
from pathlib import Path

import pytest

jinja2 = pytest.importorskip("jinja2")
gguf = pytest.importorskip("gguf")
from jinja2.sandbox import ImmutableSandboxedEnvironment  # noqa: E402
from conftest import missing, models_dir

ROOT = Path(__file__).resolve().parents[2]
MODELS = ["smollm2-135m", "qwen2.5-coder-0.5b", "qwen2.5-coder-1.5b", "gemma3-270m"]
GEMMA3_TEMPLATE = ROOT / "templates" / "gemma3.jinja"
SALVO_BIN = os.environ.get("SALVO_BIN")

# Message lists. Gemma 3 requires user/assistant alternation after an optional system message,
# so every list here alternates.
CONVERSATIONS = {
    "single_user": [{"role": "user", "content": "Hello!"}],
    "system_user": [
        {"role": "system", "content": "You are a terse assistant."},
        {"role": "user", "content": "What is 2+2?"},
    ],
    "multi_turn": [
        {"role": "user", "content": "Hi"},
        {"role": "assistant", "content": "Hello! How can I help?"},
        {"role": "user", "content": "Tell me a joke."},
    ],
    "system_multi_turn_ending_assistant": [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "Name a color."},
        {"role": "assistant", "content": "Blue."},
        {"role": "user", "content": "Another."},
        {"role": "assistant", "content": "Red."},
    ],
    "empty_content": [
        {"role": "user", "content": ""},
        {"role": "assistant", "content": ""},
        {"role": "user", "content": ""},
    ],
    "unicode": [
        {"role": "system", "content": "Réponds en français. 日本語も OK. Ελληνικά."},
        {"role": "user", "content": "Emoji 🎉🚀 👩‍💻, accents àéîõü, CJK 你好世界, RTL مرحبا, NBSP\u00a0here"},
    ],
    "special_characters": [
        {"role": "user", "content": "Quotes \"double\" and 'single', backslash \\ and \\n literal, tab\tend"},
        {"role": "assistant", "content": "Braces {{ not_a_var }} {% if x %} {# c #} and <|im_end|> <end_of_turn>"},
        {"role": "user", "content": "JSON: {\"a\": [1, 2, {\"b\": null}]} and %s %d {0}"},
    ],
    "whitespace_edges": [
        {"role": "system", "content": "  \n padded system \n\n"},
        {"role": "user", "content": "\n\n  leading and trailing whitespace\t \n"},
    ],
    "no_system_default_prompt": [
        {"role": "user", "content": "Who are you?"},
        {"role": "assistant", "content": "An assistant."},
        {"role": "user", "content": "Thanks"},
    ],
    "long_multiline": [
        {"role": "user", "content": "\n".join(f"line {i}: " + "x" * i for i in range(40))},
    ],
}


def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
    return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)


def raise_exception(message):
    raise jinja2.exceptions.TemplateError(message)


def jinja_env(trim_blocks=True, lstrip_blocks=True):
    env = ImmutableSandboxedEnvironment(trim_blocks=trim_blocks, lstrip_blocks=lstrip_blocks,
                                        extensions=["jinja2.ext.loopcontrols"])
    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception
    env.globals["strftime_now"] = lambda fmt: datetime.now().strftime(fmt)
    return env


def reference_render(source, messages, add_generation_prompt, bos, eos, **env_options):
    template = jinja_env(**env_options).from_string(source)
    return template.render(messages=messages, add_generation_prompt=add_generation_prompt, bos_token=bos,
                           eos_token=eos, tools=None, documents=None)


_MODEL_INFO = {}


def model_info(name):
    """(gguf path, template source, bos, eos) for a model, skipping when the file is missing."""
    path = models_dir() / f"{name}.gguf"
    if not path.exists():
        missing(f"{path} not present")
    if name not in _MODEL_INFO:
        reader = gguf.GGUFReader(str(path))
        field = reader.fields.get("tokenizer.chat_template")
        source = field.contents() if field is not None else None
        if source is None:
            assert reader.fields["general.architecture"].contents() == "gemma3"
            source = GEMMA3_TEMPLATE.read_text(encoding="utf-8")
        tokens = reader.fields["tokenizer.ggml.tokens"].contents()

        def special(key):
            f = reader.fields.get(key)
            return tokens[int(f.contents())] if f is not None else ""

        _MODEL_INFO[name] = (path, source, special("tokenizer.ggml.bos_token_id"),
                             special("tokenizer.ggml.eos_token_id"))
    return _MODEL_INFO[name]


def run_salvo(tmp_path, model_path, messages, add_generation_prompt, chat_template=None):
    if not SALVO_BIN:
        missing("SALVO_BIN is not set")
    messages_file = tmp_path / "messages.json"
    messages_file.write_text(json.dumps(messages, ensure_ascii=False), encoding="utf-8")
    cmd = [SALVO_BIN, "template", "--model", str(model_path), "--messages", str(messages_file)]
    if chat_template:
        cmd += ["--chat-template", str(chat_template)]
    if not add_generation_prompt:
        cmd.append("--no-generation-prompt")
    return subprocess.run(cmd, capture_output=True, timeout=60)


@pytest.mark.parametrize("add_generation_prompt", [True, False], ids=["gen", "nogen"])
@pytest.mark.parametrize("conversation", sorted(CONVERSATIONS))
@pytest.mark.parametrize("model", MODELS)
def test_matches_jinja2(tmp_path, model, conversation, add_generation_prompt):
    path, source, bos, eos = model_info(model)
    messages = CONVERSATIONS[conversation]
    expected = reference_render(source, messages, add_generation_prompt, bos, eos)
    result = run_salvo(tmp_path, path, messages, add_generation_prompt)
    assert result.returncode == 0, result.stderr.decode("utf-8", "replace")
    assert result.stdout.decode("utf-8") == expected


@pytest.mark.parametrize("add_generation_prompt", [True, False], ids=["gen", "nogen"])
@pytest.mark.parametrize("conversation", ["system_user", "multi_turn", "special_characters"])
def test_gemma3_template_file(tmp_path, conversation, add_generation_prompt):
    """templates/gemma3.jinja passed explicitly renders like the built-in copy and like jinja2."""
    path, _, bos, eos = model_info("gemma3-270m")
    source = GEMMA3_TEMPLATE.read_text(encoding="utf-8")
    messages = CONVERSATIONS[conversation]
    expected = reference_render(source, messages, add_generation_prompt, bos, eos)
    result = run_salvo(tmp_path, path, messages, add_generation_prompt, chat_template=GEMMA3_TEMPLATE)
    assert result.returncode == 0, result.stderr.decode("utf-8", "replace")
    assert result.stdout.decode("utf-8") == expected
    builtin = run_salvo(tmp_path, path, messages, add_generation_prompt)
    assert builtin.stdout == result.stdout


def test_gemma3_raise_exception(tmp_path):
    """A template's raise_exception fails the command with the template's message."""
    path, source, bos, eos = model_info("gemma3-270m")
    messages = [{"role": "user", "content": "a"}, {"role": "user", "content": "b"}]
    with pytest.raises(jinja2.exceptions.TemplateError):
        reference_render(source, messages, True, bos, eos)
    result = run_salvo(tmp_path, path, messages, True)
    assert result.returncode != 0
    assert b"Conversation roles must alternate" in result.stderr


@pytest.mark.parametrize("model", MODELS)
def test_whitespace_settings_do_not_matter_for_shipped_templates(model):
    """These templates control whitespace explicitly, so Jinja's defaults (trim_blocks=False,
    lstrip_blocks=False) render them exactly as transformers' settings do."""
    _, source, bos, eos = model_info(model)
    for messages in CONVERSATIONS.values():
        for gen in (True, False):
            a = reference_render(source, messages, gen, bos, eos)
            b = reference_render(source, messages, gen, bos, eos, trim_blocks=False, lstrip_blocks=False)
            assert a == b


def test_malformed_template_reports_position(tmp_path):
    path, _, _, _ = model_info("smollm2-135m")
    bad = tmp_path / "bad.jinja"
    bad.write_text("{% for m in messages %}\n{{ m.content | nosuchfilter }}\n{% endfor %}", encoding="utf-8")
    result = run_salvo(tmp_path, path, CONVERSATIONS["single_user"], True, chat_template=bad)
    assert result.returncode != 0
    assert b"2:" in result.stderr and b"nosuchfilter" in result.stderr


@pytest.mark.parametrize("model", ["qwen2.5-coder-0.5b", "qwen2.5-coder-1.5b"])
def test_qwen_tools_and_tool_calls(tmp_path, model):
    """The messages file may be {"messages": [...], "tools": [...]}: Qwen's tool branch (tojson of
    nested objects in insertion order, tool_calls, consecutive tool turns) matches jinja2."""
    path, source, bos, eos = model_info(model)
    tools = [{"type": "function", "function": {
        "name": "get_weather", "description": "Weather \"now\" é",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}]
    messages = [
        {"role": "user", "content": "Weather in Paris?"},
        {"role": "assistant", "content": "", "tool_calls": [
            {"type": "function", "function": {"name": "get_weather", "arguments": {"city": "Paris", "n": 1.5}}}]},
        {"role": "tool", "content": "{\"temp\": 20}"},
        {"role": "tool", "content": "second"},
        {"role": "assistant", "content": "It is 20C."},
    ]
    expected = jinja_env().from_string(source).render(
        messages=messages, tools=tools, add_generation_prompt=True, bos_token=bos, eos_token=eos, documents=None)
    if not SALVO_BIN:
        missing("SALVO_BIN is not set")
    doc = tmp_path / "chat.json"
    doc.write_text(json.dumps({"messages": messages, "tools": tools}, ensure_ascii=False), encoding="utf-8")
    result = subprocess.run([SALVO_BIN, "template", "--model", str(path), "--messages", str(doc)],
                            capture_output=True, timeout=60)
    assert result.returncode == 0, result.stderr.decode("utf-8", "replace")
    assert result.stdout.decode("utf-8") == expected
