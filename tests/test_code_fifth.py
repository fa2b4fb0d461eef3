"""Code, fifth pass (issue 86): C through its macros (every function its symbol, a gap that names its construct),
bodiless struct uses and prototypes, and names as people type them (any qualified suffix, Ruby's ? and ! kept)."""

from rag.ingest.code import parse_code
from rag.index.code_order import query_names
from test_code_symbols import _search_order

HEADER = """/** Open a device and obtain a handle.
 * \\param dev the device to open
 */
int LIBUSB_CALL libusb_open(libusb_device *dev, libusb_device_handle **dev_handle);

#define API_EXPORTED __attribute__((visibility("default")))
API_EXPORTED int libusb_close(libusb_device_handle *h)
{
	return 0;
}

const struct libusb_version * LIBUSB_CALL libusb_get_version(void);

static void __attribute__((unused)) helper(int x)
{
	(void)x;
}

LIBUSB_DEPRECATED_FOR(libusb_init_context) int libusb_init(libusb_context **ctx)
{
	return 1;
}

struct libusb_device_handle;
typedef struct libusb_context libusb_context;
void LIBUSB_CALL libusb_exit(libusb_context *ctx);
"""
FUNCTIONS = {"libusb_open", "libusb_close", "libusb_get_version", "helper", "libusb_init", "libusb_exit"}


def test_c_through_its_macros_gives_every_function_its_symbol():
    p = parse_code(HEADER, "c")
    got = {d.name: d.kind for d in p.defs}
    assert set(got) == FUNCTIONS and set(got.values()) == {"function"}, got  # no "Type: libusb_device_handle"
    assert p.warning == "", p.warning
    opened = next(d for d in p.defs if d.name == "libusb_open")
    assert opened.first == 0  # its doc comment with it
    # without the macro pass the grammar breaks at the first LIBUSB_CALL: the test can fail
    import tree_sitter_language_pack as tsl

    assert tsl.get_parser("c").parse(HEADER.encode()).root_node.has_error


def test_a_grammar_gap_names_its_construct():
    p = parse_code("int ok(void) { return 0; }\nint broken( { ]]]\nint after(void) { return 1; }\n", "c")
    import re

    line = int(re.match(r"grammar gap at line (\d+) \((.+?)\): ", p.warning).group(1))
    assert p.warning.split("(", 1)[1].startswith(["int ok(void)", "int broken(", "int after("][line - 1]), p.warning


def test_names_as_people_type_them(tmp_path, capsys):
    repo = tmp_path / "rack"
    repo.mkdir()
    (repo / "request.rb").write_text(
        "module Rack\n  class Request\n    module Helpers\n"
        "      # Whether the request is a PUT.\n      def put?\n        request_method == 'PUT'\n      end\n\n"
        "      # The request was not found.\n      def not_found?\n        status == 404\n      end\n\n"
        "      # Mark the request as not found.\n      def not_found\n        @status = 404\n      end\n\n"
        "      # Stop the request now.\n      def halt!\n        throw :halt\n      end\n"
        "    end\n  end\nend\n")
    assert query_names("put?") == {"put?"} and query_names("Helpers#put?") == {"Helpers.put?"}
    assert query_names("What does Command.get_help?") == {"Command.get_help?"}  # read without it when needed
    common = ["--dataset", str(repo), "--workspace", str(tmp_path / "ws"), "--embedder", "hash", "--no-progress",
              "--strategy", "chunks"]
    for typed in ("put?", "Helpers#put?", "Request.put?", "Rack::Request::Helpers#put?", "Request::Helpers.put?"):
        got = _search_order([typed, *common], capsys)
        assert got[0].endswith("Rack.Request.Helpers.put?"), (typed, got)
    got = _search_order(["not_found?", *common], capsys)
    assert got[0].endswith("Rack.Request.Helpers.not_found?"), got  # the ? is part of the name
    got = _search_order(["Helpers.not_found", *common], capsys)
    assert got[0].endswith("Rack.Request.Helpers.not_found"), got
    got = _search_order(["halt!", *common], capsys)
    assert got[0].endswith("Rack.Request.Helpers.halt!"), got


IO_C = """/**
 * \\page libusb_io Synchronous and asynchronous device I/O
 *
 * libusb offers two separate interfaces for device I/O.
 *
 * \\code
 * unsigned char data[4];
 * int r = libusb_bulk_transfer(handle, LIBUSB_ENDPOINT_IN, data, sizeof(data), &n, 0);
 * \\endcode
 */

/** Initialise the I/O of a context.
 * \\param ctx the context
 */
int usbi_io_init(struct libusb_context *ctx)
{
	return 0;
}
"""


def test_a_doxygen_page_is_a_doc_chunk_of_its_own_and_the_function_keeps_its_own_doc():
    """Issue 86, 4: io.c's `\\page` block was attached to `usbi_io_init` (its `\\code` example shown as code)."""
    from test_code_languages import _chunks

    doc, chunks = _chunks(IO_C, "io.c")
    page = [c for c in chunks if "\\page libusb_io" in c.text]
    assert len(page) == 1 and page[0].kind == "doc" and "usbi_io_init(" not in page[0].text, page
    fn = next(c for c in chunks if c.symbol == "usbi_io_init")
    assert "Initialise the I/O of a context." in fn.text and "\\page" not in fn.text
    # directly above the function, with no doc of its own between them: still not the function's doc
    doc2, chunks2 = _chunks(IO_C.replace("/** Initialise the I/O of a context.\n * \\param ctx the context\n */\n",
                                         ""), "io2.c")
    fn2 = next(c for c in chunks2 if c.symbol == "usbi_io_init")
    assert "\\page" not in fn2.text and any(c.kind == "doc" for c in chunks2)
    assert "".join(c.text for c in sorted(chunks2, key=lambda c: c.chunk_index)) == doc2.text  # rebuilds exactly


def _long_rust_fn() -> str:
    doc = "".join(f"    /// Line {i} of the doc that explains what parse_value reads and returns.\n" for i in range(6))
    body = "".join(f"        let v{i} = input.read_token({i}).unwrap_or_default();\n" for i in range(160))
    return ("impl Parser {\n" + "    /// Parse a JSON value from the reader and return it whole.\n" + doc
            + "    #[inline]\n    #[must_use]\n    pub fn parse_value(&mut self, input: &mut Reader) -> Value {\n"
            + body + "        Value::Null\n    }\n}\n")


def test_a_split_definition_keeps_its_doc_with_its_signature_and_the_count_sees_it():
    """Issue 86, 3: a definition cut for size had its doc in a piece of its own (no code line), its later pieces
    showing `#[inline]` as the code it documents, and the ingest's count left split definitions out (it said 0)."""
    from rag.ingest.chunking import Chunk
    from rag.index.summary import doc_splits
    from test_code_languages import _chunks

    doc, chunks = _chunks(_long_rust_fn(), "src/parser.rs")
    pieces = sorted((c for c in chunks if c.symbol.endswith("parse_value")), key=lambda c: c.line_start)
    assert len(pieces) >= 2, [(c.symbol, c.line_start, c.line_end) for c in chunks]
    first = pieces[0].text
    assert "Parse a JSON value from the reader" in first and "pub fn parse_value(" in first  # doc and signature
    assert "let v0 = " in first  # and the body's first statements: no piece of doc alone
    for p in pieces[1:]:  # a later piece names the signature, never an attribute, as the code it belongs to
        assert "pub fn parse_value(" in p.breadcrumb and "#[inline]" not in p.breadcrumb, p.breadcrumb
    documented, split, _ = doc_splits(doc, chunks)
    assert documented == 1 and split == 0
    # the count now reads split definitions too: the same pieces with the doc cut off alone are counted, named
    sig = next(i for i, x in enumerate(doc.text.split("\n")) if "pub fn parse_value(" in x)
    cut = [Chunk("a", doc.doc_id, "", 0, 0, 0, "", 0, "", symbol=pieces[0].symbol, line_start=pieces[0].line_start,
                 line_end=sig - 1),
           Chunk("b", doc.doc_id, "", 1, 0, 0, "", 0, "", symbol=pieces[0].symbol, line_start=sig,
                 line_end=pieces[0].line_end)] + [c for c in chunks if c is not pieces[0]]
    documented, split, named = doc_splits(doc, cut)
    assert split == 1 and named and "parse_value" in named[0], named


RUST_IMPL = """use serde::de;
use std::fmt;

pub struct RawValue {
    json: Box<str>,
}

impl<'de> de::Deserialize<'de> for &'de RawValue {
    type Value = &'de RawValue;
    type Error = de::Error;

    fn deserialize<D>(deserializer: D) -> Result<Self, D::Error>
    where
        D: de::Deserializer<'de>,
    {
        deserializer.deserialize_newtype_struct(TOKEN, ReferenceVisitor)
    }
}
"""


def _shape(chunks):
    return [(c.kind, c.symbol, c.line_start, c.line_end) for c in sorted(chunks, key=lambda c: c.chunk_index)]


def test_no_tiny_chunk_stands_alone_in_c_and_rust_and_the_file_rebuilds():
    """Issue 86, 2: one- and two-line chunks ranked first (C prototypes indexed alone, Rust associated types and
    impl headers). A header's prototypes join the run around them; an associated type joins its impl's header;
    every function still has its symbol in the parse; the file rebuilds exactly."""
    from test_code_languages import _chunks

    doc, chunks = _chunks(HEADER, "libusb.h")
    tiny = [c for c in chunks if sum(1 for x in c.text.split("\n") if x.strip()) <= 2]
    assert not tiny, _shape(chunks)
    assert "".join(c.text for c in sorted(chunks, key=lambda c: c.chunk_index)) == HEADER
    assert {d.name for d in parse_code(HEADER, "c").defs} == FUNCTIONS  # the parse names every function
    # the prototypes run keeps a name; the definitions with bodies keep theirs
    syms = {c.symbol for c in chunks}
    assert {"libusb_close", "helper", "libusb_init"} <= syms and "libusb_open" in syms, _shape(chunks)

    doc, chunks = _chunks(RUST_IMPL, "src/raw.rs")
    assert "".join(c.text for c in sorted(chunks, key=lambda c: c.chunk_index)) == RUST_IMPL
    holder = next(c for c in chunks if "type Value = &'de RawValue;" in c.text)
    assert "impl<'de> de::Deserialize<'de> for &'de RawValue {" in holder.text, _shape(chunks)
    assert "type Error = de::Error;" in holder.text
    assert not [c for c in chunks if c.kind == "type" and sum(1 for x in c.text.split("\n") if x.strip()) <= 2]
    assert any(c.symbol.endswith("deserialize") for c in chunks)  # the method keeps its own chunk and name


def test_python_keeps_its_chunks_as_measured():
    """Tiny chunks merge only where they ranked first (C, C++, Rust): a Python module's one-line statement stays its
    own chunk (the bundled code set's shipped vectors still cover every chunk)."""
    from test_code_languages import _chunks

    text = "def a():\n    return 1\n\n\nX = 2\n\n\ndef b():\n    return 3\n"
    _, chunks = _chunks(text, "m.py")
    assert any(c.text.strip() == "X = 2" for c in chunks), _shape(chunks)


def test_the_ingest_says_the_code_chunks_sizes(tmp_path, capsys):
    """Issue 86, 2: the ingest summary says the size distribution of the code chunks (none of one or two lines in a
    C header whose prototypes merged)."""
    from evals.cli import main

    repo = tmp_path / "usb"
    repo.mkdir()
    (repo / "libusb.h").write_text(HEADER)
    (repo / "io.c").write_text(IO_C)
    assert main(["ingest", str(repo), "--embedder", "hash", "--workspace", str(tmp_path / "ws")]) == 0
    out = capsys.readouterr()
    line = next(x for x in (out.out + out.err).splitlines() if "code chunks by non-blank lines:" in x)
    assert "1-2 0 (0%)" in line and "3-10 " in line, line


def test_a_doc_chunk_and_a_parent_that_is_one_say_they_are_documentation(tmp_path, capsys):
    """Issue 86, 4: a file's long introduction (a banner no definition took) is a `doc` chunk; its block, and a
    parent_child parent of nothing but it, say "Documentation (of no definition)", never read as code (one such
    parent was the held-out table's one codeless top-10 block in 19,795)."""
    from evals.cli import main
    from rag.ingest.code.blocks import DOC_LABEL

    repo = tmp_path / "scan"
    repo.mkdir()
    intro = "/*\n * Introduction\n *\n" + "".join(f" * Note {i}: the scanner reads tokens of a YAML stream one "
                                                  "by one.\n" for i in range(160)) + " */\n\n"
    (repo / "scanner.c").write_text(intro + "int yaml_scan(int x)\n{\n\treturn x + 1;\n}\n")
    for strategy in ("chunks", "parent_child"):
        assert main(["search", "Note 3: the scanner reads tokens of a YAML stream", "--dataset", str(repo),
                     "--embedder", "hash", "--workspace", str(tmp_path / "ws"), "--strategy", strategy,
                     "--no-progress"]) == 0
        out = capsys.readouterr().out
        assert DOC_LABEL in out and " doc " in out, out
