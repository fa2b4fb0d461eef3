"""parent_child: small leaves retrieved, their parent sections returned."""
from __future__ import annotations

from dataclasses import dataclass

from .base import (BaseParams, Context, Strategy, params_dict, register_strategy)
from .packing import _prefetch, counters, pack_blocks


@dataclass(frozen=True)
class ParentChildParams(BaseParams):
    top_k: int = 20  # leaves retrieved before de-duplication by parent
    max_parents: int = 4
    # an import block is a leaf that stands for its file's first piece: ranked as scored here (on rxjs "last"
    # cost evidence recall 0.556 -> 0.525 at more tokens; docs/strategies.md, Code corpora)
    imports: str = "keep"


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
            text, n, lead = par["text"], int(par["n_tokens"]), 0
            if rd.code_languages and rd.code_languages[leaves[0]]:  # source code: the header chunks' blocks carry
                text, n, lead = _code_parent(rd, par, leaves[0], offsets[rd.chunk_ids[leaves[0]]])
                offsets = {k: v + lead for k, v in offsets.items()} | {par["doc_id"]: lead, par["page_id"]: lead,
                                                                       None: lead}
            raw.append((text, "parents", (par["doc_id"],), (par["page_id"],),
                        tuple(rd.chunk_ids[i] for i in leaves),
                        ((par["doc_id"], par["start"], par["end"]),), n, score, offsets))
        blocks = pack_blocks(raw, p, rd.config.chunking.encoding)
        return Context(self.name, params_dict(p), blocks, counters(min(p.top_k, len(pool.dense_idx))))


def _code_parent(rd, par: dict, leaf: int, leaf_offset: int) -> tuple[str, int, int]:
    """A code parent (a class, or a piece of its file) as the code-assistant block chunks' blocks are: the header
    (file, lines, language, the class) before its code in a fence, as the prompt names the source (issue 65, 5).
    (text, exact tokens, where the code starts in the text)."""
    from rag.ingest.code.blocks import code_header
    from rag.tokens import count_tokens

    code = par["text"]
    first = (int(rd.line_starts[leaf]) - code[:leaf_offset].count("\n")) if rd.line_starts is not None else 0
    lines = (first, first + code.rstrip("\n").count("\n")) if first > 0 else ()
    crumb = list(par.get("header_path") or [])
    # a parent of nothing but comment (a file's long introduction, cut into pieces of a module gap or its `doc`
    # chunks) is said as documentation, as a `doc` chunk's block is (issue 86): never a block that reads as code
    # with none in it
    from rag.ingest.code.blocks import doc_only

    whole_doc = doc_only(code, rd.code_languages[leaf])
    head = code_header(rd.doc_ids[leaf], rd.code_languages[leaf], crumb[-1] if crumb else "",
                       "doc" if whole_doc else "class" if crumb else "module", lines)
    text = head + code + ("" if code.endswith("\n") else "\n") + "```"
    return text, count_tokens(text, rd.config.chunking.encoding), len(head)
