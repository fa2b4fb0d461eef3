"""Context strategies by name: the five reference shapes of docs/strategies.md, and yours.

The protocol (this module, the public surface a plugin uses; docs/your-system.md):

* ``Params``: a frozen dataclass subclassing ``BaseParams``; every field is a budget a user sweeps
  with ``--set NAME.FIELD=V1,V2`` (typed: ints stay ints, a typo is an error naming the valid ones).
* ``candidates(r, question, p) -> CandidatePool``: the expensive part (question embedding and search),
  cached per question by the Retriever; the default searches the dense pool of ``needed(p)`` chunks.
* ``pack(r, pool, p) -> Context``: cheap, turns the cached pool into numbered ``Block``s under the budgets
  (``pack_blocks`` applies the shared token budget and overflow policy). A budget that only changes
  packing re-uses the pool: that is what keeps notebook sliders fast.
* Code with no cheap re-pack overrides ``retrieve(r, question, p) -> Context`` instead.

``@register_strategy`` puts a class in the registry ``STRATEGIES``; ``get_strategy`` and ``make_params``
look names up and error with the valid ones. One file per shape beside this one (``chunks.py`` is the
one to copy); plugins load through ``load_plugins`` (files, ``plugins = [...]`` in a sweep file, or the
``rag_workbench.plugins`` entry-point group).
"""
from __future__ import annotations

import dataclasses

from rag.index.retrieval import Retriever

from .base import (DEFAULT_POOL, OVERFLOW_POLICIES, STRATEGIES, BaseParams, Block, Context, Strategy,  # noqa: F401
                   blocks_json, get_strategy, make_params, params_dict, register_strategy)
# the shapes register themselves on import; one file each
from .packing import chunk_raw, counters, cut_provenance, pack_blocks, truncate_to_tokens  # noqa: F401
from .llm_helpers import llm_hyde, llm_paraphrases, llm_rerank  # noqa: F401
from .chunks import ChunksParams, ChunksStrategy  # noqa: F401
from .full_documents import FullDocumentsParams, FullDocumentsStrategy  # noqa: F401
from .two_phase_pages import TwoPhasePagesParams, TwoPhasePagesStrategy  # noqa: F401
from .hybrid import HybridParams, HybridStrategy, minmax, rrf_fusion, weighted_fusion  # noqa: F401
from .parent_child import ParentChildParams, ParentChildStrategy  # noqa: F401
from .routed import RoutedParams, RoutedStrategy  # noqa: F401
from .escalate import EscalateParams, EscalateStrategy  # noqa: F401
from .plugins import load_plugins, plugin_hashes  # noqa: F401

BUILTIN = tuple(STRATEGIES)  # the five reference shapes and routed; anything registered later is a plugin


def default_strategies() -> list[str]:
    """What runs when no strategy is named: every registered shape except opt-in ones (routed needs a router)."""
    return [n for n, s in STRATEGIES.items() if not getattr(s, "opt_in", False)]

# --------------------------------------------------------------------------- plain Python API

def retrieve(retriever: Retriever, strategy: str, question: str, **params) -> Context:
    """Run one strategy for one question: ``retrieve(r, "hybrid", "Who ...?", alpha=0.5)``."""
    s = get_strategy(strategy)
    return s.retrieve(retriever, question, make_params(strategy, **params))


_HEADER_LINES = ("File:", "Language:", "Function:", "Method:", "Class:", "Type:", "Module:", "```")


def look(retriever: Retriever, strategy: str, query: str, **params) -> tuple[Context, list[dict]]:
    """One query through one strategy, as ``ragwb search`` and the workbench's search box show it: the context and,
    per block, its rank, score, group, where it comes from (a code chunk: file, lines, kind, symbol), its tokens
    and its first line of text."""
    ctx = retrieve(retriever, strategy, query, **params)
    rd, rows = retriever.reader, []
    for b in ctx.blocks:
        row = rd.rows.get(b.chunk_ids[0]) if b.chunk_ids else None
        where = ", ".join(b.doc_ids[:2])
        if row is not None and rd.symbols and rd.line_starts is not None and rd.code_languages[row]:
            where = (f"{rd.doc_ids[row]}:{int(rd.line_starts[row])}-{int(rd.line_ends[row])} "
                     f"{rd.kinds[row]} {rd.symbols[row]}".rstrip())
        first = next((x.strip() for x in b.text.splitlines() if x.strip() and not x.startswith(_HEADER_LINES)), "")
        rows.append({"rank": b.n, "score": round(float(b.score), 3), "group": b.group, "where": where,
                     "tokens": b.n_tokens, "text": first[:110]})
    return ctx, rows


def describe_strategies() -> list[dict]:
    out = []
    for name, s in STRATEGIES.items():
        defaults = s.Params()
        out.append({"name": name, "description": s.description,
                    "params": {f.name: getattr(defaults, f.name) for f in dataclasses.fields(s.Params)}})
    return out
