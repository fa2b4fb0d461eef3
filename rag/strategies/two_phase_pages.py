"""two_phase_pages: top chunks plus the candidates' distinct pages, rebuilt from all their chunks and reranked."""
from __future__ import annotations

from dataclasses import dataclass


from rag.ingest.chunking import rebuild_page
from rag.index.retrieval import CandidatePool, Retriever
from rag.tokens import count_tokens
from .base import (BaseParams, Context, Strategy, params_dict, register_strategy)
from .packing import chunk_raw, _prefetch, counters, pack_blocks
from .llm_helpers import llm_rerank


@dataclass(frozen=True)
class TwoPhasePagesParams(BaseParams):
    candidates: int = 50
    top_chunks: int = 5
    top_pages: int = 5
    reranker: str = "embedding"  # embedding (page vs question) | llm (needs an LLM) | none (first-hit order)
    code_block_chars: int = 1000  # source code chunks of group 1: cut to this many characters (0 = whole)
    code_cut: str = "comments"  # what a cut gives up first: comment lines ("comments"), or keep the top ("top")

    def validate(self):
        super().validate()
        if self.reranker not in ("embedding", "llm", "none"):
            raise ValueError(f"reranker must be embedding, llm or none, not {self.reranker!r}")


@register_strategy
class TwoPhasePagesStrategy(Strategy):
    name = "two_phase_pages"
    description = "top chunks, plus the distinct pages of the candidates rebuilt from ALL their chunks and reranked"
    Params = TwoPhasePagesParams

    def needed(self, p):
        return max(p.candidates, p.top_chunks)

    def ranked_pages(self, r: Retriever, pool: CandidatePool, p) -> list[tuple[str, float, str]]:
        """(page_id, score, rebuilt text) for the distinct pages of the candidates, best first. Cached."""
        key = ("pages", p.candidates, p.reranker)
        memo = pool.extra.get(key)
        if memo is not None:
            return memo
        rd = r.reader
        pages = list(dict.fromkeys(rd.page_ids[int(i)] for i in pool.dense_idx[:p.candidates]))
        texts = {pid: _rebuilt(rd, pid) for pid in pages}
        if p.reranker == "embedding":
            rd.prefetch_pages(pages)  # one read for all candidate pages (ANN indexes keep vectors on disk)
            scores = {pid: float(rd.page_vector(pid) @ pool.qvec) for pid in pages}
            order = sorted(pages, key=lambda x: -scores[x])
        elif p.reranker == "llm":
            if r.llm is None:
                raise ValueError("two_phase_pages reranker='llm' needs an LLM endpoint (--llm-base-url)")
            order, scores = llm_rerank(r.llm, pool.question, pages, [texts[x] for x in pages])
        else:
            scores = {pid: 0.0 for pid in pages}
            order = pages
        memo = pool.extra[key] = [(pid, scores[pid], texts[pid]) for pid in order]
        return memo

    def pack(self, r, pool, p):
        rd = r.reader
        raw = [chunk_raw(r, int(i), s, 0, p.code_block_chars, p.code_cut)
               for i, s in zip(pool.dense_idx[:p.top_chunks], pool.dense_scores[:p.top_chunks])]
        ranked = self.ranked_pages(r, pool, p)
        _prefetch(rd.pages, [pid for pid, _, _ in ranked[:p.top_pages]])
        for pid, score, text in ranked[:p.top_pages]:
            rows = rd.page_chunks(pid)
            pg = rd.pages.get(pid)
            start = pg["start"] if pg else int(rd.starts[rows[0]])
            offsets = {rd.chunk_ids[i]: int(rd.starts[i]) - start for i in rows}
            raw.append((text, "pages", (rd.doc_ids[rows[0]],), (pid,), tuple(rd.chunk_ids[i] for i in rows),
                        ((rd.doc_ids[rows[0]], start, start + len(text)),), _rebuilt_tokens(rd, pid, text), score,
                        offsets))
        blocks = pack_blocks(raw, p, rd.config.chunking.encoding)
        return Context(self.name, params_dict(p), blocks,
                       counters(min(p.candidates, len(pool.dense_idx)), pages_rebuilt=len(ranked)))


def _rebuilt(rd, pid: str) -> str:
    cache = rd.rebuilt_cache
    t = cache.get(pid)
    if t is None:
        rows = rd.page_chunks(pid)
        t = cache[pid] = rebuild_page([{"chunk_index": int(rd.chunk_index[i]), "start": int(rd.starts[i]),
                                        "end": int(rd.ends[i]), "text": rd.texts[i]} for i in rows])
    return t


def _rebuilt_tokens(rd, pid: str, text: str) -> int:
    pg = rd.pages.get(pid)
    if pg is not None and pg["text"] == text:
        return int(pg["n_tokens"])
    return count_tokens(text, rd.config.chunking.encoding)
