"""Chunkers. Every chunk lies inside one page, carries char offsets into the
document, its chunk_index within the page and its exact token count, so a page
is rebuilt exactly from its chunks (``rebuild_page``).

* ``tokens``: fixed windows of ``chunk_tokens`` tokens with ``overlap`` tokens.
* ``hierarchy``: strategies.md section 5: header_path + breadcrumb, leaves of
  ``leaf_min``-``leaf_max`` tokens split at paragraph then sentence boundaries
  (never mid-sentence unless one sentence alone exceeds ``leaf_max``), short
  leaves merged into the next sibling; parents = the section, up to
  ``parent_max`` tokens, shared by its leaves through ``parent_id``.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field

from rag.models import Document
from rag.tokens import count_tokens, token_char_offsets

_HEADER = re.compile(r"^(#{1,3})[ \t]+(.+?)[ \t]*#*[ \t]*$", re.M)
_SENT_END = re.compile(r"(?<=[.!?;。！？])[\"')\]]*\s+|\n")


@dataclass
class Chunk:
    chunk_id: str
    doc_id: str
    page_id: str
    chunk_index: int
    start: int  # char offsets in the document text
    end: int
    text: str
    n_tokens: int
    parent_id: str
    header_path: list[str] = field(default_factory=list)
    breadcrumb: str = ""
    # source code (rag/ingest/code): the language, the definition (Class.method), its kind, 1-based lines
    code_language: str = ""
    symbol: str = ""
    kind: str = ""
    line_start: int = 0
    line_end: int = 0

    @property
    def embed_text(self) -> str:
        """What gets embedded: the breadcrumb (if any) before the text."""
        return f"{self.breadcrumb}\n{self.text}" if self.breadcrumb else self.text


@dataclass
class Parent:
    parent_id: str
    doc_id: str
    page_id: str
    start: int
    end: int
    text: str
    n_tokens: int
    header_path: list[str] = field(default_factory=list)


CHUNKERS = ("auto", "tokens", "hierarchy", "code")


@dataclass(frozen=True)
class ChunkConfig:
    chunker: str = "auto"  # auto: hierarchy for Markdown, code (function-level) for source files, tokens otherwise
    chunk_tokens: int = 128
    overlap: int = 16
    leaf_min: int = 100
    leaf_max: int = 500
    parent_max: int = 2000
    encoding: str = "o200k_base"
    # code: a chunk's embedded text (breadcrumb + code) is cut to fit this many e5 tokens (multilingual-e5-small
    # reads 512 and drops the rest; 500 o200k tokens of code are ~670 e5 tokens); 0 = no limit
    embed_window: int = 512

    def __post_init__(self):
        if self.chunker not in CHUNKERS:
            raise ValueError(f"unknown chunker {self.chunker!r}; valid: {', '.join(CHUNKERS)}")
        if self.overlap < 0 or self.chunk_tokens < 1:
            raise ValueError(f"chunk_tokens must be >= 1 and overlap >= 0 (chunk_tokens {self.chunk_tokens}, "
                             f"overlap {self.overlap})")
        # the overlap rule binds only where windows overlap: the tokens chunker (auto checks it per corpus, where a
        # document is chunked by tokens: check_windows); hierarchy and code never read either setting
        if self.chunker == "tokens":
            self.check_windows()
        if not 0 < self.leaf_min <= self.leaf_max <= self.parent_max:
            raise ValueError("need 0 < leaf_min <= leaf_max <= parent_max")
        if self.embed_window and self.embed_window < 64:
            raise ValueError(f"embed_window must be 0 (no limit) or at least 64 tokens, not {self.embed_window}")


    def check_windows(self) -> None:
        """Token windows need ``overlap`` below ``chunk_tokens``: the error names both values, and says when the
        overlap is the default one (``--chunk-tokens 16`` alone meets the default overlap of 16)."""
        if self.overlap >= self.chunk_tokens:
            default = " (the default)" if self.overlap == OVERLAP_DEFAULT else ""
            raise ValueError(f"overlap {self.overlap}{default} must be below chunk_tokens {self.chunk_tokens}: token "
                             f"windows step by chunk_tokens - overlap; set overlap below {self.chunk_tokens} "
                             f"(--overlap N, or --set index.overlap=N)")


OVERLAP_DEFAULT = 16
# what each chunking mode reads of a ChunkConfig: a setting no mode of a corpus reads builds the same index whatever
# its value (docs/sweeps.md, "Index axes"); the tokens mode's parents are the hierarchy's sections (leaf_max, parent_max)
MODE_READS = {"tokens": ("chunk_tokens", "overlap", "leaf_max", "parent_max"),
              "hierarchy": ("leaf_min", "leaf_max", "parent_max"),
              "code": ("leaf_max", "parent_max", "embed_window")}


def chunk_mode(doc: Document, chunker: str) -> str:
    """The mode ``chunker`` chunks ``doc`` with: auto picks hierarchy for Markdown, code for source files, tokens
    otherwise; the code chunker chunks prose by tokens."""
    mode = chunker if chunker != "auto" else ("code" if doc.code_language else
                                              "hierarchy" if doc.is_markdown else "tokens")
    return "tokens" if mode == "code" and not doc.code_language else mode


def built_chunking(cfg: ChunkConfig, docs) -> dict:
    """What a corpus's chunks depend on under ``cfg``: the modes its documents are chunked with (and how many
    documents each) and the settings those modes read. Two configs with the same dict build the same chunks."""
    modes: dict[str, int] = {}
    for d in docs:
        m = chunk_mode(d, cfg.chunker)
        modes[m] = modes.get(m, 0) + 1
    reads = sorted({k for m in modes for k in MODE_READS[m]})
    return {"modes": dict(sorted(modes.items())), **{k: getattr(cfg, k) for k in reads}, "encoding": cfg.encoding}


# --------------------------------------------------------------------------- windows

def token_windows(text: str, size: int, overlap: int, encoding: str) -> list[tuple[int, int]]:
    """Char spans of fixed token windows over ``text``."""
    offs = token_char_offsets(text, encoding)
    n = len(offs) - 1
    if n <= 0:
        return []
    spans, i, step = [], 0, size - overlap
    while True:
        j = min(i + size, n)
        s, e = offs[i], offs[j]
        if e > s and (not spans or e > spans[-1][1]):
            spans.append((s, e))
        if j >= n:
            break
        i += step
    return spans


def _split_units(text: str, base: int, max_tokens: int, enc: str) -> list[tuple[int, int]]:
    """Split into paragraphs, paragraphs over max into sentences, sentences over max into windows.

    Returns contiguous spans (absolute offsets) that cover ``text`` exactly.
    """
    def contiguous(cuts: list[int], lo: int, hi: int) -> list[tuple[int, int]]:
        pts = [lo] + [c for c in cuts if lo < c < hi] + [hi]
        return [(a, b) for a, b in zip(pts, pts[1:]) if b > a]

    out = []
    paras = contiguous([m.end() for m in re.finditer(r"\n[ \t]*\n", text)], 0, len(text))
    for ps, pe in paras:
        if count_tokens(text[ps:pe], enc) <= max_tokens:
            out.append((ps, pe))
            continue
        seg = text[ps:pe]
        for ss, se in contiguous([m.end() for m in _SENT_END.finditer(seg)], 0, len(seg)):
            if count_tokens(seg[ss:se], enc) <= max_tokens:
                out.append((ps + ss, ps + se))
            else:  # one sentence longer than a leaf: fall back to token windows
                for ws, we in token_windows(seg[ss:se], max_tokens, 0, enc):
                    out.append((ps + ss + ws, ps + ss + we))
    # make coverage exact (windows may drop nothing, but be safe)
    fixed, pos = [], 0
    for s, e in out:
        fixed.append((pos, e))
        pos = e
    if fixed and fixed[-1][1] < len(text):
        fixed[-1] = (fixed[-1][0], len(text))
    return [(base + s, base + e) for s, e in fixed]


def _pack(units: list[tuple[int, int]], text_of, lo: int, hi: int, enc: str) -> list[tuple[int, int]]:
    """Greedy packing of contiguous units into spans of at most ``hi`` tokens; spans under
    ``lo`` merge into the next sibling when the result still fits, else into the previous."""
    spans: list[list[int]] = []
    cur: list[int] | None = None
    for s, e in units:
        if cur is not None and count_tokens(text_of(cur[0], e), enc) <= hi:
            cur[1] = e
        else:
            if cur is not None:
                spans.append(cur)
            cur = [s, e]
    if cur is not None:
        spans.append(cur)
    i = 0
    while i < len(spans):
        s, e = spans[i]
        if count_tokens(text_of(s, e), enc) < lo and len(spans) > 1:
            if i + 1 < len(spans) and count_tokens(text_of(s, spans[i + 1][1]), enc) <= hi:
                spans[i + 1][0] = s
                spans.pop(i)
                continue
            if i > 0 and count_tokens(text_of(spans[i - 1][0], e), enc) <= hi:
                spans[i - 1][1] = e
                spans.pop(i)
                continue
        i += 1
    return [(s, e) for s, e in spans]


# --------------------------------------------------------------------------- chunk a document

def _header_paths(doc: Document) -> dict[str, list[str]]:
    """The Markdown header path (# > ## > ###) in force at the start of each page."""
    heads = [(m.start(), len(m.group(1)), m.group(2).strip()) for m in _HEADER.finditer(doc.text)] if doc.is_markdown else []
    paths, stack, hi = {}, [], 0
    for page in doc.pages:
        while hi < len(heads) and heads[hi][0] <= page.start:
            _, level, title = heads[hi]
            stack = [h for h in stack if h[0] < level] + [(level, title)]
            hi += 1
        paths[page.page_id] = [t for _, t in stack]
    return paths


def chunk_document(doc: Document, cfg: ChunkConfig = ChunkConfig()) -> tuple[list[Chunk], list[Parent]]:
    mode = chunk_mode(doc, cfg.chunker)  # prose in a code-chunked corpus: token windows
    if mode == "code":
        return code_chunks(doc, cfg)
    if mode == "tokens":
        cfg.check_windows()  # auto on a corpus with prose: the rule binds here (never a window that steps by 0)
    paths = _header_paths(doc)
    source = doc.source_path.split("/")[-1] or doc.doc_id
    chunks: list[Chunk] = []
    parents: list[Parent] = []
    for page in doc.pages:
        hp = paths.get(page.page_id, [])
        crumb = f"[Source: {' > '.join([source] + hp)}]" if mode == "hierarchy" else ""
        text_of = lambda s, e, _p=page: doc.text[s:e]  # noqa: E731
        # parents: the section (page) up to parent_max tokens, split at paragraphs when longer
        units = _split_units(page.text, page.start, cfg.leaf_max, cfg.encoding)
        par_spans = _pack(units, text_of, 1, cfg.parent_max, cfg.encoding)
        page_parents = []
        for k, (s, e) in enumerate(par_spans):
            pid = f"{page.page_id}/s{k}"
            page_parents.append(Parent(pid, doc.doc_id, page.page_id, s, e, doc.text[s:e],
                                       count_tokens(doc.text[s:e], cfg.encoding), hp))
        parents.extend(page_parents)
        if mode == "tokens":
            spans = [(page.start + s, page.start + e)
                     for s, e in token_windows(page.text, cfg.chunk_tokens, cfg.overlap, cfg.encoding)]
        else:
            spans = []
            for par in page_parents:  # leaves never cross their parent
                sub = [(s, e) for s, e in units if par.start <= s < par.end]
                spans.extend(_pack(sub, text_of, cfg.leaf_min, cfg.leaf_max, cfg.encoding))
        for ci, (s, e) in enumerate(spans):
            par = next(p for p in page_parents if p.start <= s < p.end)
            t = doc.text[s:e]
            chunks.append(Chunk(f"{page.page_id}/c{ci}", doc.doc_id, page.page_id, ci, s, e, t,
                                count_tokens(t, cfg.encoding), par.parent_id, hp, crumb, doc.code_language,
                                **_code_lines(doc, s, e)))
    return chunks, parents


def _code_lines(doc: Document, s: int, e: int) -> dict:
    """Line range of a token window of a source file (windows of code keep their lines too)."""
    if not doc.code_language:
        return {}
    return {"kind": "lines", "line_start": doc.text.count("\n", 0, s) + 1,
            "line_end": doc.text.count("\n", 0, max(s, e - 1)) + 1}


def code_parse(doc: Document):
    """The definitions of a source document (parsed once, kept on the document)."""
    if doc.code_parse is None:
        from .code import parse_code

        doc.code_parse = parse_code(doc.text, doc.code_language)
    return doc.code_parse


def code_breadcrumb(doc_id: str, sg) -> str:
    """What a code chunk is, embedded and BM25-indexed before its text (as Markdown chunks carry their headers):
    the file, the kind and qualified symbol, and for a later piece of a split definition its signature, so a
    query for `HelpFormatter.write_dl` or a file name finds every piece."""
    crumb = doc_id + (f" · {sg.kind} {sg.symbol}" if sg.symbol else "")
    if sg.part or getattr(sg, "doc_only", False):  # a doc comment cut off alone embeds with the code it documents
        crumb += f" (part {sg.part + 1})" + (f" · {sg.signature}" if sg.signature else "")
    return crumb


def code_chunks(doc: Document, cfg: ChunkConfig) -> tuple[list[Chunk], list[Parent]]:
    """Function-level chunks of a source file (rag/ingest/code/chunks.py); the page is the whole file."""
    from .code.chunks import code_segments, parent_ranges

    parsed = code_parse(doc)
    segs, lines, line_tokens = code_segments(doc.text, parsed, cfg.leaf_max, cfg.encoding, cfg.embed_window,
                                              doc.doc_id, doc.code_language)
    page = doc.pages[0]
    starts = [0]
    for ln in lines:
        starts.append(starts[-1] + len(ln))
    parents: list[Parent] = []
    owner: list[tuple[int, int, str, str]] = []  # (first, last, class, parent_id)
    for k, (a, b, cname) in enumerate(parent_ranges(segs, line_tokens, cfg.parent_max)):
        s, e = starts[a], starts[b + 1]
        pid = f"{page.page_id}/s{k}"
        parents.append(Parent(pid, doc.doc_id, page.page_id, s, e, doc.text[s:e],
                              count_tokens(doc.text[s:e], cfg.encoding), [cname] if cname else []))
        owner.append((a, b, cname, pid))
    chunks = []
    from .code import is_stub

    stub = is_stub(doc.doc_id)  # a .pyi or .d.ts: every chunk is kind "stub" (ranked below implementations)
    for ci, sg in enumerate(segs):
        s, e = starts[sg.first], starts[sg.last + 1]
        pid = next(p for a, b, cname, p in owner if cname == sg.container and a <= sg.first <= b)
        t = doc.text[s:e]
        last = sg.first + t.rstrip().count("\n")  # the lines shown: trailing blank lines not counted
        chunks.append(Chunk(f"{page.page_id}/c{ci}", doc.doc_id, page.page_id, ci, s, e, t,
                            count_tokens(t, cfg.encoding), pid, sg.symbol.split(".") if sg.symbol else [],
                            code_breadcrumb(doc.doc_id, sg), doc.code_language, sg.symbol,
                            "stub" if stub else sg.kind, sg.first + 1,
                            last + 1))
    return chunks, parents


def rebuild_page(chunks: list, page_start: int | None = None) -> str:
    """Join a page's chunks back (in chunk_index order), removing window overlap by offsets.

    Works on Chunk objects or dicts with ``chunk_index``, ``start``, ``end``, ``text``.
    """
    get = (lambda c, k: c[k]) if chunks and isinstance(chunks[0], dict) else getattr
    ordered = sorted(chunks, key=lambda c: get(c, "chunk_index"))
    out, pos = [], None
    for c in ordered:
        s, e, t = get(c, "start"), get(c, "end"), get(c, "text")
        if pos is None:
            out.append(t)
        elif e > pos:
            out.append(t[max(0, pos - s):] if s < pos else t)
        pos = e if pos is None else max(pos, e)
    return "".join(out)
