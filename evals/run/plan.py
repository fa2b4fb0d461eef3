"""What a run will evaluate, settled before anything is stored or sent: the dataset loaded, every index config
built (one, or the product of the index axes), the questions, the budget points on each index, a conversational
set's points, the checks a race or a memory policy needs, and the number of items planned."""
from __future__ import annotations

import itertools
import math
import json
import sys
import dataclasses
from dataclasses import dataclass
from pathlib import Path

from rag.strategies import get_strategy, make_params

from .config import RunConfig
from .items import point_label


@dataclass
class RunPlan:
    ds: object  # rag.models.Dataset
    corpus: dict  # doc_id -> content hash (a resume on a changed corpus is refused)
    built: list  # [(index tag, IngestSummary)]: the first is the run's index
    questions: list
    points: list  # [(strategy, budget kwargs)] over every index config
    by_index: list  # [(index name, its points)]
    cpoints: list  # conversation points (conversational sets), else []
    conversational: bool
    planned: int
    identities: dict = None  # index config label -> what it builds (index_grid.built_identities)
    # confirm questions (evals/run/confirm.py): set aside from ``questions`` (the grid's), evaluated on the points
    # the grid picks; ``confirm_points``: how many points that is at most (one; a race's front: every point)
    confirm: list = dataclasses.field(default_factory=list)
    confirm_points: int = 0

    @property
    def confirm_planned_max(self) -> int:
        return self.confirm_points * len(self.confirm)

    @property
    def ingest(self):
        return self.built[0][1]


def plan_run(cfg: RunConfig, ws, store, run_id: str | None, resume: str | None, engine, progress: bool,
             lock_wait, follow_symlinks: bool, embed_concurrency: int, allow_changed_corpus: bool) -> RunPlan:
    from .index_grid import ingest_variants, tag_points

    ds = ws.load(cfg.dataset, cfg.questions_file, cfg.index, progress=progress, wait=lock_wait,
                 follow_symlinks=follow_symlinks, insert_fillers=cfg.insert_fillers, engine=engine.ingest_engine())
    corpus = {d.doc_id: d.content_hash for d in ds.documents}
    if resume and not allow_changed_corpus:
        check_same_corpus(run_id, store.run(run_id).get("corpus") or {}, corpus)
    # every index config (one, or the product of the index axes) built before any answer
    built = ingest_variants(ws, ds, cfg, progress, lock_wait, engine.ingest_engine(), embed_concurrency)
    for _, summ_i in built:
        print(summ_i.render(), file=sys.stderr)
    if cfg.questions_file and Path(cfg.dataset).is_dir():
        ws.remember_questions(cfg.dataset, cfg.questions_file)
    questions = ds.questions[:cfg.limit] if cfg.limit else ds.questions
    points = expand_grid(cfg.grid) if (cfg.grid or not cfg.systems) else []  # systems alone: no shapes
    if resume and questions_changed(store, run_id, questions):
        print(f"notice: run {run_id}: the gold set changed since the run started; its stored questions "
              "are kept as they were (a stored run is history)", file=sys.stderr)
    conversational = any(q.conversation_id for q in questions)
    confirm = []
    if cfg.confirm:  # the grid tunes on the rest; the point it picks is evaluated on these afterwards
        from .confirm import split

        if conversational:
            raise ValueError("--confirm is for question sets; a conversational set's turns depend on each other")
        questions, confirm = split(questions, cfg.confirm, store.confirm_questions(run_id) if resume else None)
    if len(built) > 1 or built[0][0]:  # every strategy point on every index config (or one config whose settings
        # its points carry: `ragwb best`'s TOML reproducing a grid point), its settings in the point's params
        if conversational:
            raise ValueError("index axes (--set index.*) run on question sets: a conversational set takes one "
                             "index a run for now")
        by_index = [(summ_i.index, tag_points(points, tag)) for tag, summ_i in built]
        points = [p for _, pts in by_index for p in pts]
    else:
        by_index = [(built[0][1].index, points)]
    cpoints = _conversation_points(cfg, ds, points, conversational)
    _check_race(cfg, points, questions, conversational)
    planned = ((len(cpoints) if conversational else len(points)) + len(cfg.systems)) * len(questions) * cfg.repeats
    if planned == 0:  # never a "finished" run that scored nothing
        raise ValueError(f"dataset {ds.name!r} has no questions to score"
                         + (" (its documents are indexed and `ragwb search` answers from them; to score, write "
                            "questions, one {\"question\": ...} a line, and pass --questions FILE.jsonl "
                            "(docs/datasets.md), or let an LLM write them: `ragwb generate` (docs/generate.md))"
                            if Path(cfg.dataset).is_dir() else ""))
    from .index_grid import built_identities

    if confirm and not points:
        raise ValueError("--confirm confirms the point a budget grid picks; this run has no strategy points")
    front = bool(cfg.race and cfg.race.get("cost_tolerance") is not None)
    return RunPlan(ds, corpus, built, questions, points, by_index, cpoints, conversational, planned,
                   built_identities(ds, cfg), confirm,
                   ((len(points) if front else 1) * cfg.repeats) if confirm else 0)


def _conversation_points(cfg: RunConfig, ds, points: list, conversational: bool) -> list:
    if conversational:
        from .conversations import expand_conversation_grid

        if cfg.fit_context:  # a turn's context is packed with its memory policy's history: not re-packed
            raise ValueError("--fit-context is not available on conversational sets yet; an overflowing turn "
                             "is stored as context_overflow (drop --fit-context)")
        return expand_conversation_grid([(n, kw, make_params(n, **kw)) for n, kw in points], cfg.memory,
                                        cfg.query_modes)
    if cfg.memory or cfg.query_modes:
        raise ValueError(f"--memory / --query-mode need a conversational dataset; {ds.name!r} has none "
                         "(try mtrag-govt)")
    return []


def _check_race(cfg: RunConfig, points: list, questions: list, conversational: bool) -> None:
    if not cfg.race:
        return
    if conversational:
        raise ValueError("--race is for question sets; a conversational set's turns depend on each other "
                         "(run its grid whole)")
    if len(points) < 2:
        raise ValueError(f"--race needs at least two budget points; this run has {len(points)}")
    if len(questions) < 2 * int(cfg.race.get("batch", 50)):
        print(f"notice: --race on {len(questions)} questions (fewer than two batches of "
              f"{cfg.race.get('batch', 50)}): too few to rule a point out; docs/sweeps.md says when not to race",
              file=sys.stderr)


MAX_GRID_POINTS = 10_000  # points of one run's budget grid (every strategy together); more is refused first
MAX_INDEX_CONFIGS = 100  # index configs of one run (each a whole index to chunk and embed); more is refused first


def memory_points(memory: dict | None) -> int:
    """How many (policy, memory budgets) points ``memory`` makes ({policy: {param: [values]}, "*": shared axes}),
    counted without making them: each policy times the lists of the axes it has."""
    if not memory:
        return 1
    from rag.answer.memory import get_memory

    shared = memory.get("*", {}) or {}
    n = 0
    for name, axes in memory.items():
        if name == "*":
            continue
        fields = set(get_memory(name).Params.__dataclass_fields__)
        mine = {**{k: v for k, v in shared.items() if k in fields}, **(axes or {})}
        n += math.prod(len(v) if isinstance(v, list) else 1 for v in mine.values())
    return max(n, 1)


def grid_count(grid: dict, index_axes: dict | None = None, memory: dict | None = None,
               query_modes=None) -> tuple[int, dict]:
    """(points, their factors) of a run's whole grid, counted before any is made: index configs x budget points x
    memory points x query modes (issue 82: memory and query-mode axes went around the cap, 12,000 points ran)."""
    from rag.strategies import default_strategies

    grid = grid or {name: {} for name in default_strategies()}
    sizes = {name: math.prod(len(v) if isinstance(v, list) else 1 for v in (axes or {}).values())
             for name, axes in grid.items()}
    parts = {"index config(s)": math.prod(len(v) if isinstance(v, list) else 1 for v in (index_axes or {}).values()),
             "budget point(s)": sum(sizes.values()), "memory point(s)": memory_points(memory),
             "query mode(s)": len(tuple(query_modes or ())) or 1}
    parts["_sizes"] = sizes
    return math.prod(v for k, v in parts.items() if not k.startswith("_")), parts


def check_points(n: int, what: str = "") -> None:
    """The one cap every surface counts against (a run's grid, the page's and the library's Sweep and Race, the
    index sweep): ValueError when ``n`` points is over MAX_GRID_POINTS, before a point is evaluated."""
    if n > MAX_GRID_POINTS:
        raise ValueError(f"the grid has {n:,} points{f' ({what})' if what else ''}, over the {MAX_GRID_POINTS:,} a "
                         "run takes: sweep fewer values (a coarse grid first, then a finer one around the best; "
                         "`--race` stops the clearly worse points early)")


def check_grid_size(grid: dict, index_axes: dict | None = None, memory: dict | None = None,
                    query_modes=None) -> None:
    """One cap for the whole grid, counted before any work: index configs x budget points x memory points x query
    modes (issue 73: index axes went around the 10,000-point cap, 496 configs began embedding; issue 82: memory
    and query-mode axes did too)."""
    total, parts = grid_count(grid, index_axes, memory, query_modes)
    sizes, configs = parts.pop("_sizes"), parts["index config(s)"]
    if configs > MAX_INDEX_CONFIGS:
        axes = " x ".join(f"{k} {len(v) if isinstance(v, list) else 1}" for k, v in index_axes.items())
        raise ValueError(f"the index axes make {configs:,} index configs ({axes}), over the {MAX_INDEX_CONFIGS:,} a "
                         "run builds (each is a whole index to chunk and embed): sweep fewer values, e.g. "
                         "index.chunk_tokens=64,128,256,512")
    big = ", ".join(f"{n} {k:,}" for n, k in sorted(sizes.items(), key=lambda x: -x[1])[:3])
    factors = [f"{v:,} {k}" for k, v in parts.items() if v > 1]
    check_points(total, big + (f"; {' x '.join(factors)}" if len(factors) > 1 else ""))


def expand_grid(grid: dict, notice: bool = True) -> list[tuple[str, dict]]:
    """[(strategy, params)] for the cartesian product of each strategy's budget lists. A point given twice
    (``--set chunks.top_k=4,4``) is one point, said once: two would store one item twice and never finish."""
    from rag.strategies import default_strategies

    grid = grid or {name: {} for name in default_strategies()}
    sizes = {name: math.prod(len(v) if isinstance(v, list) else 1 for v in (axes or {}).values())
             for name, axes in grid.items()}
    # refused before a point is made (1..100,000 grew to 4.2 GB)
    biggest = sorted(sizes.items(), key=lambda x: -x[1])[:3]
    check_points(sum(sizes.values()), ", ".join(f"{n} {k:,}" for n, k in biggest))
    points, seen, twice = [], set(), []
    for name, axes in grid.items():
        get_strategy(name)
        axes = {k: (v if isinstance(v, list) else [v]) for k, v in (axes or {}).items()}
        keys = list(axes)
        for combo in itertools.product(*(axes[k] for k in keys)) if keys else [()]:
            kw = dict(zip(keys, combo))
            p = make_params(name, **kw)  # validate now, not half-way through a run
            if (name, p) in seen:
                twice.append(f"{name} {point_label(kw)}")
                continue
            seen.add((name, p))
            points.append((name, kw))
    if twice and notice:
        print(f"notice: point(s) given more than once, run once: {'; '.join(dict.fromkeys(twice))}", file=sys.stderr)
    return points


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


def questions_changed(store: ResultStore, run_id: str, questions: list) -> bool:
    kept = store.run_questions(run_id)
    if kept.empty:
        return False
    now = {q.qid: (q.text, json.dumps(q.answers, ensure_ascii=False)) for q in questions}
    return any(now.get(r.question_id, (r.text, r.answers)) != (r.text, r.answers) for r in kept.itertuples())


@dataclass
class RunSpend:
    """What a run will send to paid endpoints, said before its first call (the CLI prints it and, on a terminal,
    waits for a yes). Exact where every prompt can be packed first (``exact``: evals/run/call_plan.count_run: the
    answer calls not in the response cache, their prompt tokens and dollars, the judges' calls); otherwise bounds:
    each item of a shape at most one answer call, each LLM judge at least one call an item, each service item one
    request."""
    dataset: str
    items: int
    answer_calls: int = 0
    model: str = ""
    price: str = ""
    judge_line: str = ""
    judge_calls: int = 0
    service_requests: int = 0
    exact: object = None  # an AnswerPlan when every prompt was counted
    race: bool = False  # a raced grid: points ruled out stop asking, so every count is at most
    confirm_items: int = 0  # the picked point(s) on the confirm questions: at most this many items more
    confirm_calls: int = 0  # ... and at most this many paid calls for them (answer and judge calls)
    confirm_line: str = ""

    @property
    def up_to(self) -> bool:  # the counts are bounds (the prompts are not packed yet), or judge calls of answers
        return (self.exact is None or bool(self.exact.judge_bound) or self.race  # not known yet, or a race,
                or bool(self.exact.notes))  # or a strategy that may ask twice (escalate)

    @property
    def paid(self) -> bool:  # anything configured that could be paid for (the line is said even at 0 calls)
        return bool(self.model or self.judge_line or self.service_requests)

    @property
    def new_calls(self) -> int:  # what the yes is asked for (0: nothing paid is sent)
        if self.exact is not None:
            return self.exact.calls + self.service_requests + self.confirm_calls
        return self.answer_calls + self.service_requests + self.judge_calls + self.confirm_calls

    def line(self) -> str:
        return self._line() + (f"; {self.confirm_line}" if self.confirm_line else "")

    def _line(self) -> str:
        if self.exact is not None:
            if not self.new_calls:
                cached = self.exact.cached_calls + self.exact.judge_cached
                return (f"{self.items:,} item(s) to evaluate on {self.dataset}; 0 calls (all cached: {cached:,} in "
                        "the response cache)" if cached else
                        f"{self.items:,} item(s) to evaluate on {self.dataset}; 0 calls")
            return "; ".join([f"{self.items:,} item(s) to evaluate on {self.dataset}"]
                             + self.exact.call_parts(self.model)
                             + ([f"{self.service_requests:,} request(s) to deployed services"]
                                if self.service_requests else [])
                             + list(dict.fromkeys(self.exact.notes))
                             + (["a race sends at most these: a point ruled out stops asking"] if self.race else []))
        parts = [f"{self.items:,} item(s) to evaluate on {self.dataset}"]
        if self.answer_calls:
            parts.append(f"up to {self.answer_calls:,} answer call(s) to {self.model} ({self.price}; those whose "
                         "prompt is in the response cache are free)")
        if self.judge_line:
            parts.append(self.judge_line)
        if self.service_requests:
            parts.append(f"{self.service_requests:,} request(s) to deployed services")
        return "; ".join(parts)


def run_spend(cfg: RunConfig, plan: RunPlan, done: set | None = None, ws=None) -> RunSpend:
    """The paid calls a run's plan can make (``done``: the keys a resume has stored already, which send nothing);
    exact where ``ws`` is given and every prompt can be packed first (evals/run/call_plan.count_run)."""
    from rag.llm.spend import price_text

    ids = {q.qid for q in plan.confirm}  # the confirm part's stored items are counted in its own line
    todo = max(plan.planned - sum(1 for k in (done or ()) if k[2] not in ids), 0)
    per_q = max(len(plan.questions) * cfg.repeats, 1)
    service = min(todo, len(cfg.systems) * per_q)
    shapes = todo - service
    spend = RunSpend(plan.ds.name, todo, service_requests=service, race=bool(cfg.race))
    if cfg.answerer == "openai" and cfg.llm is not None:
        spend.answer_calls, spend.model, spend.price = shapes, cfg.llm.model, price_text(cfg.llm.model, cfg.prices)
        if ws is not None:
            from .call_plan import count_run

            spend.exact = count_run(cfg, ws, plan, done)
            if spend.exact is not None:
                _confirm_spend(cfg, plan, spend, done)
                return spend
    _confirm_spend(cfg, plan, spend, done)
    if cfg.judge is not None and shapes:
        from evals.score.metrics import needs_autorater

        from .items import run_judges

        # the sufficiency autorater is asked only where no gold evidence decides it offline
        auto = -(-shapes * sum(map(needs_autorater, plan.questions)) // max(len(plan.questions), 1))
        per = max(len(cfg.jury), 1) * cfg.judge_repeats  # each juror asked, each repeat its own call
        each = {n: per * (auto if n == "llm_context_sufficiency" else shapes) for n in run_judges(cfg)}
        spend.judge_calls = sum(each.values())
        ragas = " (a ragas judge makes several an item)" if any(n.startswith("ragas") for n in each) else ""
        who = (f"a jury of {len(cfg.jury)} ({', '.join(cfg.jury)}; up to {spend.judge_calls // len(cfg.jury):,} "
               "each)" if cfg.jury else cfg.judge.model)
        spend.judge_line = (f"up to {spend.judge_calls:,} judge call(s) to {who} ("
                            + ", ".join(f"{n} {c:,}" for n, c in each.items())
                            + f"{ragas}; none for an abstention; {price_text(cfg.judge.model, cfg.prices)})")
    return spend


def _confirm_spend(cfg: RunConfig, plan: RunPlan, spend: RunSpend, done) -> None:
    """The confirm part in the cost line, counted before anything is sent: the point is picked after the grid, so its
    items are a bound (one point, or each point of a race's front at most), each at most one answer call and one call
    per LLM judge (and juror and repeat)."""
    if not plan.confirm:
        return
    ids = {q.qid for q in plan.confirm}
    items = max(plan.confirm_planned_max - sum(1 for k in (done or ()) if k[2] in ids), 0)
    calls = 0
    if cfg.answerer == "openai" and cfg.llm is not None:
        calls += items
    if cfg.judge is not None:
        from .items import run_judges

        calls += items * len(run_judges(cfg)) * max(len(cfg.jury), 1) * cfg.judge_repeats
    spend.confirm_items, spend.confirm_calls = items, calls
    spend.items += items
    who = ("each point of the quality/cost front" if plan.confirm_points > cfg.repeats else "the picked point")
    spend.confirm_line = (f"then {who} on the {len(plan.confirm):,} confirm question(s): up to {items:,} item(s)"
                          + (f" and {calls:,} call(s) (answer and judge calls; those in the response cache are "
                             "free)" if calls else ""))
