"""Library calls behind the marimo workbench: load an index, evaluate budget points in memory
(re-using cached candidates), and render a per-question drill-down as safe HTML."""
from __future__ import annotations

import atexit
import contextlib
import gc
import html
import json
import re
import weakref

from pathlib import Path

import numpy as np
import pandas as pd

from rag.answer.answerers import make_answerer
from rag.index.embedders import EmbedderConfig
from rag.index.workspace import IndexConfig, Workspace
from rag.index.retrieval import Retriever
from rag.strategies import get_strategy, make_params

from ..score.metrics import get_scorers
from .session import FRAME_COLUMNS, Session, item_for  # noqa: F401 (re-exported)
from .drilldown import drilldown_html, side_by_side_html  # noqa: F401 (re-exported)
# the workbench's grading, answerers and datasets live in their own modules; re-exported for the notebooks
from .grading import (GRADE_LABELS, grade_click, grade_passage, gradable_passages, grading_table_html,  # noqa: F401
                      latest_click, next_ungraded, session_judged_scores, stored_grades)
from .answering import (AnswerPlan, answer_plan, llm_session, session_for_answerer)  # noqa: F401
from .datasets import (WorkbenchArgs, resolve_dataset, workbench_args, workspace_datasets)  # noqa: F401
from ..run.runner import ItemEvaluator, point_id, point_label


from .sweeps import (budget_curve, parse_budget_value, race_budgets, race_leaderboard, race_result,  # noqa: E402, F401
                     sweep_from_applied, sweep_points)
from .page import QUIET_RATES as EMBED_CHUNKS_PER_S, measured_rate, judge_plan, judge_point  # noqa: E402, F401


def ingest_cost(dataset: str, workspace: str = "results", embedder: str = "e5") -> dict:
    """What opening ``dataset`` would embed first: {"chunks": n, "seconds": estimate, "rate": chunks/s,
    "source": where the rate comes from}. The rate is the one this workspace measured last (or a quiet 2-core
    figure), slowed for the load now. The notebook states it and waits for a button before a long ingest
    (nothing is embedded without the user's say)."""
    ws = Workspace(workspace)
    cfg = IndexConfig(embedder=EmbedderConfig(embedder))
    n = ws.chunks_to_embed(ws.load(dataset, None, cfg), cfg)
    rate, source = measured_rate(workspace, embedder)
    return {"chunks": n, "seconds": n / rate, "rate": rate, "source": source}


def open_session(dataset: str = "squad2", workspace: str = "results", embedder: str = "e5",
                 progress: bool = False, on_progress=None, questions: str | None = None, systems: tuple = (),
                 llm=None) -> Session:
    """Load (ingesting first when needed: ``on_progress(n, total)`` reports embedded chunks). ``dataset``: a
    bundled name or a folder (its remembered questions file, include/exclude and name, as ``ragwb run``
    reads them); ``systems``: deployed services (``SystemConfig``) evaluated as points; ``llm``: an
    ``LLMConfig`` the session answers with (default: the offline extractive answerer)."""
    from ..run.runner import questions_file_for

    ws = Workspace(workspace)
    cfg = IndexConfig(embedder=EmbedderConfig(embedder))
    ds = ws.load(dataset, questions_file_for(ws, dataset, questions), cfg)
    if questions and Path(dataset).is_dir():
        ws.remember_questions(dataset, questions)
    summ = ws.ingest(ds, cfg, progress=progress, on_progress=on_progress)
    r = Retriever(ws, summ.index)
    ans = make_answerer("extractive", language=r.reader.language, encoding=r.reader.config.chunking.encoding)
    clients = {}
    if systems:
        from rag.answer.systems import SystemClient

        clients = {x.name: SystemClient(x, ws.root / "cache" / "llm.sqlite") for x in systems}
    sess = Session(ds, r, ItemEvaluator(r, ans, get_scorers(), systems=clients),
                   workers=max([x.max_concurrency for x in systems], default=1), spec=dataset)
    if llm is not None:
        return llm_session(sess, llm)
    return sess


atexit.register(gc.unfreeze)  # shutdown frees what Applies froze (extensions report frozen objects as leaks)


@contextlib.contextmanager
def _gc_paused():
    """Pause the cyclic garbage collector while a batch of items is built, then freeze what
    survived: a session holds hundreds of thousands of cached objects (items, memos, frames), and
    each collection that walks them costs tens to hundreds of ms (a generation-1 pass over a few
    Applies' items measured 0.67 s). The items are acyclic (a collection right after an Apply finds
    nothing to free), so moving them to the permanent generation (``gc.freeze``) loses nothing and
    keeps later collections down to the objects made since."""
    was = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        gc.freeze()
        if was:
            gc.enable()


@_gc_paused()
def evaluate_points(sess: Session, points: list[tuple[str, dict]], limit: int = 100,
                    on_item=None) -> pd.DataFrame:
    """Long frame of per-question scores for each (strategy, params) point on the first ``limit`` questions.

    Moving a budget slider only re-packs: the question embeddings and candidate pools are cached,
    and the items of points already evaluated in this session (a strategy whose budgets did not
    change, or a budget tried before) are reused as they are.
    """
    qs = sess.dataset.questions[:limit]
    frames = sess.frames
    parts, layout = [], []
    for name, kw in points:
        p = None if name in sess.evaluator.systems else make_params(name, **kw)
        pid, label = point_id(kw), point_label(kw)
        if (name, label, limit) not in frames:
            frames[(name, label, limit)] = _point_frame(sess, qs, name, p, pid, label, on_item)
        parts.append(frames[(name, label, limit)])
        layout.append(((name, label), len(parts[-1])))
    out = pd.concat(parts, ignore_index=True) if parts else pd.DataFrame(columns=FRAME_COLUMNS)
    sess.layout = (weakref.ref(out), layout)
    return out


def _point_frame(sess: Session, qs: list, name: str, p, pid: str, label: str, on_item=None) -> pd.DataFrame:
    """One point's long scores frame; an item already evaluated in this session is reused. A deployed service
    (``--system``) is asked like ``ragwb run`` asks it; an LLM session answers ``sess.workers`` items at once.
    Each item is kept as soon as it is done, so an interrupted Apply loses none (the next one reuses them)."""
    todo = [q for q in qs if (name, label, q.qid) not in sess.items]
    ev = sess.evaluator
    if todo and name in ev.systems:
        def one(q):
            return ev.system_item(q, name, 0, ev.systems[name].ask(q.text, q.qid, [], repeat=0), [])
    elif todo:  # an item already evaluated in this session (same strategy, same budgets) is reused
        sess.retriever.warm([q.text for q in todo], p.search_key(get_strategy(name).needed(p)))

        def one(q):
            return ev.evaluate(q, name, p, pid, label)
    for q, item in _answered(one, todo, sess.workers) if todo else ():
        sess.items[(name, label, q.qid)] = item
        if on_item is not None:
            on_item(1)
    qid, metric, value, status, detail = [], [], [], [], []  # by column: a frame from dicts costs 3x
    for q in qs:
        item = sess.items[(name, label, q.qid)]
        for m, sc in item[1].items():
            qid.append(q.qid)
            metric.append(m)
            value.append(sc.value)
            status.append(sc.status)
            detail.append(sc.detail)
    n = len(qid)
    return pd.DataFrame(
        {"strategy": [name] * n, "point_label": [label] * n, "question_id": qid, "repeat": [0] * n,
         "metric": metric, "value": np.array(value, dtype=np.float64),  # None -> NaN, as before
         "status": status, "detail": detail}, columns=FRAME_COLUMNS)


def _answered(fn, questions: list, workers: int):
    """(question, fn(question)) as each is done, ``workers`` at a time. An interrupt (the notebook's stop)
    cancels what has not started and keeps what is done: nothing queued is sent after it."""
    if workers <= 1 or len(questions) <= 1:
        for q in questions:
            yield q, fn(q)
        return
    from concurrent.futures import ThreadPoolExecutor

    ex = ThreadPoolExecutor(max_workers=workers)
    try:
        futures = [(q, ex.submit(fn, q)) for q in questions]
        for q, f in futures:
            yield q, f.result()
    finally:
        ex.shutdown(wait=True, cancel_futures=True)




@_gc_paused()
def summarize_session(sess: Session, scores: pd.DataFrame) -> pd.DataFrame:
    """``summarize_scores`` of the applied points, re-using the summary of every point already
    summarised over the same questions in this session (only a changed point is bootstrapped again)."""
    from ..analyze.summary import summarize_scores

    if scores.empty:
        return summarize_scores(scores)
    cache = sess.summaries
    parts = []
    for (strategy, label), g in _point_groups(sess, scores):
        key = (strategy, label, len(g), tuple(g.question_id.iloc[[0, -1]]))
        if key not in cache:
            cache[key] = summarize_scores(g)
        parts.append(cache[key])
    return pd.concat(parts, ignore_index=True)


def _point_groups(sess: Session, scores: pd.DataFrame) -> list[tuple[tuple, pd.DataFrame]]:
    """``scores.groupby(["strategy", "point_label"], sort=True)``, as a list. The frame evaluate_points
    returned last holds each point's rows back to back, in lengths it noted: its groups are slices
    (not a hash grouping of ~100,000 string pairs); any other frame is grouped."""
    ref, layout = sess.layout
    keys = [k for k, _ in layout]
    if (ref is not None and ref() is scores and sum(n for _, n in layout) == len(scores)
            and len(set(keys)) == len(keys)):
        starts = np.cumsum([0] + [n for _, n in layout])
        return sorted(((k, scores.iloc[a:b]) for k, a, b in zip(keys, starts, starts[1:])), key=lambda kv: kv[0])
    return list(scores.groupby(["strategy", "point_label"], sort=True))


def search_frame(sess, query: str, strategy: str, budgets: dict | None = None):
    """The workbench's search box (``ragwb search``): the blocks ``strategy`` returns for ``query`` under the applied
    budgets (that strategy's share of them), one row each, as a DataFrame; no run stored."""
    import pandas as pd

    from rag.strategies import look

    from .page import matched_text

    (_, kw), = points_from_budgets([strategy], budgets or {})
    ctx, rows = look(sess.retriever, strategy, query, **kw)
    # the page shows the text that matched (the block from its first line holding a word of the query), not
    # only the block's first line ("## Treatments" said nothing)
    by_rank = {b.n: b.text for b in ctx.blocks}
    for r in rows:
        r["text"] = matched_text(by_rank.get(r["rank"], r["text"]), query)
    return pd.DataFrame(rows, columns=["rank", "score", "group", "where", "tokens", "text"])


SHIPPED = "shipped"  # a budget control's "each strategy keeps its own default" (parent_child's imports differ)


def points_from_budgets(strategies: list[str], budgets: dict, systems=()) -> list[tuple[str, dict]]:
    """One point per strategy. ``STRATEGY__PARAM`` keys go to that strategy only; plain keys to every
    strategy that has the parameter. Only values that differ from the strategy's shipped default are
    kept, so a strategy never receives another's budget (parent_child keeps its top_k of 20) and
    labels name what was changed. A key no registered strategy has (a typo) is an error naming the
    valid keys, never silently dropped."""
    import dataclasses

    from rag.strategies import STRATEGIES

    known = {n: {f.name for f in dataclasses.fields(get_strategy(n).Params)} for n in STRATEGIES}
    for key in budgets or {}:
        owner, _, param = key.rpartition("__")
        if (owner and param not in known.get(owner, ())) or (not owner and not any(param in f for f in known.values())):
            valid = sorted({p for f in known.values() for p in f}) + sorted(f"{n}__{p}" for n, f in known.items() for p in f)
            raise ValueError(f"unknown budget {key!r}; valid: {', '.join(valid)}")
    out = []
    for name in strategies:
        if name in systems:  # a deployed service (--system) has no budgets: one point, its own answers
            out.append((name, {}))
            continue
        defaults, fields = get_strategy(name).Params(), known[name]
        kw = {}
        for key, v in (budgets or {}).items():
            owner, _, param = key.rpartition("__")
            if v is None or v == SHIPPED or param not in fields or (owner and owner != name):
                continue
            if v != getattr(defaults, param):
                kw[param] = v
        out.append((name, kw))
    return out


def applied_budgets_table(points: list[tuple[str, dict]]) -> pd.DataFrame:
    """The chart's legend of applied budgets: each strategy's point and what changed since its shipped
    defaults ("top_k 8 -> 4"; "shipped defaults" when nothing did)."""
    from rag.strategies import STRATEGIES

    rows = []
    for name, kw in points:
        if name not in STRATEGIES:  # a deployed service (--system): its own context, no budgets
            rows.append({"strategy": name, "point": point_label(kw), "changed since the shipped defaults":
                         "a deployed service (--system): its own retrieval and answer"})
            continue
        defaults = get_strategy(name).Params()
        changes = "; ".join(f"{k} {getattr(defaults, k)!r} -> {v!r}" for k, v in sorted(kw.items()))
        rows.append({"strategy": name, "point": point_label(kw), "changed since the shipped defaults":
                     changes or "shipped defaults"})
    return pd.DataFrame(rows, columns=["strategy", "point", "changed since the shipped defaults"])


def save_as_run(sess: Session, db: str, points: list[tuple[str, dict]], limit: int,
                run_id: str | None = None) -> str:
    """Store the applied budgets as a run (the items this session already computed: nothing is evaluated
    again), so ``ragwb runs``, ``show``, the report and the gate see it. Returns the run id. Every item of
    every point must have been evaluated (Apply first); a missing one is an error, never a partial run."""
    import time
    import uuid

    from ..run.runner import RunConfig, git_commit, package_versions
    from ..store import ResultStore

    qs = sess.dataset.questions[:limit]
    rows, scores = [], []
    if run_id:  # the notebook's own words: it has no --run-id or --resume
        if not re.fullmatch(r"[A-Za-z0-9._-]+", run_id) or ".." in run_id or run_id == "latest":
            raise ValueError(f"run id {run_id!r} is not valid here (letters, digits, '.', '_', '-'; not 'latest')")
        if Path(db).exists():
            with ResultStore(db, read_only=True) as st:
                if st.con.execute("SELECT 1 FROM runs WHERE run_id = ?", [run_id]).fetchone():
                    raise ValueError(f"a stored run is already called {run_id!r} (a stored run is never rewritten): "
                                     "type another id in the box, or leave it empty for a new one")
    run_id = run_id or time.strftime("wb-%Y%m%d-%H%M%S-") + uuid.uuid4().hex[:4]
    for name, kw in points:
        label = point_label(kw)
        for q in qs:
            item = sess.items.get((name, label, q.qid))
            if item is None:
                raise ValueError(f"{name} [{label}] has not been evaluated on question {q.qid}: press Apply first")
            row, sc = item
            rows.append({**row, "run_id": run_id})
            scores += [{"run_id": run_id, "strategy": name, "point_id": point_id(kw), "question_id": q.qid,
                        "repeat": 0, "metric": m, "value": v.value, "status": v.status, "detail": v.detail}
                       for m, v in sc.items()]
    if not rows:
        raise ValueError("nothing to save: pick at least one strategy and press Apply")
    systems = sess.evaluator.systems  # what answered is part of the run's config: the model, the services
    cfg = RunConfig(dataset=sess.dataset.name, index=sess.retriever.reader.config,
                    grid={name: {k: [v] for k, v in kw.items()} for name, kw in points if name not in systems},
                    limit=limit, answerer="openai" if sess.client is not None else "extractive",
                    llm=sess.client.cfg if sess.client is not None else None,
                    systems=tuple(c.cfg for n, c in systems.items() if n in dict(points)))
    with ResultStore(db) as st:
        st.upsert_questions(sess.dataset.name, qs)
        st.store_finished_run(run_id, {"dataset": sess.dataset.name, "index_name": sess.retriever.reader.index,
                                       "config": cfg.to_dict(), "config_hash": cfg.hash,
                                       "versions": package_versions(), "git_commit": git_commit(),
                                       "planned": len(rows),
                                       "corpus": {d.doc_id: d.content_hash for d in sess.dataset.documents}},
                              qs, rows, scores, {"items": len(rows), "source": "workbench: Save as run", "seconds": 0.0})
    return run_id


def list_runs(db: str) -> pd.DataFrame:
    from pathlib import Path

    from ..store import ResultStore

    if not Path(db).exists():
        return pd.DataFrame(columns=["run_id", "dataset"])
    with ResultStore(db, read_only=True) as st:
        return st.runs()


def stored_summary(db: str, run_id: str) -> pd.DataFrame:
    """The summary (means with intervals per point and metric) of a stored run: its budget curves."""
    from ..store import ResultStore
    from ..analyze.summary import summarize

    with ResultStore(db, read_only=True) as st:
        return summarize(st, run_id)


def coverage_line(cmp: pd.DataFrame | None) -> str:
    """What a run comparison covered: points and questions compared, and what was left out."""
    cov = (cmp.attrs.get("coverage") if cmp is not None else None) or {}
    if not cov:
        return ""
    left = ([f"{p} (only in the candidate run)" for p in cov.get("candidate_only", [])]
            + [f"{p} (only in the baseline run)" for p in cov.get("baseline_only", [])])
    differs = f"**{cov['index_difference']}**; " if cov.get("index_difference") else ""
    return (differs + f"compared **{cov.get('points_compared')} of {cov.get('candidate_points')}** candidate points (matched "
            f"by parameters) on **{cov.get('questions_compared')}** shared questions"
            + (f"; not compared: {', '.join(left)}" if left else ""))


def compare_stored_runs(db: str, baseline: str, candidate: str) -> pd.DataFrame:
    """The paired comparison of two stored runs; the same run twice is an error saying so (every delta 0)."""
    if baseline == candidate:
        raise ValueError(f"baseline and candidate are the same run ({baseline}): pick two different runs")
    from ..analyze.gate import compare_runs
    from ..store import ResultStore

    with ResultStore(db, read_only=True) as st:
        return compare_runs(st, baseline, candidate)


def conversation_length(sess: Session, conversation_id: str) -> int:
    """How many turns the conversation has (the turn slider's range)."""
    return sum(1 for q in sess.dataset.questions if q.conversation_id == conversation_id)


def conversation_ids(sess: Session) -> list[str]:
    return list(dict.fromkeys(q.conversation_id for q in sess.dataset.questions if q.conversation_id))


def conversation_turn_html(sess: Session, conversation_id: str, turn: int, policies: list[str],
                           strategy: str = "chunks", query_mode: str = "last_turn") -> str:
    """What each memory policy puts in the prompt at one turn of a conversation: the history messages
    (escaped), their tokens, and the blocks retrieved for the turn's query."""
    from rag.answer.memory import FillerDetector, MemoryContext, TurnRecord, build_history, make_memory_params, retrieval_query
    from rag.answer.prompts import prompt_tokens

    from ..run.conversations import conversations_of

    conv = next((c for c in conversations_of(sess.dataset.questions) if c[0].conversation_id == conversation_id), [])
    if not conv:
        return "<p>no such conversation</p>"
    turn = max(1, min(turn, len(conv)))
    r, ev = sess.retriever, sess.evaluator
    enc = r.reader.config.chunking.encoding
    p = make_params(strategy)
    detect = FillerDetector(ev.embed)
    past = []
    for q in conv[:turn - 1]:
        ctx, _, _ = ev.retrieve(retrieval_query(query_mode, q.text, past, q.rewrite), strategy, p)
        past.append(TurnRecord(q.turn, q.text, q.answers[0] if q.answers else "", list(ctx.blocks), detect(q.text)))
    q = conv[turn - 1]
    bypass = detect(q.text)
    query = retrieval_query(query_mode, q.text, past, q.rewrite)
    ctx = ev.retrieve(query, strategy, p)[0] if not bypass else None
    parts = [f"<h3>Turn {turn} of {len(conv)}: {html.escape(q.text)}</h3>",
             f"<p>retrieval query ({html.escape(query_mode)}): <i>{html.escape(query)}</i>"
             f"{' <b>(bypassed: filler turn)</b>' if bypass else ''}; gold rewrite: "
             f"<i>{html.escape(q.rewrite or '-')}</i></p>"]
    mctx = MemoryContext(embed=ev.embed, encoding=enc)
    for pol in policies:
        msgs = build_history(pol, make_memory_params(pol), past, q.text, mctx, bypass)
        toks = prompt_tokens(msgs, enc) - 3 if msgs else 0
        items = "".join(f"<li><b>{html.escape(m['role'])}</b> ({prompt_tokens([m], enc) - 6} tokens)"
                        f"<pre style='white-space:pre-wrap;max-height:12em;overflow:auto'>"
                        f"{html.escape(m['content'][:3000])}</pre></li>" for m in msgs)
        parts.append(f"<details open><summary><b>{html.escape(pol)}</b>: {len(msgs)} history messages, {toks} "
                     f"tokens</summary><ol>{items or '<li>(no history)</li>'}</ol></details>")
    if ctx is not None:
        parts.append("<h4>Blocks for this turn</h4><ol>" + "".join(
            f"<li><code>{html.escape(', '.join(b.page_ids[:1]))}</code> {b.n_tokens} tokens: "
            f"{html.escape(b.text[:300])}</li>" for b in ctx.blocks) + "</ol>")
    return "".join(parts)
