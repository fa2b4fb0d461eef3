"""The five context strategies of docs/strategies.md, by name, every constant a budget.

Each strategy splits into ``candidates`` (the expensive part: question embedding and
search of the candidate pool, cached per question by the Retriever) and ``pack``
(cheap: turns the cached pool into numbered blocks under the budgets). A budget that
only changes packing re-uses the pool; that is what keeps notebook sliders fast.
"""
from __future__ import annotations

import dataclasses
import functools
import json
import re
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from .chunking import rebuild_page
from .params import build_params
from .retrieval import CandidatePool, Retriever, SearchKey
from .textproc import note_prefix
from .tokens import count_tokens, count_tokens_memo

DEFAULT_POOL = 100


# --------------------------------------------------------------------------- result shape

@dataclass(slots=True)
class Block:
    n: int  # 1-based number shown to the model
    text: str
    group: str  # chunks | documents | pages | parents
    doc_ids: tuple
    page_ids: tuple
    chunk_ids: tuple
    spans: tuple  # ((doc_id, start, end), ...) char ranges of the documents this block shows
    n_tokens: int
    score: float
    truncated: bool = False

    def to_dict(self) -> dict:
        return {"n": self.n, "text": self.text, "group": self.group, "doc_ids": list(self.doc_ids),
                "page_ids": list(self.page_ids), "chunk_ids": list(self.chunk_ids),
                "spans": [list(s) for s in self.spans], "n_tokens": self.n_tokens,
                "score": round(float(self.score), 6), "truncated": self.truncated}

    @classmethod
    def from_dict(cls, d: dict) -> "Block":
        return cls(d["n"], d["text"], d["group"], tuple(d["doc_ids"]), tuple(d["page_ids"]), tuple(d["chunk_ids"]),
                   tuple(tuple(s) for s in d["spans"]), d["n_tokens"], d["score"], d.get("truncated", False))


@functools.lru_cache(maxsize=65536)  # the same text is stored for many questions' strategies and budgets
def _json_text(text: str) -> str:
    return json.dumps(text, ensure_ascii=False)


@functools.lru_cache(maxsize=65536)
def _block_json_rest(key: tuple) -> str:
    group, doc_ids, page_ids, chunk_ids, spans, n_tokens, score, truncated = key
    return json.dumps({"group": group, "doc_ids": list(doc_ids), "page_ids": list(page_ids),
                       "chunk_ids": list(chunk_ids), "spans": [list(x) for x in spans], "n_tokens": n_tokens,
                       "score": round(float(score), 6), "truncated": truncated}, ensure_ascii=False)[1:]


def blocks_json(blocks) -> str:
    """``json.dumps([b.to_dict() for b in blocks], ensure_ascii=False)``, with each block's text and
    other fields memoised apart from its number (a block keeps its JSON when a budget moves it)."""
    out = []
    for b in blocks:
        key = (b.group, b.doc_ids, b.page_ids, b.chunk_ids, b.spans, b.n_tokens, b.score, b.truncated)
        try:
            n = str(b.n) if type(b.n) is int else json.dumps(b.n)
            out.append(f'{{"n": {n}, "text": {_json_text(b.text)}, {_block_json_rest(key)}')
        except TypeError:  # an unhashable field (a list): serialise without the memo
            out.append(json.dumps(b.to_dict(), ensure_ascii=False))
    return "[" + ", ".join(out) + "]"


@dataclass
class Context:
    strategy: str
    params: dict
    blocks: list[Block]
    counters: dict = field(default_factory=dict)

    @property
    def context_tokens(self) -> int:
        return sum(b.n_tokens for b in self.blocks)

    def to_dict(self) -> dict:
        return {"strategy": self.strategy, "params": self.params, "counters": self.counters,
                "blocks": [b.to_dict() for b in self.blocks]}


# --------------------------------------------------------------------------- parameters

OVERFLOW_POLICIES = ("truncate", "drop")


@dataclass(frozen=True)
class BaseParams:
    """Budgets every strategy shares."""
    max_context_tokens: int = 0  # 0 = no shared token budget
    overflow: str = "truncate"  # the block that overflows: truncate at a sentence boundary, or drop it
    query_template: str = "{question}"  # instruction-aware query embedding
    search_dim: int = 0  # Matryoshka fast mode when 0 < search_dim < dim

    def validate(self) -> None:
        if self.overflow not in OVERFLOW_POLICIES:
            raise ValueError(f"overflow must be one of {OVERFLOW_POLICIES}, not {self.overflow!r}")
        if "{question}" not in self.query_template:
            raise ValueError("query_template must contain {question}")
        import string

        try:
            names = {f for _, f, _, _ in string.Formatter().parse(self.query_template) if f is not None}
        except ValueError as e:
            raise ValueError(f"query_template {self.query_template!r} is not a valid template ({e})") from None
        if names - {"question"}:
            raise ValueError(f"query_template has unknown placeholder(s) "
                             f"{', '.join('{' + n + '}' for n in sorted(names - {'question'}))}; "
                             "only {question} is filled in (write {{ and }} for literal braces)")
        for f in dataclasses.fields(self):
            v = getattr(self, f.name)
            if isinstance(v, (int, float)) and not isinstance(v, bool) and v < 0:
                raise ValueError(f"{f.name} must be >= 0, got {v}")

    def search_key(self, needed: int) -> SearchKey:
        return SearchKey(self.query_template, self.search_dim, max(DEFAULT_POOL, needed))


STRATEGIES: dict[str, "Strategy"] = {}


def register_strategy(cls):
    STRATEGIES[cls.name] = cls()
    return cls


def get_strategy(name: str) -> "Strategy":
    try:
        return STRATEGIES[name]
    except KeyError:
        raise KeyError(f"unknown strategy {name!r}; valid: {', '.join(STRATEGIES)}") from None


def make_params(name: str, **kw) -> BaseParams:
    """Typed parameters for a strategy; unknown names error with the valid ones."""
    return build_params(get_strategy(name).Params, f"strategy {name!r}", kw)


@functools.lru_cache(maxsize=1024)
def _params_items(p: BaseParams) -> tuple:
    return tuple(dataclasses.asdict(p).items())


def params_dict(p: BaseParams) -> dict:
    return dict(_params_items(p))


# --------------------------------------------------------------------------- packing

_SENT_BOUNDARY = re.compile(r"(?<=[.!?;。！？])[\"')\]]*\s+|\n+")


@functools.lru_cache(maxsize=8192)
def truncate_to_tokens(text: str, budget: int, encoding: str = "o200k_base") -> str:
    """The longest prefix of ``text`` that ends at a sentence boundary and fits ``budget`` tokens."""
    if budget <= 0:
        return ""
    from .tokens import get_encoding

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
    clipped, pos = [], 0
    for sd, ss, se in spans:
        if pos >= length:
            break
        clipped.append((sd, ss, min(se, ss + (length - pos))))
        pos += se - ss
    return keep(doc_ids), keep(page_ids), keep(chunk_ids), tuple(clipped)


# --------------------------------------------------------------------------- strategies

class Strategy:
    name = ""
    description = ""
    Params: type = BaseParams

    def needed(self, p) -> int:
        """How many dense candidates packing may need (the pool holds at least DEFAULT_POOL)."""
        return getattr(p, "top_k", DEFAULT_POOL)

    def candidates(self, r: Retriever, question: str, p) -> CandidatePool:
        return r.pool(question, p.search_key(self.needed(p)))

    def pack(self, r: Retriever, pool: CandidatePool, p) -> Context:
        raise NotImplementedError

    def retrieve(self, r: Retriever, question: str, p) -> Context:
        return self.pack(r, self.candidates(r, question, p), p)


def counters(chunks_found: int, docs_loaded: int = 0, pages_rebuilt: int = 0, fallback: str | None = None) -> dict:
    return {"chunks_found": int(chunks_found), "docs_loaded": docs_loaded, "pages_rebuilt": pages_rebuilt,
            "fallback": fallback}


def _chunk_raw(r: Retriever, row: int, score: float, max_chars: int = 0) -> tuple:
    rd = r.reader
    text, n = rd.texts[row], int(rd.n_tokens[row])
    s, e = int(rd.starts[row]), int(rd.ends[row])
    if max_chars and len(text) > max_chars:
        text = _text_prefix(text, max_chars)
        e = s + max_chars
        n = count_tokens(text, rd.config.chunking.encoding)
    return (text, "chunks", (rd.doc_ids[row],), (rd.page_ids[row],), (rd.chunk_ids[row],),
            ((rd.doc_ids[row], s, e),), n, float(score))


@dataclass(frozen=True)
class ChunksParams(BaseParams):
    top_k: int = 8
    max_block_chars: int = 0  # 0 = whole chunk; one source system cut snippets to 1,000


@register_strategy
class ChunksStrategy(Strategy):
    name = "chunks"
    description = "plain top-k chunks by cosine similarity (the baseline)"
    Params = ChunksParams

    def pack(self, r, pool, p):
        raw = [_chunk_raw(r, int(i), s, p.max_block_chars)
               for i, s in zip(pool.dense_idx[:p.top_k], pool.dense_scores[:p.top_k])]
        blocks = pack_blocks(raw, p, r.reader.config.chunking.encoding)
        return Context(self.name, params_dict(p), blocks, counters(len(raw)))


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

    from .corpora import ImportError_, load_file

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
            if total + len(text) > p.max_total_chars:
                if not raw:  # the very first document alone is over budget: include it truncated
                    text = _text_prefix(text, p.max_total_chars)
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
            n = n_tok if n_tok is not None and len(text) == len(doc["text"]) else count_tokens_memo(text, enc)
            raw.append((text, "documents", (d,), pages, chunk_ids, ((d, 0, len(text)),), n, mean, offsets))
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


@functools.lru_cache(maxsize=4096)
def _text_prefix(text: str, n: int) -> str:
    """``text[:n]``, one string per (text, n): every question that truncates a document to the same
    budget shares it, and with it every memo keyed by the block text (hash computed once)."""
    cut = text[:n]
    note_prefix(cut, text)
    return cut


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


@dataclass(frozen=True)
class TwoPhasePagesParams(BaseParams):
    candidates: int = 50
    top_chunks: int = 5
    top_pages: int = 5
    reranker: str = "embedding"  # embedding (page vs question) | llm (needs an LLM) | none (first-hit order)

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
        raw = [_chunk_raw(r, int(i), s) for i, s in zip(pool.dense_idx[:p.top_chunks], pool.dense_scores[:p.top_chunks])]
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


def _prefetch(rows, ids: list) -> None:
    """One read for many rows whose text stays in LanceDB (an ANN index's lazy rows); else nothing."""
    fetch = getattr(rows, "prefetch", None)
    if fetch is not None:
        fetch(ids)


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


@dataclass(frozen=True)
class HybridParams(BaseParams):
    top_k: int = 8
    fusion: str = "weighted"  # weighted (min-max, alpha) | rrf
    bm25_backend: str = "memory"  # memory (Okapi BM25 here) | lancedb (LanceDB's full-text index)
    alpha: float = 0.8
    rrf_k: int = 60
    multi_query: int = 0  # LLM paraphrases fused by RRF (needs an LLM)
    hyde: bool = False  # embed an LLM-written hypothetical answer (needs an LLM)
    llm_rerank: bool = False

    def validate(self):
        super().validate()
        if self.fusion not in ("weighted", "rrf"):
            raise ValueError(f"fusion must be 'weighted' or 'rrf', not {self.fusion!r}")
        if not 0.0 <= self.alpha <= 1.0:
            raise ValueError("alpha must be within [0, 1]")
        if self.bm25_backend not in ("memory", "lancedb"):
            raise ValueError(f"bm25_backend must be 'memory' or 'lancedb', not {self.bm25_backend!r}")


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
        bi, bs = r.bm25_pool(pool, k, p.bm25_backend)
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
                extra_lists = [r.dense(v, k, p.search_dim)[0].tolist() for v in vecs]
                pool.extra[memo_key] = extra_lists
        return dense, sparse, extra_lists

    def pack(self, r, pool, p):
        fkey = ("fused", p.fusion, p.alpha, p.rrf_k, p.multi_query, p.hyde, p.search_dim, p.bm25_backend,
                p.top_k > DEFAULT_POOL)
        fused = pool.extra.get(fkey)
        if fused is None:  # fusion depends on alpha/fusion/rrf_k, not on top_k or token budgets: memoise
            dense, sparse, extra = self._lists(r, pool, p)
            if extra:
                fused = rrf_fusion([list(dense), *extra, list(sparse)], p.rrf_k)
            elif p.fusion == "weighted":
                fused = weighted_fusion(dense, sparse, p.alpha)
            else:
                fused = rrf_fusion([list(dense), list(sparse)], p.rrf_k)
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
        raw = [_chunk_raw(r, int(i), s) for i, s in fused[:p.top_k]]
        blocks = pack_blocks(raw, p, r.reader.config.chunking.encoding)
        return Context(self.name, params_dict(p), blocks, counters(len(fused)))


@dataclass(frozen=True)
class ParentChildParams(BaseParams):
    top_k: int = 20  # leaves retrieved before de-duplication by parent
    max_parents: int = 4


@register_strategy
class ParentChildStrategy(Strategy):
    name = "parent_child"
    description = "retrieve small leaves, de-duplicate by parent_id, return the top parent sections"
    Params = ParentChildParams

    def pack(self, r, pool, p):
        rd = r.reader
        order: dict[str, list] = {}
        for i, s in zip(pool.dense_idx[:p.top_k], pool.dense_scores[:p.top_k]):
            i = int(i)
            pid = rd.parent_ids[i]
            if pid not in order:
                if len(order) >= p.max_parents:
                    continue
                order[pid] = [float(s), []]
            order[pid][1].append(i)
        raw = []
        _prefetch(rd.parents, list(order))
        for pid, (score, leaves) in order.items():
            par = rd.parents[pid]
            offsets = {rd.chunk_ids[i]: int(rd.starts[i]) - int(par["start"]) for i in leaves}
            raw.append((par["text"], "parents", (par["doc_id"],), (par["page_id"],),
                        tuple(rd.chunk_ids[i] for i in leaves),
                        ((par["doc_id"], par["start"], par["end"]),), int(par["n_tokens"]), score, offsets))
        blocks = pack_blocks(raw, p, rd.config.chunking.encoding)
        return Context(self.name, params_dict(p), blocks, counters(min(p.top_k, len(pool.dense_idx))))


# --------------------------------------------------------------------------- LLM helpers (used when configured)

def llm_paraphrases(llm, question: str, n: int) -> list[str]:
    res = llm.chat([{"role": "system", "content": "Rewrite the user's question in different words. "
                     f"Return exactly {n} paraphrases, one per line, nothing else."},
                    {"role": "user", "content": question}], purpose="multi_query")
    lines = [re.sub(r"^\s*(\d+[.)]|[-*])\s*", "", ln).strip() for ln in (res.text or "").splitlines()]
    return [ln for ln in lines if ln][:n]


def llm_hyde(llm, question: str) -> str:
    res = llm.chat([{"role": "system", "content": "Write a short passage that answers the question."},
                    {"role": "user", "content": question}], purpose="hyde")
    return (res.text or question).strip() or question


def llm_rerank(llm, question: str, ids: list, texts: list[str]) -> tuple[list, dict]:
    """Ask the LLM for a relevance score 0-10 per passage; unparseable -> keep the input order."""
    listing = "\n\n".join(f"[{i + 1}] {t[:1500]}" for i, t in enumerate(texts))
    res = llm.chat([{"role": "system", "content": "Score how well each passage answers the question, 0 to 10. "
                     "Reply with one line per passage: <number>: <score>."},
                    {"role": "user", "content": f"Question: {question}\n\nPassages:\n{listing}"}], purpose="rerank")
    scores = {k: 0.0 for k in ids}
    for m in re.finditer(r"\[?(\d+)\]?\s*[:=-]\s*(\d+(?:\.\d+)?)", res.text or ""):
        j = int(m.group(1)) - 1
        if 0 <= j < len(ids):
            scores[ids[j]] = float(m.group(2))
    order = sorted(ids, key=lambda k: (-scores[k], ids.index(k)))
    return order, scores


# --------------------------------------------------------------------------- plain Python API

def retrieve(retriever: Retriever, strategy: str, question: str, **params) -> Context:
    """Run one strategy for one question: ``retrieve(r, "hybrid", "Who ...?", alpha=0.5)``."""
    s = get_strategy(strategy)
    return s.retrieve(retriever, question, make_params(strategy, **params))


def describe_strategies() -> list[dict]:
    out = []
    for name, s in STRATEGIES.items():
        defaults = s.Params()
        out.append({"name": name, "description": s.description,
                    "params": {f.name: getattr(defaults, f.name) for f in dataclasses.fields(s.Params)}})
    return out
