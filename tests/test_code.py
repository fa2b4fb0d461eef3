"""Code corpora (issue 27): function-level chunks, the code-assistant block shape, identifier
splitting for BM25, the bundled code-boltons set and its builder, mixed folders."""
from __future__ import annotations

import gzip
import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from rag.ingest.chunking import ChunkConfig, chunk_document, rebuild_page
from rag.ingest.code import parse_code
from rag.ingest.corpora import load_bundled
from rag.ingest.readers import load_file
from rag.ingest.folders import load_folder
from rag.index.embedders import EmbedderConfig
from rag.index.workspace import IndexConfig, Workspace
from rag.index.reader import BM25
from rag.index.retrieval import Retriever
from rag.strategies import make_params, get_strategy
from rag.textproc import analyze
from rag.tokens import count_tokens
from tests.pdfgen import make_pdf

ROOT = Path(__file__).resolve().parents[1]

PY = '''"""Module doc."""
import os

CONSTANT = 3


@decorator(arg=1)
async def fetch(url):
    """Fetch a URL."""
    return await get(url)


class Outer:
    """Outer doc."""
    size = 1

    # the comment above a method belongs to it
    def method(self):
        return 1

    class Inner:
        @staticmethod
        def deep():
            def nested():
                return 2
            return nested()

    @property
    def prop(self):
        return 3


def last():
    pass
'''

TS = '''import { x } from "y";

/** Parses a header. */
export function parseHeader(raw: string): string {
  return raw.trim();
}

export class Reader {
  private n = 0;

  @logged
  read(buf: Buffer): number {
    return buf.length;
  }
}

export const double = (a: number) => a * 2;

interface Options { verbose: boolean }
'''

GO = '''package main

import "fmt"

// Server serves.
type Server struct {
	addr string
}

// Run starts the server.
func (s *Server) Run() error {
	fmt.Println(s.addr)
	return nil
}

func main() {
	s := &Server{addr: ":80"}
	s.Run()
}
'''


def _chunks(tmp_path, name, text, cfg=ChunkConfig()):
    p = tmp_path / name
    p.write_text(text)
    doc = load_file(p, name)
    return doc, *chunk_document(doc, cfg)


def test_python_file_nested_classes_decorators_async(tmp_path):
    doc, chunks, parents = _chunks(tmp_path, "mod.py", PY)
    assert doc.code_language == "python" and doc.code_parse.parser == "tree-sitter"
    got = [(c.kind, c.symbol, c.line_start, c.line_end) for c in chunks]
    assert got == [("module", "", 1, 4), ("function", "fetch", 7, 10), ("class", "Outer", 13, 15),
                   ("method", "Outer.method", 17, 19), ("class", "Outer.Inner", 21, 21),
                   ("method", "Outer.Inner.deep", 22, 26), ("method", "Outer.prop", 28, 30),
                   ("function", "last", 33, 34)]
    by = {c.symbol: c for c in chunks}
    assert by["fetch"].text.startswith("@decorator(arg=1)\nasync def fetch") and '"""Fetch a URL."""' in by["fetch"].text
    assert by["Outer.method"].text.lstrip().startswith("# the comment above a method belongs to it")
    assert "def nested" in by["Outer.Inner.deep"].text  # a function inside a function stays in it
    assert rebuild_page(chunks) == doc.text  # back to back, whole file
    assert all(c.text.endswith("\n") for c in chunks)  # whole lines, never mid-line
    par = {p.parent_id: p for p in parents}
    outer = par[by["Outer.method"].parent_id]
    assert outer.header_path == ["Outer"] and outer.text.startswith("class Outer:") and outer.text.rstrip().endswith(
        "return 3")
    assert par[by["Outer.Inner.deep"].parent_id].header_path == ["Outer.Inner"]
    file_parent = par[by["last"].parent_id]
    assert file_parent.header_path == [] and file_parent.text == doc.text  # top-level code: the file
    # the Python ast floor finds the same definitions
    ts = parse_code(doc.text, "python")
    floor = parse_code(doc.text, "python", parser="python-ast")

    def flat(defs):
        return [(d.name, d.kind, d.first, d.last) for d in defs] + [x for d in defs for x in flat(d.children)]
    assert floor.parser == "python-ast" and flat(floor.defs) == flat(ts.defs)


def test_long_function_split_at_statements_never_mid_line(tmp_path):
    body = "".join(f"    value_{i} = compute_something(value_{i - 1}, {i})  # step {i}\n" for i in range(1, 120))
    text = f"def long_one(value_0):\n{body}    return value_119\n"
    doc, chunks, _ = _chunks(tmp_path, "long.py", text, ChunkConfig(leaf_max=200))
    assert len(chunks) > 3 and {c.symbol for c in chunks} == {"long_one"}
    assert all(c.n_tokens <= 200 for c in chunks)
    assert all(c.start == 0 or doc.text[c.start - 1] == "\n" for c in chunks)  # cut at line starts
    assert rebuild_page(chunks) == doc.text


def test_syntax_error_keeps_the_definitions_around_it_with_a_warning(tmp_path):
    """A syntax error loses only its own region (issue 38, 1): the definitions tree-sitter reads around it
    keep their function chunks, the broken lines get line windows, the warning counts what was kept; a file
    with nothing readable still falls back whole."""
    (tmp_path / "src").mkdir()
    (tmp_path / "src" / "bad.py").write_text("def ok():\n    return 1\n\n)))) (((\n$$$ @@\n\ndef fine():\n"
                                             "    return 3\n")
    (tmp_path / "src" / "hopeless.py").write_text("))))\n((((\n")
    (tmp_path / "src" / "good.py").write_text(PY)
    ds = load_folder(tmp_path / "src")
    assert sorted(d.doc_id for d in ds.documents) == ["bad.py", "good.py", "hopeless.py"]  # still ingested
    warn = {Path(s.path).name: s.reason for s in ds.skipped if s.kind == "warning"}
    assert set(warn) == {"bad.py", "hopeless.py"}
    # the gap says which construct the grammar did not read (its line's start, issue 86)
    assert warn["bad.py"] == ("grammar gap at line 4 ()))) (((): kept 2 definitions around it; lines 4-5 chunked by "
                              "line windows")
    assert "does not parse as python" in warn["hopeless.py"] and "line windows" in warn["hopeless.py"]
    bad = next(d for d in ds.documents if d.doc_id == "bad.py")
    chunks, _ = chunk_document(bad)
    assert [(c.kind, c.symbol) for c in chunks] == [("function", "ok"), ("lines", ""), ("function", "fine")]
    assert rebuild_page(chunks) == bad.text
    hopeless = next(d for d in ds.documents if d.doc_id == "hopeless.py")
    assert {c.kind for c in chunk_document(hopeless)[0]} == {"lines"}


TS_NEW = """/** A box. TS 4.7 variance annotations: the pinned grammar does not know `out T`. */
export interface Box<out T> {
  value: T;
}

export function unbox<T>(b: Box<T>): T {
  return b.value;
}

namespace A {
  export interface Props { x: number }
  export function make(): Props { return { x: 1 }; }
}
namespace B {
  export interface Props { y: number }
}

export class Parser {
  parse(a: string): number;
  parse(a: number): number;
  parse(a: any): number {
    return Number(a);
  }
  reset(): void {}
}

export function pick(a: string): string;
export function pick(a: any) {
  return a;
}
"""


def test_typescript_grammar_gap_namespaces_and_overloads(tmp_path):
    """Issue 38, 1 and 4: `interface Box<out T>` no longer sends the file to line windows (every definition
    kept, the warning says so); namespace members are qualified (`A.Props`, `B.Props`); overload signatures
    join their implementation's chunk instead of the class header."""
    doc, chunks, _ = _chunks(tmp_path, "box.ts", TS_NEW)
    assert doc.code_parse.warning == ("grammar gap at line 2 (export interface Box<out T> {): kept 11 definitions "
                                      "around it; no lines lost")
    got = [(c.kind, c.symbol) for c in chunks]
    assert got == [("type", "Box"), ("function", "unbox"), ("module", "A"), ("type", "A.Props"),
                   ("function", "A.make"), ("module", "B"), ("type", "B.Props"), ("class", "Parser"),
                   ("method", "Parser.parse"), ("method", "Parser.reset"), ("function", "pick")], got
    parse = next(c for c in chunks if c.symbol == "Parser.parse")
    assert parse.text.lstrip().startswith("parse(a: string): number;") and "return Number(a)" in parse.text
    header = next(c for c in chunks if c.symbol == "Parser")
    assert "parse(" not in header.text  # the class header holds no overload signature
    pick = next(c for c in chunks if c.symbol == "pick")
    assert pick.text.startswith("export function pick(a: string): string;") and "return a" in pick.text
    assert rebuild_page(chunks) == doc.text


TS_CALL_SIGNATURES = """\
export interface Filter<F> {
  <A, B extends A>(fa: HKT<F, A>, refinement: Refinement<A, B>): HKT<F, B>
  // the plain predicate
  <A>(fa: HKT<F, A>, predicate: Predicate<A>): HKT<F, A>
}

export const lookup: {
  (i: number): <A>(as: Array<A>) => Option<A>
  <A>(i: number, as: Array<A>): Option<A>
} = RA.lookup

/**
 * Takes the first `n` elements.
 */
export const takeLeft =
  (n: number) =>
  <A>(as: Array<A>): Array<A> =>
    as.slice(0, n)

export function first<A>(as: Array<A>): A {
  return as[0]
}
"""


def test_typescript_generic_call_signatures_parse_whole(tmp_path):
    """Issue 55: a generic call signature on its own line after a member that ends with a type (`Option<A>`
    then `<A>(i: number, ...)`, fp-ts and mobx write interfaces so) broke the pinned grammar's parse from there
    on (38 of fp-ts's 123 files had a grammar gap, mobx's `IObservableValueFactory` went to line windows). The
    file parses whole now, with the curried generic arrow (`(n) =>` then `<A>(as) =>`) left as it is."""
    doc, chunks, _ = _chunks(tmp_path, "array.ts", TS_CALL_SIGNATURES)
    assert doc.code_parse.warning == "", doc.code_parse.warning
    got = [(c.kind, c.symbol, c.line_start, c.line_end) for c in chunks if c.symbol]
    assert got == [("type", "Filter", 1, 5), ("function", "takeLeft", 12, 18), ("function", "first", 20, 22)], got
    assert all(c.kind != "lines" for c in chunks)
    assert rebuild_page(chunks) == doc.text  # the separator the parser saw is not in the text


def test_typescript_and_go(tmp_path):
    _, ts, _ = _chunks(tmp_path, "reader.ts", TS)
    # the file's opening imports are kind "imports" (ranked below implementations: docs/strategies.md)
    assert [(c.kind, c.symbol) for c in ts] == [("imports", ""), ("function", "parseHeader"), ("class", "Reader"),
                                               ("method", "Reader.read"), ("function", "double"), ("type", "Options")]
    assert ts[1].text.startswith("/** Parses a header. */\nexport function parseHeader")
    assert ts[3].text.lstrip().startswith("@logged")
    assert "}" in ts[3].text and ts[3].code_language == "typescript"  # the class's closing brace goes with it
    _, go, _ = _chunks(tmp_path, "main.go", GO)
    assert [(c.kind, c.symbol) for c in go] == [("imports", ""), ("type", "Server"), ("method", "Server.Run"),
                                               ("function", "main")]
    assert go[2].text.startswith("// Run starts the server.\nfunc (s *Server) Run()")


def test_identifier_splitting_in_bm25():
    docs = ["def parseHeader(raw): return raw.strip()", "def load_config_file(path): return open(path)",
            "class HTTPServer: pass"]
    bm = BM25([analyze(d, "en", identifiers=True) for d in docs])
    for query, want in (("parse header", 0), ("load config file", 1), ("http server", 2), ("parseHeader", 0)):
        s = bm.scores(analyze(query, "en", identifiers=True))
        assert int(np.argmax(s)) == want and s[want] > 0, query
    plain = BM25([analyze(d, "en") for d in docs])  # without splitting, "parse header" finds nothing
    assert plain.scores(analyze("parse header", "en")).max() == 0


@pytest.fixture
def code_index(tmp_path):
    src = tmp_path / "repo"
    (src / "pkg").mkdir(parents=True)
    (src / "pkg" / "mod.py").write_text(PY)
    (src / "pkg" / "reader.ts").write_text(TS)
    (src / "main.go").write_text(GO)
    ws = Workspace(tmp_path / "ws")
    ds = load_folder(src)
    summ = ws.ingest(ds, IndexConfig(embedder=EmbedderConfig("hash")), progress=False)
    return ws, ds, summ


def test_two_phase_pages_rebuilds_the_whole_file_and_blocks_show_the_header(code_index):
    ws, ds, summ = code_index
    r = Retriever(ws, summ.index)
    assert r.reader.has_code
    ctx = get_strategy("two_phase_pages").retrieve(r, "parse header of raw string", make_params("two_phase_pages"))
    pages = [b for b in ctx.blocks if b.group == "pages"]
    assert pages and all(b.text == ds.doc(b.doc_ids[0]).text for b in pages)  # the page is the file, exactly
    ctx = get_strategy("hybrid").retrieve(r, "parse header", make_params("hybrid", alpha=0.0))  # BM25 alone
    top = ctx.blocks[0]
    assert top.text.startswith("File: pkg/reader.ts (lines 3-6)\nLanguage: typescript\nFunction: parseHeader\n"
                               "```typescript\n/** Parses a header. */") and top.text.endswith("\n```")
    assert top.n_tokens == count_tokens(top.text)
    (d, s, e), = top.spans  # the span is the code shown, not the header
    assert ds.doc(d).text[s:e] == top.text.split("```typescript\n", 1)[1][:-4]


def test_code_block_chars_cuts_the_code_at_a_line_end(tmp_path):
    text = "def big():\n" + "".join(f"    x_{i} = {i} * {i}  # a line of about forty chars\n" for i in range(60))
    src = tmp_path / "repo"
    src.mkdir()
    (src / "big.py").write_text(text)
    ws = Workspace(tmp_path / "ws")
    summ = ws.ingest(load_folder(src), IndexConfig(embedder=EmbedderConfig("hash")), progress=False)
    r = Retriever(ws, summ.index)
    chunks = get_strategy("chunks")
    b = chunks.retrieve(r, "big", make_params("chunks", top_k=1, code_block_chars=300)).blocks[0]
    code = b.text.split("```python\n", 1)[1][:-4]
    # cut at a line end: the code shown is whole lines of the file (whichever piece of `big` ranked first)
    assert len(code) <= 300 and ("\n" + code + "\n") in ("\n" + text) and b.n_tokens == count_tokens(b.text)
    whole = chunks.retrieve(r, "big", make_params("chunks", top_k=1, code_block_chars=0)).blocks[0]
    assert len(whole.text) > len(b.text) and whole.n_tokens == count_tokens(whole.text)
    assert b.spans[0][2] - b.spans[0][1] == len(code)


def test_folder_mixing_code_markdown_pdf_binary_and_minified(tmp_path):
    src = tmp_path / "mixed"
    (src / "docs").mkdir(parents=True)
    (src / "app.py").write_text(PY)
    (src / "docs" / "guide.md").write_text("# Guide\n\nInstall it.\n\n## Use\n\nRun it.\n")
    make_pdf(src / "docs" / "paper.pdf", [["The paper's first page."], ["Its second page."]])
    (src / "blob.py").write_bytes(b"\x00\x01binary" * 10)
    (src / "bundle.min.js").write_text("function a(){return 1}" * 10)
    (src / "packed.js").write_text("var a=" + "1+" * 2000 + "1;\n")
    (src / "notes.xyz").write_text("unknown type")
    (src / ".git" / "objects").mkdir(parents=True)
    (src / ".git" / "objects" / "ab.py").write_text("x = 1\n")
    (src / "__pycache__").mkdir()
    (src / "__pycache__" / "app.cpython-311.pyc").write_bytes(b"\x00")
    ds = load_folder(src)
    kinds = {d.doc_id: (d.code_language, d.is_markdown) for d in ds.documents}
    assert kinds == {"app.py": ("python", False), "docs/guide.md": ("", True), "docs/paper.pdf": ("", False)}
    skipped = {Path(s.path).name: s.reason for s in ds.skipped if s.kind == "skipped"}
    # unsupported types: one line for the folder, by type ("mixed" is the folder's name)
    assert set(skipped) == {"blob.py", "bundle.min.js", "packed.js", "mixed", ".git", "__pycache__"}
    assert skipped["mixed"] == "1 files of unsupported types skipped: .xyz 1 (e.g. notes.xyz)"
    assert skipped[".git"] == "folder skipped (version control)"  # one line, not walked
    assert "binary" in skipped["blob.py"] and "minified" in skipped["bundle.min.js"] \
        and "minified" in skipped["packed.js"]
    ws = Workspace(tmp_path / "ws")
    summ = ws.ingest(ds, IndexConfig(embedder=EmbedderConfig("hash")), progress=False)
    assert summ.documents == 3 and len(summ.skipped) == 6
    t = ws.table(summ.index, "chunks").to_arrow().to_pandas()
    assert set(t[t.doc_id == "app.py"].kind) == {"module", "function", "class", "method"}
    assert set(t[t.doc_id != "app.py"].code_language) == {""}


def test_questions_in_a_code_folder_get_symbol_and_kind(tmp_path):
    src = tmp_path / "repo"
    src.mkdir()
    (src / "mod.py").write_text(PY)
    qs = [{"id": "q1", "question": "which method returns one?", "answers": ["method"],
           "evidence": [{"doc": "mod.py", "lines": [18, 19]}]},
          {"id": "q2", "question": "what is nested?", "evidence": [{"doc": "mod.py", "text": "def nested():"}]},
          {"id": "q3", "question": "constant?", "kind": "given", "evidence": [{"doc": "mod.py", "lines": [4, 4]}]}]
    (tmp_path / "q.jsonl").write_text("".join(json.dumps(q) + "\n" for q in qs))
    ds = load_folder(src, tmp_path / "q.jsonl")
    q1, q2, q3 = ds.questions
    assert q1.metadata == {"code_language": "python", "file": "mod.py", "symbol": "Outer.method", "kind": "method"}
    assert q1.evidence[0].text == "    def method(self):\n        return 1"
    assert q2.metadata["symbol"] == "Outer.Inner.deep" and q2.metadata["kind"] == "method"
    assert q3.metadata["kind"] == "given" and q3.metadata["symbol"] == ""  # the gold set's own field wins
    (tmp_path / "bad.jsonl").write_text(json.dumps({"id": "b", "question": "?", "evidence": [
        {"doc": "mod.py", "lines": "18-19"}]}) + "\n" + json.dumps({"id": "c", "question": "?", "evidence": [
            {"doc": "mod.py", "lines": [30, 999]}]}) + "\n")
    ds = load_folder(src, tmp_path / "bad.jsonl")
    bad = [s for s in ds.skipped if s.line == 1]
    assert len(bad) == 1 and "'evidence[0].lines' must be [first, last]" in bad[0].reason  # named, line skipped
    (c,) = ds.questions  # out of range: kept at document level, with a warning naming the lines
    assert c.evidence[0].start is None and any("lines [30, 999] out of range" in s.reason for s in ds.skipped)


def _builder():
    spec = importlib.util.spec_from_file_location("build_code_set", ROOT / "scripts" / "build_code_set.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_builder_reproduces_the_shipped_set_on_a_slice():
    b = _builder()
    shipped = json.loads(gzip.decompress((ROOT / "datasets" / "code" / "code-boltons.json.gz").read_bytes()))
    files = ["boltons/strutils.py", "boltons/dictutils.py"]
    got = b.build(b.read_source(), shipped["seed"], files)
    assert got["documents"] == [d for d in shipped["documents"] if d["doc_id"] in files]
    assert got["questions"] == [q for q in shipped["questions"] if q["metadata"]["file"] in files]
    assert len(got["questions"]) > 40
    src = b.read_source()
    for q in got["questions"]:
        doc = next(d["text"] for d in got["documents"] if d["doc_id"] == q["metadata"]["file"])
        name = q["metadata"]["symbol"].split(".")[-1]
        if q["answerable"]:  # the span is the function, with no docstring left in it
            ev = q["evidence"][0]
            assert doc[ev["start"]:ev["end"]] == ev["text"] and f"def {name}(" in ev["text"]
            assert q["text"] not in doc
        else:  # removed from the corpus, present in the source
            assert f"def {name}(" in src[q["metadata"]["file"]]
    assert any(not q["answerable"] for q in got["questions"])
    import ast

    for d in got["documents"]:  # no docstring left anywhere
        for n in ast.walk(ast.parse(d["text"])):
            if isinstance(n, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
                assert ast.get_docstring(n) is None, (d["doc_id"], getattr(n, "name", "module"))


def test_folder_builder_strips_every_doc_comment_as_the_python_set_does(tmp_path):
    """Issue 46: a folder set is built as code-boltons is: every JSDoc block leaves the corpus, not only those that
    made queries (a doc left on a neighbour is prose no query of the set can match, and the TypeScript set kept
    339 of them); a query is the first sentence of the doc's first paragraph (a summary paragraph without a full
    stop ran on into the long description and was dropped as over 40 words)."""
    src = tmp_path / "src"
    src.mkdir()
    (src / "ops.ts").write_text(
        "import { x } from './x';\n\n"
        "/**\n * Converts a higher-order Observable into a first-order Observable\n * producing values\n *\n"
        " * Long description. It goes on for a while.\n * @see other\n */\n"
        "export function switchAll(): number {\n  return 1;\n}\n\n"
        "/** Short. */\nexport function tiny(): number {\n  return 2;\n}\n\n"
        "/**\n * A class whose doc makes no query.\n */\nexport class Box {\n  /** Gets the value held in the box. */\n"
        "  get(): number {\n    return 3;\n  }\n}\n")
    b = _builder()
    files, n = b.folder_set(src, tmp_path / "set", (".ts",))
    qs = [json.loads(x) for x in (tmp_path / "set" / "questions.jsonl").read_text().splitlines()]
    assert (files, n) == (1, 2)
    assert qs[0] == {"id": "ops.ts::switchAll", "question": "Converts a higher-order Observable into a first-order "
                     "Observable producing values", "answers": ["switchAll"],
                     "evidence": [{"doc": "ops.ts", "symbol": "switchAll"}]}
    assert qs[1]["evidence"] == [{"doc": "ops.ts", "symbol": "Box.get"}]
    out = (tmp_path / "set" / "corpus" / "ops.ts").read_text()
    assert "/**" not in out and "*/" not in out and "Short." not in out and "makes no query" not in out
    assert "export function tiny()" in out and "export class Box {" in out and "  get(): number {" in out


def test_folder_builder_asks_a_shared_doc_sentence_once_with_every_definition_gold(tmp_path):
    """Issue 55: fp-ts opens `altW`'s doc with "Less strict version of [`alt`](#alt)." in six modules. Asked once
    per definition, the copies shared one ranked list and at most one could rank first (29% of fp-ts's questions);
    the set now asks the sentence once with every such definition gold, and the scorer credits the first shown."""
    src = tmp_path / "src"
    src.mkdir()
    for mod in ("Option", "Either"):
        (src / f"{mod}.ts").write_text(
            "/**\n * Less strict version of the alternative, widening the result.\n */\n"
            "export function altW(a: number): number {\n  return a;\n}\n\n"
            f"/**\n * Returns the value of this {mod} or a default one.\n */\n"
            "export function getOrElse(a: number): number {\n  return a;\n}\n")
    b = _builder()
    files, n = b.folder_set(src, tmp_path / "set", (".ts",), keep_docs=True)
    qs = [json.loads(x) for x in (tmp_path / "set" / "questions.jsonl").read_text().splitlines()]
    assert (files, n) == (2, 3) and len(qs) == 3
    shared = next(q for q in qs if q["question"].startswith("Less strict"))
    assert shared["evidence"] == [{"doc": "Either.ts", "symbol": "altW"}, {"doc": "Option.ts", "symbol": "altW"}]
    assert shared["answers"] == ["altW"]
    assert sorted(q["question"] for q in qs if q is not shared) == [
        "Returns the value of this Either or a default one.", "Returns the value of this Option or a default one."]
    files, n = b.folder_set(src, tmp_path / "each", (".ts",), keep_docs=True, one_per_definition=True)
    assert n == 4  # the construction before the merge, still there to compare against
    # the merged question loads with both definitions as its evidence (symbol MRR: the first block showing one)
    ds = load_folder(tmp_path / "set" / "corpus", tmp_path / "set" / "questions.jsonl")
    q = next(q for q in ds.questions if q.text.startswith("Less strict"))
    assert sorted(e.doc_id for e in q.evidence) == ["Either.ts", "Option.ts"]


def test_folder_builder_refuses_a_folder_an_earlier_build_left(tmp_path):
    """Issue 65: a set built twice into one --out kept the first build's files beside the second's (rxjs's main
    branch beside 7.8.2, every operator twice). A second build is refused naming what is there; --replace empties
    the corpus first, so only the new source's files remain."""
    old, new = tmp_path / "old", tmp_path / "new"
    for d, name in ((old, "buffer-time.ts"), (new, "bufferTime.ts")):
        d.mkdir()
        (d / name).write_text("/**\n * Buffers the source values for a period of time.\n */\n"
                              "export function bufferTime(n: number): number {\n  return n;\n}\n")
    b = _builder()
    b.folder_set(old, tmp_path / "set", (".ts",))
    with pytest.raises(SystemExit, match=r"already holds 1 file\(s\).*--replace"):
        b.folder_set(new, tmp_path / "set", (".ts",))
    assert sorted(p.name for p in (tmp_path / "set" / "corpus").iterdir()) == ["buffer-time.ts"]  # untouched
    files, n = b.folder_set(new, tmp_path / "set", (".ts",), replace=True)
    assert (files, n) == (1, 1)
    assert sorted(p.name for p in (tmp_path / "set" / "corpus").iterdir()) == ["bufferTime.ts"]
    # the same through the command a user types
    cmd = [sys.executable, str(ROOT / "scripts" / "build_code_set.py"), "--folder", str(old), "--out",
           str(tmp_path / "set"), "--suffix", ".ts"]
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    assert r.returncode != 0 and "already holds 1 file(s)" in r.stderr and "--replace" in r.stderr, r.stderr
    r = subprocess.run(cmd + ["--replace"], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0 and "1 files, 1 questions" in r.stdout, r.stderr
    assert sorted(p.name for p in (tmp_path / "set" / "corpus").iterdir()) == ["buffer-time.ts"]


def test_bundled_code_set_loads_with_function_evidence():
    ds = load_bundled("code-boltons")
    assert len(ds.documents) == 30 and 300 <= len(ds.questions) <= 400 and not ds.skipped
    answerable = [q for q in ds.questions if q.answerable]
    assert {q.metadata["kind"] for q in answerable} == {"function", "method"}
    # every gold span is exactly one function-level chunk's code (or inside it, for split functions)
    doc_chunks = {d.doc_id: chunk_document(d)[0] for d in ds.documents}
    for q in answerable[:60]:
        ev = q.evidence[0]
        syms = {c.symbol for c in doc_chunks[ev.doc_id] if c.start < ev.end and ev.start < c.end}
        assert q.metadata["symbol"] in syms


def test_run_on_the_code_set_breaks_down_by_kind(tmp_path):
    ws = tmp_path / "ws"
    cmd = [sys.executable, "-m", "evals.cli"]
    r = subprocess.run(cmd + ["run", "--dataset", "code-boltons", "--limit", "40", "--embedder", "hash",
                              "--strategies", "chunks,hybrid", "--no-report", "--workspace", str(ws)],
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-2000:]
    r = subprocess.run(cmd + ["show", "latest", "--workspace", str(ws)], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0 and "evidence_mrr@10" in r.stdout and "evidence_ndcg@10" in r.stdout, r.stderr
    r = subprocess.run(cmd + ["show", "latest", "--by", "kind", "--metrics", "evidence_recall", "evidence_mrr@10",
                              "--workspace", str(ws)], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    assert "function" in r.stdout and "method" in r.stdout


def test_evidence_ranking_metrics_by_hand():
    from rag.models import Evidence, Question
    from rag.strategies import Block
    from evals.score.metrics import ScoringInput, score_retrieval

    ev = [Evidence("f.py", "f.py#p0", 100, 200)]
    q = Question("q", "?", ["x"], True, evidence=ev)

    def blk(n, s, e):
        return Block(n, "t", "chunks", ("f.py",), ("f.py#p0",), (f"c{n}",), (("f.py", s, e),), 5, 0.0)

    def scores(blocks):
        out = score_retrieval(ScoringInput(q, blocks, "x"))
        return out["evidence_mrr@10"].value, round(out["evidence_ndcg@10"].value, 6)
    assert scores([blk(1, 0, 50), blk(2, 90, 210), blk(3, 100, 200)]) == (0.5, round(1 / np.log2(3), 6))
    assert scores([blk(1, 100, 200)]) == (1.0, 1.0)
    assert scores([blk(1, 0, 50), blk(2, 150, 300)]) == (0.0, 0.0)  # a part of the function is not the function
    assert scores([]) == (0.0, 0.0)


def test_gate_matches_a_baseline_stored_before_a_budget_existed():
    import pandas as pd

    from evals.analyze.gate import with_point_keys

    old = json.dumps({"top_k": 8, "max_block_chars": 0, "max_context_tokens": 0, "overflow": "truncate",
                      "query_template": "{question}", "search_dim": 0})
    new = json.dumps(json.loads(old) | {"code_block_chars": 1000})
    df = pd.DataFrame({"strategy": ["chunks", "chunks"], "params": [old, new], "point_label": ["d", "d"]})
    keys = with_point_keys(df).point_key
    assert keys.iloc[0] == keys.iloc[1]
    other = json.dumps(json.loads(old) | {"code_block_chars": 500})
    df2 = pd.DataFrame({"strategy": ["chunks"], "params": [other], "point_label": ["x"]})
    assert with_point_keys(df2).point_key.iloc[0] != keys.iloc[0]


def test_a_split_never_leaves_a_whitespace_only_chunk():
    """Issue 38, item 4: a long function whose last statement is cut alone left its trailing blank line as a
    chunk of its own ("\\n"); it now joins the piece before, and the file still rebuilds exactly."""
    from rag.ingest.code import parse_code
    from rag.ingest.code.chunks import code_segments

    text = "def f():\n    x = [\n" + "        1111,\n" * 6 + "    ]\n\n\ndef g():\n    pass\n"
    segs, lines, _ = code_segments(text, parse_code(text, "python"), 40, "o200k_base")
    assert all("".join(lines[s.first:s.last + 1]).strip() for s in segs)
    assert "".join("".join(lines[s.first:s.last + 1]) for s in segs) == text  # back to back, whole
    assert [(s.first, s.last) for s in segs][-1] == (11, 12)


FMT = '''"""Formatting helpers."""


class HelpFormatter:
    """Formats help pages."""

    def write_dl(self, rows, col_max=30):
        """Writes a definition list into the buffer."""
        for first, second in rows:
            self.write(first)
            self.write(second)

    def write_usage(self, prog, args):
        """Writes a usage line."""
        self.write(f"Usage: {prog} {args}")


def wrap_text(text, width=78):
    """Wraps a paragraph to the given width."""
    return [text[i:i + width] for i in range(0, len(text), width)]


def write_dl(rows):
    """Module-level definition list writer."""
    return "\\n".join(f"{a}: {b}" for a, b in rows)
'''


import re  # noqa: E402


def _search(capsys, *args):
    from evals.cli import main

    code = main(["search", *args])
    out = capsys.readouterr()
    return code, out.out, out.err


def test_symbols_are_searchable_filterable_and_looked_at_with_ragwb_search(tmp_path, capsys):
    """Issue 38, 3: the file/kind/symbol breadcrumb is embedded and BM25-indexed, so the qualified name finds its
    method first (BM25 alone: the bare `write_dl` function and the class header hold only half of it); `--where`
    keeps only chunks whose fields match, for `ragwb search` and `ragwb run` alike; a typo is an error."""
    src = tmp_path / "repo"
    src.mkdir()
    (src / "fmt.py").write_text(FMT)
    common = ["--dataset", str(src), "--embedder", "hash", "--workspace", str(tmp_path / "ws"), "--no-progress"]
    code, out, _ = _search(capsys, "HelpFormatter.write_dl", *common, "--set", "alpha=0.0")
    assert code == 0
    ranked = [ln for ln in out.splitlines() if re.match(r"\s*\d+\.\s", ln)]
    assert "fmt.py:7-11 method HelpFormatter.write_dl" in ranked[0], out
    code, out, _ = _search(capsys, "write_dl", *common, "--strategy", "chunks", "--where", "kind=method")
    listed = [ln for ln in out.splitlines() if " chunks " in ln and "fmt.py:" in ln]
    assert code == 0 and listed and all(" method HelpFormatter." in ln for ln in listed), out
    code, _, err = _search(capsys, "x", *common, "--where", "kind=methd")
    assert code == 2 and "kind 'methd' matches no kind; valid: function, method" in err
    code, _, err = _search(capsys, "x", *common, "--where", "colour=red")
    assert code == 2 and "unknown field 'colour'; valid: kind, symbol, file, language" in err
    code, _, err = _search(capsys, "x", *common, "--where", "symbol=Nope*")
    assert code != 0 and "matches no chunk" in err
    # a run: every point searches methods only, and says so in its label
    from evals.cli import main
    from evals.store import ResultStore

    q = tmp_path / "q.jsonl"
    q.write_text(json.dumps({"id": "q1", "question": "Which method writes a definition list?",
                             "answers": ["write_dl"], "evidence": [{"doc": "fmt.py"}]}) + "\n")
    assert main(["run", *common, "--questions", str(q), "--strategies", "chunks,hybrid", "--where", "kind=method",
                 "--run-id", "W", "--no-report"]) == 0
    with ResultStore(tmp_path / "ws" / "results.duckdb", read_only=True) as st:
        rows = st.con.execute("SELECT DISTINCT point_label, blocks FROM results WHERE run_id = 'W'").fetchall()
    assert {r[0] for r in rows} == {"where=kind=method"}
    shown = [c for _, b in rows for blk in json.loads(b) for c in blk["chunk_ids"]]
    assert shown and set(shown) <= {"fmt.py#p0/c2", "fmt.py#p0/c3"}, shown  # the two method chunks only


def test_split_pieces_carry_the_signature_and_fit_the_embedders_window(tmp_path):
    """Issue 38, 2 and 3: a definition longer than e5 reads is cut to fit e5's own tokens (500 o200k tokens of
    code are ~670 e5 tokens), each later piece's breadcrumb names the definition and its signature."""
    from rag.tokens import E5_WINDOW, e5_tokens

    body = "".join(f"    v{i} = compute_value_{i}(alpha_{i}, beta_{i}, gamma={i})  # step {i} of the pipeline\n"
                   for i in range(40))
    text = "def run_pipeline(alpha, beta):\n" + body + "    return v0\n"
    _, fitted, _ = _chunks(tmp_path, "pipe.py", text)
    _, unfitted, _ = _chunks(tmp_path, "pipe.py", text, ChunkConfig(embed_window=0))
    assert max(e5_tokens([c.embed_text for c in unfitted])) > E5_WINDOW  # what e5 used to cut silently
    assert max(e5_tokens([c.embed_text for c in fitted])) <= E5_WINDOW
    # one greedy pass under both budgets: as few pieces as the o200k budget alone, but cut elsewhere
    assert len(fitted) >= len(unfitted) and {c.symbol for c in fitted} == {"run_pipeline"}
    assert [c.line_start for c in fitted] != [c.line_start for c in unfitted]
    assert fitted[0].breadcrumb == "pipe.py · function run_pipeline"
    assert fitted[1].breadcrumb == "pipe.py · function run_pipeline (part 2) · def run_pipeline(alpha, beta):"
    assert rebuild_page(fitted) == text


def test_ingest_says_how_many_chunks_are_longer_than_the_embedder_reads(tmp_path):
    """Issue 38, 2: nothing is cut silently: chunks over e5's 512 tokens are counted and named at ingest."""
    src = tmp_path / "repo"
    src.mkdir()
    (src / "long.py").write_text("def long_one():\n" + "".join(
        f"    value_{i} = transform_{i}(input_{i}, option_{i}={i})  # line {i}\n" for i in range(60)) + "    return 1\n"
        + "\n\ndef short_one():\n    return 2\n")
    ws = Workspace(tmp_path / "ws")
    cfg = IndexConfig(ChunkConfig(leaf_max=2000, parent_max=4000, embed_window=0), EmbedderConfig("e5"))
    summ = ws.ingest(load_folder(src), cfg, progress=False)
    assert summ.over_window == 1 and summ.window == 512
    assert "1 of 2 chunks are longer than the 512 tokens e5 reads: their tails are not embedded (longest: " \
           "long.py#p0/c0 (" in summ.render()
    fitted = ws.ingest(load_folder(src), IndexConfig(ChunkConfig(leaf_max=2000, parent_max=4000),
                                                     EmbedderConfig("e5")), progress=False)
    assert fitted.over_window == 0 and "longer than" not in fitted.render()


def test_folders_gitignore_include_exclude_workspace_shebang_and_one_skip_line(tmp_path, capsys):
    """Issue 38, 5: .gitignore honoured (each below its own folder), --include/--exclude remembered for the
    folder so a later run reads the same files, the workspace inside the folder never ingested, a shebang script
    is code, unsupported types summarised in one line."""
    from evals.cli import main

    repo = tmp_path / "repo"
    for d in ("src", "docs", "build", ".ci", "src/gen"):
        (repo / d).mkdir(parents=True)
    (repo / "src" / "fmt.py").write_text(FMT)
    (repo / ".gitignore").write_text("build/\n*.log\n")
    (repo / "src" / ".gitignore").write_text("gen/\n")
    (repo / "src" / "gen" / "made.py").write_text("def made():\n    return 1\n")
    (repo / "build" / "out.py").write_text("def out():\n    return 1\n")
    (repo / "run.log").write_text("log\n")
    (repo / ".ci" / "run").write_text("#!/usr/bin/env bash\nset -e\nrun_tests() {\n  python -m pytest -q\n}\n")
    for n in ("a.json", "b.json", "c.toml"):
        (repo / n).write_text("{}\n")
    (repo / "docs" / "guide.md").write_text("# Guide\n\nHello there.\n")
    ws = repo / "results"  # the workspace inside the corpus, as `ragwb ingest .` makes it
    common = ["--embedder", "hash", "--workspace", str(ws), "--no-progress"]
    assert main(["ingest", str(repo), *common]) == 0
    out = capsys.readouterr().out
    assert "results: folder skipped (the workspace" in out
    assert "3 files or folders left out by .gitignore" in out  # build/ and run.log; src/gen/ by src/.gitignore
    assert "3 files of unsupported types skipped: .json 2 (e.g. a.json), .toml 1 (e.g. c.toml)" in out
    ds = Workspace(ws).load(str(repo), None, IndexConfig(embedder=EmbedderConfig("hash")))
    assert sorted(d.doc_id for d in ds.documents) == [".ci/run", "docs/guide.md", "src/fmt.py"]
    script = next(d for d in ds.documents if d.doc_id == ".ci/run")
    assert script.code_language == "bash" and [c.symbol for c in chunk_document(script)[0]] == ["", "run_tests"]
    # --exclude docs/ is remembered: a later load (a run, a search) reads the same files
    assert main(["ingest", str(repo), *common, "--exclude", "docs/"]) == 0
    assert "1 files or folders left out by --exclude docs/" in capsys.readouterr().out  # one line per rule
    again = Workspace(ws).load(str(repo), None, IndexConfig(embedder=EmbedderConfig("hash")))
    assert sorted(d.doc_id for d in again.documents) == [".ci/run", "src/fmt.py"]
    assert main(["ingest", str(repo), *common, "--include", "src/**/*.py", "--no-gitignore"]) == 0
    capsys.readouterr()
    only = Workspace(ws).load(str(repo), None, IndexConfig(embedder=EmbedderConfig("hash")))
    assert sorted(d.doc_id for d in only.documents) == ["src/fmt.py", "src/gen/made.py"]


def test_an_unreadable_gitignore_is_said_not_silently_dropped(tmp_path, monkeypatch):
    """A .gitignore over the size cap (or unreadable) leaves nothing out, and the summary says so by name."""
    import rag.ingest.folders as corpora

    repo = tmp_path / "repo"
    repo.mkdir()
    (repo / "a.py").write_text("def a():\n    return 1\n")
    (repo / ".gitignore").write_text("a.py\n" + "# padding\n" * 50)
    monkeypatch.setattr(corpora, "GITIGNORE_MAX_BYTES", 100)
    ds = load_folder(repo)
    assert [d.doc_id for d in ds.documents] == ["a.py"]
    (warn,) = [s for s in ds.skipped if s.kind == "warning"]
    assert warn.path.endswith(".gitignore") and "larger than 100 bytes" in warn.reason
