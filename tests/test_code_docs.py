"""Issue 65: a doc comment belongs to its definition across a blank line (as TypeDoc and rustdoc read it; godoc and
`#` comments need none between), a definition whose code fits keeps signature and body in one piece, a section
banner or licence header is never a chunk of its own, a function's evidence is its implementation (never the
overload signatures above it), and a code parent block carries the header chunks' blocks carry."""
from __future__ import annotations

import json
from pathlib import Path

from rag.ingest.chunking import ChunkConfig, chunk_document
from rag.ingest.folders import load_folder
from rag.ingest.readers import load_code_file

from test_code_split import MAP_TS

SUPERSTRUCT_STYLE = """/* TYPES */

/**
 * Ensure that a value is an integer.
 */

export function integer(): Struct<number, null> {
  return define('integer', (value) => Number.isInteger(value))
}

/**
 * Ensure that a value is a string.
 */


export function string(): Struct<string, null> {
  return define('string', (value) => typeof value === 'string')
}

/**
 * Copyright (c) the authors. MIT license.
 */

export function never(): Struct<never, null> {
  return define('never', () => false)
}

/** NOTIFICATIONS */

// a section comment, a blank line above the definition

export function number(): Struct<number, null> {
  return define('number', (value) => typeof value === 'number')
}
"""


def _chunks(text: str, name: str):
    doc = load_code_file(Path(name), name, "en", text)
    return chunk_document(doc, ChunkConfig())[0]


def test_a_doc_comment_a_blank_line_above_belongs_to_its_definition_and_no_chunk_is_comment_only():
    chunks = _chunks(SUPERSTRUCT_STYLE, "src/types.ts")
    lines = SUPERSTRUCT_STYLE.split("\n")
    by = {c.symbol: c for c in chunks if c.symbol}
    # JSDoc one blank line above: one chunk from the comment to the closing brace (the file's first banner, a
    # comment alone, joins it rather than standing as a chunk)
    assert "/**\n * Ensure that a value is an integer.\n */\n\nexport function integer()" in by["integer"].text
    assert by["integer"].text.rstrip().endswith("}") and by["integer"].text.startswith("/* TYPES */")
    # two blank lines still attach (MAX_DOC_GAP); the chunk holds the doc and the code
    assert "Ensure that a value is a string." in by["string"].text and "typeof value === 'string'" in by["string"].text
    # a licence comment documents the file, never the definition: it is not its doc (not in its evidence) ...
    from rag.ingest.code import all_defs, parse_code

    defs = {d.name: d for d in all_defs(parse_code(SUPERSTRUCT_STYLE, "typescript").defs)}
    assert defs["never"].first == lines.index("export function never(): Struct<never, null> {")
    assert defs["integer"].first == lines.index("/**")  # ... where the JSDoc a blank line above is
    # ... and no chunk is comment-only: every chunk shows a line of code (banners, licences joined to what follows)
    for c in chunks:
        code = [x for x in c.text.split("\n") if x.strip() and not x.strip().startswith(("/*", "*", "//"))]
        assert code, c.text
    assert "".join(c.text for c in sorted(chunks, key=lambda c: c.chunk_index)) == SUPERSTRUCT_STYLE  # whole file
    # a `//` comment with a blank line below it stays apart from the definition's doc (godoc's rule), yet joins the
    # chunk after it rather than standing alone
    assert any("a section comment" in c.text and "export function number" in c.text for c in chunks)


def test_rust_doc_lines_attach_across_a_blank_line_and_go_doc_comments_do_not():
    rust = "/// Adds one to the number.\n/// Wraps at the maximum.\n\npub fn add_one(x: u8) -> u8 {\n    x.wrapping_add(1)\n}\n"
    by = {c.symbol: c for c in _chunks(rust, "src/lib.rs") if c.symbol}
    assert by["add_one"].text.startswith("/// Adds one to the number.")
    go = "package m\n\n// Detached is not the doc of F (a blank line between, as godoc reads it).\n\nfunc F() int {\n\treturn 1\n}\n"
    by = {c.symbol: c for c in _chunks(go, "m.go") if c.symbol}
    assert by["F"].text.startswith("func F()")


def test_a_definition_whose_code_fits_keeps_signature_and_body_together():
    """rxjs's exhaustAll: a long doc, a one-line body. Was [doc][doc tail + signature][body alone]."""
    doc = "\n".join(["/**", " * Converts a higher-order Observable into a first-order Observable."] + [
        f" * Paragraph {k}: " + "words of the documentation " * 6 + "\n *" for k in range(30)] + [" */"])
    text = (f"import {{ exhaustMap }} from './exhaustMap';\n\n{doc}\n"
            "export function exhaustAll<O extends ObservableInput<any>>(): OperatorFunction<O, ObservedValueOf<O>> {\n"
            "  return exhaustMap(identity);\n}\n")
    chunks = [c for c in _chunks(text, "src/exhaustAll.ts") if c.symbol == "exhaustAll"]
    assert len(chunks) >= 2  # over e5's window: split
    code = next(c for c in chunks if "export function exhaustAll" in c.text)
    assert "return exhaustMap(identity);" in code.text and code.text.rstrip().endswith("}")
    # the code piece carries as much of its doc as fits; the doc above it is cut at a paragraph, carrying the
    # signature in its breadcrumb
    assert code.text.startswith(" * Paragraph ") and code.text.count(" * Paragraph ") >= 5
    top = chunks[0]
    assert top is not code and "exhaustAll<O extends ObservableInput<any>>" in top.breadcrumb


def test_a_functions_evidence_is_its_implementation_never_its_overload_signatures(tmp_path):
    repo = tmp_path / "repo"
    (repo / "src").mkdir(parents=True)
    (repo / "src" / "map.ts").write_text(MAP_TS)
    q = tmp_path / "q.jsonl"
    q.write_text(json.dumps({"question": "Applies a given project function", "answers": ["map"],
                             "evidence": [{"doc": "src/map.ts", "symbol": "map"}]}) + "\n")
    ds = load_folder(repo, q)
    ev = ds.questions[0].evidence[0]
    shown = MAP_TS[ev.symbol_start:ev.symbol_end]
    assert shown.startswith("/**\n * Applies a given `project`") and "thisArg: A): OperatorFunction<T, R>;" not in shown
    chunks = _chunks(MAP_TS, "src/map.ts")
    over = [c for c in chunks if c.kind == "overload"]
    assert over and all(c.end <= ev.symbol_start for c in over)  # an overload piece shows no line of the evidence
    from rag.ingest.code.blocks import code_header

    assert "Overload signatures of: map" in code_header("src/map.ts", "typescript", "map", "overload", (3, 5))


def test_a_code_parent_block_carries_the_file_header(tmp_path, capsys):
    from evals.cli import main

    repo = tmp_path / "repo"
    repo.mkdir()
    (repo / "m.py").write_text("class Box:\n    def size(self):\n        return 3\n\n    def name(self):\n"
                               "        return 'box'\n")
    q = tmp_path / "q.jsonl"
    q.write_text(json.dumps({"question": "size of the box", "evidence": [{"doc": "m.py", "symbol": "Box.size"}]}) + "\n")
    ws = tmp_path / "ws"
    assert main(["run", "--dataset", str(repo), "--questions", str(q), "--workspace", str(ws), "--embedder", "hash",
                 "--strategies", "parent_child", "--no-report", "--no-progress", "--run-id", "P"]) == 0
    import duckdb

    con = duckdb.connect(str(ws / "results.duckdb"), read_only=True)
    (blocks,) = con.execute("SELECT blocks FROM results WHERE run_id = 'P'").fetchone()
    con.close()
    text = json.loads(blocks)[0]["text"]
    assert text.startswith("File: m.py (lines 1-6)\nLanguage: python\nClass: Box\n```python\nclass Box:"), text
