"""Evaluating multi-turn gold sets: memory policy x query mode x strategy x budget points, turn by
turn within each conversation (docs/conversations.md).

Turns are evaluated in order, so a policy that re-sends earlier context (``full_history``) sees the
blocks the same point gave those turns. Earlier answers are the gold references (teacher forcing).
Resuming recomputes the (cheap, cached, deterministic) retrieval of earlier turns and only answers
and scores the missing items.
"""
from __future__ import annotations

import hashlib
import itertools
import json
from dataclasses import dataclass

from rag.answer.memory import (MEMORY_POLICIES, FillerDetector, MemoryContext, TurnRecord, build_history, get_memory,
                        get_query_mode, make_memory_params, retrieval_query)
from rag.strategies import Context

DEFAULT_MEMORY = ("none", "full_history", "window", "retrieved_turns", "recent_summaries")
DEFAULT_QUERY_MODES = ("last_turn",)


@dataclass(frozen=True)
class ConvPoint:
    strategy: str
    params: object  # strategy params
    memory: str
    memory_params: object
    memory_kw: tuple
    query_mode: str
    pid: str
    label: str
    kw: tuple  # the strategy's own axis values

    @property
    def extra(self) -> dict:
        return {"memory": {"policy": self.memory, **dict(self.memory_kw)}, "query_mode": self.query_mode}


def expand_memory_grid(memory: dict | None) -> list[tuple[str, dict]]:
    """{policy: {param: [values]}} -> [(policy, kw)]; an axis applies to every policy that has it."""
    memory = memory or {name: {} for name in DEFAULT_MEMORY}
    shared = memory.get("*", {})
    out = []
    for name, axes in memory.items():
        if name == "*":
            continue
        pol = get_memory(name)
        fields = {f for f in pol.Params.__dataclass_fields__}
        axes = {**{k: v for k, v in shared.items() if k in fields}, **(axes or {})}
        axes = {k: (v if isinstance(v, list) else [v]) for k, v in axes.items()}
        keys = list(axes)
        for combo in itertools.product(*(axes[k] for k in keys)) if keys else [()]:
            kw = dict(zip(keys, combo))
            make_memory_params(name, **kw)
            out.append((name, kw))
    unknown = [k for k in shared if not any(k in get_memory(n).Params.__dataclass_fields__ for n in memory if n != "*")]
    if unknown:
        raise ValueError(f"memory parameter(s) {unknown} belong to none of the chosen policies "
                         f"({', '.join(n for n in memory if n != '*')})")
    return out


def expand_conversation_grid(points: list[tuple], memory: dict | None, query_modes) -> list[ConvPoint]:
    """``points``: [(strategy, kw, params)] of the strategy grid."""
    modes = [get_query_mode(m) for m in (query_modes or DEFAULT_QUERY_MODES)]
    out, seen = [], set()
    for (name, kw, p), (mem, mkw), mode in itertools.product(points, expand_memory_grid(memory), modes):
        full = {**kw, "memory": {"policy": mem, **mkw}, "query_mode": mode}
        pid = hashlib.sha256(json.dumps(full, sort_keys=True).encode()).hexdigest()[:10]
        if (name, pid) in seen:  # a memory budget or mode given twice: one point (the strategy grid says so)
            continue
        seen.add((name, pid))
        label = ",".join(f"{k}={v}" for k, v in sorted(kw.items())) or "defaults"
        mem_label = mem + (f"({','.join(f'{k}={v}' for k, v in sorted(mkw.items()))})" if mkw else "")
        out.append(ConvPoint(name, p, mem, make_memory_params(mem, **mkw), tuple(sorted(mkw.items())), mode, pid,
                             f"{label} | memory={mem_label} | query={mode}", tuple(sorted(kw.items()))))
    return out


def conversations_of(questions) -> list[list]:
    convs: dict[str, list] = {}
    for q in questions:
        convs.setdefault(q.conversation_id, []).append(q)
    return [sorted(v, key=lambda q: q.turn) for v in convs.values()]


def evaluate_conversations(evaluator, questions, cpoints: list[ConvPoint], repeats: int, done: set, llm=None,
                           detector: FillerDetector | None = None):
    """Yield (question, point, repeat, row, scores) for every item not in ``done``."""
    r = evaluator.r
    enc = r.reader.config.chunking.encoding
    detector = detector or FillerDetector(evaluator.embed)
    mctx = MemoryContext(embed=evaluator.embed, llm=llm, encoding=enc)
    from rag.strategies import get_strategy

    for cp in cpoints:
        escalates = getattr(get_strategy(cp.strategy), "escalates", False)
        for conv in conversations_of(questions):
            past: list[TurnRecord] = []
            for q in conv:
                todo = [rep for rep in range(repeats) if (cp.strategy, cp.pid, q.qid, rep) not in done]
                bypassed = bool(cp.memory_params.bypass) and detector(q.text)
                if escalates:  # Self-Route: the answer decides the context, so each turn is answered here
                    query = q.text if bypassed else retrieval_query(cp.query_mode, q.text, past, q.rewrite, llm)
                    history = build_history(cp.memory, cp.memory_params, past, q.text, mctx, bypassed)
                    for rep in todo or [0]:  # all stored (a resume): answer once more for the memory
                        row, scores, ctx = evaluator.escalate(q, cp.strategy, cp.params, cp.pid, cp.label, rep,
                                                              query, history, bypassed, cp.extra, cp.query_mode)
                        if rep in todo:
                            yield q, cp, rep, row, scores
                    past.append(TurnRecord(q.turn, q.text, q.answers[0] if q.answers else "", list(ctx.blocks),
                                           filler=bypassed))
                    continue
                if bypassed:  # a filler turn: no document or conversation retrieval
                    ctx, retrieve_ms, pack_ms = Context(cp.strategy, {}, [], {"bypassed": True}), 0.0, 0.0
                else:
                    query = retrieval_query(cp.query_mode, q.text, past, q.rewrite, llm)
                    ctx, retrieve_ms, pack_ms = evaluator.retrieve(query, cp.strategy, cp.params)
                if todo:
                    history = build_history(cp.memory, cp.memory_params, past, q.text, mctx, bypassed)
                    for rep in todo:
                        row, scores = evaluator.finish(q, cp.strategy, cp.params, cp.pid, cp.label, rep, ctx,
                                                       retrieve_ms, pack_ms, history, bypassed, cp.extra,
                                                       cp.query_mode)
                        yield q, cp, rep, row, scores
                # memory knows what the system decided (bypassed), not the gold label
                past.append(TurnRecord(q.turn, q.text, q.answers[0] if q.answers else "", list(ctx.blocks),
                                       filler=bypassed))


def describe() -> dict:
    return {"memory": list(MEMORY_POLICIES), "query_modes": list(DEFAULT_QUERY_MODES)}
