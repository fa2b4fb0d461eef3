"""The plain Python API: each step is one call.

    from . import api
    r = api.open_index("squad2")                       # ingest if needed, returns a Retriever
    ctx = api.retrieve(r, "hybrid", "Who ruled Normandy?", alpha=0.5)
    pool = api.candidates(r, "chunks", "Who ruled Normandy?")      # the cached, expensive part
    ctx = api.pack(r, "chunks", pool, top_k=4, max_context_tokens=500)  # cheap re-packing
    ans = api.answer("Who ruled Normandy?", ctx)        # offline extractive answerer by default
"""
from __future__ import annotations

from .answer.answerers import Answer, make_answerer
from .index.embedders import EmbedderConfig
from .index.workspace import IndexConfig, Workspace
from .index.retrieval import CandidatePool, Retriever
from .strategies import Context, get_strategy, make_params
from .strategies import retrieve as _retrieve


def open_index(dataset: str, workspace: str = "results", embedder: str = "e5", questions: str | None = None,
               progress: bool = False, llm=None) -> Retriever:
    ws = Workspace(workspace)
    cfg = IndexConfig(embedder=EmbedderConfig(embedder))
    summ = ws.ingest(ws.load(dataset, questions, cfg), cfg, progress=progress)
    return Retriever(ws, summ.index, llm=llm)


def candidates(r: Retriever, strategy: str, question: str, **params) -> CandidatePool:
    p = make_params(strategy, **params)
    return get_strategy(strategy).candidates(r, question, p)


def pack(r: Retriever, strategy: str, pool: CandidatePool, **params) -> Context:
    return get_strategy(strategy).pack(r, pool, make_params(strategy, **params))


def retrieve(r: Retriever, strategy: str, question: str, **params) -> Context:
    return _retrieve(r, strategy, question, **params)


def answer(question: str, context: Context, answerer: str = "extractive", **kw) -> Answer:
    return make_answerer(answerer, **kw).answer(question, context.blocks)
