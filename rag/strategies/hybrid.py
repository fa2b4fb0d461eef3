"""hybrid: BM25 + vector search fused by weights or reciprocal rank."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from rag.index.retrieval import CandidatePool, Retriever
from rag.index.code_order import code_order
from .base import (DEFAULT_POOL, BaseParams, Context, Strategy, params_dict, register_strategy)
from .packing import chunk_raw, counters, pack_blocks
from .llm_helpers import llm_hyde, llm_paraphrases, llm_rerank


@dataclass(frozen=True)
class HybridParams(BaseParams):
    top_k: int = 8
    fusion: str = "weighted"  # weighted (min-max, alpha) | rrf
    bm25_backend: str = "memory"  # memory (Okapi BM25 here) | lancedb (LanceDB's full-text index)
    alpha: float = 0.8
    rrf_k: int = 60
    # BM25 query words: "auto" drops English-like stopwords on an index holding code (in code "the", "of", "a" live
    # only in comments, so their idf is high and they rank comment-heavy chunks; dropping them moved BM25's
    # symbol recall@10 from 0.40 to 0.61 on rxjs, 0.59 to 0.68 on code-boltons) and keeps them on prose
    bm25_stopwords: str = "auto"  # auto | drop | keep
    multi_query: int = 0  # LLM paraphrases fused by RRF (needs an LLM)
    hyde: bool = False  # embed an LLM-written hypothetical answer (needs an LLM)
    llm_rerank: bool = False
    code_block_chars: int = 1000  # source code chunks: cut to this many characters (0 = whole)
    code_cut: str = "comments"  # what a cut gives up first: comment lines ("comments"), or keep the top ("top")

    def validate(self):
        super().validate()
        if self.fusion not in ("weighted", "rrf"):
            raise ValueError(f"fusion must be 'weighted' or 'rrf', not {self.fusion!r}")
        if not 0.0 <= self.alpha <= 1.0:
            raise ValueError("alpha must be within [0, 1]")
        if self.bm25_backend not in ("memory", "lancedb"):
            raise ValueError(f"bm25_backend must be 'memory' or 'lancedb', not {self.bm25_backend!r}")
        if self.bm25_stopwords not in ("auto", "drop", "keep"):
            raise ValueError(f"bm25_stopwords must be 'auto', 'drop' or 'keep', not {self.bm25_stopwords!r}")


def minmax(x: np.ndarray) -> np.ndarray:
    if len(x) == 0:
        return x
    lo, hi = float(x.min()), float(x.max())
    return np.ones_like(x) if hi == lo else (x - lo) / (hi - lo)


def weighted_fusion(dense: dict, sparse: dict, alpha: float) -> list[tuple[Any, float]]:
    """min-max normalise each list, then alpha * dense + (1 - alpha) * bm25 (absent = 0)."""
    dk, sk = list(dense), list(sparse)
    dn = dict(zip(dk, minmax(np.array([dense[k] for k in dk], np.float64))))
    sn = dict(zip(sk, minmax(np.array([sparse[k] for k in sk], np.float64))))
    keys = list(dict.fromkeys(dk + sk))
    fused = [(k, alpha * dn.get(k, 0.0) + (1 - alpha) * sn.get(k, 0.0)) for k in keys]
    fused.sort(key=lambda x: -x[1])
    return fused


def rrf_fusion(rankings: list[list], rrf_k: int = 60) -> list[tuple[Any, float]]:
    """Reciprocal-rank fusion: sum over lists of 1 / (rrf_k + rank), rank starting at 1."""
    acc: dict = {}
    for ranking in rankings:
        for rank, k in enumerate(ranking, 1):
            acc[k] = acc.get(k, 0.0) + 1.0 / (rrf_k + rank)
    return sorted(acc.items(), key=lambda x: -x[1])


@register_strategy
class HybridStrategy(Strategy):
    name = "hybrid"
    description = "dense + language-aware BM25, min-max weighted fusion (alpha) or RRF"
    Params = HybridParams

    def _lists(self, r: Retriever, pool: CandidatePool, p) -> tuple[dict, dict, list[list]]:
        k = max(DEFAULT_POOL, p.top_k)
        dense = dict(zip(pool.dense_idx[:k].tolist(), pool.dense_scores[:k].tolist()))
        bi, bs = r.bm25_pool(pool, k, p.bm25_backend, p.bm25_stopwords)
        sparse = dict(zip(bi.tolist(), bs.tolist()))
        extra_lists = []
        if (p.multi_query or p.hyde) and r.llm is None:
            raise ValueError("hybrid multi_query/hyde need an LLM endpoint (--llm-base-url)")
        if p.multi_query or p.hyde:
            memo_key = ("llm_lists", p.multi_query, p.hyde, k, p.search_dim)
            extra_lists = pool.extra.get(memo_key)
            if extra_lists is None:
                texts = []
                if p.multi_query:
                    texts += llm_paraphrases(r.llm, pool.question, p.multi_query)
                if p.hyde:
                    texts += [llm_hyde(r.llm, pool.question)]
                vecs = r.embed_queries([p.query_template.format(question=t) for t in texts]) if texts else []
                extra_lists = [r.dense(v, k, p.search_dim, pool.mask)[0].tolist() for v in vecs]
                pool.extra[memo_key] = extra_lists
        return dense, sparse, extra_lists

    def pack(self, r, pool, p):
        fkey = ("fused", p.fusion, p.alpha, p.rrf_k, p.multi_query, p.hyde, p.search_dim, p.bm25_backend,
                p.bm25_stopwords, p.top_k > DEFAULT_POOL)
        fused = pool.extra.get(fkey)
        if fused is None:  # fusion depends on alpha/fusion/rrf_k, not on top_k or token budgets: memoise
            dense, sparse, extra = self._lists(r, pool, p)
            if extra:
                fused = rrf_fusion([list(dense), *extra, list(sparse)], p.rrf_k)
            elif p.fusion == "weighted":
                fused = weighted_fusion(dense, sparse, p.alpha)
            else:
                fused = rrf_fusion([list(dense), list(sparse)], p.rrf_k)
            if r.reader.has_code and fused:  # fusion may undo the pool's exact names first / stubs last
                rows, sc = code_order(r.reader, pool.question, [k for k, _ in fused], [v for _, v in fused], pool.key)
                fused = list(zip(rows.tolist(), sc.tolist()))
            pool.extra[fkey] = fused
        if p.llm_rerank:
            if r.llm is None:
                raise ValueError("hybrid llm_rerank needs an LLM endpoint")
            key = ("hybrid_rerank", tuple(k for k, _ in fused[:p.top_k * 2]))
            if key not in pool.extra:
                cand = [k for k, _ in fused[:p.top_k * 2]]
                order, scores = llm_rerank(r.llm, pool.question, cand, [r.reader.texts[i] for i in cand])
                pool.extra[key] = [(k, scores[k]) for k in order]
            fused = pool.extra[key]
        raw = [chunk_raw(r, int(i), s, 0, p.code_block_chars, p.code_cut) for i, s in fused[:p.top_k]]
        blocks = pack_blocks(raw, p, r.reader.config.chunking.encoding)
        return Context(self.name, params_dict(p), blocks, counters(len(fused)))
