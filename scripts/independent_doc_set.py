"""A second question set for a code folder, built by a rule that never reads the chunker's doc attachment
(docs/strategies.md, the per-language held-out table; issue 75): the doc comment of each function or method as the
language's doc tool defines it, read here with its own small rules, and its first sentence (the name taken out) as
the question; gold: the definition (`{"doc", "symbol"}`, the parser's name). The product's builder
(`scripts/build_code_set.py`) shares the chunker's reader (rag/ingest/code/docs.py); where the two sets' scores
agree, the reader is not what the table measures.

Rules (each language's doc tool):
- Java (Javadoc), C (Doxygen): the `/** ... */` block ending right above the definition, only annotations
  (`@Name`, `@Name(...)` over lines) and blank lines between; its inner lines may start with `*` or not.
- Rust (rustdoc): the `///` lines right above, only attributes (`#[...]` over lines) between.
- Go (godoc): the `//` lines right above, nothing between.

    python scripts/independent_doc_set.py --folder REPO/src --suffix .rs --out /tmp/sets/NAME-ind
"""
from __future__ import annotations

import argparse
import json
import re
from pathlib import Path


def _skip_annotations(lines: list[str], k: int) -> int:
    """Index of the first line above ``k`` (exclusive) that is not an annotation or attribute line (several lines
    each) nor blank."""
    depth = 0
    while k - 1 >= 0:
        s = lines[k - 1].strip()
        if not s and depth == 0:
            k -= 1
            continue
        opens, closes = s.count("(") + s.count("["), s.count(")") + s.count("]")
        if depth > 0 or (closes > opens and not s.startswith(("//", "/*", "*"))):
            depth += closes - opens  # inside a multi-line annotation or attribute: walk to its start
            k -= 1
            if depth <= 0 and (s.startswith("@") or s.startswith("#[")):
                depth = 0
            continue
        if s.startswith("@") or s.startswith("#[") or s.startswith("#!["):
            k -= 1
            continue
        break
    return k


def doc_of(lines: list[str], head: int, language: str) -> str:
    if language == "go":
        k = head
        while k - 1 >= 0 and lines[k - 1].strip().startswith("//"):
            k -= 1
        return "\n".join(re.sub(r"^\s*//\s?", "", x) for x in lines[k:head])
    k = _skip_annotations(lines, head)
    if language == "rust":
        j = k
        while j - 1 >= 0 and lines[j - 1].strip().startswith("///"):
            j -= 1
        return "\n".join(re.sub(r"^\s*///\s?", "", x) for x in lines[j:k])
    if k - 1 < 0 or not lines[k - 1].strip().endswith("*/"):
        return ""
    j = k - 1
    while j >= 0 and "/**" not in lines[j]:
        if "/*" in lines[j]:
            return ""  # a plain /* */ comment
        j -= 1
    if j < 0:
        return ""
    body = []
    for x in lines[j:k]:
        t = re.sub(r"^\s*(/\*\*|\*/|\*(?!/))\s?", "", x).replace("*/", "").rstrip()
        if t.lstrip().startswith("@"):
            break
        body.append(t)
    return "\n".join(body)


def first_sentence(doc: str, name: str) -> str | None:
    para = re.split(r"\n\s*\n", doc.strip(), maxsplit=1)[0]
    para = re.sub(r"\{@(?:link|code) ([^}]+)\}", r"\1", " ".join(para.split()))
    m = re.match(r"(.+?[.!?])(\s|$)", para)
    s = (m.group(1) if m else para).strip()
    short = name.rsplit(".", 1)[-1]
    if s.startswith(short + " "):
        s = s[len(short) + 1:]
        s = s[:1].upper() + s[1:]
    return s if 4 <= len(s.split()) <= 40 else None


def build(src: Path, suffix: str) -> list[dict]:
    from rag.ingest.code import all_defs, code_language, is_stub, minified_reason, parse_code

    out, seen = [], {}
    for p in sorted(src.rglob(f"*{suffix}")):
        rel = p.relative_to(src).as_posix()
        if is_stub(p) or p.name.endswith("_test.go") or "/test" in "/" + rel:
            continue
        text = p.read_text(encoding="utf-8", errors="replace")
        if minified_reason(p, text):
            continue
        lines, lang = text.split("\n"), code_language(p)
        for d in all_defs(parse_code(text, lang).defs):
            if d.kind not in ("function", "method") or d.children:
                continue
            head = d.head if d.head >= 0 else d.first
            while head < d.last and (lines[head].strip().startswith(("@", "#[")) or not lines[head].strip()):
                head += 1  # the signature line under its annotations
            q = first_sentence(doc_of(lines, head, lang), d.name)
            if not q:
                continue
            n = seen[(rel, d.name)] = seen.get((rel, d.name), 0) + 1
            out.append({"id": f"{rel}::{d.name}" + (f"@{head + 1}" if n > 1 else ""), "question": q,
                        "answers": [d.name], "evidence": [{"doc": rel, "symbol": d.name}]})
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--folder", type=Path, required=True)
    ap.add_argument("--suffix", required=True)
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--one-per-definition", action="store_true", help="keep a question per definition, copies too")
    a = ap.parse_args()
    qs = build(a.folder, a.suffix)
    if not a.one_per_definition:  # one question per distinct text, its definitions gold together (as the product's
        merged: dict = {}  # builder does: twins documented alike, IndexMap::len and IndexSet::len, are both right)
        for q in qs:
            first = merged.setdefault(q["question"], {**q, "answers": [], "evidence": []})
            first["answers"] += [x for x in q["answers"] if x not in first["answers"]]
            first["evidence"] += [e for e in q["evidence"] if e not in first["evidence"]]
        qs = list(merged.values())
    a.out.mkdir(parents=True, exist_ok=True)
    with open(a.out / "questions.jsonl", "w", encoding="utf-8") as f:
        for q in qs:
            f.write(json.dumps(q, ensure_ascii=False) + "\n")
    print(f"wrote {a.out / 'questions.jsonl'}: {len(qs)} questions")


if __name__ == "__main__":
    main()
