"""A code chunk as the code-assistant block shape: a header (file, lines, language, definition, what a cut left
out), then the code in a fence, cut to a character budget, comments given up first. Here, below the strategies,
because ingest builds the default block of every code chunk too: their exact token counts are kept then
(rag/tokens.py ``save_counts``), so a fresh process's first `ragwb search` need not load the BPE (issue 46, 5)."""
from __future__ import annotations

import re

# the strategies' shipped code block (chunks, hybrid, two_phase_pages): 1,000 characters, comments given up first
DEFAULT_BLOCK_CHARS = 1000
DEFAULT_CUT = "comments"
_KIND_LABEL = {"function": "Function", "method": "Method", "class": "Class", "type": "Type", "module": "Module"}


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


def code_block_text(whole: str, lines: tuple, language: str, path: str, symbol: str = "", kind: str = "",
                    max_chars: int = 1000, cut: str = "comments") -> tuple[str, list[tuple[int, int]], int]:
    """The block of one code chunk (``whole``, lines ``lines`` of file ``path``): (text, the [start, end) ranges of
    ``whole`` it shows, the header's length). ``cut="comments"``: comment runs leave first (``cut_code_comments``);
    ``"top"``: the top ``max_chars`` characters are kept (``cut_code``)."""
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
