"""The workbench's answerers: the offline extractive one, or an LLM (any OpenAI-compatible endpoint) with the
same response cache as ``ragwb run`` (WORKSPACE/cache/llm.sqlite: a CLI run and the notebook never pay twice),
and what an Apply would cost before it sends anything."""
from __future__ import annotations

from dataclasses import dataclass, field, replace

from rag.answer.answerers import make_answerer
from rag.llm.client import PRICES, LLMClient, dollars_text, price_known, price_of
from rag.strategies import get_strategy, make_params

from ..run.runner import ItemEvaluator, point_label
from ..score.metrics import get_scorers

OFFLINE = "offline (extractive)"


def llm_session(sess, llm, prices: dict | None = None, judge=None):
    """A session that answers with ``llm`` (an ``LLMConfig``), sharing the offline session's dataset, index and
    warm candidate cache; its items are its own (an LLM answer is never mixed with an extractive one). ``judge``:
    the judge's ``LLMConfig`` (the page's flags: the answering endpoint by default); its judges score every point
    the session evaluates, counted in the Apply's cost line."""
    prices = {**PRICES, **(prices or {})}
    client = LLMClient(llm, sess.retriever.ws.root / "cache" / "llm.sqlite", prices=prices)
    enc = sess.retriever.reader.config.chunking.encoding
    answerer = make_answerer("openai", client=client, encoding=enc)
    base = sess.evaluator
    judges = list(base.judges)
    if judge is not None:
        from ..score.judges import DEFAULT_LLM_JUDGES, get_judge

        jclient = LLMClient(judge, sess.retriever.ws.root / "cache" / "llm.sqlite", prices=prices)
        judges = [get_judge(n, jclient) for n in DEFAULT_LLM_JUDGES]
    ev = ItemEvaluator(sess.retriever, answerer, get_scorers(), llm.model, judges, prices,
                       systems=base.systems, plugin_timeout=base.plugin_timeout)
    ev.worker = base.worker  # one plugin worker per page: the same retriever's index and plugins
    return replace(sess, evaluator=ev, items={}, frames={}, summaries={}, layout=(None, []), client=client,
                   answerer_label=f"LLM: {llm.model}", workers=llm.max_concurrency)


def session_for_answerer(sessions: dict, base, choice: str, llm=None, prices: dict | None = None, judge=None):
    """The session of the answerer picked in the page (made once, then kept: its items and cache stay warm);
    ``prices``: the page's --price table (a model missing from it and the built-in table is "price unknown");
    ``judge``: the page's judge (None: --judge none)."""
    if choice == OFFLINE or llm is None:
        return base
    key = (choice, judge.model if judge is not None else None)  # judged and unjudged items are kept apart
    if key not in sessions:
        sessions[key] = llm_session(base, llm, prices, judge)
    return sessions[key]


@dataclass
class AnswerPlan:
    """What evaluating some points on some questions will send: answer calls not in the response cache, the
    ones that are, their prompt tokens and the dollars (prompt at the input price, completions counted at
    max_tokens: an upper bound), and the requests to deployed services."""
    items: int = 0
    new_calls: int = 0
    cached_calls: int = 0
    prompt_tokens: int = 0
    dollars: float = 0.0
    service_requests: int = 0
    overflow: int = 0  # prompts that cannot fit the model's window: refused before any call
    notes: list = field(default_factory=list)
    price_known: bool = True  # False: the model has no price here (said as "price unknown", never $0)
    judge_calls: int = 0  # judge calls not in the response cache (those of answers not yet known: at most one each)
    judge_cached: int = 0
    judge_bound: int = 0  # of judge_calls, the ones that read an answer not known yet (so "up to")
    judge_model: str = ""
    judge_dollars: float = 0.0
    judge_price_known: bool = True

    @property
    def calls(self) -> int:  # what the Send button sends at most
        return self.new_calls + self.judge_calls

    def line(self, model: str = "") -> str:
        if not self.items:
            return "nothing new to answer: every item of these points is already in this session"
        parts = [f"{self.items:,} new item(s)"]
        if self.new_calls or self.cached_calls:
            parts.append(f"{self.new_calls:,} answer call(s) to {model or 'the LLM'} "
                         f"({self.prompt_tokens:,} prompt tokens, "
                         f"{dollars_text(self.dollars, self.price_known, 'up to ')})")
            parts.append(f"{self.cached_calls:,} already in the response cache (free)")
        if self.judge_calls or self.judge_cached:
            up = "up to " if self.judge_bound else ""
            parts.append(f"{up}{self.judge_calls:,} judge call(s) to {self.judge_model} (faithfulness, answer "
                         f"relevance, sufficiency where no gold evidence decides it; "
                         f"{dollars_text(self.judge_dollars, self.judge_price_known, 'up to ')})"
                         + (f", {self.judge_cached:,} already in the response cache (free)" if self.judge_cached else ""))
        if self.overflow:
            parts.append(f"{self.overflow:,} prompt(s) over the context window (stored as context_overflow, not sent)")
        if self.service_requests:
            parts.append(f"{self.service_requests:,} request(s) to deployed services")
        return "; ".join(parts)


def answer_plan(sess, points: list[tuple[str, dict]], limit: int) -> AnswerPlan:
    """What an Apply of ``points`` on the first ``limit`` questions would send, counted before anything is sent:
    each new item's context is packed (from cached candidates) and its prompt looked up in the response cache."""
    plan = AnswerPlan()
    qs = sess.dataset.questions[:limit]
    ev, client = sess.evaluator, sess.client
    if client is not None:
        plan.price_known = price_known(client.cfg.model, client.prices)
    # two points that build the same prompt make one call: the second is answered from the response cache (as
    # `ragwb show` later counts it), so a prompt is counted as a new call once
    planned: set[str] = set()
    for name, kw in points:
        label = point_label(kw)
        todo = [q for q in qs if (name, label, q.qid) not in sess.items]
        plan.items += len(todo)
        if name in ev.systems:
            plan.service_requests += len(todo)
            continue
        if client is None or not todo:
            continue
        p, strat = make_params(name, **kw), get_strategy(name)
        escalates = getattr(strat, "escalates", False)
        if escalates:
            plan.notes.append(f"{name}: up to two calls an item (counted as one here)")
        sess.retriever.warm([q.text for q in todo], p.search_key(strat.needed(p)))
        window = client.context_window()
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
                plan.overflow += 1
                continue
            key = client.cache_key(msgs, client._params({}), 0)
            answer = None  # the answer's text when the cache already holds it: its judge calls count exactly
            if key in planned or client.has_key(key):
                plan.cached_calls += 1
                hit = client.cache.get(key) if client.cache is not None else None
                answer = hit["text"].strip() if hit and isinstance(hit.get("text"), str) else None
            else:
                planned.add(key)
                plan.new_calls += 1
                plan.prompt_tokens += n
                plan.dollars += price_of(client.cfg.model, n, client.cfg.max_tokens, client.prices)
            if ev.judges and not escalates:
                count_judges(plan, ev, q, answer, [b.text for b in ctx.blocks], planned)
    return plan


def count_judges(plan: AnswerPlan, ev, q, answer: str | None, contexts: list[str], planned: set) -> None:
    """Add one item's judge calls to ``plan``: exact where the answer is known (cached), else at most one each."""
    from rag.tokens import count_tokens

    from ..score.judges import count_judge_calls

    jc = ev.judges[0].client
    plan.judge_model = jc.cfg.model
    plan.judge_price_known = price_known(jc.cfg.model, jc.prices)
    new, cached, unknown = count_judge_calls(ev.judges, q, answer, contexts, 0, planned, ev.fallback)
    plan.judge_calls += new + unknown
    plan.judge_bound += unknown
    plan.judge_cached += cached
    if new + unknown:  # the context once per call (an upper bound: faithfulness reads only the cited blocks)
        tokens = count_tokens("\n\n".join(contexts)) + 200
        plan.judge_dollars += (new + unknown) * price_of(jc.cfg.model, tokens, jc.cfg.max_tokens, jc.prices)
