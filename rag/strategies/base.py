"""The strategy protocol and its registry: ``BaseParams``, ``Block``, ``Context``, ``Strategy``,
``register_strategy``. Every shape in this package imports from here (never from the package's
``__init__``, which imports the shapes: that was an import circle). The protocol itself is described in
``rag/strategies/__init__.py``.
"""
from __future__ import annotations

import dataclasses
import functools
import json
from dataclasses import dataclass, field

from rag.params import build_params
from rag.index.code_order import STUB_POLICIES, parse_where
from rag.index.retrieval import CandidatePool, Retriever, SearchKey

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
CODE_CUTS = ("comments", "top")  # what a code block cut to code_block_chars gives up first


@dataclass(frozen=True)
class BaseParams:
    """Budgets every strategy shares."""
    max_context_tokens: int = 0  # 0 = no shared token budget
    overflow: str = "truncate"  # the block that overflows: truncate at a sentence boundary, or drop it
    query_template: str = "{question}"  # instruction-aware query embedding
    search_dim: int = 0  # Matryoshka fast mode when 0 < search_dim < dim
    # only chunks whose fields match, e.g. "kind=method" or "file=src/*.py;symbol=Parser.*" (fnmatch globs over
    # kind, symbol, file, language; rag.index.retrieval.parse_where): dense and BM25 search see nothing else
    where: str = ""
    # code indexes (rag.index.retrieval.code_order): a chunk whose qualified symbol the query spells out
    # (`Command.get_help`, `evolve`) ranks first; stub files' chunks (kind `stub`: .pyi, .d.ts) rank below every
    # implementation unless "keep" (or a `where` asks for kind=stub)
    exact_names: bool = True
    stubs: str = "last"
    imports: str = "last"  # import-only chunks (kind `imports`) below every implementation unless "keep"

    def validate(self) -> None:
        if getattr(self, "code_cut", "comments") not in CODE_CUTS:
            raise ValueError(f"code_cut must be one of {', '.join(CODE_CUTS)}, not {self.code_cut!r}")
        for name in ("stubs", "imports"):
            if getattr(self, name) not in STUB_POLICIES:
                raise ValueError(f"{name} must be one of {', '.join(STUB_POLICIES)}, not {getattr(self, name)!r}")
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
        parse_where(self.where)  # an unknown field or kind is an error here, before any question

    def search_key(self, needed: int) -> SearchKey:
        return SearchKey(self.query_template, self.search_dim, max(DEFAULT_POOL, needed), self.where,
                         self.exact_names, self.stubs, self.imports)


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
