"""full_documents: chunks find the files; whole files are the context."""
from __future__ import annotations

from dataclasses import dataclass


from rag.tokens import count_tokens_memo
from .base import (STRATEGIES, BaseParams, Context, Strategy, make_params, params_dict, register_strategy)
from .packing import _prefetch, _text_prefix, counters, pack_blocks


@dataclass(frozen=True)
class FullDocumentsParams(BaseParams):
    top_k: int = 8
    max_total_chars: int = 80000
    on_overflow: str = "stop"  # stop (shipped) | skip (keep trying smaller documents)
    load_from: str = "index"  # index (documents table) | source (re-read the source file)

    def validate(self):
        super().validate()
        if self.on_overflow not in ("stop", "skip"):
            raise ValueError(f"on_overflow must be 'stop' or 'skip', not {self.on_overflow!r}")
        if self.load_from not in ("index", "source"):
            raise ValueError(f"load_from must be 'index' or 'source', not {self.load_from!r}")


def _load_source_text(path: str) -> str | None:
    from pathlib import Path

    from rag.ingest.readers import ImportError_, load_file

    p = Path(path)
    if not p.is_file():
        return None
    try:
        return load_file(p, p.name).text
    except (ImportError_, OSError):
        return None


@register_strategy
class FullDocumentsStrategy(Strategy):
    name = "full_documents"
    description = "chunks find the files; whole files (ranked by hits, then mean similarity) are the context"
    Params = FullDocumentsParams

    @staticmethod
    def rank_documents(doc_ids: list[str], scores: list[float]) -> list[tuple[str, int, float]]:
        """(doc_id, hits, mean similarity), by hits desc then mean similarity desc."""
        agg: dict[str, list] = {}
        for d, s in zip(doc_ids, scores):
            a = agg.setdefault(d, [0, 0.0])
            a[0] += 1
            a[1] += float(s)
        ranked = [(d, h, tot / h) for d, (h, tot) in agg.items()]
        ranked.sort(key=lambda x: (-x[1], -x[2]))
        return ranked

    def pack(self, r, pool, p):
        rd = r.reader
        rows = [int(i) for i in pool.dense_idx[:p.top_k]]
        ranked = self.rank_documents([rd.doc_ids[i] for i in rows], list(pool.dense_scores[:p.top_k]))
        raw, total, loaded = [], 0, 0
        enc = rd.config.chunking.encoding
        _prefetch(rd.documents, [d for d, _, _ in ranked])
        for rank, (d, hits, mean) in enumerate(ranked):
            doc = rd.documents.get(d)
            text = None
            if doc is not None:
                text = doc["text"] if p.load_from == "index" else _load_source_text(doc["source_path"])
            if not text:
                continue  # missing or unreadable source
            n_tok = int(doc["n_tokens"]) if p.load_from == "index" else None
            cut = False  # the document is cut to the budget (the block is marked: its marker says so where shown)
            if total + len(text) > p.max_total_chars:
                if not raw:  # the very first document alone is over budget: include it truncated, said
                    cut, text = True, _text_prefix(text, p.max_total_chars)
                    n_tok = None
                elif p.on_overflow == "stop":
                    break
                else:
                    continue
            # pages ranked by the best retrieved chunk on them, then the rest in reading order
            # (docs/metrics.md, "page order of multi-page blocks"); blank pages show nothing
            shown = [(pid, pg) for pid, pg in _doc_pages(rd, d) if pg["start"] < len(text) and pg["end"] > pg["start"]]
            best = {}
            for i, sc in zip(rows, pool.dense_scores[:p.top_k]):
                if rd.doc_ids[i] == d:
                    best.setdefault(rd.page_ids[i], float(sc))
            pages = tuple(sorted((pid for pid, _ in shown), key=lambda x: (x not in best, -best.get(x, 0.0))))
            chunk_ids = tuple(rd.chunk_ids[i] for i in rows if rd.doc_ids[i] == d and int(rd.starts[i]) < len(text))
            offsets = {pid: int(pg["start"]) for pid, pg in shown}
            offsets.update({rd.chunk_ids[i]: int(rd.starts[i]) for i in rows if rd.doc_ids[i] == d})
            spans = ((d, 0, len(text)),)  # what is shown: the prefix when cut (metrics credit only this)
            n = n_tok if n_tok is not None and len(text) == len(doc["text"]) else count_tokens_memo(text, enc)
            raw.append((text, "documents", (d,), pages, chunk_ids, spans, n, mean, offsets, cut))
            total += len(text)
            loaded += 1
        found = counters(len(rows), docs_loaded=loaded)
        if not raw:
            ctx = STRATEGIES["chunks"].pack(r, pool, make_params("chunks", top_k=p.top_k,
                                                                 max_context_tokens=p.max_context_tokens,
                                                                 overflow=p.overflow))
            found.update(docs_loaded=0, fallback="chunks")
            return Context(self.name, params_dict(p), ctx.blocks, found)
        return Context(self.name, params_dict(p), pack_blocks(raw, p, enc), found)


def _doc_pages(rd, doc_id: str):
    if rd.doc_pages_cache is None:
        cache: dict = {}
        light = getattr(rd.pages, "light_items", None)  # Arrow-backed pages: group without loading text
        for pid, pg in (light(("doc_id", "page_no", "start", "end")) if light else rd.pages.items()):
            cache.setdefault(pg["doc_id"], []).append((pid, pg))
        for v in cache.values():
            v.sort(key=lambda x: x[1]["page_no"])
        rd.doc_pages_cache = cache
    return rd.doc_pages_cache.get(doc_id, [])
