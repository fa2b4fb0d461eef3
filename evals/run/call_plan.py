"""What answering some budget points on some questions will send, counted before anything is sent: each item's
context is packed (from cached candidates where a session holds them), its prompt looked up in the response cache,
and its judges' calls counted (exactly where the answer is cached). The page's Apply and Sweep lines and
``ragwb run``'s cost line are this one count."""
from __future__ import annotations

from dataclasses import dataclass, field

from rag.llm.client import dollars_text, price_known, price_of
from rag.strategies import get_strategy, make_params


@dataclass
class AnswerPlan:
    """What evaluating some points on some questions will send: answer calls not in the response cache, the
    ones that are, their prompt tokens and the dollars (prompt at the input price, completions counted at
    max_tokens: an upper bound), and the requests to deployed services."""
    items: int = 0
    new_calls: int = 0
    cached_calls: int = 0
    repeated_calls: int = 0  # prompts another item of this plan asks too: one call answers both (free)
    prompt_tokens: int = 0
    dollars: float = 0.0
    service_requests: int = 0
    overflow: int = 0  # prompts that cannot fit the model's window: refused before any call
    window_unasked: bool = False  # counted before consent: the model's window is asked (GET /models) at the send
    notes: list = field(default_factory=list)
    price_known: bool = True  # False: the model has no price here (said as "price unknown", never $0)
    judge_calls: int = 0  # judge calls not in the response cache (those of answers not yet known: at most one each)
    judge_cached: int = 0
    judge_bound: int = 0  # of judge_calls, the ones that read an answer not known yet (so "up to")
    judge_model: str = ""
    jurors: int = 0  # a jury: its jurors (the line says each one's calls)
    judge_dollars: float = 0.0
    judge_price_known: bool = True
    judge_each: dict = field(default_factory=dict)  # judge name -> its calls (new or not known yet)

    @property
    def calls(self) -> int:  # what the Send button sends at most
        return self.new_calls + self.judge_calls

    def line(self, model: str = "") -> str:
        if not self.items:
            return "nothing new to answer: every item of these points is already in this session"
        return "; ".join([f"{self.items:,} new item(s)"] + self.call_parts(model))

    def call_parts(self, model: str = "") -> list[str]:
        """The line's parts after its item count: answer calls, cache, judges, overflow, services."""
        parts = []
        if self.new_calls or self.cached_calls or self.repeated_calls:
            parts.append(f"{self.new_calls:,} answer call(s) to {model or 'the LLM'} "
                         f"({self.prompt_tokens:,} prompt tokens, "
                         f"{dollars_text(self.dollars, self.price_known, 'up to ')})")
            parts.append(f"{self.cached_calls:,} already in the response cache (free)"
                         + (f", {self.repeated_calls:,} repeat{'s' if self.repeated_calls == 1 else ''} a prompt "
                            "counted above (one call answers both)" if self.repeated_calls else ""))
        if self.judge_calls or self.judge_cached:
            up = "up to " if self.judge_bound else ""
            each = ", ".join(f"{n} {c:,}" for n, c in self.judge_each.items() if c)
            model = (self.judge_model[:-1] + f"; {up}{self.judge_calls // self.jurors:,} each)"
                     if self.jurors and self.judge_model.endswith(")") else self.judge_model)
            parts.append(f"{up}{self.judge_calls:,} judge call(s) to {model} ("
                         + (f"{each}; " if each else "") + "sufficiency only where no gold evidence decides it; "
                         + f"{dollars_text(self.judge_dollars, self.judge_price_known, 'up to ')})"
                         + (f", {self.judge_cached:,} already in the response cache (free)" if self.judge_cached else ""))
        if self.overflow:
            parts.append(f"{self.overflow:,} prompt(s) over the context window (stored as context_overflow, not sent)")
        if self.window_unasked and self.new_calls:
            parts.append("the model's context window is asked of the endpoint (GET /models, no tokens) at the send, "
                         "not before: a prompt over it is then stored as context_overflow, not sent")
        if self.service_requests:
            parts.append(f"{self.service_requests:,} request(s) to deployed services")
        return parts


def count_point(plan: AnswerPlan, ev, client, retriever, name: str, kw: dict, todo: list, planned: set,
                repeats: int = 1, probe: bool = True) -> None:
    """Add to ``plan`` the calls of answering ``todo`` (questions) under one shape point ``(name, kw)`` with
    ``ev`` (an ItemEvaluator whose answerer is the LLM's) and ``client``: a prompt already counted in ``planned``
    or held by the response cache is free; one over the model's window is never sent. ``probe`` False (the page and
    the Workbench, which count before consent): the window is not asked of the endpoint here, only used if known."""
    p, strat = make_params(name, **kw), get_strategy(name)
    escalates = getattr(strat, "escalates", False)
    if escalates:
        plan.notes.append(f"{name}: up to two calls an item (counted as one here)")
    retriever.warm([q.text for q in todo], p.search_key(strat.needed(p)))
    window = client.context_window() if probe else client.known_window()
    if window is None:
        plan.window_unasked, window = True, 0
    params = client._params({})
    # Self-Route's first call is its cheap point's (a second only where that one abstains)
    first, fp = p.point("cheap") if escalates else (name, p)
    for q in todo:
        try:
            ctx = ev.retrieve(q.text, first, fp)[0]
        except Exception:  # noqa: BLE001 - a plugin that fails is counted as the item it will be
            continue
        msgs = ev.answerer.messages(q.text, ctx.blocks)
        n = ev.answerer.count(q.text, ctx.blocks)
        if window and n + client.cfg.max_tokens > window:
            plan.overflow += repeats
            continue
        for rep in range(repeats):
            key = client.cache_key(msgs, params, rep)
            answer = None  # the answer's text when the cache already holds it: its judge calls count exactly
            if key in planned:  # the same prompt twice in this plan (two points packing one context): one call
                plan.repeated_calls += 1
            elif client.has_key(key):
                plan.cached_calls += 1
                hit = client.cache.get(key) if client.cache is not None else None
                answer = hit["text"].strip() if hit and isinstance(hit.get("text"), str) else None
            else:
                planned.add(key)
                plan.new_calls += 1
                plan.prompt_tokens += n
                plan.dollars += price_of(client.cfg.model, n, client.cfg.max_tokens, client.prices)
            if ev.judges and not escalates:
                count_judges(plan, ev, q, answer, [b.text for b in ctx.blocks], planned, rep)


def count_judges(plan: AnswerPlan, ev, q, answer: str | None, contexts: list[str], planned: set,
                 repeat: int = 0) -> None:
    """Add one item's judge calls to ``plan``: exact where the answer is known (cached), else at most one each."""
    from rag.tokens import count_tokens

    from evals.score.judges import count_judge_calls

    jc = ev.judges[0].client
    jurors = getattr(ev.judges[0], "jurors", None)  # a jury: every juror named, never only the first
    plan.jurors = len(jurors) if jurors else 0
    plan.judge_model = (f"a jury of {len(jurors)} ({', '.join(j.client.cfg.model for j in jurors)})" if jurors
                        else jc.cfg.model)
    plan.judge_price_known = price_known(jc.cfg.model, jc.prices)
    new = cached = unknown = 0
    for j in ev.judges:  # one judge at a time: the line says each one's calls
        n, c, u = count_judge_calls([j], q, answer, contexts, repeat, planned, ev.fallback)
        name = getattr(j, "name", "") or type(j).__name__
        plan.judge_each[name] = plan.judge_each.get(name, 0) + n + u
        new, cached, unknown = new + n, cached + c, unknown + u
    plan.judge_calls += new + unknown
    plan.judge_bound += unknown
    plan.judge_cached += cached
    if new + unknown:  # the context once per call (an upper bound: faithfulness reads only the cited blocks)
        tokens = count_tokens("\n\n".join(contexts)) + 200
        plan.judge_dollars += (new + unknown) * price_of(jc.cfg.model, tokens, jc.cfg.max_tokens, jc.prices)


EXACT_ITEMS = 20_000  # shape items a run's cost line counts prompt by prompt; above, it bounds them (said)


def count_run(cfg, ws, plan, done: set | None) -> AnswerPlan | None:
    """The exact answer and judge calls of a run with an LLM answerer, its prompt tokens and dollars, and what
    the response cache already holds (a resume's stored items send nothing). None where a prompt cannot be known
    before the run (a conversational set's turns, --fit-context's re-packing) or the run has over ``EXACT_ITEMS``
    shape items: the line then bounds the calls."""
    from .index_grid import budgets_of
    from .items import build_parts, point_id

    shapes = sum(len(pts) for _, pts in plan.by_index) * len(plan.questions) * cfg.repeats
    if (cfg.answerer != "openai" or cfg.llm is None or plan.conversational or cfg.fit_context
            or shapes > EXACT_ITEMS):
        return None
    done = done or set()
    out, planned = AnswerPlan(), set()
    for index, points in plan.by_index:
        parts = build_parts(cfg, ws, index)
        out.price_known = price_known(cfg.llm.model, parts.llm.prices)
        for name, kw in points:
            pid = point_id(kw)
            todo = [q for q in plan.questions if any((name, pid, q.qid, r) not in done for r in range(cfg.repeats))]
            out.items += sum((name, pid, q.qid, r) not in done for q in todo for r in range(cfg.repeats))
            if todo:
                count_point(out, parts.evaluator, parts.llm, parts.retriever, name, budgets_of(kw), todo, planned,
                            cfg.repeats)
    return out
