"""A code chunk as the code-assistant block shape: a header (file, lines, language, definition, what a cut left
out), then the code in a fence, cut to a character budget, comments given up first. Here, below the strategies,
because ingest builds the default block of every code chunk too: their exact token counts are kept then
(rag/tokens.py ``save_counts``), so a fresh process's first `ragwb search` need not load the BPE (issue 46, 5)."""
from __future__ import annotations

import re

# the strategies' shipped code block (chunks, hybrid, two_phase_pages): 1,000 characters, comments given up first
DEFAULT_BLOCK_CHARS = 1000
DEFAULT_CUT = "comments"
DOC_LABEL = "Documentation (of no definition)"
_KIND_LABEL = {"function": "Function", "method": "Method", "class": "Class", "type": "Type", "module": "Module",
               "overload": "Overload signatures of"}


def code_header(path: str, language: str, symbol: str = "", kind: str = "", lines: tuple = (), note: str = "") -> str:
    """The seed's code block header: file, language and function or class name (missing fields
    omitted), then the code in a fence. Documented in docs/strategies.md (code corpora). ``note`` says what a
    cut left out ("12 comment lines left out")."""
    where = [f"lines {lines[0]}-{lines[1]}"] if lines and lines[0] else []
    where += [note] if note else []
    head = f"File: {path}" + (f" ({'; '.join(where)})" if where else "")
    head += f"\nLanguage: {language}"
    if symbol and kind in _KIND_LABEL:
        head += f"\n{_KIND_LABEL[kind]}: {symbol}"
    elif kind == "doc":  # a Doxygen page or a long banner: prose, said as such (its fence holds no code)
        head += f"\n{DOC_LABEL}"
    return head + f"\n```{language}\n"


def cut_code(code: str, max_chars: int) -> str:
    """At most ``max_chars`` characters of code, ending at a line end when one is in the second half."""
    if not max_chars or len(code) <= max_chars:
        return code
    cut = code[:max_chars]
    nl = cut.rfind("\n")
    return cut[:nl + 1] if nl >= max_chars // 2 else cut


_HASH_COMMENTS = {"python", "ruby", "bash"}
_SLASH_COMMENT = re.compile(r"^\s*(//|/\*|\*|\*/)")
_HASH_COMMENT = re.compile(r"^\s*#")
_DOCSTRING_OPEN = re.compile(r"^\s*[rRbBuU]{0,2}(\"\"\"|\'\'\')")


def comment_lines(lines: list[str], language: str) -> list[bool]:
    """Which lines are comment only: ``#`` lines (Python, Ruby, shell) and Python docstrings (a triple-quoted
    string opening right after a line ending in ``:``), ``//``, ``/*``, `` * `` lines elsewhere."""
    pat = _HASH_COMMENT if language in _HASH_COMMENTS else _SLASH_COMMENT
    out = [bool(pat.match(x)) for x in lines]
    if language == "python":
        prev, i = "", 0
        while i < len(lines):
            m = _DOCSTRING_OPEN.match(lines[i])
            if m and prev.rstrip().endswith(":"):
                quote, j = m.group(1), i
                rest = lines[i][m.end():]
                while quote not in rest and j + 1 < len(lines):
                    j += 1
                    rest = lines[j]
                for k in range(i, j + 1):
                    out[k] = True
                i = j + 1
                prev = ""
                continue
            if lines[i].strip():
                prev = lines[i]
            i += 1
    return out


def cut_code_comments(code: str, max_chars: int, language: str) -> tuple[str, list[tuple[int, int]], int, bool]:
    """At most ``max_chars`` characters of a chunk's code, comments given up first: whole runs of comment lines
    (doc comments, docstrings) are left out from the top until the code fits, then the rest is cut at a line
    end as ``cut_code`` does. (text shown, the [start, end) character ranges of ``code`` it shows, comment
    lines left out, whether the tail was cut too)."""
    if not max_chars or len(code) <= max_chars:
        return code, [(0, len(code))], 0, False
    lines = code.splitlines(keepends=True)
    is_comment = comment_lines([x.rstrip("\r\n") for x in lines], language)
    if not any(ln.strip() and not c for ln, c in zip(lines, is_comment)):
        # a piece of nothing but comment (the doc comment of a definition split at it): leaving its comments out
        # would pack an empty fence; it keeps its top instead, the words a docstring-style query matches
        shown = cut_code(code, max_chars)
        return shown, [(0, len(shown))], 0, len(shown) < len(code)
    keep = [True] * len(lines)
    total, dropped, i = len(code), 0, 0
    while total > max_chars and i < len(lines):  # comment runs, top first
        if is_comment[i]:
            j = i
            while j < len(lines) and is_comment[j]:
                keep[j] = False
                total -= len(lines[j])
                dropped += 1
                j += 1
            i = j
        else:
            i += 1
    ranges, pos = [], 0
    for ln, k in zip(lines, keep):
        if k:
            if ranges and ranges[-1][1] == pos:
                ranges[-1] = (ranges[-1][0], pos + len(ln))
            else:
                ranges.append((pos, pos + len(ln)))
        pos += len(ln)
    shown = "".join(code[a:b] for a, b in ranges)
    tail = len(shown) > max_chars
    if tail:  # still over: the tail goes, at a line end
        cut = cut_code(shown, max_chars)
        left, out = len(cut), []
        for a, b in ranges:
            if left <= 0:
                break
            out.append((a, a + min(b - a, left)))
            left -= b - a
        shown, ranges = cut, out
    return shown, ranges, dropped, tail


def first_code_line(text: str, language: str) -> tuple[int, str] | None:
    """(offset, line with its newline) of the first line of ``text`` that is neither blank nor comment."""
    pos = 0
    body = text.splitlines(keepends=True)
    for ln, is_c in zip(body, comment_lines([x.rstrip("\r\n") for x in body], language)):
        if ln.strip() and not is_c:
            return pos, ln if ln.endswith("\n") else ln + "\n"
        pos += len(ln)
    return None


_OPENS_AS_COMMENT = re.compile(r"^\s*(//|/\*|\*|#|[rRbBuU]{0,2}(\"\"\"|\'\'\'))")


def doc_only(whole: str, language: str) -> bool:
    """A chunk of nothing but comment: the doc comment of a definition split at its signature. Most chunks open
    with code: those are answered from their first line, without reading the rest (ingest asks of every chunk)."""
    first = next((x for x in whole.splitlines() if x.strip()), None)
    if first is None or not _OPENS_AS_COMMENT.match(first):
        return False
    return first_code_line(whole, language) is None


def follow_line(text: str, symbol: str, language: str, line_start: int, after) -> tuple[str, int, int] | None:
    """What a doc-only chunk shows after its comment (``code_block_text``'s ``follow``): the first code line of the
    chunks after it that are the same definition's (a long doc comment is cut into several pieces: the first
    line of code may be two pieces down). ``after``: an iterable of (text, offset of its start from this chunk's
    start, its first line, its symbol) of the next chunks of the file, in order."""
    if not doc_only(text, language):  # module code cut after a long comment (rxjs's `export const ajax = ...`
        return None  # under 90 lines of doc) shows its first line too: never a comment alone (issue 65)
    for k, (ntext, off, nline, nsymbol) in enumerate(after):
        if nsymbol != symbol or k >= 16:
            return None
        got = first_code_line(ntext, language)
        if got is not None:
            pos, line = got
            return line, off + pos, int(nline) + ntext.count("\n", 0, pos)
    return None


def _with_signature(whole: str, max_chars: int, follow: tuple[str, int, int], lines: tuple
                    ) -> tuple[str, list[tuple[int, int]], tuple, str]:
    """A doc-only chunk's block: its comment's top, then the code line it documents (the next piece's first line:
    the signature), so no block is a comment alone (issue 55, 1). (code, ranges of ``whole``'s coordinates,
    lines shown, note)."""
    sig, off, line_no = follow
    top = cut_code(whole, max(1, max_chars - len(sig))) if max_chars else whole
    if not top.endswith("\n"):
        top += "\n"
    ranges = [(0, min(len(top), len(whole))), (off, off + len(sig.rstrip("\n")))]
    gap = whole.count("\n", len(top)) if len(top) < len(whole) else 0
    note = "doc comment, then the first line of the code it documents" + (
        f"; {gap} comment line{'s' if gap != 1 else ''} between left out" if gap else "")
    return top + sig, ranges, ((lines[0], line_no) if lines and lines[0] else lines), note


def code_block_text(whole: str, lines: tuple, language: str, path: str, symbol: str = "", kind: str = "",
                    max_chars: int = 1000, cut: str = "comments", follow: tuple[str, int, int] | None = None
                    ) -> tuple[str, list[tuple[int, int]], int]:
    """The block of one code chunk (``whole``, lines ``lines`` of file ``path``): (text, the [start, end) ranges of
    ``whole`` it shows, the header's length). ``cut="comments"``: comment runs leave first (``cut_code_comments``);
    ``"top"``: the top ``max_chars`` characters are kept (``cut_code``). ``follow``: for a chunk that is nothing
    but a doc comment (``follow_line`` gives one to no other), the code line after it (text, offset from
    ``whole``'s start, 1-based line), shown after the comment (``_with_signature``)."""
    if follow is not None:  # follow_line gives one only to a doc-only chunk
        code, ranges, lines, note = _with_signature(whole, max_chars, follow, lines)
        code = code.rstrip("\n")
        head = code_header(path, language, symbol or "", kind or "", lines, note)
        return head + code + "\n```", ranges, len(head)
    if cut == "comments":
        code, ranges, dropped, tail_cut = cut_code_comments(whole, max_chars, language)
    else:
        code = cut_code(whole, max_chars)
        ranges, dropped, tail_cut = [(0, len(code))], 0, len(code) < len(whole)
    trim = len(code) - len(code.rstrip("\n"))  # the fence closes on its own line
    code = code[:len(code) - trim]
    while trim and ranges:
        a, b = ranges.pop()
        if b - a > trim:
            ranges.append((a, b - trim))
        trim = max(0, trim - (b - a))
    tail_cut = tail_cut and len(code) < len(whole.rstrip("\n"))
    if lines and ranges and (dropped or tail_cut):  # the lines actually shown
        lines = (lines[0] + whole.count("\n", 0, ranges[0][0]),
                 lines[0] + whole.count("\n", 0, max(ranges[-1][1] - 1, ranges[0][0])))
    note = "; ".join(x for x in (f"{dropped} comment line{'s' if dropped != 1 else ''} left out" if dropped
                                 else "", f"cut at {max_chars:,} characters" if tail_cut else "") if x)
    head = code_header(path, language, symbol or "", kind or "", lines, note)
    return head + code + "\n```", ranges, len(head)
