"""routed: a router trained on a stored run (``ragwb route``) picks one of that run's points per question,
from features known before answering (rag/strategies/routing.py); the chosen point then retrieves as itself. The
choice and its reason are in the item's counters (``routed_to``, ``route_p``, ``router``), so a routed
configuration is stored, shown and gated like any shape. Opt-in: it needs ``--set routed.model=PATH``."""
from __future__ import annotations

from dataclasses import dataclass

from .base import BaseParams, Context, Strategy, get_strategy, make_params, params_dict, register_strategy


@dataclass(frozen=True)
class RoutedParams(BaseParams):
    model: str = ""  # a router file written by `ragwb route RUN --metric M`

    def validate(self):
        super().validate()
        if not self.model:
            raise ValueError("routed needs a router: --set routed.model=PATH (train one with "
                             "`ragwb route RUN --metric M`)")
        from .routing import load_router

        load_router(self.model)  # a missing, changed or foreign file is an error before any item runs


@register_strategy
class RoutedStrategy(Strategy):
    name = "routed"
    description = "a trained router (ragwb route) picks one of a run's points per question (opt-in: routed.model)"
    Params = RoutedParams
    opt_in = True  # not in the default list: it needs a router file

    def pack(self, r, pool, p):
        from .routing import load_router, question_features

        router = load_router(p.model)
        question = pool.question
        j, prob = router.choose(question_features(r, question))
        point = router.points[j]
        inner = get_strategy(point["strategy"])
        ip = make_params(point["strategy"], **point["params"])
        ctx = inner.pack(r, inner.candidates(r, question, ip), ip)  # the shared pool: cached, not searched again
        counters = {**ctx.counters, "routed_to": f"{point['strategy']} · {point['label']}", "route_p": round(prob, 4),
                    "router": router.sha256[:12]}
        return Context(self.name, params_dict(p), ctx.blocks, counters)
