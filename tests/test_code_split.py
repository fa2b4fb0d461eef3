"""Issue 46, items 1 and 6: a long definition is cut where the language does (between overloads and the
implementation, between statements), its doc comment stays with its signature, no cut falls inside a comment,
later pieces carry the implementation's signature, and no chunk's embedded text is longer than e5 reads."""
from __future__ import annotations

from rag.ingest.chunking import ChunkConfig, chunk_document
from rag.ingest.readers import load_code_file
from rag.tokens import e5_tokens

JSDOC = "\n".join(["/**", " * Applies a given `project` function to each value emitted by the source", " *"]
                  + [f" * Example {i}: map(x => x * {i}) turns 1, 2, 3 into {i}, {2 * i}, {3 * i} for the reader."
                     for i in range(8)] + [" */"])
STEPS = "\n".join(f"  const step{i} = scheduleStep(index + {i}, source, subscriber, project);" for i in range(12))
MAP_TS = f"""import {{ OperatorFunction }} from '../types';

export function map<T, R>(project: (value: T, index: number) => R): OperatorFunction<T, R>;
/** @deprecated Use a closure instead of a `thisArg`. */
export function map<T, R, A>(project: (this: A, value: T, index: number) => R, thisArg: A): OperatorFunction<T, R>;

{JSDOC}
export function map<T, R>(project: (value: T, index: number) => R, thisArg?: any): OperatorFunction<T, R> {{
  // count the values as they pass
  let index = 0;
{STEPS}
  return operate((source, subscriber) => {{
    source.subscribe(
      createOperatorSubscriber(subscriber, (value: T) => {{
        subscriber.next(project.call(thisArg, value, index++));
      }})
    );
  }});
}}

export function other(): number {{
  return 1;
}}
"""


def _chunks(text: str, name: str = "src/operators/map.ts", **cfg):
    doc = load_code_file(__import__("pathlib").Path(name), name, "en", text)
    return chunk_document(doc, ChunkConfig(**cfg))[0], text.split("\n")


def test_overloads_doc_and_body_are_cut_where_typescript_does():
    chunks, lines = _chunks(MAP_TS)
    maps = [c for c in chunks if c.symbol == "map"]
    assert len(maps) >= 2, [(c.line_start, c.line_end) for c in chunks]
    doc_start = lines.index("/**") + 1  # 1-based
    sig = next(i for i, x in enumerate(lines, 1) if x.startswith("export function map<T, R>(project: (value: T, index: number) => R, thisArg"))
    # the overloads stand apart (kind "overload": not the definition's evidence); the implementation's doc comment
    # starts a piece, and that piece holds the signature and the body's first statements, the rest of the body after
    # it (issue 86, 3: a doc piece with no code line answered its doc's question; a body this long is cut, where
    # a one- or two-line body stays whole with its signature: issue 65, 2, tests/test_code_docs.py)
    assert maps[0].line_start == 3 and maps[0].line_end < doc_start and maps[0].kind == "overload"
    holder = next(c for c in maps if c.line_start <= doc_start <= c.line_end)
    assert holder.line_start == doc_start and holder.line_end > sig, [(c.line_start, c.line_end) for c in maps]
    end = next(i for i in range(sig, len(lines) + 1) if lines[i - 1] == "}")
    assert max(c.line_end for c in maps) >= end
    # no piece starts inside the comment
    for c in chunks:
        assert not (doc_start < c.line_start <= doc_start + JSDOC.count("\n")), (c.line_start, c.line_end)
    # a piece of the body carries the implementation's signature, not the first overload's
    later = [c for c in maps if c.line_start > doc_start]
    assert all(lines[sig - 1].strip()[:60] in c.breadcrumb for c in later), [c.breadcrumb for c in maps]
    assert all("thisArg?: any" in c.breadcrumb for c in maps[1:])
    # the comment in the body goes with the statement below it
    comment = next(i for i, x in enumerate(lines, 1) if "count the values" in x)
    assert not any(c.line_start == comment + 1 for c in chunks)
    # whole lines back to back: the file rebuilds exactly
    assert "".join(c.text for c in sorted(chunks, key=lambda c: c.chunk_index)) == MAP_TS


def test_an_implementation_that_fits_lies_whole_in_one_chunk_beside_its_overloads():
    small = MAP_TS.replace(JSDOC, "/** Applies `project` to each value. */")
    chunks, lines = _chunks(small)
    sig = next(i for i, x in enumerate(lines, 1) if "thisArg?: any" in x)
    last = next(i for i in range(sig, len(lines)) if lines[i - 1] == "}")
    assert any(c.line_start <= sig - 1 and last <= c.line_end for c in chunks)  # doc + signature + body


def test_no_chunk_is_longer_than_e5_reads_with_its_breadcrumb():
    """Item 6: the breadcrumb's room is counted per definition; a long TypeScript signature (carried by every
    later piece) used to push chunks to 541 e5 tokens."""
    long_sig = ("export function combineLatestWith<A extends readonly unknown[], B, C, D, E, F, G>("
                + ", ".join(f"other{i}: ObservableInputTuple<A>[{i}] | Promise<Array<ReadonlyArray<{i}>>>" for i in range(12))
                + "): OperatorFunction<A, Cons<B, A>> {")
    body = "\n".join(f"  const value{i} = source.pipe(combineAll(other{i % 12}, project, scheduler, {i}));" for i in range(90))
    text = long_sig + "\n" + body + "\n  return value0;\n}\n"
    chunks, _ = _chunks(text, "src/a/very/deeply/nested/folder/of/operators/combineLatestWith.ts")
    assert len(chunks) > 2
    counts = e5_tokens([c.embed_text for c in chunks])
    assert max(counts) <= 512, counts
    assert all("(part " in c.breadcrumb for c in chunks[1:])


def test_python_docstring_stays_with_its_signature():
    doc = '    """' + " ".join(f"word{i}" for i in range(120)) + '\n    more words\n    """\n'
    body = "".join(f"    x{i} = compute({i}, 'a fairly long argument string to spend tokens')\n" for i in range(40))
    text = "def big(a, b):\n" + doc + body + "    return a\n"
    chunks, lines = _chunks(text, "pkg/big.py")
    first = chunks[0]
    assert first.line_start == 1 and first.line_end >= 2  # the signature and the docstring's start together
    assert all("def big(a, b):" in c.breadcrumb for c in chunks[1:])


def test_the_block_cut_gives_up_comments_before_code(tmp_path):
    """Item 2: code_block_chars used to be taken from the top, so a long docstring ate it; comments go first now,
    the header says what was left out, and the block's spans are the lines shown."""
    from rag.index.retrieval import Retriever
    from rag.index.workspace import IndexConfig, Workspace
    from rag.index.embedders import EmbedderConfig
    from rag.strategies import get_strategy, make_params

    doc = "".join(f"    Explains the parsing rules in detail, part {i} of the long docstring.\n" for i in range(20))
    text = ('def parse_header(raw):\n    """Parse one header line.\n\n' + doc + '    """\n'
            "    # split once: values may hold colons\n"
            "    name, _, value = raw.partition(':')\n    return name.strip().lower(), value.strip()\n")
    repo = tmp_path / "repo"
    repo.mkdir()
    (repo / "hdr.py").write_text(text)
    ws = Workspace(tmp_path / "ws")
    cfg = IndexConfig(embedder=EmbedderConfig(name="hash"))
    ds = ws.load(str(repo), None, cfg, progress=False)
    r = Retriever(ws, ws.ingest(ds, cfg, progress=False).index)

    def block(**kw):
        ctx = get_strategy("chunks").retrieve(r, "parse_header", make_params("chunks", code_block_chars=400, **kw))
        return next(b for b in ctx.blocks if "parse_header" in b.text)
    b = block()
    assert "def parse_header(raw):" in b.text and "return name.strip().lower()" in b.text
    assert "long docstring" not in b.text and "comment lines left out" in b.text.splitlines()[0]
    for d, s, e in b.spans:  # the spans are exactly the lines shown
        assert text[s:e].rstrip("\n") in b.text
    top = block(code_cut="top")
    assert "long docstring" in top.text and "return name" not in top.text
    assert "cut at 400 characters" in top.text.splitlines()[0]
