"""The public extension surface: everything a user's own system needs, in one module.

Three ways in (docs/your-system.md), one store out:

1. **A strategy plugin** (your context builder, measured with the workbench's answerer and scorers)::

       from dataclasses import dataclass
       from .extend import BaseParams, Context, Strategy, chunk_raw, counters, pack_blocks, params_dict, register_strategy

       @dataclass(frozen=True)
       class MyParams(BaseParams):      # every field is a budget: --set mine.top_k=2,4,8
           top_k: int = 5

       @register_strategy
       class Mine(Strategy):
           name = "mine"
           description = "what it does"
           Params = MyParams

           def pack(self, r, pool, p):  # pool: the cached dense candidates of the question
               raw = [chunk_raw(r, int(i), s) for i, s in zip(pool.dense_idx[:p.top_k], pool.dense_scores[:p.top_k])]
               return Context(self.name, params_dict(p), pack_blocks(raw, p, r.reader.config.chunking.encoding),
                              counters(len(raw)))

   Load it with ``ragwb run --plugins my_strategies.py`` (or ``plugins = [...]`` in a sweep file, or an
   entry point in the group ``rag_workbench.plugins``). Code with no cheap re-pack overrides
   ``retrieve(r, question, p) -> Context`` instead of ``pack``. ``rag/strategies/chunks.py`` is a complete
   built-in to copy.

2. **A deployed service** (``ragwb run --system NAME=URL``): the request/response contract is
   ``rag.answer.systems`` (``DEFAULT_MAPPING``; a mapping file adapts other shapes).

3. **Logged outputs** (``ragwb score FILE``): the record schema is ``LoggedRecord`` / ``read_logged``
   (ragas's column names or the workbench's).

Each becomes points in the DuckDB store that ``ragwb show``, ``export``, ``report``, ``gate`` and the
workbench read with no special case.
"""
from __future__ import annotations

from .answer.logged import LoggedRecord, read_logged
from .answer.prompts import PromptTemplate, load_prompt
from .strategies import (BaseParams, Block, Context, Strategy, get_strategy, load_plugins, make_params,
                         pack_blocks, params_dict, register_strategy)
from .strategies.packing import chunk_raw, counters, truncate_to_tokens
from .answer.systems import DEFAULT_MAPPING, SystemConfig, SystemResult, load_mapping

__all__ = ["BaseParams", "Block", "Context", "Strategy", "register_strategy", "get_strategy", "make_params",
           "pack_blocks", "params_dict", "chunk_raw", "counters", "truncate_to_tokens", "load_plugins",
           "DEFAULT_MAPPING", "SystemConfig", "SystemResult", "load_mapping", "LoggedRecord", "read_logged",
           "PromptTemplate", "load_prompt"]
