"""What an ingest did, in counts and one readable summary (added, replaced, skipped, kept with a warning, embedded, over the embedder's window)."""
from __future__ import annotations

from .config import ANN_MIN_CHUNKS
from dataclasses import dataclass, field
from pathlib import Path


@dataclass
class IngestSummary:
    dataset: str
    index: str
    documents: int = 0
    pages: int = 0
    chunks: int = 0
    tokens: int = 0
    questions: int = 0
    added: int = 0
    replaced: int = 0
    unchanged: int = 0
    removed: int = 0
    embedded: int = 0
    cache_hits: int = 0
    seconds: float = 0.0
    embed_seconds: float = 0.0
    embedded_tokens: int = 0  # the embedder's own tokens of the texts embedded now, cut to its window (0: unknown)
    blank_pages: int = 0  # pages with no text (kept for their page number; no chunks)
    parse_seconds: float = 0.0
    file_parse_seconds: dict = field(default_factory=dict)
    file_embed_seconds: dict = field(default_factory=dict)
    notices: list = field(default_factory=list)  # repairs made (one line each)
    vector_index: str = "exact"  # exact (in-memory flat search) | IVF_HNSW_SQ (LanceDB ANN index)
    vector_index_seconds: float = 0.0
    skipped: list = field(default_factory=list)
    # chunks longer than the embedder reads (their tails are never embedded), the longest named: over the chunks
    # this ingest embedded (local engine; a cached vector was checked when it was embedded), over every chunk of
    # the changed documents with the Ray engine (counted in its parallel chunk tasks)
    over_window: int = 0
    window: int = 0
    over_window_worst: list = field(default_factory=list)  # (chunk_id, tokens), longest first
    # source code: documented functions and methods, and those whose doc ends in another chunk than their signature
    documented: int = 0
    doc_split: int = 0
    doc_split_named: list = field(default_factory=list)
    code_sizes: dict = field(default_factory=dict)  # band of non-blank lines -> code chunks

    def note_doc_splits(self, doc, chunks) -> None:
        for c in chunks:  # the code chunks' sizes in lines, said in the summary (issue 86, 2: tiny ones ranked first)
            if c.line_end:
                lines = sum(1 for x in c.text.split("\n") if x.strip())
                band = next(b for b, top in SIZE_BANDS if lines <= top)
                self.code_sizes[band] = self.code_sizes.get(band, 0) + 1
        n, m, named = doc_splits(doc, chunks)
        self.documented += n
        self.doc_split += m
        self.doc_split_named += named[:max(0, 3 - len(self.doc_split_named))]

    def note_over_window(self, emb, texts: list[str], chunk_ids: list[str]) -> None:
        counts = emb.count_tokens(texts) if emb.max_tokens and texts else None
        if counts:  # what the engine reads (cut to its window): what an embed costs, kept with the rate
            self.embedded_tokens = sum(min(n, emb.max_tokens) for n in counts)
            self.note_over_window_counts(emb, len(texts), [(c, n) for c, n in zip(chunk_ids, counts)
                                                           if n > emb.max_tokens])

    def note_over_window_counts(self, emb, n_chunks: int, over: list[tuple[str, int]]) -> None:
        """``over``: (chunk_id, tokens) of the chunks longer than the embedder reads; one notice names them."""
        if not emb.max_tokens:
            return
        self.window, self.over_window = emb.max_tokens, len(over)
        self.over_window_worst = sorted(over, key=lambda x: (-x[1], x[0]))[:3]
        if over:
            worst = "; ".join(f"{c} ({n:,} tokens)" for c, n in self.over_window_worst)
            self.notices.append(
                f"{len(over)} of {n_chunks} chunks are longer than the {emb.max_tokens} tokens {emb.name} reads: "
                f"their tails are not embedded (longest: {worst}); smaller --chunk-tokens or --leaf-max fit them")

    def render(self) -> str:
        lines = [
            f"ingested {self.dataset} into index {self.index}",
            f"  documents {self.documents} (added {self.added}, replaced {self.replaced}, unchanged {self.unchanged}, "
            f"removed {self.removed})",
            f"  pages {self.pages} ({self.blank_pages} blank)  chunks {self.chunks}  tokens {self.tokens}  "
            f"questions {self.questions}",
            f"  vector index: {self.vector_index}"
            + (f" (built in {self.vector_index_seconds:.1f}s)" if self.vector_index_seconds else
               (f" (ANN above {ANN_MIN_CHUNKS:,} chunks)" if self.vector_index == "exact" else "")),
            f"  parsed {len(self.file_parse_seconds)} file(s) in {self.parse_seconds:.1f}s; embedded {self.embedded} "
            f"chunks ({self.cache_hits} from cache) in {self.embed_seconds:.1f}s; total {self.seconds:.1f}s",
        ]
        slow = sorted(set(self.file_parse_seconds) | set(self.file_embed_seconds),
                      key=lambda f: -(self.file_parse_seconds.get(f, 0) + self.file_embed_seconds.get(f, 0)))
        if self.file_parse_seconds and slow:
            lines.append("  slowest files: " + "; ".join(
                f"{_short_path(f)} parse {self.file_parse_seconds.get(f, 0):.2f}s embed "
                f"{self.file_embed_seconds.get(f, 0):.2f}s" for f in slow[:5]))
        if self.code_sizes:
            total = sum(self.code_sizes.values())
            lines.append("  code chunks by non-blank lines: " + ", ".join(
                f"{b} {self.code_sizes.get(b, 0):,} ({self.code_sizes.get(b, 0) / total:.0%})" for b, _ in SIZE_BANDS))
        if self.documented:  # 0 split where docs attach as the language's doc tool reads them (issue 75)
            lines.append(f"  code: {self.documented:,} documented definition(s), {self.doc_split:,} with the doc in "
                         "another chunk" + (f" (e.g. {'; '.join(self.doc_split_named)})" if self.doc_split else ""))
        lines += [f"  notice: {n}" for n in self.notices]
        # what was left out, and apart from it what was kept with a warning (a file ingested with a downgrade is
        # not a skipped file)
        left = [s for s in self.skipped if getattr(s, "kind", "skipped") != "warning"]
        warned = [s for s in self.skipped if getattr(s, "kind", "skipped") == "warning"]
        lines.append(f"  skipped {len(left)}" + (":" if left else ""))
        lines += [f"    - {s}" for s in left]
        if warned:
            lines.append(f"  kept with a warning {len(warned)}:")
            lines += [f"    - {s}" for s in warned]
        from rag.safeio import printable

        # file names come from outside: a control character in one is shown escaped, never run by the terminal
        return "\n".join(printable(x) for x in lines)


SIZE_BANDS = (("1-2", 2), ("3-10", 10), ("11-40", 40), ("41+", 10**9))


def doc_splits(doc, chunks) -> tuple[int, int, list[str]]:
    """(documented definitions, those whose doc starts in another chunk than their signature (a definition cut
    into pieces for its size included), the worst few named: the doc farthest from its signature first):
    0 split where the chunker attaches docs as the language's doc tool reads them (the ingest says the count, so
    the next language's gap shows at ingest: issue 75)."""
    from rag.ingest.chunking import code_parse
    from rag.ingest.code import all_defs
    from rag.ingest.code.docs import doc_block, is_attribute_line, leading_start

    lines = doc.text.split("\n")
    spans = [(c.line_start - 1, c.line_end - 1, c.symbol) for c in chunks if c.line_end]
    documented, split, named = 0, 0, []
    for d in all_defs(code_parse(doc).defs):
        if d.kind not in ("function", "method") or d.children:
            continue
        head = d.head if d.head >= 0 else d.first
        sig = next((k for k in range(head, d.last + 1) if lines[k].strip() and not is_attribute_line(lines[k])
                    and not lines[k].lstrip().startswith(("//", "/*", "*", "#"))), head)
        # the doc found from the signature up, as the language's doc tool reads it: never from where the chunker
        # put the definition's first line (a chunker that lost the doc would find none, and count nothing)
        start = leading_start(lines, sig, -1)
        block = doc_block(lines, start, sig, doc.code_language)
        if not block:
            continue
        documented += 1
        doc_first = next(k for k in range(start, sig) if lines[k:k + len(block)] == block)
        # a definition cut into pieces for its size counts too (issue 86, 3: the count left them out and said 0
        # while 29 of libusb's 94 doc questions found a doc piece with no code): its first piece should hold the doc
        # and the signature
        if not any(a <= doc_first and sig <= b for a, b, _ in spans):
            split += 1
            named.append((sig - doc_first, f"{doc.doc_id}:{sig + 1} {d.name}"))
    # the worst first: the doc farthest from its signature
    return documented, split, [n for _, n in sorted(named, key=lambda x: -x[0])[:3]]


def _short_path(f: str) -> str:
    """A file as a reader tells it apart: relative to the working folder where it lies below it, else its last three
    parts (three files called schemas.ts are three different paths, not one base name)."""
    p = Path(f)
    try:
        return str(p.resolve().relative_to(Path.cwd()))
    except (ValueError, OSError):
        return str(Path(*p.parts[-3:])) if len(p.parts) > 3 else str(p)
