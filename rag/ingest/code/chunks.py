"""Function-level chunks of a source file.

A chunk is a function or method (decorators, leading comments and docstring in), a class header
(the class's own lines between its methods), or the module-level code between definitions. Chunks
are whole lines and cover the file back to back (blank lines go with the chunk before), so
``rebuild_page`` gives the file back exactly. A chunk over ``leaf_max`` tokens is split where its
body's statements start (else at a line start), never mid-line. The page is the file; a chunk's
parent is its enclosing class (innermost), or the file for top-level code, cut into pieces of at
most ``parent_max`` tokens at chunk boundaries. A file with no definitions to use (a grammar
missing, a syntax error) is cut into line windows of at most ``leaf_max`` tokens.
"""
from __future__ import annotations

import dataclasses
import re
from dataclasses import dataclass

from rag.tokens import count_tokens_batch
from .base import _COMMENT_LINE, CodeParse, Def


@dataclass
class Segment:
    first: int  # 0-based lines, inclusive
    last: int
    kind: str
    symbol: str
    container: str  # the enclosing class's qualified name ('' = the file)
    statements: tuple = ()
    part: int = 0  # a split definition's pieces count from 0
    signature: str = ""  # the definition's first code line, carried by its later pieces (their breadcrumb)


def segments(defs: list[Def], lo: int, hi: int, container: Def | None) -> list[Segment]:
    """Segments covering lines lo..hi (inclusive) back to back."""
    out: list[Segment] = []
    gap_kind = "class" if container is not None and container.kind == "class" else "module"
    gap_symbol = container.name if container is not None else ""
    cname = container.name if container is not None and container.kind == "class" else ""
    pos = lo
    for d in sorted(defs, key=lambda d: d.first):
        if d.first < pos or d.first > hi:  # two definitions on one line: the first one owns it
            continue
        last = min(d.last, hi)
        if d.first > pos:
            out.append(Segment(pos, d.first - 1, gap_kind, gap_symbol, cname))
        if d.container:
            out.extend(segments(d.children, d.first, last, d))
        else:
            out.append(Segment(d.first, last, d.kind, d.name, cname, tuple(d.statements)))
        pos = last + 1
    if pos <= hi:
        out.append(Segment(pos, hi, gap_kind, gap_symbol, cname))
    return out


_TRIVIAL = re.compile(r"^\s*([}\])]+[;,]?|end)?\s*$")  # blank, or only closing brackets (`}`, `end`)


def _merge_blank(segs: list[Segment], lines: list[str]) -> list[Segment]:
    """Segments of blank lines or closing brackets join the segment before (the first joins the next)."""
    out: list[Segment] = []
    carry = None
    for s in segs:
        blank = all(_TRIVIAL.match(lines[i]) for i in range(s.first, s.last + 1))
        if blank and out:
            out[-1].last = s.last
        elif blank:
            carry = s.first if carry is None else carry
        else:
            if carry is not None:
                s.first, carry = carry, None
            out.append(s)
    if carry is not None and not out:  # nothing but blank lines
        out.append(Segment(carry, len(lines) - 1, "module", "", ""))
    return out


def _split(seg: Segment, line_tokens: list[int], max_tokens: int) -> list[Segment]:
    """Cut a segment over ``max_tokens`` at statement starts (else any line start): greedy, whole lines."""
    total = sum(line_tokens[seg.first:seg.last + 1])
    if total <= max_tokens or seg.first == seg.last:
        return [seg]
    cuts = {ln for ln in seg.statements if seg.first < ln <= seg.last}
    allowed = lambda ln: not cuts or ln in cuts  # noqa: E731
    out, start, used = [], seg.first, 0

    def piece(a, b):
        return Segment(a, b, seg.kind, seg.symbol, seg.container, tuple(ln for ln in seg.statements if a < ln <= b),
                       seg.part, seg.signature)
    for ln in range(seg.first, seg.last + 1):
        if used and used + line_tokens[ln] > max_tokens and allowed(ln):
            out.append(piece(start, ln - 1))
            start, used = ln, 0
        used += line_tokens[ln]
    out.append(piece(start, seg.last))
    if cuts and any(sum(line_tokens[s.first:s.last + 1]) > max_tokens and s.last > s.first for s in out):
        # one statement alone is over the budget: cut that piece at line starts
        again = []
        for s in out:
            again.extend(_split(dataclasses.replace(s, statements=()), line_tokens, max_tokens))
        out = again
    return out


def _number_parts(pieces: list[Segment], lines: list[str]) -> list[Segment]:
    """Pieces of one split definition: numbered, each later one carrying the definition's signature line."""
    if len(pieces) < 2 or not pieces[0].symbol:
        return pieces
    sig = next((lines[i].strip() for i in range(pieces[0].first, pieces[0].last + 1)
                if lines[i].strip() and not _COMMENT_LINE.match(lines[i])), "")
    for k, p in enumerate(pieces):
        p.part, p.signature = k, sig[:200]
    return pieces


BREADCRUMB_RESERVE = 48  # e5 tokens kept free for a chunk's breadcrumb (file · kind symbol · signature)


def _pieces(segs: list[Segment], line_tokens: list[int], max_tokens: int) -> list[tuple[int, int]]:
    """Group consecutive segments into line ranges of at most ``max_tokens`` (a parent's pieces)."""
    out, start, used, last = [], None, 0, None
    for s in segs:
        t = sum(line_tokens[s.first:s.last + 1])
        if start is not None and used + t > max_tokens:
            out.append((start, last))
            start, used = None, 0
        if start is None:
            start = s.first
        used += t
        last = s.last
    if start is not None:
        out.append((start, last))
    return out


def code_segments(text: str, parsed: CodeParse, max_tokens: int, encoding: str, embed_window: int = 0
                  ) -> tuple[list[Segment], list[str], list[int]]:
    """(segments, lines with their newline, tokens per line). A segment is cut to at most ``max_tokens`` tokens
    of ``encoding`` and, with ``embed_window``, to what e5 reads (its own tokens, a breadcrumb's room kept)."""
    parts = text.split("\n")  # lines as parsers count them (str.splitlines also splits at \f and \u2028)
    lines = [x + "\n" for x in parts[:-1]] + ([parts[-1]] if parts[-1] else [])
    bare = [x.rstrip("\r\n") for x in lines]
    line_tokens = count_tokens_batch(lines, encoding) if lines else []
    if not lines:
        return [], lines, line_tokens
    if parsed.defs:
        segs = _merge_blank(segments(parsed.defs, 0, len(lines) - 1, None), bare)
    else:  # no definitions: module code if it parsed, line windows if it did not
        segs = [Segment(0, len(lines) - 1, "lines" if parsed.parser == "lines" else "module", "", "")]
    fits = [(line_tokens, max_tokens)]
    if embed_window:
        # e5's per-line counts less its fixed overhead add up to the whole; counting by line costs what counting
        # the pieces would (e5's tokenizer is ~1.5 us a character either way, <1% of embedding them)
        from rag.tokens import e5_overhead, e5_tokens

        over = e5_overhead()
        fits.append(([n - over for n in e5_tokens(lines)], embed_window - over - BREADCRUMB_RESERVE))
    out = []
    for s in segs:
        pieces = [s]
        for per_line, cap in fits:  # the tokenizer's budget, then the embedder's window
            pieces = [x for p in pieces for x in _split(p, per_line, cap)]
        out.extend(_number_parts(pieces, bare))
    return _no_blank_pieces(out, bare), lines, line_tokens


def _no_blank_pieces(segs: list[Segment], bare: list[str]) -> list[Segment]:
    """A split can leave a piece of nothing but whitespace (a function's trailing blank line cut off on its own:
    a chunk "\n" that embeds as noise): it joins the piece before it (the first piece: the one after)."""
    out: list[Segment] = []
    carry = None
    for s in segs:
        if not any(bare[i].strip() for i in range(s.first, s.last + 1)):
            if out:
                out[-1].last = s.last
            else:
                carry = s.first if carry is None else carry
            continue
        if carry is not None:
            s.first, carry = carry, None
        out.append(s)
    return out or segs


def parent_ranges(segs: list[Segment], line_tokens: list[int], parent_max: int
                  ) -> list[tuple[int, int, str]]:
    """Parents as (first line, last line, class name or ''): every class (innermost owns its
    segments) and the file, each cut into pieces of at most ``parent_max`` tokens."""
    by_class: dict[str, list[Segment]] = {}
    for s in segs:
        by_class.setdefault(s.container, []).append(s)
    out = []
    for cname, members in by_class.items():
        if cname == "":
            members = segs  # the file parent covers the whole file
        for a, b in _pieces(members, line_tokens, parent_max):
            out.append((a, b, cname))
    return out
