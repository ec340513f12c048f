"""Raw material for DFlash training prompts, read from files found on this machine.

Real text makes the prompts varied in a way templates cannot: the Python standard library (public
functions and classes: first docstring lines as tasks, their source as snippets to explain, test
or edit), Debian's package lists (synopses as tool ideas and topics, long descriptions as prose),
/usr/share/doc (README / changelog paragraphs as prose) and /usr/share/dict/words (apt package
wamerican) filtered to words that follow "the"/"a" in that prose (nouns, mostly) as chat topics.
Each item carries a `group` (module, package, document, word) so that held-out prompts can come
from groups that training never sees. Everything is sorted, so a machine yields the same lists on
every run; another machine (other Debian or Python versions) yields other lists.
"""

import ast
import glob
import gzip
import os
import re
import subprocess
import sysconfig
import zlib

SKIP_DIRS = {"test", "tests", "site-packages", "dist-packages", "idle_test", "__pycache__", "lib2to3",
             "turtledemo", "ensurepip", "pydoc_data", "encodings"}


def stable_hash(text):
    return zlib.crc32(text.encode("utf-8"))


def stdlib_roots():
    roots = [sysconfig.get_paths()["stdlib"]] + sorted(glob.glob("/usr/lib/python3.*"))
    return [r for r in dict.fromkeys(os.path.realpath(r) for r in roots) if os.path.isdir(r)]


def first_sentence(doc):
    line = doc.strip().split("\n\n")[0].replace("\n", " ")
    line = re.sub(r"\s+", " ", line).strip()
    m = re.match(r"(.+?[.!?])(\s|$)", line)
    return (m.group(1) if m else line).strip()


def _local_names(node):
    names = []
    for n in ast.walk(node):
        if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store) and len(n.id) > 1:
            names.append(n.id)
        elif isinstance(n, ast.arg) and n.arg not in ("self", "cls") and len(n.arg) > 1:
            names.append(n.arg)
    return list(dict.fromkeys(names))


def stdlib_items():
    """Public functions, methods and classes with a docstring, one dict each:
    module, group (top-level package), name, kind, doc (first sentence), args, code (source)."""
    seen, out = set(), []
    for root in stdlib_roots():
        files = sorted(glob.glob(os.path.join(root, "**", "*.py"), recursive=True))
        for path in files:
            rel = os.path.relpath(path, root)
            parts = rel[:-3].split(os.sep)
            if any(p in SKIP_DIRS or p.startswith("test") for p in parts) or parts[-1].startswith("_"):
                continue
            module = ".".join(p for p in parts if p != "__init__")
            try:
                text = open(path, encoding="utf-8").read()
                tree = ast.parse(text)
            except (SyntaxError, UnicodeDecodeError, ValueError, OSError):
                continue
            nodes = [(n, None) for n in tree.body]
            for n in tree.body:
                if isinstance(n, ast.ClassDef) and not n.name.startswith("_"):
                    nodes += [(m, n.name) for m in n.body]
            for n, cls in nodes:
                if not isinstance(n, (ast.FunctionDef, ast.ClassDef)) or n.name.startswith("_"):
                    continue
                doc = ast.get_docstring(n)
                if not doc or len(doc) < 20:
                    continue
                key = (module, cls, n.name)
                if key in seen:
                    continue
                seen.add(key)
                code = ast.get_source_segment(text, n) or ""
                if n.decorator_list or "\t" in code:
                    code = ""
                indent = n.col_offset
                code = "\n".join(line[indent:] if line[:indent].strip() == "" else line for line in code.split("\n"))
                args = [a.arg for a in n.args.args if a.arg not in ("self", "cls")] if isinstance(n, ast.FunctionDef) else []
                out.append({"module": module, "group": "py:" + parts[0], "name": n.name, "cls": cls,
                            "kind": "class" if isinstance(n, ast.ClassDef) else ("method" if cls else "function"),
                            "doc": first_sentence(doc), "args": args, "code": code, "locals": _local_names(n)})
    return out


def _package_stanzas(text):
    for stanza in text.split("\n\n"):
        fields, last = {}, None
        for line in stanza.split("\n"):
            if line.startswith((" ", "\t")) and last:
                fields[last] += "\n" + line[1:]
            elif ":" in line:
                last, _, value = line.partition(":")
                fields[last] = value.strip()
        if "Package" in fields and "Description" in fields:
            yield fields


def debian_packages():
    """Packages with a synopsis and, when it is long enough, their long description as prose."""
    texts = []
    if os.path.exists("/var/lib/dpkg/status"):
        texts.append(open("/var/lib/dpkg/status", encoding="utf-8", errors="replace").read())
    for path in sorted(glob.glob("/var/lib/apt/lists/*Packages*")):
        try:
            if path.endswith(".lz4"):
                raw = subprocess.run(["lz4cat", path], capture_output=True, check=True).stdout
            elif path.endswith(".gz"):
                raw = gzip.open(path).read()
            elif path.endswith("Packages"):
                raw = open(path, "rb").read()
            else:
                continue
        except (OSError, subprocess.CalledProcessError):
            continue
        texts.append(raw.decode("utf-8", errors="replace"))
    out = {}
    for text in texts:
        for f in _package_stanzas(text):
            name = f["Package"]
            if name in out or re.search(r"-(dbg|dbgsym|doc|dev|data|common|l10n.*|locale.*)$", name):
                continue
            synopsis, _, long = f["Description"].partition("\n")
            long = "\n".join("" if l.strip() == "." else l.strip() for l in long.split("\n")).strip()
            if len(synopsis) < 12:
                continue
            out[name] = {"name": name, "group": "deb:" + name, "synopsis": synopsis.strip(),
                         "section": f.get("Section", "misc").split("/")[-1], "long": long}
    return [out[k] for k in sorted(out)]


def _read_doc(path):
    try:
        raw = gzip.open(path).read() if path.endswith(".gz") else open(path, "rb").read(200_000)
    except OSError:
        return ""
    return raw[:200_000].decode("utf-8", errors="replace")


def doc_paragraphs():
    """Prose paragraphs (200-1200 characters, mostly words) from /usr/share/doc READMEs and
    changelogs, and from the long Debian descriptions: grouped by document."""
    out = []
    paths = sorted(glob.glob("/usr/share/doc/*/README*") + glob.glob("/usr/share/doc/*/NEWS*") +
                   glob.glob("/usr/share/doc/*/changelog.gz"))
    for path in paths:
        text = _read_doc(path)
        group = "doc:" + path.split("/")[4]
        for para in re.split(r"\n\s*\n", text):
            para = "\n".join(l.rstrip() for l in para.strip("\n").split("\n"))
            letters = sum(c.isalpha() or c == " " for c in para)
            if 200 <= len(para) <= 1200 and letters > 0.8 * len(para) and not para.lstrip().startswith(("#", "--", "*")):
                out.append({"group": group, "text": para.strip()})
    return out


def topic_words(prose):
    """Dictionary words that follow an article in the given prose at least twice (nouns, mostly)."""
    path = "/usr/share/dict/words"
    if not os.path.exists(path):
        return []
    words = {w.strip() for w in open(path, encoding="utf-8", errors="replace")}
    counts = {}
    for text in prose:
        for w in re.findall(r"\b(?:the|a|an|of|your)\s+([a-z]{4,14})\b", text):
            counts[w] = counts.get(w, 0) + 1
    adjective_or_verb = re.compile(r"(ing|ed|ly|ous|ful|less|ive|able|ible|est|ish)$")
    return sorted(w for w, c in counts.items() if c >= 2 and w in words and not adjective_or_verb.search(w))


def gather():
    """All sources in one dict (takes ~20-60 s: the whole stdlib is parsed)."""
    py = stdlib_items()
    pkgs = debian_packages()
    paras = doc_paragraphs()
    paras += [{"group": p["group"], "text": p["long"]} for p in pkgs if 200 <= len(p["long"]) <= 1200]
    prose = [p["text"] for p in paras] + [i["doc"] for i in py] + [p["synopsis"] for p in pkgs]
    return {"py": py, "pkgs": pkgs, "paras": paras, "words": topic_words(prose)}


if __name__ == "__main__":
    import time
    t = time.time()
    s = gather()
    print({k: len(v) for k, v in s.items()}, f"{time.time() - t:.1f}s")
    print(sum(1 for i in s["py"] if 5 <= i["code"].count("\n") + 1 <= 40), "snippets of 5-40 lines")
    print(s["words"][:40])
