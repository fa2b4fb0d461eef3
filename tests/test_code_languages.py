"""Issue 75: doc comments attach as each language's own doc tool reads them (Javadoc whose prose has no `*`,
annotations and Rust attributes between a doc and its item, Doxygen, RDoc, godoc), symbols are the names a person
types (no generics), and the ingest counts the documented definitions whose doc sits in another chunk."""
from __future__ import annotations

from pathlib import Path

import pytest

from rag.ingest.chunking import Chunk, ChunkConfig, chunk_document
from rag.index.summary import doc_splits
from rag.ingest.code.docs import doc_block, doc_text
from rag.ingest.readers import load_code_file

JAVA = '''package org.jsoup.nodes;

import java.util.Map;

/**
 A single key + value attribute. (Only used for presentation.)
 */
public class Attribute implements Map.Entry<String, String>, Cloneable  {
    private String key;

    /**
     Get the attribute's key (aka name).
     @return the attribute's key
     */
    @Override
    public String getKey() {
        return key;
    }

    // a plain line comment above a method: in its chunk, never its doc
    public void setKey(String key) {
        this.key = key.trim();
    }

    /**
     * Get the attribute value. Will return an empty string if the value is not set.
     * @return the attribute value
     */
    @Deprecated(
        since = "1.2")
    public String getValue() {
        return val == null ? "" : val;
    }
}
'''

RUST = '''use core::hash::Hash;

impl<K, V> IndexMap<K, V> {
    /// Create a new map. (Does not allocate.)
    #[inline]
    pub fn new() -> Self {
        IndexMap { core: IndexMapCore::new() }
    }

    /// Remove all key-value pairs in the specified range from the map.
    ///
    /// The range may be any type that implements `RangeBounds<usize>`.
    #[track_caller]
    #[must_use]
    pub fn drain(&mut self, range: R) -> Drain<'_, K, V> {
        Drain::new(self.core.drain(range))
    }
}

impl<'a, K, V, S> RawOccupiedEntryMut<'a, K, V, S> {
    /// Gets a reference to the entry's key in the map.
    #[inline]
    #[cfg(any(
        feature = "std",
        test
    ))]
    pub fn key(&self) -> &K {
        &self.inner.key
    }
}
'''

C = '''#include <stdio.h>

/**
 * Parse a header line into its name and value.
 */
int parse_header(const char *line, struct header *out) {
    return split(line, ':', out);
}

/// Free every header of a request.
void free_headers(struct request *r) {
    free(r->headers);
}
'''

RUBY = '''class Router
  # Route a request to the handler registered for its path.
  # Returns nil when no route matches.
  def route(request)
    @routes[request.path]
  end
end
'''

GO = '''package chi

// Handle adds the route `pattern` that matches any http method to
// execute the `handler` http.Handler.
func (mx *Mux) Handle(pattern string, handler http.Handler) {
	mx.handle(mALL, pattern, handler)
}
'''

CASES = {"Attribute.java": (JAVA, {"Attribute.getKey": "Get the attribute's key (aka name).",
                                    "Attribute.getValue": "Get the attribute value."}),
         "set.rs": (RUST, {"IndexMap.new": "Create a new map.", "IndexMap.drain": "Remove all key-value pairs",
                           "RawOccupiedEntryMut.key": "Gets a reference to the entry's key"}),
         "headers.c": (C, {"parse_header": "Parse a header line", "free_headers": "Free every header"}),
         "router.rb": (RUBY, {"Router.route": "Route a request to the handler"}),
         "mux.go": (GO, {"Mux.Handle": "Handle adds the route"})}


def _chunks(text: str, name: str):
    doc = load_code_file(Path(name), name, "en", text)
    return doc, chunk_document(doc, ChunkConfig())[0]


@pytest.mark.parametrize("name", list(CASES))
def test_every_doc_sits_in_its_definitions_chunk_and_no_chunk_is_doc_or_attributes_alone(name):
    text, docs = CASES[name]
    doc, chunks = _chunks(text, name)
    by_symbol = {c.symbol: c for c in chunks if c.kind in ("function", "method")}
    for symbol, first_words in docs.items():
        assert symbol in by_symbol, (symbol, sorted(by_symbol))
        assert first_words in by_symbol[symbol].text, (symbol, by_symbol[symbol].text)
    for c in chunks:
        code = [x for x in c.text.split("\n") if x.strip() and not x.strip().startswith(("//", "/*", "*", "@"))
                and not x.strip().endswith("*/") and not (x.strip().startswith("#") and not name.endswith(".c"))]
        assert code, f"{name}: a chunk with no line of code: {c.text!r}"
        if c.kind == "class":  # an impl or class header never holds the next member's doc
            assert not any(w in c.text for w in docs.values()), c.text
    # the ingest's count: every documented definition has its doc in its own chunk
    documented, split, _ = doc_splits(doc, chunks)
    assert documented == len(docs) and split == 0, (documented, split)


def test_the_doc_a_builder_reads_is_the_languages_doc_never_a_line_comment_or_an_attribute():
    lines = JAVA.split("\n")
    get_key = lines.index("    public String getKey() {")
    assert doc_text(doc_block(lines, get_key - 6, get_key, "java")).strip().split("\n")[0] == \
        "Get the attribute's key (aka name)."
    set_key = lines.index("    public void setKey(String key) {")
    assert doc_block(lines, set_key - 1, set_key, "java") == []  # `//` is not Javadoc
    rs = RUST.split("\n")
    key = rs.index("    pub fn key(&self) -> &K {")
    got = doc_text(doc_block(rs, key - 6, key, "rust"))
    assert got.strip() == "Gets a reference to the entry's key in the map." and "[" not in got
    go = GO.split("\n")
    assert "Handle adds the route" in doc_text(doc_block(go, 2, 4, "go"))


def test_a_doc_split_from_its_signature_is_counted_and_named():
    doc, chunks = _chunks(JAVA, "Attribute.java")
    lines = JAVA.split("\n")
    sig = lines.index("    public String getKey() {") + 1  # 1-based
    cut = []
    for c in chunks:  # the getKey chunk cut in two just above its signature, as the old chunker cut it
        if c.symbol == "Attribute.getKey":
            cut += [Chunk(c.chunk_id + "a", c.doc_id, c.page_id, 0, 0, 0, "", 0, "", line_start=c.line_start,
                          line_end=sig - 2),
                    Chunk(c.chunk_id + "b", c.doc_id, c.page_id, 0, 0, 0, "", 0, "", line_start=sig - 1,
                          line_end=c.line_end)]
        else:
            cut.append(c)
    documented, split, named = doc_splits(doc, cut)
    assert (documented, split) == (2, 1) and named == [f"Attribute.java:{sig} Attribute.getKey"]


def test_rust_symbols_carry_no_generics_and_exact_names_find_them(tmp_path, capsys):
    from evals.cli import main
    from rag.index.code_order import query_names

    _, chunks = _chunks(RUST, "src/map.rs")
    symbols = {c.symbol for c in chunks if c.symbol}
    assert {"IndexMap", "IndexMap.new", "RawOccupiedEntryMut.key"} <= symbols, symbols
    assert not any("<" in s for s in symbols)
    assert "impl<'a, K, V, S> RawOccupiedEntryMut<'a, K, V, S>" in next(
        c.text for c in chunks if c.symbol == "RawOccupiedEntryMut")  # the full signature stays in the text
    assert query_names("RawOccupiedEntryMut::key") == {"RawOccupiedEntryMut.key"}
    src = tmp_path / "crate" / "src"
    src.mkdir(parents=True)
    (src / "map.rs").write_text(RUST)
    assert main(["search", "RawOccupiedEntryMut::key", "--dataset", str(tmp_path / "crate"), "--embedder", "hash",
                 "--workspace", str(tmp_path / "ws"), "--strategy", "chunks"]) == 0
    out = capsys.readouterr().out
    first = next(x for x in out.split("\n") if "RawOccupiedEntryMut" in x)
    assert "RawOccupiedEntryMut.key" in first, out


def _script(name: str):
    import importlib.util

    root = Path(__file__).resolve().parents[1]
    spec = importlib.util.spec_from_file_location(name, root / "scripts" / f"{name}.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


OVERLOADS = '''package org.jsoup.nodes;

public class Element {
    /**
     Find elements that match the supplied query.
     @param query a selector query
     */
    public Elements select(String query) {
        return Selector.select(query, this);
    }

    /**
     Find elements that match the supplied evaluator, in document order.
     */
    public Elements select(Evaluator evaluator) {
        return Selector.select(evaluator, this);
    }

    // Returns the element's tag name, lower-cased: a line comment, never a question
    public String tagName() {
        return tag.getName();
    }
}
'''


def test_the_set_builder_reads_docs_as_the_chunker_does_and_ids_are_unique(tmp_path):
    """Item 3: overloads shared the id `file::Symbol` (`ragwb run` skipped 32 of jsoup's questions as duplicates),
    Rust `#[...]` lines became question text ("... [inline]"), `//` line comments made Java questions, and a
    generated file made held_whole.py raise where the ingest skips it."""
    import json

    build = _script("build_code_set")
    src = tmp_path / "src"
    src.mkdir()
    (src / "Element.java").write_text(OVERLOADS)
    (src / "set.rs").write_text(RUST)
    (src / "EntitiesData.java").write_text("class EntitiesData { static final String points = \""
                                           + "x" * 30000 + "\"; }\n")  # generated: one 30,000-character line
    files, n = build.folder_set(src, tmp_path / "set", (".java", ".rs"), keep_docs=True, one_per_definition=True)
    qs = [json.loads(x) for x in (tmp_path / "set" / "questions.jsonl").read_text().splitlines()]
    ids = [q["id"] for q in qs]
    assert len(ids) == len(set(ids)) == n and files == 2  # the generated file skipped as the ingest skips it
    texts = {q["id"]: q["question"] for q in qs}
    assert texts["Element.java::Element.select"] == "Find elements that match the supplied query."
    assert any(i.startswith("Element.java::Element.select@") for i in ids)  # the overload, told apart by its line
    assert not any("tagName" in i for i in ids)  # a `//` line comment is not Javadoc
    assert not any("[" in t for t in texts.values()), texts  # no attribute line in a question
    assert texts["set.rs::RawOccupiedEntryMut.key"] == "Gets a reference to the entry's key in the map."
    held = _script("held_whole").held_whole(src, (".java", ".rs"))
    assert held["implementations"] >= 5 and held["whole"] == 1.0, held
