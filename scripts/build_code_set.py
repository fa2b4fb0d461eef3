"""Build the bundled code-retrieval gold set ``code-boltons`` (datasets/code/) from boltons' source.

The CodeSearchNet construction: a query is the summary of a public function's docstring, its gold
evidence the function's span (decorators to last line), and every docstring is removed from the
indexed code, so a query cannot match its own text. Some functions are removed from the corpus
altogether: their queries are unanswerable. Deterministic: each file is processed on its own and
a function's fate (kept or removed) depends only on the seed and its name, so any slice of files
reproduces the shipped rows for those files (tests/test_code.py checks two).

    python scripts/build_code_set.py --fetch      # once: the sdist's boltons/*.py + LICENSE
    python scripts/build_code_set.py              # datasets/code/code-boltons.json.gz
    python scripts/build_datasets.py --vectors-only code-boltons   # its shipped e5 vectors
    python scripts/build_code_set.py --folder rxjs/src --out /tmp/rxjs-set --suffix .ts   # any folder (docs only)
"""
from __future__ import annotations

import argparse
import ast
import gzip
import hashlib
import io
import json
import re
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGE, VERSION, LICENSE = "boltons", "26.2.0", "BSD-3-Clause"
SOURCE = ROOT / "datasets" / "code" / f"{PACKAGE}-{VERSION}-src.tar.gz"
OUT = ROOT / "datasets" / "code" / "code-boltons.json.gz"
SEED = 20261124
UNANSWERABLE_RATE = 0.12  # share of candidate functions removed from the corpus (their queries: unanswerable)
MIN_WORDS, MAX_WORDS = 4, 40


def fetch(dest: Path = SOURCE) -> None:
    """Download the sdist from the package registry and keep boltons/*.py and LICENSE (a deterministic tar)."""
    with tempfile.TemporaryDirectory() as tmp:
        subprocess.run([sys.executable, "-m", "pip", "download", f"{PACKAGE}=={VERSION}", "--no-deps",
                        "--no-binary", ":all:", "-d", tmp], check=True)
        sdist = next(Path(tmp).glob(f"{PACKAGE}-{VERSION}.tar.gz"))
        files = {}
        with tarfile.open(sdist) as t:
            for m in t.getmembers():
                parts = m.name.split("/")
                if m.isfile() and (parts[1:] == ["LICENSE"] or (len(parts) == 3 and parts[1] == PACKAGE
                                                               and parts[2].endswith(".py"))):
                    files["/".join(parts[1:])] = t.extractfile(m).read()
    dest.parent.mkdir(parents=True, exist_ok=True)
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as t:
        for name in sorted(files):
            info = tarfile.TarInfo(name)
            info.size, info.mtime, info.mode = len(files[name]), 0, 0o644
            t.addfile(info, io.BytesIO(files[name]))
    with open(dest, "wb") as f, gzip.GzipFile(fileobj=f, mode="wb", mtime=0) as g:
        g.write(buf.getvalue())
    print(f"wrote {dest} ({len(files)} files)")


def read_source(path: Path = SOURCE) -> dict[str, str]:
    with tarfile.open(path) as t:
        return {m.name: t.extractfile(m).read().decode("utf-8") for m in t.getmembers() if m.isfile()}


def summary(doc: str) -> str | None:
    """The docstring's summary: its first paragraph, first sentence, whitespace collapsed."""
    para = re.split(r"\n\s*\n", doc.strip(), maxsplit=1)[0]
    text = " ".join(para.split())
    m = re.search(r"(?<=[.!?])\s+(?=[A-Z`(*:])", text)
    if m:
        text = text[:m.start()]
    if ">>>" in text or not MIN_WORDS <= len(text.split()) <= MAX_WORDS:
        return None
    return text


def removed(seed: int, module: str, qualname: str) -> bool:
    h = hashlib.sha256(f"{seed}:{module}:{qualname}".encode()).digest()
    return int.from_bytes(h[:8], "big") / 2 ** 64 < UNANSWERABLE_RATE


def _functions(tree: ast.Module):
    """(qualname, node, kind) of every function and method not nested in a function."""
    def walk(body, prefix, in_class):
        for n in body:
            if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef)):
                yield prefix + n.name, n, "method" if in_class else "function"
            elif isinstance(n, ast.ClassDef):
                yield from walk(n.body, prefix + n.name + ".", True)
            elif isinstance(n, (ast.If, ast.Try)):
                yield from walk(n.body + n.orelse + getattr(n, "finalbody", []), prefix, in_class)
    yield from walk(tree.body, "", False)


def _docstring_nodes(tree: ast.Module):
    for n in ast.walk(tree):
        if isinstance(n, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)) and n.body:
            first = n.body[0]
            if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant) and isinstance(
                    first.value.value, str):
                yield n, first


def strip_file(text: str, drop: set[str]) -> str:
    """``text`` without docstrings and without the functions named in ``drop`` (whole lines; a body
    left empty gets ``pass``). Repeated while a docstring is left: a bare string right after a
    docstring becomes the docstring once the first is gone."""
    out = _strip_once(text, drop)
    for _ in range(10):
        if not any(True for _ in _docstring_nodes(ast.parse(out))):
            break
        out = _strip_once(out, set())
    return out


def _strip_once(text: str, drop: set[str]) -> str:
    tree = ast.parse(text)
    lines = text.split("\n")
    cut: list[tuple[int, int, str | None]] = []  # 0-based first..last line, replacement line
    for owner, expr in _docstring_nodes(tree):
        a, b = expr.lineno - 1, expr.end_lineno - 1
        only = len(owner.body) == 1 and not isinstance(owner, ast.Module)
        if lines[a][:expr.col_offset].strip() or lines[b][expr.end_col_offset:].strip():
            # the docstring shares a line with code (`def f(): "doc"`): blank the literal on its line
            if a == b:
                lines[a] = lines[a][:expr.col_offset] + ("pass" if only else "") + lines[a][expr.end_col_offset:]
            continue
        cut.append((a, b, " " * expr.col_offset + "pass" if only else None))
    for qual, node, _ in _functions(tree):
        if qual in drop:
            a = min([node.lineno] + [d.lineno for d in node.decorator_list]) - 1
            cut.append((a, node.end_lineno - 1, None))
    keep = [True] * len(lines)
    repl: dict[int, str] = {}
    for a, b, r in sorted(cut):
        for i in range(a, b + 1):
            keep[i] = False
        if r is not None:
            repl[a] = r
    out = [repl.get(i, line) for i, line in enumerate(lines) if keep[i] or i in repl]
    result = "\n".join(out)
    try:
        ast.parse(result)
    except SyntaxError as e:  # e.g. a class whose only method was removed
        raise ValueError(f"stripping left invalid Python at line {e.lineno}") from None
    return result


def build_file(name: str, text: str, seed: int = SEED) -> tuple[dict, list[dict]]:
    """One source file: its stripped text (a document) and its questions."""
    tree = ast.parse(text)
    module = Path(name).stem
    cands, seen = [], {}
    for qual, node, kind in _functions(tree):
        if any(p.startswith("_") for p in qual.split(".")):
            continue  # private and dunder: their docstrings describe internals
        doc = ast.get_docstring(node)
        s = summary(doc) if doc else None
        if s:
            cands.append((qual, kind, s))
            seen[s.casefold()] = seen.get(s.casefold(), 0) + 1
    cands = [c for c in cands if seen[c[2].casefold()] == 1]  # a summary two functions share is ambiguous
    drop = {q for q, _, _ in cands if removed(seed, module, q)}
    try:
        stripped = strip_file(text, drop)
    except ValueError:  # removing one of them left an empty body: keep them all answerable
        drop = set()
        stripped = strip_file(text, drop)
    spans = {}
    lines = stripped.split("\n")
    starts = [0]
    for ln in lines:
        starts.append(starts[-1] + len(ln) + 1)
    for qual, node, _ in _functions(ast.parse(stripped)):
        a = min([node.lineno] + [d.lineno for d in node.decorator_list]) - 1
        spans[qual] = (starts[a], starts[node.end_lineno] - 1)
    questions = []
    for qual, kind, s in cands:
        meta = {"code_language": "python", "kind": kind, "symbol": qual, "file": name}
        qid = f"{PACKAGE}-{module}-{qual}"
        if qual in drop:
            questions.append({"qid": qid, "text": s, "answers": [], "answerable": False, "qtype": "code-search",
                              "language": "en", "evidence": [], "metadata": {**meta, "removed": True}})
            continue
        a, b = spans[qual]
        questions.append({"qid": qid, "text": s, "answers": [qual.split(".")[-1]], "answerable": True,
                          "qtype": "code-search", "language": "en",
                          "evidence": [{"doc_id": name, "page_id": f"{name}#p0", "start": a, "end": b,
                                        "text": stripped[a:b]}], "metadata": meta})
    return {"doc_id": name, "text": stripped}, questions


def build(source: dict[str, str], seed: int = SEED, files: list[str] | None = None) -> dict:
    docs, questions = [], []
    for name in sorted(source):
        if not name.endswith(".py") or (files is not None and name not in files):
            continue
        d, qs = build_file(name, source[name], seed)
        docs.append(d)
        questions.extend(qs)
    return {"name": "code-boltons", "package": PACKAGE, "version": VERSION, "license": LICENSE, "seed": seed,
            "documents": docs, "questions": questions}


def write(obj: dict, path: Path = OUT) -> None:
    data = json.dumps(obj, ensure_ascii=False, separators=(",", ":")).encode()
    with open(path, "wb") as f, gzip.GzipFile(fileobj=f, mode="wb", mtime=0) as g:
        g.write(data)


# --------------------------------------------------------------------------- any folder (docs/strategies.md table)

def _doc_blocks(lines: list[str]) -> set[int]:
    """Line numbers of every JSDoc block (`/** ... */`) standing on lines of its own: the folder set removes them
    all, as the bundled Python set removes every docstring, so no definition keeps prose a query could match."""
    drop: set[int] = set()
    k = 0
    while k < len(lines):
        if lines[k].lstrip().startswith("/**"):
            end = k
            while end < len(lines) and "*/" not in lines[end]:
                end += 1
            if end < len(lines) and lines[end].split("*/", 1)[1].strip() == "":
                drop.update(range(k, end + 1))
            k = end + 1
        else:
            k += 1
    return drop


def _python_docstrings(text: str) -> dict[int, str]:
    """0-based line of each function's ``def`` (decorators skipped) -> its docstring (Python files)."""
    try:
        tree = ast.parse(text)
    except (SyntaxError, ValueError):
        return {}
    out = {}
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            doc = ast.get_docstring(node)
            if doc:
                out[node.lineno - 1] = doc
    return out


def _question(sentence: str | None, name: str) -> str | None:
    """The summary sentence with the definition's own name taken out (a query must not spell its answer)."""
    short = name.rsplit(".", 1)[-1]
    if not sentence:
        return None
    if sentence.startswith(short + " "):  # Go: "Execute uses the args ..." names itself: the rest
        sentence = sentence[len(short) + 1:]
        sentence = sentence[:1].upper() + sentence[1:]
    sentence = re.sub(rf"`{re.escape(short)}(\(\))?`", "it", sentence)
    return sentence if MIN_WORDS <= len(sentence.split()) <= MAX_WORDS else None


def folder_set(src: Path, out: Path, suffixes: tuple[str, ...], keep_docs: bool = False,
               one_per_definition: bool = False, replace: bool = False) -> tuple[int, int]:
    """A gold set from any code folder, the CodeSearchNet way and the way the bundled Python set is built: a query
    is the first sentence of the first paragraph of a function's doc comment (JSDoc, Go doc comment, `#` block;
    with ``keep_docs`` a Python function's docstring too), its gold the definition (`{"doc", "symbol"}` evidence),
    and every doc comment (JSDoc blocks anywhere, the comment run above any definition) is removed from the corpus
    written to ``out/corpus``; ``keep_docs`` leaves the files as they are (issue 55's held-out check: docs in place,
    the question is the doc's first sentence with the name taken out). Definitions sharing a question are its gold
    together (``merge_shared_questions``) unless ``one_per_definition``. ``out/corpus`` must not hold files already:
    a set built twice into one folder kept the first build's files beside the second's (issue 65's first rxjs
    table: 7.8.2's `src` over 118 files of the main branch's `packages/rxjs/src`, every operator twice), so it is
    refused with what is there, or emptied first with ``replace``. (files, questions)"""
    import shutil

    from rag.ingest.code import all_defs, code_language, doc_above_blanks, is_stub, minified_reason, parse_code
    from rag.ingest.code.docs import doc_block, doc_text, leading_start

    corpus, questions, files = out / "corpus", [], 0
    if corpus.exists() and any(corpus.iterdir()):
        if not replace:
            held = sum(1 for x in corpus.rglob("*") if x.is_file())
            raise SystemExit(f"{corpus} already holds {held:,} file(s) from an earlier build; a second build "
                             "would leave them beside the new ones. Pass --replace to empty it first, or "
                             "another --out.")
        shutil.rmtree(corpus)
    for p in sorted(src.rglob("*")):
        rel = p.relative_to(src).as_posix()
        if not p.is_file() or not p.name.endswith(suffixes) or is_stub(p) or re.search(
                r"(_test\.go|\.spec\.ts|\.test\.ts|test_[^/]*\.py)$", p.name) or "/test" in "/" + rel:
            continue
        text = p.read_text(encoding="utf-8", errors="replace")
        if minified_reason(p, text):  # skipped as the ingest skips it (a generated table, a minified bundle)
            continue
        lines = text.split("\n")
        seen: dict[str, int] = {}
        drop = _doc_blocks(lines) if not keep_docs else set()
        pydocs = _python_docstrings(text) if keep_docs and p.suffix == ".py" else {}
        for d in all_defs(parse_code(text, code_language(p)).defs):
            if d.head >= 0 and d.head in pydocs and d.kind in ("function", "method") and not d.children:
                q = _question(summary(pydocs[d.head]), d.name)
                if q:
                    questions.append({"id": f"{rel}::{d.name}", "question": q, "answers": [d.name],
                                      "evidence": [{"doc": rel, "symbol": d.name}]})
                continue
            if d.head < 0:
                continue
            # the doc as the language's doc tool reads it, through the chunker's own reader (rag/ingest/code/docs.py):
            # a Javadoc block whatever its lines start with, attributes and annotations between it and the code
            # skipped (never question text), a `//` line comment never a Java, TypeScript or Rust doc
            lang = code_language(p)
            start = leading_start(lines, d.head, -1)
            if start == d.head:  # a JSDoc block or /// run a blank line or two above (as the chunker attaches it)
                start = doc_above_blanks(lines, d.head, -1)
            block = doc_block(lines, start, d.head, lang) if start < d.head else []
            if not block:
                continue
            b0 = next(k for k in range(d.head - 1, start - 1, -1) if lines[k] == block[0]
                      and lines[k:k + len(block)] == block)
            if not keep_docs:
                drop.update(range(b0, b0 + len(block)))
            if d.kind not in ("function", "method") or d.children:
                continue
            sentence = _question(summary(re.sub(r"\{@link ([^}|]+)[^}]*\}", r"\1", doc_text(block))), d.name)
            if not sentence:
                continue
            # overloads and repeated impls share a name: each later one is told apart by its line
            n = seen[d.name] = seen.get(d.name, 0) + 1
            qid = f"{rel}::{d.name}" + (f"@{d.head + 1}" if n > 1 else "")
            questions.append({"id": qid, "question": sentence, "answers": [d.name],
                              "evidence": [{"doc": rel, "symbol": d.name}]})
        (corpus / rel).parent.mkdir(parents=True, exist_ok=True)
        (corpus / rel).write_text("\n".join(x for k, x in enumerate(lines) if k not in drop), encoding="utf-8")
        files += 1
    if not one_per_definition:
        questions = merge_shared_questions(questions)
    with open(out / "questions.jsonl", "w", encoding="utf-8") as f:
        for q in questions:
            f.write(json.dumps(q, ensure_ascii=False) + "\n")
    return files, len(questions)


def merge_shared_questions(questions: list[dict]) -> list[dict]:
    """One question per distinct text: definitions whose docs open with the same sentence (fp-ts writes "Less
    strict version of [`alt`](#alt)." above `altW` in six modules) are every one a right answer to it, so they are
    its gold together (MRR credits the first shown, recall counts each). Asked once per definition, the copies got
    one ranked list between them and at most one could rank first: 125 of fp-ts's 433 questions (29%) against 29
    of werkzeug's 275 (11%), a gap in the set and not in retrieval."""
    merged: dict[str, dict] = {}
    for q in questions:
        first = merged.setdefault(q["question"], {**q, "answers": [], "evidence": []})
        first["answers"] += [a for a in q["answers"] if a not in first["answers"]]
        first["evidence"] += [e for e in q["evidence"] if e not in first["evidence"]]
    return list(merged.values())


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--fetch", action="store_true", help=f"download {PACKAGE}=={VERSION} and keep its source")
    ap.add_argument("--seed", type=int, default=SEED)
    ap.add_argument("--folder", type=Path, default=None,
                    help="build a set from any code folder instead (docs/strategies.md, Code corpora): writes "
                         "OUT/corpus and OUT/questions.jsonl")
    ap.add_argument("--out", type=Path, default=None, help="with --folder: where to write")
    ap.add_argument("--suffix", nargs="+", default=[".ts", ".go", ".py"], help="with --folder: files to read")
    ap.add_argument("--keep-docs", action="store_true",
                    help="with --folder: leave doc comments and docstrings in the corpus (questions from Python "
                         "docstrings too): issue 55's held-out check")
    ap.add_argument("--one-per-definition", action="store_true",
                    help="with --folder: one question per definition even where several share its text (the "
                         "construction before issue 55's merge: the copies compete for one ranked list)")
    ap.add_argument("--replace", action="store_true",
                    help="with --folder: empty OUT/corpus first when an earlier build left files there (refused "
                         "otherwise: its files would stay beside the new ones)")
    a = ap.parse_args()
    if a.folder is not None:
        if a.out is None:
            ap.error("--folder needs --out")
        files, n = folder_set(a.folder, a.out, tuple(a.suffix), a.keep_docs, a.one_per_definition,
                              a.replace)
        print(f"wrote {a.out}: {files} files, {n} questions")
        return
    if a.fetch:
        fetch()
        return
    obj = build(read_source(), a.seed)
    write(obj)
    n = len(obj["questions"])
    u = sum(not q["answerable"] for q in obj["questions"])
    print(f"wrote {OUT}: {len(obj['documents'])} files, {n} questions ({u} unanswerable)")


if __name__ == "__main__":
    main()
