"""Source code as a corpus: which files are code, and their definitions (functions, methods,
classes) found by a parser from the registry ``PARSERS``.

* ``tree-sitter`` (rag/ingest/code/treesitter.py): compiled grammars from ``tree-sitter-language-pack``
  for Python, JavaScript, TypeScript/TSX, Go, Java, Rust, C, C++, Ruby and shell.
* ``python-ast`` (rag/ingest/code/python_ast.py): Python's own ``ast``, the floor when the grammars are
  not installed.
* ``lines``: no parser (a grammar missing, or a file with nothing readable): the chunker falls back
  to line windows and the file gets a warning naming it. A syntax error tree-sitter reads around keeps
  every definition outside the broken region; only that region gets line windows (warned, with the count
  kept). A parser returns ``list[Def]``, or ``(list[Def], note)`` when it read around an error.

A definition (``Def``) is a whole-line range: chunks are cut at line starts, never mid-line. The
chunker (rag/ingest/code/chunks.py) turns the definitions into function-level chunks; docs/datasets.md
("Code") documents the model: a page is a file, a parent the enclosing class or the file.
"""
from __future__ import annotations

import functools
import re
from pathlib import Path

from .base import _COMMENT_LINE, PARSERS, CodeParse, CodeParseError, Def, register_parser  # noqa: F401

# extension -> language (the tree-sitter grammar name)
LANGUAGES = {
    ".py": "python", ".pyi": "python",
    ".js": "javascript", ".mjs": "javascript", ".cjs": "javascript", ".jsx": "javascript",
    ".ts": "typescript", ".mts": "typescript", ".cts": "typescript", ".tsx": "tsx",
    ".go": "go", ".java": "java", ".rs": "rust",
    ".c": "c", ".h": "c", ".cc": "cpp", ".cpp": "cpp", ".cxx": "cpp", ".hpp": "cpp", ".hh": "cpp", ".hxx": "cpp",
    ".rb": "ruby", ".sh": "bash", ".bash": "bash",
}
CODE_SUFFIXES = tuple(LANGUAGES)
# what a code chunk can be; "overload": a piece of nothing but a function's overload signatures (not its evidence)
# "doc": documentation of no definition (a Doxygen \page or @defgroup block, a long banner), prose of its own
KINDS = ("function", "method", "class", "type", "module", "imports", "lines", "stub", "overload", "doc")
STUB_SUFFIXES = (".pyi", ".d.ts", ".d.mts", ".d.cts")  # declarations only: every chunk of one is kind "stub"


def is_stub(path: str | Path) -> bool:
    """A type stub (.pyi) or a TypeScript declaration file (.d.ts): signatures with no implementation."""
    return str(path).lower().endswith(STUB_SUFFIXES)

# minified or generated: one of these and the file is skipped (counted, named) rather than chunked
MINIFIED_LINE_CHARS = 1000  # a line this long in a file of few lines ...
MINIFIED_MEAN_LINE_CHARS = 300  # ... or lines this long on average


# a script with no extension names its interpreter on its first line (`#!/usr/bin/env bash`, `.ci/run`)
SHEBANGS = {"python": "python", "python3": "python", "bash": "bash", "sh": "bash", "zsh": "bash", "dash": "bash",
            "node": "javascript", "ruby": "ruby"}


def shebang_language(path: str | Path) -> str:
    """The language a file without an extension declares on its ``#!`` line ('' when none, or not readable)."""
    p = Path(str(path))
    if p.suffix:
        return ""
    try:
        with open(p, "rb") as f:
            first = f.readline(200)
    except OSError:
        return ""
    if not first.startswith(b"#!"):
        return ""
    words = first[2:].decode("utf-8", "replace").split()
    if words and words[0].endswith("/env"):
        words = [w for w in words[1:] if not w.startswith("-")]
    name = Path(words[0]).name if words else ""
    return SHEBANGS.get(name, SHEBANGS.get(name.rstrip("0123456789."), ""))


def code_language(path: str | Path) -> str:
    """The language of a source file by its extension, or by its ``#!`` line when it has none ('' when the file
    is not code)."""
    return LANGUAGES.get(Path(str(path)).suffix.lower(), "") or shebang_language(path)


def minified_reason(path: str | Path, text: str) -> str | None:
    """Why a source file looks minified or generated (then it is skipped), else None."""
    name = Path(str(path)).name.lower()
    if re.search(r"[.-]min\.(js|mjs|css)$", name):
        return "minified file (name ends in .min.js)"
    lines = text.splitlines() or [""]
    longest = max(len(x) for x in lines)
    mean = sum(len(x) for x in lines) / len(lines)
    if longest >= MINIFIED_LINE_CHARS and (len(lines) <= 5 or mean >= MINIFIED_MEAN_LINE_CHARS):
        return f"minified or generated code (a {longest:,}-character line, {mean:.0f} characters a line on average)"
    return None


def attach_leading_comments(defs: list[Def], lines: list[str], floor: int = 0) -> None:
    """Extend each definition upward over the comment and decorator lines right above it: a doc comment belongs
    to its function. Across blank lines only where the language's doc tool reads one so (``doc_above_blanks``: a
    JSDoc block for TypeDoc, a ``///`` run for rustdoc; godoc and ``#`` comments need no blank line between).
    Never past the previous definition."""
    from .docs import leading_start

    prev_end = floor - 1
    for d in sorted(defs, key=lambda d: d.first):
        # comments, a /** */ block whatever its inner lines start with (Javadoc prose without `*`), Rust attributes
        # and annotations between a doc and its definition (issue 75)
        i = leading_start(lines, d.first, prev_end)
        if i == d.first:  # nothing adjacent: a doc comment a blank line or two above
            above = doc_above_blanks(lines, i, prev_end)
            if above < i and d.head < 0:
                d.head = d.first  # the definition's own first line (its signature follows the doc and blanks)
            i = above
        d.first = i
        attach_leading_comments(d.children, lines, d.first + 1)
        prev_end = max(prev_end, d.last)


MAX_DOC_GAP = 2  # blank lines a doc comment may stand above its definition (more: a section comment)
# a licence, copyright or file-level doc comment documents the file, never the definition under it
_FILE_DOC = re.compile(r"licen[cs]e|copyright|spdx-|@preserve|@packagedocumentation|@fileoverview|@file\b|@module\b",
                       re.I)


def doc_above_blanks(lines: list[str], i: int, floor: int) -> int:
    """The first line of a doc comment that ends one or two blank lines above line ``i`` (above ``floor``): a JSDoc
    block (``/** ... */`` on lines of its own, as TypeDoc attaches it to the declaration after it) or a run of
    ``///`` lines (rustdoc's, an attribute of the next item). ``i`` when there is none, or when the comment is a
    licence or file-level doc."""
    j = i
    while j - 1 > floor and not lines[j - 1].strip():
        j -= 1
    if j == i or i - j > MAX_DOC_GAP or j - 1 <= floor:
        return i
    end = lines[j - 1].strip()
    k = j - 1
    if end.startswith("///"):
        while k - 1 > floor and lines[k - 1].strip().startswith("///"):
            k -= 1
    elif end.endswith("*/"):
        while k > floor and "/*" not in lines[k]:
            k -= 1
        if k <= floor or not lines[k].lstrip().startswith("/**") or lines[k].lstrip().startswith("/***"):
            return i  # a plain /* */ comment or a /*** banner: not a doc comment
        if lines[k].lstrip().startswith("/**") and "*/" in lines[k] and k != j - 1:
            return i
    else:
        return i
    from .docs import documents_no_definition

    if _FILE_DOC.search("\n".join(lines[k:j])) or documents_no_definition(lines[k:j]):  # a \page: no one's doc
        return i
    return k


def all_defs(defs: list[Def]):
    """Every definition, nested ones too, in source order (a class, then its methods)."""
    for d in defs:
        yield d
        yield from all_defs(d.children)


def def_at(defs: list[Def], line: int) -> Def | None:
    """The innermost definition holding a 0-based line (None: module-level code, or a "lines" region)."""
    found = None
    for d in defs:
        if d.first <= line <= d.last:
            found = d if d.kind != "lines" and d.name else found
            inner = def_at(d.children, line)
            if inner is not None:
                found = inner
    return found


def symbol_at(defs: list[Def], line: int) -> tuple[str, str]:
    """(qualified name, kind) of the innermost definition holding a 0-based line; ('', 'module') if none."""
    found = ("", "module")
    for d in defs:
        if d.first <= line <= d.last:
            found = (d.name, d.kind)
            inner = symbol_at(d.children, line)
            if inner[0]:
                found = inner
    return found


@functools.lru_cache(maxsize=64)  # many gold lines point into one file (a str caches its own hash)
def line_starts(text: str) -> list[int]:
    """Where each line of a file starts (a file ending with a newline has no line after it: "a\nb\n" has 2)."""
    return [0] + [m.end() for m in re.finditer("\n", text) if m.end() < len(text)]


def lines_span(text: str, first: int, last: int) -> tuple[int, int]:
    """(start, end) character offsets of 0-based lines first..last (the end before the last line's newline)."""
    starts = line_starts(text)
    end = starts[last + 1] - 1 if last + 1 < len(starts) else len(text) - text.endswith("\n")
    return starts[first], end


def def_span(text: str, d: Def) -> tuple[int, int]:
    """(start, end) character offsets of a definition's lines: its evidence. For a function with overload
    signatures joined above it (TypeScript), the implementation: its own doc comment, signature and body, never
    the overloads (a block showing only an overload signature, up to 240 lines above, was credited as the
    definition; docs/metrics.md, "Symbol metrics")."""
    return lines_span(text, impl_first(text.split("\n"), d) if d.overloads else d.first, d.last)


def impl_first(lines: list[str], d: Def) -> int:
    """The first line of a definition's implementation: its own leading comment (adjacent, or a doc comment a blank
    line or two above) and its signature, below any overload signatures joined above it."""
    return leading_comment_start(lines, d.head if d.head >= 0 else d.first, d.first)


def leading_comment_start(lines: list[str], line: int, floor: int) -> int:
    """The first line of the comment (and decorator) lines right above ``line``, not above ``floor``; with none
    adjacent, a doc comment a blank line or two above (``doc_above_blanks``)."""
    from .docs import leading_start

    i = leading_start(lines, line, floor - 1)
    return doc_above_blanks(lines, line, floor - 1) if i == line else i


def annotate_questions(questions: list, docs: list) -> None:
    """Gold questions whose evidence lies in source code get ``code_language``, ``kind``, ``symbol``
    and ``file`` metadata (unless the gold set gave them): ``ragwb show --by kind`` then works on any
    code folder, not only the bundled set."""
    by_id = {d.doc_id: d for d in docs if getattr(d, "code_language", "")}
    for q in questions:
        for ev in q.evidence:  # each span's definition (already set from a gold `symbol` key)
            doc = by_id.get(ev.doc_id)
            if doc is None or ev.start is None or ev.symbol or doc.code_parse is None:
                continue
            d = def_at(doc.code_parse.defs, doc.text.count("\n", 0, ev.start))
            if d is not None:
                ev.symbol = d.name
                ev.symbol_start, ev.symbol_end = def_span(doc.text, d)
        ev = next((e for e in q.evidence if e.doc_id in by_id), None)
        if ev is None:
            continue
        d = by_id[ev.doc_id]
        meta = {"code_language": d.code_language, "file": d.doc_id}
        if ev.start is not None and d.code_parse is not None:
            meta["symbol"], meta["kind"] = symbol_at(d.code_parse.defs, d.text.count("\n", 0, ev.start))
        q.metadata = {**meta, **q.metadata}


def available_parser(language: str) -> str | None:
    """The best parser this machine has for a language ('tree-sitter', 'python-ast') or None."""
    from .treesitter import has_grammar

    if has_grammar(language):
        return "tree-sitter"
    if language == "python":
        return "python-ast"
    return None


def parse_code(text: str, language: str, parser: str | None = None) -> CodeParse:
    """The definitions of a source file. Never raises: a file no parser reads gets no definitions
    (the chunker cuts line windows) and a warning saying why (the caller names the file)."""
    name = parser or available_parser(language)
    if name is None:
        return CodeParse([], "lines", f"no {language} grammar installed (pip install "
                                      "'tree-sitter-language-pack<1'); chunked by line windows")
    if name not in PARSERS:
        raise KeyError(f"unknown code parser {name!r}; valid: {', '.join(PARSERS)}")
    # the Python floor may still read what tree-sitter rejects; its error is the one reported
    chain = [name] + (["python-ast"] if name == "tree-sitter" and language == "python" else [])
    for n in chain:
        try:
            got = PARSERS[n](text, language)
            # a parser returns its definitions, or (definitions, note) when it read around a syntax error
            defs, note = got if isinstance(got, tuple) else (got, "")
            attach_leading_comments(defs, text.split("\n"))
        except CodeParseError as e:
            err = e
            continue
        except (RecursionError, MemoryError):  # a tree nested past any real program's depth (20,000 classes)
            err = CodeParseError(f"nested too deeply to walk under {n}")
            continue
        if note:  # a syntax error the parser read around: what it kept, and where it could not read
            broken = _broken_ranges(defs)
            where = ", ".join(f"{a + 1}-{b + 1}" if b > a else f"{a + 1}" for a, b in broken[:5])
            more = f" and {len(broken) - 5} more" if len(broken) > 5 else ""
            rest = f"lines {where}{more} chunked by line windows" if broken else "no lines lost"
            return CodeParse(defs, n, f"{note}: kept {_count(defs)} definitions around it; {rest}")
        return CodeParse(defs, n)
    return CodeParse([], "lines", f"does not parse as {language} ({err}); chunked by line windows")


def _broken_ranges(defs: list[Def]) -> list[tuple[int, int]]:
    """0-based line ranges a parser could not read (its "lines" definitions), in file order."""
    out = []
    for d in defs:
        if d.kind == "lines":
            out.append((d.first, d.last))
        out.extend(_broken_ranges(d.children))
    return sorted(out)


def _count(defs: list[Def]) -> int:
    return sum((d.kind != "lines") + _count(d.children) for d in defs)


from . import python_ast, treesitter  # noqa: E402,F401  (register the parsers)
