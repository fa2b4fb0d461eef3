"""Packing helpers shared by the shapes: sentence-boundary truncation, the shared token budget,
block provenance, counters, and chunk rows as raw blocks."""
from __future__ import annotations

import functools
import re


from rag.index.retrieval import Retriever
from rag.ingest.code.blocks import (code_block_text, code_header, comment_lines, cut_code,  # noqa: F401
                                     cut_code_comments)
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


def cut_marker(block) -> str:
    """What follows a block cut short wherever it is shown (the prompt, the drill-down, the report): a reader, and a
    model, must not take the start of a file for the whole of it. "" for a whole block."""
    if not getattr(block, "truncated", False):
        return ""
    shown = sum(e - s for _, s, e in block.spans)
    return f"\n[... cut here: the block shows {shown:,} characters of {', '.join(block.doc_ids[:1]) or 'its source'}]"


def pack_blocks(raw: list[tuple], params: BaseParams, encoding: str) -> list[Block]:
    """Number blocks in rank order under the shared token budget.

    ``raw`` holds (text, group, doc_ids, page_ids, chunk_ids, spans, n_tokens, score[, offsets[, truncated]]).
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
        out.append(Block(len(out) + 1, text, group, d, p, c, spans, n, score, bool(item[9]) if len(item) > 9 else False))
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


def code_block(rd, row: int, score: float, max_chars: int = 1000, cut: str = "comments") -> tuple:
    """A code chunk as a raw block (``code_block_text``: header, fenced code cut to ``max_chars``, comments
    first or the top kept with ``cut="top"``), exact tokens of all of it."""
    key = ("code", row, max_chars, cut)
    hit = rd.block_cache.get(key)
    if hit is None:
        s = int(rd.starts[row])
        lines = (int(rd.line_starts[row]), int(rd.line_ends[row])) if rd.line_starts is not None else ()
        text, ranges, lead = code_block_text(rd.texts[row], lines, rd.code_languages[row], rd.doc_ids[row],
                                             rd.symbols[row], rd.kinds[row], max_chars, cut, _follow(rd, row))
        spans = tuple((rd.doc_ids[row], s + a, s + b) for a, b in ranges if b > a)
        hit = (text, spans or ((rd.doc_ids[row], s, s),), count_tokens(text, rd.config.chunking.encoding), lead)
        if len(rd.block_cache) > 100_000:
            rd.block_cache.clear()
        rd.block_cache[key] = hit
    text, spans, n, lead = hit
    return (text, "chunks", (rd.doc_ids[row],), (rd.page_ids[row],), (rd.chunk_ids[row],), spans, n, float(score),
            {rd.doc_ids[row]: lead, rd.page_ids[row]: lead, rd.chunk_ids[row]: lead, None: lead})


def _follow(rd, row: int):
    """The code line a doc-only chunk shows after its comment (rag/ingest/code/blocks.py ``follow_line``)."""
    from rag.ingest.code.blocks import follow_line

    if rd.line_starts is None:
        return None
    rows, page, ci, s = rd.rows, rd.page_ids[row], int(rd.chunk_index[row]), int(rd.starts[row])

    def after():
        k = ci + 1
        while (n := rows.get(f"{page}/c{k}")) is not None:
            yield rd.texts[n], int(rd.starts[n]) - s, int(rd.line_starts[n]), rd.symbols[n]
            k += 1
    return follow_line(rd.texts[row], rd.symbols[row], rd.code_languages[row], int(rd.line_starts[row]), after())


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
