"""Training prompts for DFlash drafters, four categories, built from local sources (sources.py),
math generators (mathgen.py) and hand-written lists (topics.py).

Deterministic for a seed on a given machine. Held out by SOURCE: every stdlib module, Debian
package, document, topic word and math generator is either a training group or a held-out group
(stable hash of the group name, plus mathgen.HELDOUT), so held-out prompts never share their
snippet, topic or problem type with a training prompt, only the task phrasing. Prompts containing
a benchmark prompt's text are dropped (make_data.py passes them in).
"""

import random
import re

import mathgen
import topics as T
from sources import gather, stable_hash

HELDOUT_PCT = 10  # % of source groups reserved for held-out prompts
CATS = ("code", "math", "chat", "edit")


def _lc(s):
    s = s.rstrip(".").strip()
    return s[:1].lower() + s[1:] if s[1:2].islower() or len(s) < 2 else s


def _snippet_ok(item, max_chars=1500):
    n = item["code"].count("\n") + 1
    return 5 <= n <= 40 and len(item["code"]) <= max_chars


def _plant_bug(code, rng):
    """A one-token mistake (operator, off-by-one, wrong constant); None when nothing fits."""
    muts = [(r" < ", " <= "), (r" <= ", " < "), (r" > ", " >= "), (r" == ", " != "), (r" != ", " == "),
            (r" \+ 1\b", " - 1"), (r" - 1\b", " + 1"), (r"\band\b", "or"), (r"\bTrue\b", "False"), (r"\[0\]", "[1]"),
            (r"\[-1\]", "[0]"), (r" \+= ", " -= ")]
    rng.shuffle(muts)
    body = code.split('"""')[-1] if code.count('"""') >= 2 else code
    for pat, rep in muts:
        hits = list(re.finditer(pat, body))
        if hits:
            m = rng.choice(hits)
            off = len(code) - len(body)
            return code[:off + m.start()] + rep + code[off + m.end():]
    return None


def _typos(text, rng):
    words = text.split(" ")
    for _ in range(max(2, len(words) // 25)):
        i = rng.randrange(len(words))
        w = words[i]
        if len(w) > 3 and w.isalpha():
            j = rng.randrange(len(w) - 1)
            words[i] = w[:j] + w[j + 1] + w[j] + w[j + 2:] if rng.random() < 0.6 else w[:j] + w[j + 1:]
    out = " ".join(words)
    for a, b in (("their", "there"), ("its", "it's"), (" than ", " then "), ("were", "was")):
        if a in out and rng.random() < 0.5:
            out = out.replace(a, b, 1)
    return out


def _record(rng, words):
    keys = rng.sample(["name", "id", "email", "city", "tags", "active", "score", "owner", "version", "created",
                       "price", "items", "port", "host", "timeout", "retries", "color", "size", "notes"], rng.randint(3, 7))
    rec = {}
    for k in keys:
        r = rng.random()
        rec[k] = (rng.randint(0, 9999) if r < 0.3 else rng.choice([True, False]) if r < 0.4 else
                  [rng.choice(words) for _ in range(rng.randint(1, 4))] if r < 0.6 else rng.choice(words))
    return rec


def _data_edit(rng, pool):
    import json
    words = pool["words"] or ["alpha", "beta", "gamma"]
    rec = _record(rng, words)
    rows = [_record(random.Random(rng.random()), words) for _ in range(rng.randint(2, 5))]
    cols = sorted(set(rows[0]))
    csv = "\n".join([",".join(cols)] + [",".join(str(r.get(c, "")).replace(",", ";") for c in cols) for r in rows])
    return rng.choice([f"Convert this JSON to YAML:\n\n{json.dumps(rec)}", f"Convert this JSON to TOML:\n\n{json.dumps(rec, indent=2)}",
                       f"Turn this CSV into a Markdown table:\n\n{csv}", f"Convert this CSV into a JSON array of objects:\n\n{csv}",
                       f"Rewrite this JSON with the keys sorted and two-space indentation:\n\n{json.dumps(rec)}",
                       f"Convert this JSON object into XML:\n\n{json.dumps(rec)}",
                       f"Sort these lines alphabetically and remove duplicates:\n\n" + "\n".join(rng.choice(words) for _ in range(8))])


def _sql(rng, pool):
    words = [w for w in pool["words"] if w.isalpha() and not w.endswith("s")] or ["item", "order", "user"]
    t1, t2 = rng.sample(words, 2)
    c1 = rng.sample(["name", "title", "price", "quantity", "created_at", "status", "rating", "city", "amount"], 3)
    schema = f"{t1}s(id, {', '.join(c1)}) and {t2}s(id, {t1}_id, {rng.choice(['amount', 'score', 'weight', 'duration'])})"
    q = rng.choice([f"the number of {t2}s per {t1}", f"the {t1}s without any {t2}", f"the average {c1[0]} per {c1[1]}",
                    f"the top 3 {t1}s by total {t2} amount", f"each {t1} with its latest {t2}", f"duplicate {c1[0]} values",
                    f"a running total of {t2} amounts ordered by id", f"the {t1}s whose {c1[2]} is above the average"])
    return rng.choice([f"Write a SQL query over the tables {schema} that returns {q}.",
                       f"Given tables {schema}, how do I get {q} in SQL? Explain the query.",
                       f"Write the CREATE TABLE statements for {schema}, with keys and an index, then a query for {q}."])


def code_prompt(rng, pool):
    k = rng.random()
    lang = rng.choice(T.LANGS)
    if k < 0.2 and pool["py"]:
        it = rng.choice(pool["py"])
        if it["kind"] == "class":
            return rng.choice(T.CLASS_FORMS).format(lang=lang, name=it["name"], doc=it["doc"])
        return rng.choice(T.DOC_FORMS).format(lang=lang, name=it["name"], args=", ".join(it["args"]), doc=it["doc"],
                                              module=it["module"])
    if k < 0.38 and pool["snippets"]:
        it = rng.choice(pool["snippets"])
        if rng.random() < 0.2:
            bug = _plant_bug(it["code"], rng)
            if bug:
                return rng.choice(T.FIX_CODE).format(code=bug)
        if rng.random() < 0.2 and it["code"].count('"""') >= 2:  # complete: signature + docstring only
            head = it["code"].split('"""')
            return f"Complete this function:\n\n{head[0]}\"\"\"{head[1]}\"\"\"\n"
        return rng.choice(T.SNIPPET_FORMS).format(code=it["code"], lang=lang)
    if k < 0.72:  # a third: short classic exercises, the commonest code request
        return rng.choice(T.CODE_FORMS).format(lang=lang, task=rng.choice(pool["tasks"]))
    if k < 0.82 and pool["pkgs"]:
        p = rng.choice(pool["pkgs"])
        return rng.choice(T.PKG_CODE_FORMS).format(lang=lang, name=p["name"], syn=p["synopsis"], syn_lc=_lc(p["synopsis"]))
    if k < 0.91:
        return _sql(rng, pool)
    task = rng.choice(pool["shell"])
    return rng.choice([f"Give me a shell one-liner to {task}.", f"Write a bash script to {task}.",
                       f"How do I {task} on Linux? Show the command and explain it."])


def math_prompt(rng, pool):
    return mathgen.GENERATORS[rng.choice(pool["math"])](rng)


def chat_prompt(rng, pool):
    k = rng.random()
    tops = pool["topics"]
    if k < 0.5:
        return rng.choice(T.CHAT_FORMS).format(t=rng.choice(tops))
    if k < 0.6:
        a, b = rng.sample(tops, 2)
        return rng.choice(T.COMPARE_FORMS).format(a=a, b=b)
    if k < 0.72:
        return rng.choice(T.ADVICE_FORMS).format(p=rng.choice(T.PEOPLE), s=rng.choice(T.SITUATIONS))
    if k < 0.86 and pool["pkgs"]:
        p = rng.choice(pool["pkgs"])
        return rng.choice(T.PKG_CHAT_FORMS).format(name=p["name"], syn=p["synopsis"], syn_lc=_lc(p["synopsis"]))
    it = rng.choice(pool["py"])
    return rng.choice(T.PY_CHAT_FORMS).format(module=it["module"], name=it["name"], doc=it["doc"])


def edit_prompt(rng, pool):
    k = rng.random()
    if k < 0.4 and pool["snippets"]:
        it = rng.choice(pool["snippets"])
        code = it["code"]
        r = rng.random()
        names = [n for n in it["locals"] if re.search(rf"\b{re.escape(n)}\b", code)]
        if r < 0.25 and names:
            old = rng.choice(names)
            new = rng.choice(["value", "result", "item", "count", "data", "current", "total", "buffer", "entry"])
            new = new if new not in names else new + "_" + old
            return rng.choice([f"Rename the variable `{old}` to `{new}` in this code and return the whole code:\n\n{code}",
                               f"In the following code, rename `{old}` to `{new}` everywhere:\n\n{code}"])
        if r < 0.45:
            bug = _plant_bug(code, rng)
            if bug:
                return rng.choice(T.FIX_CODE).format(code=bug)
        return rng.choice(T.CODE_EDITS).format(code=code, lang=rng.choice(T.LANGS[6:]))
    if k < 0.8 and pool["paras"]:
        text = rng.choice(pool["paras"])["text"]
        if rng.random() < 0.25:
            return rng.choice(T.FIX_TEXT).format(text=_typos(text, rng))
        return rng.choice(T.PROSE_EDITS).format(text=text, human=rng.choice(T.TRANSLATE_TO))
    if k < 0.9 and pool["pkgs"]:
        p = rng.choice([p for p in pool["pkgs"][:2000] if p["long"]] or pool["pkgs"])
        return rng.choice(T.PROSE_EDITS).format(text=p["synopsis"] + ". " + p["long"][:900], human=rng.choice(T.TRANSLATE_TO))
    return _data_edit(rng, pool)


GEN = {"code": code_prompt, "math": math_prompt, "chat": chat_prompt, "edit": edit_prompt}


def split_pools(src):
    """Two pools of sources (train, heldout), disjoint by group."""
    ho = lambda g: stable_hash(g) % 100 < HELDOUT_PCT
    pools = {"train": {}, "heldout": {}}
    lists = {"py": src["py"], "pkgs": src["pkgs"], "paras": src["paras"],
             "words": [{"group": "w:" + w, "w": w} for w in src["words"]],
             "tasks": [{"group": "task:" + t, "w": t} for t in T.GENERIC_TASKS],
             "shell": [{"group": "sh:" + t, "w": t} for t in T.SHELL_TASKS],
             "topics": [{"group": "t:" + t, "w": t} for t in T.GENERAL_TOPICS]}
    for name, items in lists.items():
        for split in pools:
            sel = [i for i in items if ho(i["group"]) == (split == "heldout")]
            pools[split][name] = [i["w"] for i in sel] if items and "w" in items[0] else sel
    for split, p in pools.items():
        p["snippets"] = [i for i in p["py"] if i["code"] and _snippet_ok(i)]
        p["topics"] = p["topics"] * 4 + p["words"]  # everyday topics weigh more than the prose-derived words
        p["math"] = [g for g in mathgen.GENERATORS if (g in mathgen.HELDOUT) == (split == "heldout")]
    return pools


def make_prompts(n, seed, n_heldout=0, weights=(0.25, 0.25, 0.25, 0.25), exclude=(), src=None):
    """n training + n_heldout held-out prompts: dicts {cat, msg, split}, unique, none containing or
    contained in a text of `exclude` (the benchmark prompts)."""
    src = src or gather()
    pools = split_pools(src)
    excl = [re.sub(r"\s+", " ", e).strip().lower() for e in exclude]
    seen, out = set(), []
    for split, count in (("train", n), ("heldout", n_heldout)):
        rng = random.Random(f"{seed}:{split}")
        cum = [sum(weights[:i + 1]) / sum(weights) for i in range(len(CATS))]
        for i in range(count):
            u = (i + 0.5) / count  # stratified: the categories' shares are exact for any count
            cat = CATS[min(j for j, c in enumerate(cum) if u <= c + 1e-12)]
            for _ in range(50):
                msg = GEN[cat](rng, pools[split]).strip()
                norm = re.sub(r"\s+", " ", msg).lower()
                if msg not in seen and not any(e in norm or norm in e for e in excl):
                    break
            else:
                continue
            seen.add(msg)
            out.append({"cat": cat, "msg": msg, "split": split})
    random.Random(seed).shuffle(out)
    return out


if __name__ == "__main__":
    import sys
    ps = make_prompts(int(sys.argv[1]) if len(sys.argv) > 1 else 40, 0, 8)
    for p in ps:
        print(f"--- {p['cat']} {p['split']}\n{p['msg']}")
