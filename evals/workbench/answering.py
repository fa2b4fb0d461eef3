"""The workbench's answerers: the offline extractive one, or an LLM (any OpenAI-compatible endpoint) with the
same response cache as ``ragwb run`` (WORKSPACE/cache/llm.sqlite: a CLI run and the notebook never pay twice),
and what an Apply would cost before it sends anything."""
from __future__ import annotations

from dataclasses import replace

from rag.answer.answerers import make_answerer
from rag.llm.client import PRICES, LLMClient, price_known

from ..run.call_plan import AnswerPlan, count_point  # noqa: F401 (AnswerPlan: the page's name)
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
    return replace(sess, evaluator=ev, items={}, frames={}, summaries={}, plans={}, layout=(None, []), client=client,
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
        # nothing reaches the endpoint before its Send (issue 83): its window is used only if already known
        count_point(plan, ev, client, sess.retriever, name, kw, todo, planned, probe=False)
    return plan


def answer_plan_kept(sess, points: list[tuple[str, dict]], limit: int, sent: int = 0) -> AnswerPlan:
    """``answer_plan``, kept on the session while nothing it counts can have changed: the same points and questions,
    no item answered since and no send since (``sent``: the page's send counter). The Sweep's line is recounted on
    every Apply (its points start from the applied budgets) and, with an LLM, packed every prompt of every sweep
    point each time (issue 63: the page's Apply at 300 questions)."""
    key = (repr(points), limit, len(sess.items), sent)
    if key not in sess.plans:
        if len(sess.plans) > 64:
            sess.plans.clear()
        sess.plans[key] = answer_plan(sess, points, limit)
    return sess.plans[key]
