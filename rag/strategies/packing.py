"""Packing helpers shared by the shapes: sentence-boundary truncation, the shared token budget,
block provenance, counters, and chunk rows as raw blocks."""
from __future__ import annotations

import functools
import re


from rag.index.retrieval import Retriever
from rag.textproc import note_prefix
from rag.tokens import count_tokens, count_tokens_memo
from .base import (BaseParams, Block)

# --------------------------------------------------------------------------- packing

_SENT_BOUNDARY = re.compile(r"(?<=[.!?;。！？])[\"')\]]*\s+|\n+")


@functools.lru_cache(maxsize=8192)
def truncate_to_tokens(text: str, budget: int, encoding: str = "o200k_base") -> str:
    """The longest prefix of ``text`` that ends at a sentence boundary and fits ``budget`` tokens."""
    if budget <= 0:
        return ""
    from rag.tokens import get_encoding

    enc = get_encoding(encoding)
    # one encode finds where the budget runs out; then walk back to a sentence boundary
    ids = enc.encode(text[: budget * 12], disallowed_special=())
    if len(ids) <= budget and len(text) <= budget * 12:
        return text
    limit = len(enc.decode(ids[:budget]))
    ends = [m.start() for m in _SENT_BOUNDARY.finditer(text, 0, limit + 1)]
    if limit >= len(text):
        ends.append(len(text))
    for end in reversed(ends):
        cand = text[:end].rstrip()
        # token merges at the cut can differ: recheck (memoised: pack_blocks counts the cut next)
        if cand and count_tokens_memo(cand, encoding) <= budget:
            note_prefix(cand, text)
            return cand
    return ""


def pack_blocks(raw: list[tuple], params: BaseParams, encoding: str) -> list[Block]:
    """Number blocks in rank order under the shared token budget.

    ``raw`` holds (text, group, doc_ids, page_ids, chunk_ids, spans, n_tokens, score[, offsets]).
    ``offsets`` maps a page, chunk or document id to the position in ``text`` where its text
    starts (absent: 0). ``spans`` are the document ranges the text shows, in order, back to back.
    Policy for the block that would overflow ``max_context_tokens``:
    ``truncate`` keeps its longest prefix ending at a sentence boundary that fits (nothing if
    none fits) and stops; ``drop`` leaves it out and goes on with the next, smaller blocks.
    A truncated block keeps exactly the pages, chunks, documents and spans whose text it still shows.
    """
    out: list[Block] = []
    budget = params.max_context_tokens
    used = 0
    for item in raw:
        text, group, d, p, c, spans, n, score = item[:8]
        if budget and used + n > budget:
            if params.overflow == "drop":
                continue
            cut = truncate_to_tokens(text, budget - used, encoding)
            if cut:
                k = count_tokens_memo(cut, encoding)
                offsets = item[8] if len(item) > 8 else {}
                d2, p2, c2, sp2 = cut_provenance(len(cut), d, p, c, spans, offsets)
                out.append(Block(len(out) + 1, cut, group, d2, p2, c2, sp2, k, score, True))
            break
        out.append(Block(len(out) + 1, text, group, d, p, c, spans, n, score))
        used += n
    return out


def cut_provenance(length: int, doc_ids: tuple, page_ids: tuple, chunk_ids: tuple, spans: tuple,
                   offsets: dict) -> tuple[tuple, tuple, tuple, tuple]:
    """What the first ``length`` characters of a block show: the ids whose text starts before the
    cut (order kept) and the spans clipped to it."""
    keep = lambda ids: tuple(x for x in ids if offsets.get(x, 0) < length)  # noqa: E731
    length -= offsets.get(None, 0)  # a header before the document text (code blocks) shows no span
    clipped, pos = [], 0
    for sd, ss, se in spans:
        if pos >= length:
            break
        clipped.append((sd, ss, min(se, ss + (length - pos))))
        pos += se - ss
    return keep(doc_ids), keep(page_ids), keep(chunk_ids), tuple(clipped)



def counters(chunks_found: int, docs_loaded: int = 0, pages_rebuilt: int = 0, fallback: str | None = None) -> dict:
    return {"chunks_found": int(chunks_found), "docs_loaded": docs_loaded, "pages_rebuilt": pages_rebuilt,
            "fallback": fallback}


def chunk_raw(r: Retriever, row: int, score: float, max_chars: int = 0, code_chars: int = 1000,
              code_cut: str = "comments") -> tuple:
    """A chunk as a raw block; a chunk of source code in the code-assistant shape (``code_block``),
    its code cut to ``code_chars`` characters (0 = whole), comments first unless ``code_cut="top"``."""
    rd = r.reader
    if rd.code_languages and rd.code_languages[row]:
        return code_block(rd, row, score, code_chars, code_cut)
    text, n = rd.texts[row], int(rd.n_tokens[row])
    s, e = int(rd.starts[row]), int(rd.ends[row])
    if max_chars and len(text) > max_chars:
        text = _text_prefix(text, max_chars)
        e = s + max_chars
        n = count_tokens(text, rd.config.chunking.encoding)
    return (text, "chunks", (rd.doc_ids[row],), (rd.page_ids[row],), (rd.chunk_ids[row],),
            ((rd.doc_ids[row], s, e),), n, float(score))


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


def code_block(rd, row: int, score: float, max_chars: int = 1000, cut: str = "comments") -> tuple:
    """A code chunk as a raw block: header, fenced code (cut to ``max_chars``: comments first, or the top kept
    with ``cut="top"``), exact tokens of all of it."""
    key = ("code", row, max_chars, cut)
    hit = rd.block_cache.get(key)
    if hit is None:
        whole = rd.texts[row]
        s = int(rd.starts[row])
        lines = (int(rd.line_starts[row]), int(rd.line_ends[row])) if rd.line_starts is not None else ()
        if cut == "comments":
            code, ranges, dropped, tail_cut = cut_code_comments(whole, max_chars, rd.code_languages[row])
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
        spans = tuple((rd.doc_ids[row], s + a, s + b) for a, b in ranges if b > a)
        head = code_header(rd.doc_ids[row], rd.code_languages[row], rd.symbols[row] or "", rd.kinds[row] or "",
                           lines, note)
        text = head + code + "\n```"
        hit = (text, spans or ((rd.doc_ids[row], s, s),), count_tokens(text, rd.config.chunking.encoding),
               len(head))
        if len(rd.block_cache) > 100_000:
            rd.block_cache.clear()
        rd.block_cache[key] = hit
    text, spans, n, lead = hit
    return (text, "chunks", (rd.doc_ids[row],), (rd.page_ids[row],), (rd.chunk_ids[row],), spans, n, float(score),
            {rd.doc_ids[row]: lead, rd.page_ids[row]: lead, rd.chunk_ids[row]: lead, None: lead})


@functools.lru_cache(maxsize=4096)
def _text_prefix(text: str, n: int) -> str:
    """``text[:n]``, one string per (text, n): every question that truncates a document to the same
    budget shares it, and with it every memo keyed by the block text (hash computed once)."""
    cut = text[:n]
    note_prefix(cut, text)
    return cut


def _prefetch(rows, ids: list) -> None:
    """One read for many rows whose text stays in LanceDB (an ANN index's lazy rows); else nothing."""
    fetch = getattr(rows, "prefetch", None)
    if fetch is not None:
        fetch(ids)
