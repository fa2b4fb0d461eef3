"""The unit of work of a run: one item (retrieve, pack, answer, score) and one shard of questions.

Every engine (evals/run/engines.py: this process, or Ray workers) rebuilds a run's parts from its config
with ``build_parts`` and evaluates shards with ``evaluate_shard``: the same code, so the same rows.
The driver (evals/run/runner.py) plans the run and writes the store; this module never imports it.
"""
from __future__ import annotations

import dataclasses
import functools
import hashlib
import json
import time
from dataclasses import dataclass
from pathlib import Path

from rag.answer.answerers import Answer, make_answerer
from rag.index.workspace import Workspace
from rag.llm.client import PRICES, LLMClient, price_known, price_of
from rag.answer.prompts import FALLBACK, is_fallback, parse_citations, prompt_tokens
from rag.index.retrieval import Retriever
from rag.strategies import (BUILTIN, DEFAULT_POOL, Context, Strategy, blocks_json, get_strategy, make_params,
                            params_dict)

from evals.analyze.judgments import ranked_passage_keys
from evals.score.judges import judge_applies, judge_repeated
from evals.score.metrics import Score, ScoringInput, get_scorers, score_all

from .config import RunConfig


def point_id(kw: dict) -> str:
    return hashlib.sha256(json.dumps(kw, sort_keys=True).encode()).hexdigest()[:10] if kw else "default"


def point_label(kw: dict) -> str:
    return ",".join(f"{k}={v}" for k, v in sorted(kw.items())) or "defaults"



class ItemEvaluator:
    """One item = retrieve, pack, answer, score; the same code for runs and the notebook."""

    def __init__(self, retriever: Retriever, answerer, scorers: dict, model: str = "local", judges=(),
                 prices: dict | None = None, fit_context: bool = False, systems: dict | None = None,
                 plugin_timeout: float = 60.0):
        self.r, self.answerer, self.scorers, self.model = retriever, answerer, scorers, model
        self.plugin_timeout = plugin_timeout  # seconds a plugin's shape may take per item (0 = no limit)
        self.systems = systems or {}  # name -> rag.answer.systems.SystemClient
        tpl = getattr(answerer, "template", None)
        self.fallback = tpl.fallback if tpl is not None else FALLBACK  # what abstaining reads as
        self.fit_context = fit_context and hasattr(answerer, "overflow_tokens")
        self.judges, self.prices = list(judges), prices
        # the run's embedder (the relevance stand-in); none where there is no index (a log scored without a dataset)
        self.embed = (lambda texts: retriever.embed_queries(list(texts))) if retriever is not None else None
        self.worker = None  # a PluginWorker when plugins run in a process of their own (build_parts)

    def search_ms(self, strat, pool, p) -> float:
        """The question's own search cost for this point: its dense search (+ embedding share), plus
        BM25 for hybrid. The same figure in a one-point run and in a 50-point sweep (docs/store.md)."""
        ms = pool.search_ms
        if strat.name == "hybrid":
            k = max(DEFAULT_POOL, p.top_k)
            self.r.bm25_pool(pool, k, p.bm25_backend)
            ms += pool.extra.get(("bm25_ms", k, p.bm25_backend), 0.0)
        return ms

    def retrieve(self, query: str, name: str, p):
        """(context, retrieve_ms, pack_ms) for one query under one strategy point. A plugin's shape runs
        under its time limit, and what it returns is checked, counted here and held to the budget."""
        if name in BUILTIN:
            return self._retrieve(query, name, p)
        if self.worker is not None:  # checked in the worker, stopped there at the limit
            return self.worker.call(query, name, p, self.plugin_timeout)
        from rag.strategies.plugins import call_with_time_limit, checked_context

        ctx, retrieve_ms, pack_ms = call_with_time_limit(lambda: self._retrieve(query, name, p), self.plugin_timeout)
        return checked_context(ctx, name, p, self.r.reader.config.chunking.encoding), retrieve_ms, pack_ms

    def _retrieve(self, query: str, name: str, p):
        strat = get_strategy(name)
        if type(strat).pack is Strategy.pack:  # a shape that only overrides retrieve (no cheap re-pack)
            t2 = time.perf_counter()
            ctx = strat.retrieve(self.r, query, p)
            return ctx, (time.perf_counter() - t2) * 1000, 0.0
        pool = strat.candidates(self.r, query, p)
        retrieve_ms = self.search_ms(strat, pool, p)
        t2 = time.perf_counter()
        ctx = strat.pack(self.r, pool, p)
        if self.fit_context:
            ctx = self._fit(query, strat, pool, p, ctx)
        return ctx, retrieve_ms, (time.perf_counter() - t2) * 1000

    def _fit(self, query: str, strat, pool, p, ctx):
        """Re-pack a context whose prompt overflows the model's window under a token budget that fits,
        by the point's own overflow policy (truncate or drop the block that overflows); the
        counters say so. A prompt that still does not fit is refused by the answerer."""
        excess = self.answerer.overflow_tokens(query, ctx.blocks)
        for _ in range(4):  # a block's header and separators are counted too: shrink until it fits
            if excess <= 0:
                break
            budget = max(1, ctx.context_tokens - excess) if not p.max_context_tokens else \
                max(1, min(p.max_context_tokens, ctx.context_tokens) - excess)
            p = dataclasses.replace(p, max_context_tokens=budget)
            ctx = strat.pack(self.r, pool, p)
            ctx.counters = {**ctx.counters, "fitted_to_tokens": budget}
            excess = self.answerer.overflow_tokens(query, ctx.blocks)
        return ctx

    def system_item(self, q, name: str, rep: int, res, history: list[dict] | None = None):
        """One question through a deployed service, from its reply (``SystemClient.ask``): its answer and
        contexts (located in the corpus) are scored like any point's; latency is end to end; a failed call is
        the item's status. The runner asks on worker threads and scores here as replies come back, so scoring
        overlaps the waiting."""
        from rag.answer.prompts import count_prompt_tokens
        from rag.strategies import BaseParams
        from rag.answer.systems import context_blocks
        from rag.tokens import count_tokens

        enc = self.r.reader.config.chunking.encoding
        p = BaseParams()
        if res.status != "ok":
            ctx = Context(name, {}, [], {"latency_ms": round(res.latency_ms, 1)})
            ans = Answer("", res.status, 0, 0, error=res.error, cached=res.cached)
        else:
            blocks, how = context_blocks(self.r.reader, res.contexts, enc)
            ctx = Context(name, {}, blocks, {"contexts": len(blocks), "located": how,
                                              "latency_ms": round(res.latency_ms, 1)})
            given = res.prompt_tokens is not None
            ans = Answer(res.answer, "ok",
                         res.prompt_tokens if given else count_prompt_tokens(q.text, blocks, history, enc),
                         res.completion_tokens if res.completion_tokens is not None else count_tokens(res.answer, enc),
                         "endpoint" if given else "tokenizer", res.cached, error=res.usage_error)
        row, scores = self.finish(q, name, p, "default", "defaults", rep, ctx, 0.0, 0.0, history=None,
                                  extra_params={"system": name}, answer=ans)
        row["answer_ms"] = res.latency_ms  # end to end, as a user of the service waits
        return row, scores

    def evaluate(self, q, name: str, p, pid: str, label: str, rep: int = 0):
        if getattr(get_strategy(name), "escalates", False):
            row, scores, _ = self.escalate(q, name, p, pid, label, rep)
            return row, scores
        try:
            ctx, retrieve_ms, pack_ms = self.retrieve(q.text, name, p)
        except (Exception, SystemExit) as e:  # noqa: BLE001 - a user's plugin that fails costs that item, not the run
            if name in BUILTIN:  # ours: a bug, never hidden behind a status
                raise
            why = plugin_failure(name, e)
            return self.finish(q, name, p, pid, label, rep, Context(name, params_dict(p), [], {"error": why}),
                               0.0, 0.0, failure=why)
        return self.finish(q, name, p, pid, label, rep, ctx, retrieve_ms, pack_ms)

    def escalate(self, q, name: str, p, pid: str, label: str, rep: int = 0, query: str | None = None,
                 history: list[dict] | None = None, bypassed: bool | None = None, extra_params: dict | None = None,
                 query_mode: str | None = None):
        """Self-Route (rag/strategies/escalate.py): the cheap point answers; where that answer is the
        fallback sentence, the rich point answers again (a conversation turn: with the same history and
        retrieval query; a bypassed turn never escalates, it retrieves nothing by design). Prompt and
        completion tokens (so the price) count both calls; the blocks scored are the ones finally
        answered from. Returns (row, scores, the final context)."""
        query = q.text if query is None else query
        more = dict(history=history, bypassed=bypassed, extra_params=extra_params, query_mode=query_mode)
        cheap, cp = p.point("cheap")
        if bypassed:
            ctx1, r1, k1 = Context(name, {}, [], {"bypassed": True}), 0.0, 0.0
        else:
            ctx1, r1, k1 = self.retrieve(query, cheap, cp)
        t0 = time.perf_counter()
        a1 = self.answerer.answer(q.text, ctx1.blocks, repeat=rep, history=history)
        t1 = time.perf_counter()
        counters = {"escalated": False, "first": cheap, "first_context_tokens": ctx1.context_tokens}
        if bypassed or a1.status != "ok" or not is_fallback(a1.text, self.fallback):
            ctx = Context(name, params_dict(p), ctx1.blocks, {**ctx1.counters, **counters})
            row, scores = self.finish(q, name, p, pid, label, rep, ctx, r1, k1, answer=a1, own_answer=True, **more)
            row["answer_ms"] = (t1 - t0) * 1000
            return row, scores, ctx
        rich, rp = p.point("rich")
        ctx2, r2, k2 = self.retrieve(query, rich, rp)
        t2 = time.perf_counter()
        a2 = self.answerer.answer(q.text, ctx2.blocks, repeat=rep, history=history)
        t3 = time.perf_counter()
        both = Answer(a2.text, a2.status, a1.prompt_tokens + a2.prompt_tokens,
                      a1.completion_tokens + a2.completion_tokens,
                      a1.usage_source if a1.usage_source == a2.usage_source else "mixed", a1.cached and a2.cached,
                      a2.error)
        counters |= {"escalated": True, "first_prompt_tokens": a1.prompt_tokens, "then": rich}
        ctx = Context(name, params_dict(p), ctx2.blocks, {**ctx2.counters, **counters})
        row, scores = self.finish(q, name, p, pid, label, rep, ctx, r1 + r2, k1 + k2, answer=both, own_answer=True,
                                  **more)
        row["answer_ms"] = (t1 - t0 + t3 - t2) * 1000  # both answers
        return row, scores, ctx

    def finish(self, q, name: str, p, pid: str, label: str, rep: int, ctx, retrieve_ms: float, pack_ms: float,
               history: list[dict] | None = None, bypassed: bool | None = None, extra_params: dict | None = None,
               query_mode: str | None = None, failure: str | None = None, answer=None,
               not_applicable: dict | None = None, own_answer: bool = False):
        """Answer and score one item whose context is already packed (conversation turns pass the
        history their memory policy chose and whether retrieval was bypassed). ``failure``: the item
        failed before answering (its metrics get status error and the reason); ``answer``: an answer
        that came with the context (a deployed system's), so none is generated here; ``not_applicable``:
        metric -> why it cannot apply to this item (no gold), stored with that reason; ``own_answer``: the
        given answer is this evaluator's answerer's (escalation), so its exemptions hold. The answerer's
        exemptions (by_construction) follow only its own answers: a service's or a log's answer is its own
        words, checked on every metric."""
        t3 = time.perf_counter()
        if failure is not None:
            ans = Answer("", "error", 0, 0, error=failure)
        elif answer is not None:
            ans = answer
        else:
            ans = self.answerer.answer(q.text, ctx.blocks, repeat=rep, history=history)
        t4 = time.perf_counter()
        price = price_of(self.model, ans.prompt_tokens, ans.completion_tokens, self.prices)
        if answer is None and self.model != "local" and not price_known(self.model, self.prices or None):
            price = None  # an LLM with no price: its dollars are unknown (stored so), never $0
        hist_tokens = (prompt_tokens(history, self.r.reader.config.chunking.encoding) - 3) if history else 0
        scored = ans.text
        if len(scored) > MAX_SCORED_ANSWER_CHARS:  # a runaway answer: scored on its head, said in the row
            scored = scored[:MAX_SCORED_ANSWER_CHARS]
            ans.error = "; ".join(x for x in (ans.error, f"answer of {len(ans.text):,} characters scored on its "
                                                         f"first {MAX_SCORED_ANSWER_CHARS:,}") if x)
        exempt = getattr(self.answerer, "by_construction", {}) if (answer is None or own_answer) else {}
        scores = score_all(ScoringInput(q, ctx.blocks, scored, ans.status, ans.prompt_tokens,
                                        ans.completion_tokens, price, ctx.counters, self.embed,
                                        {**exempt, **(not_applicable or {})},
                                        hist_tokens if q.conversation_id else None, bypassed, self.fallback),
                           self.scorers)
        for j in self.judges:
            if not judge_applies(j, q):  # a filler turn; sufficiency that gold evidence decided offline: no call
                continue
            context_only = getattr(j, "only_without_evidence", False)  # the sufficiency autorater reads no answer
            ref = q.answers[0] if q.answerable and q.answers else None
            judged = FALLBACK if is_fallback(scored, self.fallback) else scored  # judges know the one sentence
            scores[getattr(j, "score_name", j.name)] = (
                judge_repeated(j, q.text, judged, [b.text for b in ctx.blocks], rep, ref)
                if ans.status == "ok" or context_only else Score(None, ans.status, "answer not available"))
        t5 = time.perf_counter()
        row = {"run_id": None, "strategy": name, "point_id": pid, "point_label": label,
               "params": _params_json(p) if not extra_params else json.dumps({**params_dict(p), **extra_params}), "question_id": q.qid, "repeat": rep,
               "blocks": blocks_json(ctx.blocks),
               # what the judged metrics read, kept now: a stored run's judged read is then a lookup
               "passage_keys": ranked_passage_keys(b.text for b in sorted(ctx.blocks, key=lambda b: b.n)),
               "counters": json.dumps(ctx.counters), "answer": ans.text, "answer_status": ans.status,
               "answer_error": ans.error, "citations": json.dumps(parse_citations(ans.text)),
               "n_blocks": len(ctx.blocks), "prompt_tokens": ans.prompt_tokens,
               "context_tokens": ctx.context_tokens, "completion_tokens": ans.completion_tokens,
               "usage_source": ans.usage_source, "cached": ans.cached,
               "retrieve_ms": retrieve_ms, "pack_ms": pack_ms,
               "answer_ms": (t4 - t3) * 1000, "score_ms": (t5 - t4) * 1000,
               "conversation_id": q.conversation_id or None, "turn": q.turn if q.conversation_id else None,
               "query_mode": query_mode}
        return row, scores


def plugin_failure(name: str, e: BaseException) -> str:
    """Why a plugin's item failed, one line: the plugin's own frame (file:line) when it raised."""
    from rag.strategies.plugins import PluginFailure

    if isinstance(e, PluginFailure):
        return f"strategy {name} {e}"
    if isinstance(e, SystemExit):
        return f"strategy {name} called sys.exit({e.code!r})"
    import traceback

    tb = traceback.extract_tb(e.__traceback__)[-1]
    return f"strategy {name} raised {type(e).__name__}: {str(e)[:300]} ({tb.filename}:{tb.lineno})"


@functools.lru_cache(maxsize=1024)  # one string per point, not one dumps per item
def _params_json(p) -> str:
    return json.dumps(params_dict(p))


MAX_SCORED_ANSWER_CHARS = 20_000  # longer answers are scored on their first 20,000 characters (said per item)
SHARD_QUESTIONS = 64  # questions per shard: one batched query embedding, one unit of work for an engine


@dataclass
class RunJob:
    """What an engine evaluates: everything a worker needs to rebuild the run's parts itself
    (``cfg.systems``: the deployed services, evaluated per question beside the points)."""
    cfg: RunConfig
    workspace: str
    index: str
    questions: list
    points: list  # [(strategy, budget kwargs)]
    cpoints: list  # conversation points (conversational sets), else []
    done: set  # (strategy, point_id, question_id, repeat) already stored
    shards: list  # [[question, ...]]: whole conversations stay in one shard


def make_shards(questions: list, conversational: bool, size: int = SHARD_QUESTIONS) -> list[list]:
    if size < 1:
        raise ValueError(f"shard size must be >= 1, got {size}")
    if not conversational:
        return [questions[i:i + size] for i in range(0, len(questions), size)]
    shards, cur, seen = [], [], None
    for q in questions:  # a conversation's turns are in order; never split one across shards
        if cur and len(cur) >= size and q.conversation_id != seen:
            shards.append(cur)
            cur = []
        cur.append(q)
        seen = q.conversation_id
    return shards + ([cur] if cur else [])


@dataclass
class RunParts:
    retriever: Retriever
    evaluator: "ItemEvaluator"
    llm: LLMClient | None
    judges: list
    workers: int

    def clients(self) -> list:
        # a jury's every juror: its calls are the run's too (issue 85: a two-model jury counted only the first)
        judged = [c for j in self.judges for c in [j.client] + [x.client for x in getattr(j, "jurors", ())]]
        return list({id(c): c for c in [self.llm] + judged if c is not None}.values())


def build_parts(cfg: RunConfig, ws: Workspace, index: str, limiter_for=None) -> RunParts:
    """Retriever, answerer, scorers and judges of a run: built by the driver (local engine) or by
    each worker (Ray engine) from the same config. ``limiter_for(kind, llm_config)`` supplies the
    concurrency limiter of the answer model ("llm") and the judge ("judge"); default: per process."""
    load_run_plugins(cfg)
    prices = {**PRICES, **{k: tuple(v) for k, v in cfg.prices.items()}}
    lim = limiter_for or (lambda kind, c: None)
    llm = None
    if cfg.llm is not None:
        llm = LLMClient(cfg.llm, ws.root / "cache" / "llm.sqlite", use_cache=cfg.use_cache, prices=prices,
                        limiter=lim("llm", cfg.llm))
    retriever = Retriever(ws, index, llm=llm)
    answerer = build_answerer(cfg, retriever, llm)
    judges = []
    if cfg.judge is not None:
        from evals.score.judges import get_judge

        jclient = LLMClient(cfg.judge, ws.root / "cache" / "llm.sqlite", use_cache=cfg.use_cache, prices=prices,
                            limiter=lim("judge", cfg.judge))
        judges = [get_judge(n, jclient) for n in run_judges(cfg)]
        if cfg.jury:  # each judge asked of every juror model at the judge endpoint (evals/score/jury.py)
            from dataclasses import replace

            from evals.score.jury import Jury

            jurors = [LLMClient(replace(cfg.judge, model=m), ws.root / "cache" / "llm.sqlite", use_cache=cfg.use_cache,
                                prices=prices, limiter=lim("judge", cfg.judge)) for m in cfg.jury]
            judges = [Jury(n, jurors, cfg.jury_rule) for n in run_judges(cfg)]
        for j in judges:  # --judge-repeats: each item judged that many times (sampled), each repeat cached
            j.repeats = cfg.judge_repeats
    systems = {}
    if cfg.systems:
        from rag.answer.systems import SystemClient

        systems = {x.name: SystemClient(x, ws.root / "cache" / "llm.sqlite", use_cache=cfg.use_cache)
                   for x in cfg.systems}
    evaluator = ItemEvaluator(retriever, answerer, get_scorers(list(cfg.scorers) or None),
                              cfg.llm.model if cfg.llm else "local", judges, prices, fit_context=cfg.fit_context,
                              systems=systems, plugin_timeout=cfg.plugin_timeout)
    workers = max([c.max_concurrency for c in (cfg.llm, cfg.judge) if c is not None]
                  + [x.max_concurrency for x in cfg.systems], default=1)
    return RunParts(retriever, evaluator, llm, judges, workers)


def run_judges(cfg: RunConfig) -> tuple:
    """The judges a run with a judge endpoint runs: those its config names (the CLI and the page name
    evals/score/judges.py DEFAULT_LLM_JUDGES when the user names none); a stored run from before judges were named
    ran ragas_faithfulness, and resumes as it ran."""
    return tuple(cfg.judges) or LEGACY_JUDGES


LEGACY_JUDGES = ("ragas_faithfulness",)


def build_answerer(cfg: RunConfig, retriever: Retriever, llm: LLMClient | None):
    enc = retriever.reader.config.chunking.encoding
    if cfg.answerer == "openai":
        if llm is None:
            raise ValueError("answerer 'openai' needs --llm-base-url and --llm-model")
        from rag.answer.prompts import PromptTemplate

        return make_answerer("openai", client=llm, encoding=enc,
                             template=PromptTemplate.from_dict(cfg.prompt) if cfg.prompt else None)
    return make_answerer(cfg.answerer, language=retriever.reader.language, encoding=enc, **cfg.answerer_params)


def system_tasks(job: RunJob, shard: list, done: set) -> list[tuple]:
    """(question, system name, repeat, history) of every service request of ``shard`` not in ``done``; a
    conversation's history is its gold turns (the same whichever order the requests are sent in)."""
    hist, tasks = {}, []
    for q in shard:
        h = hist.setdefault(q.conversation_id, []) if q.conversation_id else []
        for sysc in job.cfg.systems:
            for rep in range(job.cfg.repeats):
                if (sysc.name, "default", q.qid, rep) not in done:
                    tasks.append((q, sysc.name, rep, list(h)))
        if q.conversation_id:
            h += [{"role": "user", "content": q.text},
                  {"role": "assistant", "content": q.answers[0] if q.answers else ""}]
    return tasks


def ask_system(ev, t: tuple):
    q, name, rep, h = t
    return ev.systems[name].ask(q.text, q.qid, h, repeat=rep)


def evaluate_shard(parts: RunParts, job: RunJob, shard: list, done: set | None = None, prefetched: dict | None = None):
    """Yield (question_id, strategy, point_id, repeat, row, scores) for every item of ``shard`` not in
    ``done``: the unit of work of every engine (the same code, so the same rows). ``prefetched``: (question id,
    system, repeat) -> a future of that service reply, asked ahead across shards (the local engine keeps the
    service busy while a shard's replies are scored and committed: no barrier between shards)."""
    done = job.done if done is None else done
    cfg, r = job.cfg, parts.retriever
    if cfg.systems:  # each deployed service answers every question (with its conversation's history)
        tasks = system_tasks(job, shard, done)
        ev = parts.evaluator
        if prefetched is not None:
            # scored as they come back, not in question order: a reply that waits on an earlier one's turn (a
            # busy client's slot is not first come, first served) held every reply behind it (issue 44, 17)
            from concurrent.futures import as_completed

            futs = {prefetched.pop((t[0].qid, t[1], t[2])): t for t in tasks}
            pairs = ((futs[f], f.result()) for f in as_completed(futs))
        else:
            # services answer on worker threads (each client's own limit bounds its calls in flight) while this
            # thread scores the replies already back: the waiting and the scoring overlap, at any concurrency
            pairs = zip(tasks, pool_map(lambda t: ask_system(ev, t), tasks, max(2, parts.workers), always_threads=True))
        for (q, name, rep, h), res in pairs:
            row, scores = ev.system_item(q, name, rep, res, h)
            yield q.qid, name, "default", rep, row, scores
    if job.cpoints:
        from .conversations import evaluate_conversations

        for cp in job.cpoints:  # one batched query embedding per search key
            r.warm([q.text for q in shard] + [q.rewrite for q in shard if q.rewrite],
                   cp.params.search_key(get_strategy(cp.strategy).needed(cp.params)))
        for q, cp, rep, row, scores in evaluate_conversations(parts.evaluator, shard, job.cpoints, cfg.repeats,
                                                              done, parts.llm):
            yield q.qid, cp.strategy, cp.pid, rep, row, scores
        return
    from .index_grid import budgets_of, index_tag

    # a point of an index sweep carries its index settings beside its budgets: the strategy takes the budgets, the
    # stored params keep both (points are matched by params: two configs are never one point)
    params = [(name, make_params(name, **budgets_of(kw)), point_id(kw), point_label(kw)) for name, kw in job.points]
    tags = {pid: index_tag(kw) for (_, kw), (_, _, pid, _) in zip(job.points, params) if index_tag(kw)}
    todo_q = [q for q in shard if any((n, pid, q.qid, rep) not in done for n, _, pid, _ in params
                                      for rep in range(cfg.repeats))]
    if not todo_q:
        return
    worker = parts.evaluator.worker if parts.evaluator.plugin_timeout else None
    for name, p, pid, _ in params:  # one batched embedding per search key (a plugin's: in its worker)
        if worker is None or name in BUILTIN:
            r.warm([q.text for q in todo_q], p.search_key(get_strategy(name).needed(p)))
    tasks = [(q, name, p, pid, label, rep) for q in todo_q for name, p, pid, label in params
             for rep in range(cfg.repeats) if (name, pid, q.qid, rep) not in done]
    if worker is not None:  # the shard's plugin items go at once: the worker packs while this process scores
        worker.submit([(q.text, name, p) for q, name, p, _, _, _ in tasks if name not in BUILTIN])
    # LLM-bound items run with bounded concurrency; offline ones in order
    results = pool_map(lambda t: parts.evaluator.evaluate(*t), tasks, parts.workers)
    for (q, name, p, pid, label, rep), (row, scores) in zip(tasks, results):
        if pid in tags:
            row["params"] = json.dumps({**json.loads(row["params"]), **tags[pid]})
        yield q.qid, name, pid, rep, row, scores


def pool_map(fn, items: list, workers: int, always_threads: bool = False):
    """``fn`` over ``items``, results yielded in order as each is done (never the whole list at the end):
    the runner commits a killed LLM run's finished items within a second (its flush_seconds).
    ``always_threads``: even one worker runs beside the caller (the caller works on results meanwhile)."""
    if (workers <= 1 and not always_threads) or len(items) <= 1:
        for t in items:
            yield fn(t)
        return
    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(max_workers=workers) as ex:
        yield from ex.map(fn, items)


def load_run_plugins(cfg: RunConfig) -> None:
    """Load the run's strategy plugins (here and in every engine worker); a plugin whose source changed
    since the run recorded it is refused: its items would mix two versions of the user's code."""
    if not cfg.plugins:
        return
    from rag.strategies import load_plugins
    from rag.strategies.plugins import plugin_files, plugin_hashes

    missing = [k for k in cfg.plugins if not Path(k).is_file() and (k.endswith(".py") or "/" in k)]
    if missing:
        raise ValueError(f"strategy plugin(s) of this run are gone: {', '.join(missing)}; put the file(s) back where "
                         "the run found them to resume, or start a new run")
    now = plugin_hashes(list(cfg.plugins))
    changed = [f"{k} (sha256 {v[:12]} -> {now.get(k, 'missing')[:12]}; covers {', '.join(plugin_files(k))})"
               for k, v in cfg.plugins.items() if now.get(k) != v]
    if changed:
        raise ValueError(f"strategy plugin(s) changed since the run recorded them (the file or a module it imports): "
                         f"{'; '.join(changed)}; start a new run (a run measures one version of your code)")
    load_plugins(list(cfg.plugins))
