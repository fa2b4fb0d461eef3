"""Safe input and output: what comes from outside parsed with bounds, what the workspace keeps written whole.

Reading. JSON from outside (a service's reply, a logged file, a gold file, claims): parsed with a depth bound.

``json.loads`` of 100,000 nested brackets raises RecursionError deep inside whatever called it (a
traceback, a lost run); nothing real nests past a few dozen levels. ``loads_bounded`` turns both the
parser's recursion limit and a document deeper than ``MAX_DEPTH`` into a ValueError its caller
reports as one line naming the file, row or item.

Writing. Files written whole: a temporary file beside the target, then one atomic replace, so another process (a
reader, a second ingest) never sees half of one. Every cache and snapshot the workspace keeps goes through here.
"""
from __future__ import annotations

import json
import os
import threading
from pathlib import Path

MAX_DEPTH = 200


def depth_of(obj, limit: int = MAX_DEPTH) -> int:
    """The nesting depth of a parsed JSON value, walked without recursion; stops counting past ``limit``."""
    deepest, stack = 0, [(obj, 1)]
    while stack:
        v, d = stack.pop()
        if isinstance(v, (list, dict)):
            deepest = max(deepest, d)
            if deepest > limit:
                return deepest
            stack.extend((x, d + 1) for x in (v.values() if isinstance(v, dict) else v))
    return deepest


def loads_bounded(data, max_depth: int = MAX_DEPTH):
    """``json.loads(data)``, or ValueError when it is not JSON or nests deeper than ``max_depth``."""
    try:
        obj = json.loads(data)
    except RecursionError:
        raise ValueError(f"JSON nested deeper than {max_depth} levels") from None
    if depth_of(obj, max_depth) > max_depth:
        raise ValueError(f"JSON nested deeper than {max_depth} levels")
    return obj


def write_whole(path: Path, data: bytes) -> None:
    """``data`` at ``path`` all at once (the temporary name is this process's and thread's: two writers of one
    file never share one). The temporary file is created new (O_EXCL, O_NOFOLLOW): a link planted under its name is
    never written through, and the replace swaps the name itself, so a link at ``path`` is replaced, not followed."""
    path = Path(path)
    tmp = path.with_name(f"{path.name}.{os.getpid()}.{threading.get_ident()}.tmp")
    try:
        os.unlink(tmp)  # a dead writer's leftover (or a planted link): removed, never opened
    except FileNotFoundError:
        pass
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0), 0o644)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise


class LinkRefused(ValueError):
    """A write that would have gone through a symbolic link: refused, the link named (its caller says it in one
    line)."""


def refuse_links(*paths: Path) -> None:
    """LinkRefused naming the first of ``paths`` that is a symbolic link (a file the user's copy would be written
    through, or a folder that points elsewhere)."""
    for p in paths:
        if os.path.islink(p):
            raise LinkRefused(f"{printable(str(p))} is a symbolic link (to {printable(os.readlink(p))}): nothing "
                              "is written through a link; remove it or pick another folder")


def write_no_follow(path: Path, data: bytes) -> None:
    """``data`` written whole at ``path``, refused (LinkRefused) when ``path`` or its folder is a link."""
    path = Path(path)
    refuse_links(path.parent, path)
    write_whole(path, data)


_BIDI = set(range(0x202A, 0x202F)) | set(range(0x2066, 0x206A))  # overrides and isolates: text shown out of order


def printable(text: str) -> str:
    """``text`` safe to print on a terminal: control characters (C0, DEL, C1: escape sequences that retitle the
    window, clear the screen or hide text) and bidi overrides shown as escapes (``\\x1b``, ``\\u202e``), never sent raw.
    For names that come from outside (file names, ids) in every line the CLI prints about them."""
    if text.isprintable():
        return text
    out = []
    for c in text:
        o = ord(c)
        if o < 0x20 or 0x7F <= o <= 0x9F:
            out.append(f"\\x{o:02x}")
        elif o in _BIDI:
            out.append(f"\\u{o:04x}")
        else:
            out.append(c)
    return "".join(out)


# Markdown's active characters (emphasis, code, links, images, tables, math, headings, HTML and entities): each shown
# as a numeric character reference, which Markdown passes through as text and the browser shows as the character
_MD_ACTIVE = frozenset("&<>\"'\\`*_[](){}!#|~$^=:")


def html_text(text, keep_lines: bool = False) -> str:
    """``text`` from outside (a folder, file, run, strategy, metric or judge name, a note, an error that quotes
    one) as HTML text: ``& < > " '`` escaped, so it shows literally in any element or quoted attribute and never
    becomes markup; control characters and bidi overrides shown as escapes as on a terminal (``printable``). The
    one rule for the report, the Jupyter displays and every ``mo.Html`` of the page (issue 82)."""
    import html

    # a body of text (an answer, a table cell) keeps its line breaks and tabs; every other control is shown
    return html.escape(printable_lines(text) if keep_lines else printable(str(text)), quote=True)


def md_text(text) -> str:
    """``text`` from outside as Markdown that renders to exactly that text: ``html_text``, and every character
    Markdown would act on (``*_`[]()!#|~$``...: emphasis, links such as ``[x](javascript:...)``, images, math)
    written as a character reference. For every outside string the page's ``mo.md`` and widget labels show (marimo
    renders both as Markdown with raw HTML allowed, and its run mode does not sanitise it)."""
    s = printable(str(text))
    out = "".join(f"&#{ord(c)};" if c in _MD_ACTIVE else c for c in s)
    if out[:1] in ("-", "+", ".") or out[:1].isdigit():  # a list item or a numbered one at the start of a line
        out = f"&#{ord(out[0])};" + out[1:]
    return out


def md_code(text) -> str:
    """``text`` from outside in a code span that renders to exactly that text (a name inside a command the page
    shows, ``ragwb show RUN``): HTML's ``<code>`` around ``md_text``, since a Markdown code span shows an escape as
    itself and ends at the name's first backtick."""
    return f"<code>{md_text(text)}</code>"


def printable_lines(text: str) -> str:
    """``printable`` for a block of text printed as it is (a table, a note): its line breaks and tabs kept, every
    other control character shown as an escape."""
    return "\n".join("\t".join(printable(part) for part in line.split("\t")) for line in str(text).split("\n"))


def html_body(text) -> str:
    """``html_text`` for a body of text (an answer, a passage, a table cell): line breaks and tabs kept, quotes
    escaped (a cell's text also lands in quoted attributes)."""
    return html_text(text, keep_lines=True)


def open_regular(path, max_bytes: int) -> int:
    """A read-only descriptor of ``path`` when it is a regular file of at most ``max_bytes``, opened without
    following a link and without blocking (a FIFO planted in its place once hung a search; a link to /dev/zero was
    read for 2.7 GB): OSError otherwise. The caller closes it."""
    import stat

    fd = os.open(path, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0))
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise OSError(f"{path}: not a regular file")
        if st.st_size > max_bytes:
            raise OSError(f"{path}: {st.st_size:,} bytes, over the {max_bytes:,} expected")
        return fd
    except BaseException:
        os.close(fd)
        raise


def read_regular(path, max_bytes: int) -> bytes:
    """The whole of ``path`` when it is a regular file (not a link, FIFO or device) of at most ``max_bytes``."""
    fd = open_regular(path, max_bytes)
    with os.fdopen(fd, "rb") as f:
        return f.read(max_bytes + 1)[:max_bytes]
