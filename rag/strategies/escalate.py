"""escalate: the Self-Route mechanism (Li et al., 2024). Answer with a cheap shape; when the answer is the
fallback sentence (the model abstained), answer again with a rich shape. One composite point: its
prompt tokens and price count both calls, its blocks are the ones finally answered from, and every item
says whether it escalated (counter ``escalated``, metric ``escalated``: the mean is the escalation rate).

The answering happens in the evaluator (evals/run/items.py), because only an answer can abstain; this
strategy names the two points and packs the cheap one. Opt-in: ``--strategies escalate`` (defaults:
chunks, then full_documents), budgets as ``--set escalate.cheap_params="top_k=4"``."""
from __future__ import annotations

import functools
import shlex
from dataclasses import dataclass

from .base import BaseParams, Strategy, get_strategy, make_params, register_strategy


def parse_point_params(text: str, owner: str) -> dict:
    """'top_k=4 max_block_chars=1000' -> {'top_k': '4', ...} (typed later by the strategy's Params)."""
    out = {}
    for part in shlex.split(text.replace(";", " ")):
        k, sep, v = part.partition("=")
        if not sep or not k:
            raise ValueError(f"{owner}: {part!r} is not NAME=VALUE (write e.g. \"top_k=4 max_block_chars=1000\")")
        out[k.strip()] = v.strip()
    return out


@functools.lru_cache(maxsize=256)  # asked for several times per item: parse and type it once
def _point(name: str, params: str, role: str):
    return name, make_params(name, **parse_point_params(params, f"escalate.{role}_params"))


@dataclass(frozen=True)
class EscalateParams(BaseParams):
    cheap: str = "chunks"  # answered first
    cheap_params: str = ""  # its budgets: "top_k=4 max_block_chars=1000"
    rich: str = "full_documents"  # answered again where the cheap answer abstained
    rich_params: str = ""

    def validate(self):
        super().validate()
        for role in ("cheap", "rich"):
            name = getattr(self, role)
            s = get_strategy(name)  # unknown: the error names the valid ones
            if getattr(s, "escalates", False) or getattr(s, "opt_in", False):
                raise ValueError(f"escalate.{role} must be a plain shape, not {name!r}")
            make_params(name, **parse_point_params(getattr(self, f"{role}_params"), f"escalate.{role}_params"))
        if self.cheap == self.rich and self.cheap_params == self.rich_params:
            raise ValueError("escalate: the cheap and the rich point are the same")

    def point(self, role: str):
        return _point(getattr(self, role), getattr(self, f"{role}_params"), role)


@register_strategy
class EscalateStrategy(Strategy):
    name = "escalate"
    description = "Self-Route: answer with a cheap shape, again with a rich one where it abstained (opt-in)"
    Params = EscalateParams
    opt_in = True
    escalates = True  # the evaluator answers the cheap point, then the rich one where it abstained

    def needed(self, p) -> int:
        name, cp = p.point("cheap")
        return get_strategy(name).needed(cp)

    def candidates(self, r, question, p):
        name, cp = p.point("cheap")
        return get_strategy(name).candidates(r, question, cp)

    def pack(self, r, pool, p):
        """The cheap point's context (what is answered first); the evaluator escalates."""
        name, cp = p.point("cheap")
        return get_strategy(name).pack(r, pool, cp)
