"""Doc comments as each language's own doc tool reads them (issue 75): one reader for the chunker (which lines above
a definition belong to it) and for the gold-set builder (which of them are its doc, and what they say).

- Javadoc, KDoc, JSDoc/TypeDoc, Doxygen: a ``/** ... */`` block, whatever its inner lines start with (jsoup writes
  prose lines with no leading ``*``), with annotations (``@Override``, ``@Deprecated(since = "2")``) between it and
  the definition.
- rustdoc: ``///`` and ``//!`` runs, with attributes between the doc and the item (``#[inline]``,
  ``#[cfg(feature = "std")]``, one spanning several lines).
- Doxygen (C, C++): ``/** */`` blocks and ``///`` runs.
- godoc: the ``//`` run right above a declaration.
- Python, Ruby (RDoc/YARD), bash: the ``#`` run right above a definition.

A ``//`` line comment is never a doc where the language's doc form is ``/** */`` or ``///`` (Java, JavaScript,
TypeScript, Rust): it still belongs to the definition's chunk (as any comment right above it), but a question is
never made of it.
"""
from __future__ import annotations

import re

# which doc-comment forms each language's doc tool reads
DOC_FORMS = {"java": {"block"}, "javascript": {"block"}, "typescript": {"block"}, "tsx": {"block"},
             "rust": {"slash3"}, "c": {"block", "slash3"}, "cpp": {"block", "slash3"}, "go": {"line"},
             "python": {"hash"}, "ruby": {"hash"}, "bash": {"hash"}}

_LINE_COMMENT = re.compile(r"^\s*(//|#(\s|$|#|!(?!\[))|--|;)")  # `#[` / `#![` are Rust attributes, not comments
_ATTRIBUTE_START = re.compile(r"^\s*#!?\[")  # Rust (`#[inline]`, `#![no_std]`)
_ANNOTATION = re.compile(r"^\s*@[A-Za-z_][\w.]*")  # Java/Kotlin annotations, Python/TS decorators
MAX_BLOCK_LINES = 400  # a /** */ block longer than this is not walked (a file's commented-out half)
MAX_ATTRIBUTE_LINES = 12  # an attribute spanning lines (`#[cfg(any(\n  feature = "std",\n))]`)


def _block_start(lines: list[str], end: int, floor: int) -> int:
    """The line a ``/* ... */`` block ending on line ``end`` starts on (its ``/*`` opening a line of its own), or -1."""
    k = end
    while k > floor and end - k < MAX_BLOCK_LINES:
        if "/*" in lines[k]:
            return k if lines[k].lstrip().startswith("/*") else -1
        k -= 1
    return -1


def _attribute_start(lines: list[str], end: int, floor: int) -> int:
    """The first line of a Rust attribute ending on line ``end`` (``#[...]`` on one line, or several), or -1."""
    for k in range(end, max(floor, end - MAX_ATTRIBUTE_LINES), -1):
        if _ATTRIBUTE_START.match(lines[k]):
            return k
        if k != end and lines[k].rstrip().endswith("]"):  # another item's end: not inside one attribute
            return -1
    return -1


def _annotation_start(lines: list[str], end: int, floor: int) -> int:
    """The first line of an annotation ending on line ``end`` (``@Foo``, ``@Foo(a = 1,\\n b = 2)``), or -1."""
    if not (_ANNOTATION.match(lines[end]) or lines[end].rstrip().endswith(")")):
        return -1  # a comment's last line (` */`), a Javadoc `@return` inside it: not an annotation's end
    for k in range(end, max(floor, end - MAX_ATTRIBUTE_LINES), -1):
        if lines[k].lstrip().startswith(("*", "/", "#")):
            return -1
        if _ANNOTATION.match(lines[k]):
            return k
        if k != end and not lines[k].rstrip().endswith((",", "(")):
            return -1
    return -1


def leading_start(lines: list[str], i: int, floor: int) -> int:
    """The first line of the comment, doc, attribute and annotation lines right above line ``i`` (none above
    ``floor``, exclusive): a ``/* */`` block is taken whole whatever its inner lines hold, a multi-line attribute
    or annotation whole. ``i`` when nothing is adjacent."""
    while i - 1 > floor:
        above = lines[i - 1]
        s = above.strip()
        if not s:
            break
        if s.endswith("*/"):
            k = _block_start(lines, i - 1, floor)
            if k < 0 or documents_no_definition(lines[k:i]):  # a \page block is no function's doc (issue 86, 4)
                break
            i = k
        elif _LINE_COMMENT.match(above) or s.startswith("*"):
            i -= 1
        elif s.endswith("]") and (k := _attribute_start(lines, i - 1, floor)) >= 0:
            i = k
        elif (k := _annotation_start(lines, i - 1, floor)) >= 0:
            i = k
        else:
            break
    return i


# Doxygen commands that open documentation of no definition: a page, a group, the main page, a file's own doc
_DOC_PAGE = re.compile(r"[\\@](page|mainpage|defgroup)\b")
DOC_BANNER_LINES = 40  # a comment this long that documents no definition by its own word is still a doc block


def documents_no_definition(block: list[str], banner: bool = False) -> bool:
    """A comment block that documents no definition: it names a Doxygen page, group or main page
    (``\\page``, ``@defgroup``, ...), or is a banner of ``DOC_BANNER_LINES`` lines or more. It is a ``doc`` chunk
    of its own, never the next function's comment (io.c's 350-line ``\\page`` block was ``usbi_io_init``'s doc in 17
    pieces, its ``\\code`` examples shown as code: issue 86, 4). ``banner``: a comment no definition took (a gap
    of the file), where length alone says it too (right above a function, a long doc is still its doc)."""
    if banner and len(block) >= DOC_BANNER_LINES:
        return True
    if not any(_DOC_PAGE.search(x) for x in block[:MAX_BLOCK_LINES]):
        return False
    # a group opener (`/** @defgroup styles Node Styles @{ */`) is no documentation: it stays with what follows (a
    # chunk of its own ranked in the top ten with nothing to read); a page or group with prose of its own is
    prose = [w for x in block[:MAX_BLOCK_LINES] for w in _prose_line(x).split()]
    return len(prose) >= DOC_PROSE_WORDS


DOC_PROSE_WORDS = 12  # words of prose (besides Doxygen commands) that make a \page or @defgroup block documentation


def _prose_line(line: str) -> str:
    """A comment line's prose: the comment marks off, nothing of a line that is a Doxygen command (``@{``,
    ``\\defgroup name Title``)."""
    t = re.sub(r"^\s*(/\*+!?|\*+/?|//+!?)", "", line).replace("*/", "").strip()
    return "" if t.startswith(("@", "\\")) else t


def is_attribute_line(line: str) -> bool:
    return bool(_ATTRIBUTE_START.match(line) or _ANNOTATION.match(line))


def doc_block(lines: list[str], start: int, head: int, language: str) -> list[str]:
    """The doc comment among lines ``start..head-1`` (what ``leading_start`` attached) as the language's doc tool
    reads it: the last ``/** */`` block or ``///`` run (or ``//`` run for Go, ``#`` run for Python, Ruby, bash)
    above the definition, attributes and annotations between them skipped; [] when there is none (a ``//`` line
    comment above a Java method is not its doc)."""
    forms = DOC_FORMS.get(language, {"block", "slash3", "line", "hash"})
    k = head
    while k > start:  # attributes and annotations (several lines each), blank lines: between the doc and the code
        x = lines[k - 1]
        if not x.strip() or is_attribute_line(x):
            k -= 1
        elif x.rstrip().endswith("]") and (a := _attribute_start(lines, k - 1, start - 1)) >= 0:
            k = a
        elif (a := _annotation_start(lines, k - 1, start - 1)) >= 0:
            k = a
        else:
            break
    if k <= start:
        return []
    last = lines[k - 1].strip()
    if last.endswith("*/") and "block" in forms:
        b = _block_start(lines, k - 1, start - 1)
        if b >= 0 and lines[b].lstrip().startswith("/**") and not lines[b].lstrip().startswith("/***"):
            return lines[b:k]
        return []
    for form, mark in (("slash3", ("///", "//!")), ("line", ("//",)), ("hash", ("#",))):
        if form in forms and last.startswith(mark) and not (form == "hash" and _ATTRIBUTE_START.match(last)):
            j = k
            while j - 1 >= start and lines[j - 1].strip().startswith(mark) and not _ATTRIBUTE_START.match(lines[j - 1]):
                j -= 1
            if form == "line" and any(x.strip().startswith("///") for x in lines[j:k]):
                continue
            return lines[j:k]
    return []


def doc_text(block: list[str]) -> str:
    """The prose of a doc comment, paragraphs kept (blank lines), comment markers out; it ends at the first
    ``@tag`` (Javadoc, JSDoc) or code example."""
    out = []
    for x in block:
        t = re.sub(r"^\s*(/\*\*|\*/|\*|///?|//!|#)\s?", "", x).rstrip().removesuffix("*/").rstrip()
        if t.lstrip().startswith("@") or t.lstrip().startswith("```"):  # a tag, whatever its indentation
            break
        out.append(t)
    return "\n".join(out)


def mark_block_comments(lines: list[str]) -> list[str]:
    """``lines`` for comment detection: each inner line of a ``/* ... */`` block that opens a line of its own gets a
    ``*`` after its indentation (Javadoc prose written without one, as jsoup writes it, read as code split doc from
    method: issue 75). Only for reading which lines are comments; the chunk text is the file's own."""
    out, inside = list(lines), False
    for k, x in enumerate(lines):
        s = x.strip()
        if inside:
            if s and not s.startswith("*"):
                lead = len(x) - len(x.lstrip())
                out[k] = x[:lead] + "*" + x[lead:]
            if "*/" in x:
                inside = False
        elif s.startswith("/*") and "*/" not in s[2:]:
            inside = True
    return out
