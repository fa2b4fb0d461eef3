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
    signature: str = ""  # the implementation's signature line, carried by its later pieces (their breadcrumb)
    head: int = -1  # the definition's own first line (Def.head; -1 = first)
    overloads: tuple = ()  # where overload signatures joined above it start (Def.overloads)
    doc_only: bool = False  # a split definition's piece of nothing but its doc comment (carries the signature)


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
            out.append(Segment(d.first, last, d.kind, d.name, cname, tuple(d.statements), head=d.head,
                               overloads=tuple(d.overloads)))
        pos = last + 1
    if pos <= hi:
        out.append(Segment(pos, hi, gap_kind, gap_symbol, cname))
    return out


# a line that starts an import (Python, JS/TS, Go, Rust, Java, C/C++, Ruby, shell), read at bracket depth 0
_IMPORT_START = re.compile(r"^\s*(import\b|from\s+\S+\s+import\b|export\s+(\*|\{[^}]*\}?|type\s+\{)[^;]*\bfrom\b|"
                           r"export\s+\*|package\s|use\s|extern\s+crate\s|mod\s+\w+\s*;|#\s*include\b|"
                           r"require(_relative)?\b|(const|let|var)\s+[\w{},\s]+=\s*require\(|source\s|\.\s|"
                           r"['\"]use strict['\"])")
_OPEN, _CLOSE = "([{", ")]}"


def imports_only(lines: list[str]) -> bool:
    """Is a module-level segment nothing but imports (``import``/``from``/``package``/``use``/``#include``/
    ``require``, a multi-line ``import (...)`` or ``import {...} from`` in), comments and blank lines? Such a
    chunk is kind ``imports``: a quarter of a TypeScript index (every file opens with one) that matched queries
    by the names it imports."""
    depth, seen = 0, False
    for raw in lines:
        x = raw.strip()
        if not x or (depth == 0 and _COMMENT_LINE.match(raw) and not x.startswith("@")):
            continue
        if depth == 0:
            if not _IMPORT_START.match(raw):
                return False
            seen = True
        depth = max(0, depth + sum(x.count(c) for c in _OPEN) - sum(x.count(c) for c in _CLOSE))
    return seen


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


def _join_comment_only(segs: list[Segment], bare: list[str]) -> list[Segment]:
    """A module or class gap of nothing but comments (a section banner `/* NOTIFICATIONS */`, a licence header, a
    doc comment no definition took) is never a chunk of its own: it ranked above code and showed none. It joins
    the segment after it (the definition it stands above), the last one joins the segment before."""
    from .docs import documents_no_definition

    out: list[Segment] = []
    carry = None
    for s in segs:
        if s.kind in ("module", "class") and all(not bare[i].strip() or _COMMENT_LINE.match(bare[i])
                                                for i in range(s.first, s.last + 1)):
            if documents_no_definition(bare[s.first:s.last + 1], banner=True):  # a Doxygen \page, a long banner: prose of its
                if carry is not None:  # own, kind "doc", never the next definition's comment (issue 86, 4)
                    s, carry = dataclasses.replace(s, first=carry), None
                out.append(dataclasses.replace(s, kind="doc"))
                continue
            carry = s.first if carry is None else carry
            continue
        if carry is not None:
            s = dataclasses.replace(s, first=carry)
            carry = None
        out.append(s)
    if carry is not None:
        if out:
            out[-1] = dataclasses.replace(out[-1], last=segs[-1].last)
        else:
            return segs
    return out


def _comment_up(line: int, floor: int, bare: list[str]) -> int:
    """The first line of the comment (and decorator) lines right above ``line``, not above ``floor`` (a doc
    comment a blank line or two above counts)."""
    from . import leading_comment_start

    return leading_comment_start(bare, line, floor)


_DOC_MARK = re.compile(r"^\s*(/\*\*?|\*/?|//+|#+)")  # a comment line (decorators are code here)
_DOC_PARAGRAPH = re.compile(r"^\s*(\*|///?|#)\s*$")  # a doc comment's blank line (` *`, `///`, `#`)


def _code_start(seg: Segment, bare: list[str]) -> int:
    """The first line of a definition's code under its leading doc comment (decorators in): where its doc ends."""
    for i in range(seg.first, seg.last + 1):
        if bare[i].strip() and not _DOC_MARK.match(bare[i]):
            return i
    return seg.first


def _code_head(seg: Segment, bare: list[str]) -> int:
    """Where the implementation's code starts: its first line at or after its own start that is no comment
    (decorators and attributes in: a cut there keeps them with the definition)."""
    start = seg.head if seg.head >= 0 else seg.first
    for i in range(start, seg.last + 1):
        if bare[i].strip() and not _COMMENT_LINE.match(bare[i]):
            return i
    return start


def _signature_line(seg: Segment, bare: list[str]) -> int:
    """The implementation's signature: the first code line at or after its own start that is no comment and no
    attribute, annotation or decorator (one spanning lines included), not the first overload's. A later piece
    showed `#[inline]` or `@CanIgnoreReturnValue` as "the code it documents" (issue 86, 3)."""
    from .docs import is_attribute_line

    start = seg.head if seg.head >= 0 else seg.first
    first_code, depth = None, 0
    for i in range(start, seg.last + 1):
        x = bare[i]
        if not x.strip() or _COMMENT_LINE.match(x):
            continue
        first_code = i if first_code is None else first_code
        if depth > 0 or is_attribute_line(x):  # an attribute, or a line inside one still open
            depth = max(0, depth + x.count("(") + x.count("[") - x.count(")") - x.count("]"))
            continue
        return i
    return start if first_code is None else first_code


BODY_LINES_TO_CUT = 3  # a body of fewer code lines stays whole with its signature (a one-line body alone is noise)


def _doc_with_signature(seg: Segment, bare: list[str], costs: list, impl: int) -> bool:
    """Can the first piece hold the doc, the signature and the body's first statements, the rest of the body after?
    Only for a body of ``BODY_LINES_TO_CUT`` code lines or more with a statement to cut at: a split definition then
    keeps its doc with its signature (issue 86, 3: libusb's doc questions found doc pieces that showed no code);
    a short body stays with its signature (issue 65, 2)."""
    sig = _signature_line(seg, bare)
    body = sum(1 for i in range(sig + 1, seg.last + 1) if bare[i].strip() and not _COMMENT_LINE.match(bare[i]))
    if body < BODY_LINES_TO_CUT:
        return False
    return any(st > sig and not any(sum(lt[impl:st]) > cap for lt, cap in costs) for st in seg.statements)


def cut_tiers(seg: Segment, bare: list[str], costs: list | None = None) -> list[tuple[set, bool]]:
    """Where a definition over its budget is cut, best first, as (lines a piece may start at, forced):
    1. forced: between its joined overload signatures and the implementation's doc comment (the implementation
       then stands alone with its doc, as it would without overloads);
    2. between body statements (a comment glued to the statement below it, a docstring to the signature) and
       between overloads;
    3. between the doc comment and the signature (only when doc and signature alone are over);
    4. any line start outside a comment; 5. any line start.
    Where the code (signature and body, under ``costs``) fits on its own, the doc comment is cut off first, then at
    its paragraphs: signature and body stay one piece (rxjs's `exhaustAll` was [doc tail + signature] and
    [`return exhaustMap(identity); }`] alone; issue 65, 2)."""
    sig = _code_head(seg, bare)
    impl = _comment_up(seg.head, seg.first, bare) if seg.head > seg.first else seg.first
    ovl = {_comment_up(o, seg.first, bare) for o in seg.overloads[1:]}
    tiers: list[tuple[set, bool]] = []
    if seg.overloads:
        tiers.append(({impl}, True))
    code0 = _code_start(dataclasses.replace(seg, first=impl), bare)
    if costs is not None and code0 > impl and not any(sum(lt[code0:seg.last + 1]) > cap for lt, cap in costs) \
            and not _doc_with_signature(seg, bare, costs, impl):
        # one cut: the code with as much of its doc (from a paragraph break down) as fits; the doc above it is
        # then cut at its paragraphs
        paragraphs = sorted(i + 1 for i in range(impl, code0 - 1) if _DOC_PARAGRAPH.match(bare[i]))
        best = next((b for b in paragraphs if b > seg.first and
                     not any(sum(lt[b:seg.last + 1]) > cap for lt, cap in costs)), code0)
        tiers.append(({best}, True))
        tiers.append((set(paragraphs), False))
    tiers.append((set(seg.statements) | ovl, False))
    tiers.append(({sig}, False))
    outside = {i for i in range(seg.first + 1, seg.last + 1)
               if not (_COMMENT_LINE.match(bare[i]) and bare[i - 1].strip() and _COMMENT_LINE.match(bare[i - 1]))}
    tiers.append((outside, False))
    tiers.append((set(range(seg.first + 1, seg.last + 1)), False))
    return tiers


def _split(seg: Segment, costs: list[tuple[list[int], int]], tiers: list[tuple[set, bool]] | None = None
           ) -> list[Segment]:
    """Cut a segment over its budgets into whole-line pieces at the best tier of ``cut_tiers`` that has a cut
    inside it: a forced tier cuts at every one of its lines, the others greedily (each piece as long as fits,
    cut at the latest allowed line); a piece still over is cut again at the next tiers. ``costs``: (tokens per
    line, budget) pairs, all held at once (the tokenizer's and the embedder's: one greedy pass under both, not
    one pass after the other)."""

    def over(a, b):
        return any(sum(lt[a:b + 1]) > cap for lt, cap in costs)
    if seg.first == seg.last or not over(seg.first, seg.last):
        return [seg]
    if tiers is None:  # no definition to read: statements, else line starts
        tiers = [(set(seg.statements), False), (set(range(seg.first + 1, seg.last + 1)), False)]
    k, cuts, forced = 0, set(), False
    while k < len(tiers):
        cuts, forced = {ln for ln in tiers[k][0] if seg.first < ln <= seg.last}, tiers[k][1]
        k += 1
        if cuts:
            break
    if not cuts:
        return [seg]

    def piece(a, b):
        return dataclasses.replace(seg, first=a, last=b, statements=tuple(ln for ln in seg.statements if a < ln <= b))
    bounds = []
    if forced:
        starts = [seg.first] + sorted(cuts)
        bounds = list(zip(starts, [x - 1 for x in starts[1:]] + [seg.last]))
    else:
        start, last_cut = seg.first, None
        used = [0] * len(costs)
        at_cut = used
        for ln in range(seg.first, seg.last + 1):
            if ln in cuts and ln > start:
                last_cut, at_cut = ln, list(used)
            if last_cut is not None and any(u + lt[ln] > cap for u, (lt, cap) in zip(used, costs)):
                bounds.append((start, last_cut - 1))
                start, used, last_cut = last_cut, [u - c for u, c in zip(used, at_cut)], None
            used = [u + lt[ln] for u, (lt, _) in zip(used, costs)]
        bounds.append((start, seg.last))
    out = []
    for a, b in bounds:
        if b > a and over(a, b):
            out.extend(_split(piece(a, b), costs, tiers[k:] or [(set(range(a + 1, b + 1)), False)]))
        else:
            out.append(piece(a, b))
    return out


def _number_parts(pieces: list[Segment], lines: list[str]) -> list[Segment]:
    """Pieces of one split definition: numbered, each carrying the implementation's signature line (the first
    overload's is not the one the body belongs to)."""
    if len(pieces) < 2 or not pieces[0].symbol:
        return pieces
    whole = dataclasses.replace(pieces[0], last=pieces[-1].last)
    sig = lines[_signature_line(whole, lines)].strip()
    impl = _comment_up(whole.head, whole.first, lines) if whole.overloads and whole.head > whole.first else -1
    for k, p in enumerate(pieces):
        p.part, p.signature = k, sig[:200]
        p.doc_only = all(not lines[i].strip() or _COMMENT_LINE.match(lines[i]) for i in range(p.first, p.last + 1))
        if impl > p.last:  # overload signatures alone: not the definition's evidence, and its header says so
            p.kind = "overload"
    return pieces


def _merge_one_line(pieces: list[Segment], costs: list[tuple[list[int], int]], bare: list[str]) -> list[Segment]:
    """A piece of one line (a signature cut off alone, a closing triple quote) is noise on its own: it joins the piece
    before it, else the one after, where the joined piece stays within every budget (issue 55, 1)."""
    def fits(a, b):
        return not any(sum(lt[a:b + 1]) > cap for lt, cap in costs)

    def one_line(p):
        return sum(1 for i in range(p.first, p.last + 1) if bare[i].strip()) <= 1

    out: list[Segment] = []
    for p in pieces:
        if out and (one_line(p) or one_line(out[-1])) and fits(out[-1].first, p.last):
            prev = out[-1]
            out[-1] = dataclasses.replace(prev, last=p.last, statements=prev.statements + p.statements)
            continue
        out.append(p)
    return out




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


def code_segments(text: str, parsed: CodeParse, max_tokens: int, encoding: str, embed_window: int = 0,
                  doc_id: str = "", language: str = "") -> tuple[list[Segment], list[str], list[int]]:
    """(segments, lines with their newline, tokens per line). A segment is cut to at most ``max_tokens`` tokens
    of ``encoding`` and, with ``embed_window``, to what e5 reads (its own tokens, with room for the breadcrumb
    it will carry: counted for each definition, a long TypeScript signature included). Module-level segments
    that hold nothing but imports are kind ``imports``."""
    parts = text.split("\n")  # lines as parsers count them (str.splitlines also splits at \f and \u2028)
    lines = [x + "\n" for x in parts[:-1]] + ([parts[-1]] if parts[-1] else [])
    from .docs import mark_block_comments

    # comment detection reads a /* */ block's prose lines as comment lines (Javadoc written without `*`: issue 75)
    bare = mark_block_comments([x.rstrip("\r\n") for x in lines])
    line_tokens = count_tokens_batch(lines, encoding) if lines else []
    if not lines:
        return [], lines, line_tokens
    if parsed.defs:
        segs = _join_comment_only(_merge_blank(segments(parsed.defs, 0, len(lines) - 1, None), bare), bare)
    else:  # no definitions: module code if it parsed, line windows if it did not
        segs = [Segment(0, len(lines) - 1, "lines" if parsed.parser == "lines" else "module", "", "")]
    e5_lines, over = None, 0
    if embed_window:
        # e5's per-line counts less its fixed overhead add up to the whole; counting by line costs what counting
        # the pieces would (e5's tokenizer is ~1.5 us a character either way, <1% of embedding them)
        from rag.tokens import e5_overhead, e5_tokens

        over = e5_overhead()
        e5_lines = [n - over for n in e5_tokens(lines)]
    out = []
    for s in segs:
        costs = [(line_tokens, max_tokens)]  # the tokenizer's budget, and the embedder's window less the
        if e5_lines is not None:  # breadcrumb this definition carries (whole, or as a numbered piece)
            code_e5 = sum(e5_lines[s.first:s.last + 1])
            fits_o200k = sum(line_tokens[s.first:s.last + 1]) <= max_tokens
            # a breadcrumb is at most two e5 tokens a character: far under the window, nothing to count (most
            # definitions; counting every breadcrumb cost code-boltons' chunking 0.6 s)
            bound = 2 * (len(doc_id) + len(s.kind) + len(s.symbol) + 4) + 2
            if fits_o200k and code_e5 + bound <= embed_window - over:
                costs.append((e5_lines, embed_window - over - bound))
            else:
                whole, split = _crumb_tokens(doc_id, s, bare, over)
                fits = fits_o200k and code_e5 <= embed_window - over - whole
                costs.append((e5_lines, embed_window - over - (whole if fits else split)))
        if not any(sum(lt[s.first:s.last + 1]) > cap for lt, cap in costs):  # most definitions: no cut to plan
            out.append(s)
            continue
        pieces = _merge_one_line(_split(s, costs, cut_tiers(s, bare, costs) if s.symbol else None), costs, bare)
        out.extend(_number_parts(pieces, bare))
    out = _merge_tiny(out, bare, line_tokens, max_tokens, e5_lines, embed_window - over if embed_window else 0,
                      language)
    for sg in out:
        if sg.kind == "module" and imports_only(bare[sg.first:sg.last + 1]):
            sg.kind = "imports"
    return _no_blank_pieces(out, bare), lines, line_tokens


TINY_LINES = 2  # a chunk of this many non-blank lines or fewer does not stand alone where a neighbour can take it
# where tiny chunks ranked first (issue 86: C 29 of 54 misses, Rust 27 of 93; Java 0 of 42, Python 3 of 53): the
# languages whose chunks merge (elsewhere a one-line module statement stays its own chunk, as measured fine)
TINY_MERGE_LANGUAGES = ("c", "cpp", "rust")


def _lines_of(s: Segment, bare: list[str]) -> int:
    return sum(1 for i in range(s.first, s.last + 1) if bare[i].strip())


def _prototype(s: Segment, bare: list[str], language: str) -> bool:
    """A C or C++ declaration with no body (``int LIBUSB_CALL libusb_open(...);``)."""
    if language not in ("c", "cpp") or s.kind != "function":
        return False
    code = [bare[i].strip() for i in range(s.first, s.last + 1) if bare[i].strip() and not _COMMENT_LINE.match(bare[i])]
    return bool(code) and code[-1].endswith(";") and not any("{" in x for x in code)


def _merge_tiny(segs: list[Segment], bare: list[str], line_tokens: list[int], max_tokens: int, e5_lines,
                e5_cap: int, language: str) -> list[Segment]:
    """No tiny chunk stands alone (issue 86, 2: chunks of one or two lines ranked first for 29 of 54 C questions and
    27 of 93 Rust ones): a segment of ``TINY_LINES`` lines or fewer joins a neighbour of its scope where the two
    fit every budget. Which ones: a gap of module code with no name (a stray `#define`, a lone statement); an
    associated type or other type member inside an impl or class (it joins the header); a C/C++ prototype (it joins
    the prototypes around it, the run keeping the first one's name). A named definition with a body keeps its own
    chunk (its exact name finds it), as does a class header (it receives, never moves). Whole lines, back to back:
    the file still rebuilds exactly. Only in ``TINY_MERGE_LANGUAGES``."""
    if language not in TINY_MERGE_LANGUAGES:
        return segs

    def fits(a: int, b: int) -> bool:
        if sum(line_tokens[a:b + 1]) > max_tokens:
            return False
        return e5_lines is None or sum(e5_lines[a:b + 1]) <= e5_cap - 24  # room for the breadcrumb it carries

    def movable(s: Segment) -> str:
        if s.part or s.doc_only or _lines_of(s, bare) > TINY_LINES:
            return ""
        if _prototype(s, bare, language):
            return "prototype"
        if s.kind == "module" and not s.symbol and not imports_only(bare[s.first:s.last + 1]):
            return "gap"  # a `use` or `#include` run stays together, its own chunk (kind imports, ranked last)
        if s.kind == "type" and s.container:
            return "member"
        return ""

    out: list[Segment] = []
    protos: set[int] = set()  # indices in ``out`` of prototype runs
    pending: Segment | None = None  # a tiny segment with nothing before it to join: it joins the next
    for s in segs:
        if pending is not None:
            if pending.container == s.container and fits(pending.first, s.last) and not movable(s):
                s = dataclasses.replace(s, first=pending.first, statements=pending.statements + s.statements)
            else:
                out.append(pending)
            pending = None
        how = movable(s)
        prev = out[-1] if out else None
        if how and prev is not None and prev.container == s.container and fits(prev.first, s.last) and (
                how != "prototype" or len(out) - 1 in protos or not _is_split(prev)):
            out[-1] = dataclasses.replace(prev, last=s.last, statements=prev.statements + s.statements)
            continue
        if how and how != "member":  # nothing before it to take it: the next one does, if it can
            pending = s
            continue
        if _prototype(s, bare, language):  # a prototype kept whole (longer than tiny): a run others may join
            protos.add(len(out))
        out.append(s)
    if pending is not None:
        out.append(pending)
    return out


def _is_split(s: Segment) -> bool:
    return bool(s.part) or bool(s.signature)


def _crumb_tokens(doc_id: str, s: Segment, bare: list[str], over: int) -> tuple[int, int]:
    """e5 tokens of the breadcrumb a segment carries whole, and as a later piece of its split (part number and
    the implementation's signature in): rag/ingest/chunking.py ``code_breadcrumb``, plus its newline."""
    from rag.tokens import e5_tokens

    crumb = doc_id + (f" · {s.kind} {s.symbol}" if s.symbol else "")
    sig = bare[_signature_line(s, bare)].strip()[:200] if s.symbol else ""
    split = crumb + " (part 99)" + (f" · {sig}" if sig else "")
    a, b = e5_tokens([crumb + "\n", split + "\n"])
    return a - over, b - over


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
