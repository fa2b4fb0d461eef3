"""Reading an index for retrieval: an in-memory snapshot of the LanceDB tables,
exact dense search, language-aware BM25, and the per-question candidate cache.

Dense search is exact cosine (normalised inner product) over the chunk vectors read
from LanceDB, as LanceDB's own flat search is; the snapshot is keyed on the tables'
versions, so a re-ingest is picked up. BM25 runs over the ``bm25_text`` column
(the same analysed tokens LanceDB's full-text index holds) with Okapi k1=1.2, b=0.75.
"""
from __future__ import annotations

from .code_order import code_order, where_mask
from .reader import IndexReader, open_index
import re
import time
from dataclasses import dataclass, field

import numpy as np

from .bm25 import BM25
from .embedders import get_embedder
from .workspace import Workspace
from rag.textproc import analyze


ANN_NPROBES = 20  # IVF partitions searched per query
ANN_REFINE = 5  # candidates re-scored with exact vectors: refine_factor x k ...
ANN_REFINE_CANDIDATES = 100  # ... up to this many (a pool of 100 re-scores 100, not 500: 50 -> 27 ms at 100k)
ANN_EF = 200  # HNSW search breadth within a partition (at least k x refine factor)

def ann_refine(k: int) -> int:
    """Refine factor for a top-k ANN query: 5 for small k (top-10: 50 exact re-scores), fewer for a
    large candidate pool, whose tail ranks matter less than its cost."""
    return max(1, min(ANN_REFINE, ANN_REFINE_CANDIDATES // max(1, k)))




# --------------------------------------------------------------------------- candidate cache

@dataclass(frozen=True)
class SearchKey:
    """Everything that changes *search* (as opposed to packing). Keys the candidate cache."""
    query_template: str = "{question}"
    search_dim: int = 0
    pool: int = 100
    where: str = ""  # only chunks whose fields match (parse_where), for dense and BM25 alike
    exact_names: bool = True  # code: chunks whose symbol is a name the query spells out rank first
    stubs: str = "last"  # code: stub chunks (.pyi, .d.ts) rank below implementations ("keep": as scored)
    imports: str = "last"  # code: import-only chunks (kind imports) rank below implementations ("keep": as scored)


# --------------------------------------------------------------------------- code: exact names first, stubs last


# --------------------------------------------------------------------------- chunk filters (`where`)


@dataclass
class CandidatePool:
    question: str
    qvec: np.ndarray
    dense_idx: np.ndarray  # chunk rows, best first
    dense_scores: np.ndarray
    extra: dict = field(default_factory=dict)  # strategy-specific memo (bm25 pool, page scores, llm calls)
    mask: np.ndarray | None = None  # the chunk rows its `where` keeps (None: all)
    key: SearchKey = SearchKey()  # how it was searched (code: exact names first, stubs last)
    # this question's own search cost: its share of the batched query embedding + its dense search.
    # Recorded once when the pool is built, so every point that uses the pool reports the same figure.
    search_ms: float = 0.0


class Retriever:
    """Computes the expensive part once per (index, question, SearchKey) and caches it."""

    def __init__(self, ws: Workspace, index: str, llm=None, cache_queries: bool = True):
        self.ws, self.index, self.cache_queries = ws, index, cache_queries
        self.reader = open_index(ws, index)
        self.embedder = get_embedder(self.reader.config.embedder)
        self.llm = llm
        self._pools: dict[tuple, CandidatePool] = {}
        self.stats = {"pool_hits": 0, "pool_misses": 0}

    def embed_queries(self, texts: list[str]) -> np.ndarray:
        if not self.cache_queries:
            return self.embedder.embed_queries(texts)
        return self.ws.embedding_cache.embed(self.embedder, self.reader.config.embedder.key, texts, "query")

    def warm(self, questions: list[str], key: SearchKey = SearchKey()) -> None:
        """Embed many questions in one batch (faster than one by one)."""
        todo = [q for q in dict.fromkeys(questions) if (q, key) not in self._pools]
        if todo:
            t0 = time.perf_counter()
            vecs = self.embed_queries([key.query_template.format(question=q) for q in todo])
            share = (time.perf_counter() - t0) * 1000 / len(todo)
            for q, v in zip(todo, vecs):
                ts = time.perf_counter()
                pool = self._search(q, v, key)
                pool.search_ms = share + (time.perf_counter() - ts) * 1000
                self._pools[(q, key)] = pool
                self.stats["pool_misses"] += 1

    def dense(self, qvec: np.ndarray, k: int, search_dim: int = 0, mask: np.ndarray | None = None
              ) -> tuple[np.ndarray, np.ndarray]:
        if self.reader.vectors is None:
            if mask is not None:
                raise ValueError(f"a `where` filter needs exact search; index {self.index} has an ANN index "
                                 "(ingest with --vector-index exact)")
            return self._dense_ann(qvec, k, search_dim)
        V = self.reader.vectors
        if 0 < search_dim < V.shape[1]:  # Matryoshka-style fast mode
            Vd = _truncated(self.reader, search_dim)
            q = qvec[:search_dim] / (np.linalg.norm(qvec[:search_dim]) or 1.0)
            sims = Vd @ q
        else:
            sims = V @ qvec
        if mask is not None:  # filtered out: never in the top k
            sims = np.where(mask, sims, -np.inf).astype(np.float32)
            k = min(k, int(mask.sum()))
        k = min(k, len(sims))
        if k <= 0:
            return np.zeros(0, np.int64), np.zeros(0, np.float32)
        top = np.argpartition(-sims, k - 1)[:k]
        top = top[np.lexsort((top, -sims[top]))]  # score desc, row asc for ties: deterministic
        return top, sims[top]

    def _dense_ann(self, qvec: np.ndarray, k: int, search_dim: int = 0) -> tuple[np.ndarray, np.ndarray]:
        """Top-k by LanceDB's ANN index (cosine), re-ranked exactly on the refined candidates."""
        if search_dim:
            raise ValueError("search_dim (Matryoshka search) needs exact search; this index uses an ANN index "
                             "(ingest with --vector-index exact)")
        k = min(k, len(self.reader.chunk_ids))
        if k <= 0:
            return np.zeros(0, np.int64), np.zeros(0, np.float32)
        refine = ann_refine(k)
        # through the Lance dataset: the same index and hits as LanceDB's query builder, ~5 ms less
        hits = self.reader.dataset.to_table(columns=["chunk_id", "_distance"], nearest={
            "column": "vector", "q": np.asarray(qvec, np.float32), "k": k, "nprobes": ANN_NPROBES,
            "refine_factor": refine, "ef": max(ANN_EF, k * refine), "metric": "cosine"})
        rows = np.array([self.reader.rows[c] for c in hits.column("chunk_id").to_pylist()], np.int64)
        sims = (1.0 - hits.column("_distance").to_numpy()).astype(np.float32)
        order = np.lexsort((rows, -sims))  # score desc, row asc for ties: deterministic
        return rows[order], sims[order]

    def _search(self, question: str, qvec: np.ndarray, key: SearchKey) -> CandidatePool:
        mask = where_mask(self.reader, key.where)
        idx, sc = self.dense(qvec, key.pool, key.search_dim, mask)
        idx, sc = code_order(self.reader, question, idx, sc, key, qvec, mask)
        return CandidatePool(question, qvec, idx, sc, mask=mask, key=key)

    def pool(self, question: str, key: SearchKey = SearchKey()) -> CandidatePool:
        p = self._pools.get((question, key))
        if p is not None:
            self.stats["pool_hits"] += 1
            return p
        self.warm([question], key)
        return self._pools[(question, key)]

    def bm25_query(self, question: str, stopwords: str = "auto") -> list[str]:
        """The question's BM25 terms. ``stopwords``: "drop", "keep", or "auto" (drop them on an index holding
        code: there "the" or "of" appear only in comments, so a high idf makes them rank comment-heavy chunks)."""
        drop = stopwords == "drop" or (stopwords == "auto" and self.reader.has_code)
        return analyze(question, self.reader.language, stopwords=drop, identifiers=self.reader.has_code)

    def _fts(self, question: str, k: int, stopwords: str = "auto") -> tuple[np.ndarray, np.ndarray]:
        """Top-k chunk rows and scores from LanceDB's full-text index over the analysed tokens.
        (Run beside the dense search in a thread it was slower: on 2 cores e5 and the ANN search
        already use both.)"""
        q = " ".join(self.bm25_query(question, stopwords))
        if not q:
            return np.zeros(0, np.int64), np.zeros(0, np.float32)
        # through the Lance dataset: LanceDB's results and scores exactly, ~7 ms less at 1M chunks
        hits = self.reader.dataset.to_table(columns=["chunk_id", "_score"], full_text_query=q, limit=k)
        top = np.array([self.reader.rows[c] for c in hits.column("chunk_id").to_pylist()], dtype=np.int64)
        return top, hits.column("_score").to_numpy().astype(np.float32)

    def bm25_pool(self, pool: CandidatePool, k: int, backend: str = "memory", stopwords: str = "auto"
                  ) -> tuple[np.ndarray, np.ndarray]:
        """Top-k BM25 chunk rows and scores. ``memory``: Okapi BM25 here over the analysed tokens;
        ``lancedb``: the same tokens through LanceDB's full-text index; ``stopwords`` as in bm25_query."""
        memo = pool.extra.get(("bm25", k, backend, stopwords))
        t0 = time.perf_counter()
        if memo is None and backend == "lancedb":
            if pool.mask is not None:
                raise ValueError("a `where` filter works with bm25_backend=memory, not lancedb")
            memo = pool.extra[("bm25", k, backend, stopwords)] = self._fts(pool.question, k, stopwords)
        elif memo is None:
            s = self.reader.bm25.scores(self.bm25_query(pool.question, stopwords))
            if pool.mask is not None:
                s = np.where(pool.mask, s, 0.0)
            kk = min(k, int((s > 0).sum()))
            if kk:
                top = np.argpartition(-s, kk - 1)[:kk]
                top = top[np.lexsort((top, -s[top]))]
            else:
                top = np.zeros(0, np.int64)
            memo = pool.extra[("bm25", k, backend, stopwords)] = (top, s[top])
        if ("bm25_ms", k, backend) not in pool.extra:  # charged to the question, not to the first point
            pool.extra[("bm25_ms", k, backend)] = (time.perf_counter() - t0) * 1000
        return memo


_trunc_cache: dict[tuple[int, int], np.ndarray] = {}


def _truncated(reader: IndexReader, d: int) -> np.ndarray:
    key = (id(reader.vectors), d)
    m = _trunc_cache.get(key)
    if m is None:
        m = reader.vectors[:, :d]
        m = m / np.maximum(np.linalg.norm(m, axis=1, keepdims=True), 1e-12)
        _trunc_cache[key] = m
    return m
