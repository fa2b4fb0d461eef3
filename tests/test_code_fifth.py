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
