"""chunks: plain top-k chunks by cosine similarity (the baseline). The file to copy for a plugin."""
from __future__ import annotations

from dataclasses import dataclass

from .base import (BaseParams, Context, Strategy, params_dict, register_strategy)
from .packing import chunk_raw, counters, pack_blocks


@dataclass(frozen=True)
class ChunksParams(BaseParams):
    top_k: int = 8
    max_block_chars: int = 0  # 0 = whole chunk; one source system cut snippets to 1,000
    code_block_chars: int = 1000  # source code chunks: the code assistant's cut (0 = whole function)
    code_cut: str = "comments"  # what a cut gives up first: comment lines ("comments"), or keep the top ("top")


@register_strategy
class ChunksStrategy(Strategy):
    name = "chunks"
    description = "plain top-k chunks by cosine similarity (the baseline)"
    Params = ChunksParams

    def pack(self, r, pool, p):
        raw = [chunk_raw(r, int(i), s, p.max_block_chars, p.code_block_chars, p.code_cut)
               for i, s in zip(pool.dense_idx[:p.top_k], pool.dense_scores[:p.top_k])]
        blocks = pack_blocks(raw, p, r.reader.config.chunking.encoding)
        return Context(self.name, params_dict(p), blocks, counters(len(raw)))
