"""Library calls behind the marimo workbench: load an index, evaluate budget points in memory
(re-using cached candidates), and render a per-question drill-down as safe HTML."""
from __future__ import annotations

import re

from pathlib import Path

import pandas as pd

from rag.answer.answerers import make_answerer
from rag.index.embedders import EmbedderConfig
from rag.index.workspace import IndexConfig, Workspace
from rag.index.retrieval import Retriever
from rag.strategies import get_strategy, make_params

from ..score.metrics import get_scorers
from .session import FRAME_COLUMNS, Session, dataset_spec, item_for, session_run_config  # noqa: F401 (re-exported)
from .drilldown import drilldown_html, side_by_side_html  # noqa: F401 (re-exported)
# the workbench's grading, answerers and datasets live in their own modules; re-exported for the notebooks
from .grading import (GRADE_LABELS, grade_click, grade_passage, gradable_passages, grading_table_html,  # noqa: F401
                      latest_click, next_ungraded, session_judged_scores, stored_grades)
from .answering import (AnswerPlan, answer_plan, answer_plan_kept, llm_session,  # noqa: F401
                        session_for_answerer)
from .datasets import (WorkbenchArgs, resolve_dataset, workbench_args, workspace_datasets)  # noqa: F401
from ..run.runner import ItemEvaluator, point_id, point_label  # noqa: F401 (re-exported)
from .evaluate import SHIPPED, evaluate_points, points_from_budgets, summarize_session  # noqa: F401 (re-exported)
from .sweeps import (budget_curve, confirm_part, parse_budget_value, pick_of, race_budgets, race_leaderboard, race_result, sweep_stored,  # noqa: F401
                     sweep_from_applied, sweep_points)
from .page import agreement_plan, judge_lines, measure_agreement  # noqa: F401 (re-exported)
from .index_sweep import best_config  # noqa: F401 (re-exported)
from rag.index.rates import measured_rate
from rag.safeio import html_body  # one escaping rule for what pages show (issue 82)


def ingest_cost(dataset: str, workspace: str = "results", embedder: str = "e5") -> dict:
    """What opening ``dataset`` would embed first: {"chunks": n, "seconds": estimate, "rate": chunks/s,
    "source": where the rate comes from}. The rate is the one this workspace measured last (or a quiet 2-core
    figure), slowed for the load now. The notebook states it and waits for a button before a long ingest
    (nothing is embedded without the user's say)."""
    ws = Workspace(workspace)
    cfg = IndexConfig(embedder=EmbedderConfig(embedder))
    work = ws.embed_work(ws.load(dataset, None, cfg), cfg)
    n = len(work)
    if not n:
        rate, source = measured_rate(workspace, embedder)
        return {"chunks": 0, "seconds": 0.0, "rate": rate, "source": source}
    from rag.index.rates import estimate_seconds

    secs, source = estimate_seconds(workspace, embedder, n, sum(work.values()))  # per token where measured here
    return {"chunks": n, "seconds": secs, "rate": n / max(secs, 1e-9), "source": source}


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
    ev = ItemEvaluator(r, ans, get_scorers(), systems=clients)
    ev.worker = plugin_worker(dataset, cfg, ws, summ.index)
    sess = Session(ds, r, ev, workers=max([x.max_concurrency for x in systems], default=1), spec=dataset,
                   embedded=summ.embedded)
    if llm is not None:
        return llm_session(sess, llm)
    return sess


def plugin_worker(dataset: str, cfg: IndexConfig, ws, index: str):
    """The page's plugins run where they can be stopped, as a run's do (evals/run/plugin_worker.py): a worker
    process that loads the plugins this process loaded; None when none is loaded."""
    from rag.strategies import load_plugins

    from ..run.config import RunConfig
    from ..run.plugin_worker import PluginWorker

    # files and modules (an entry point, "pkg.mod:attr", is loaded again by the worker itself)
    loaded = load_plugins((), entry_points=False)  # what this process loaded so far
    if not loaded:
        return None
    plugins = {k: v for k, v in loaded.items() if ":" not in k or Path(k).is_file()}
    return PluginWorker(RunConfig(dataset=dataset, index=cfg, plugins=plugins), ws.root, index)


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

    from ..run.runner import git_commit, package_versions
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
                raise ValueError(f"{name} [{label}] has not been evaluated on question {q.qid}: press Apply first "
                                 "(and, with an LLM, Send: the cost line waits for it)")
            row, sc = item
            rows.append({**row, "run_id": run_id})
            scores += [{"run_id": run_id, "strategy": name, "point_id": point_id(kw), "question_id": q.qid,
                        "repeat": 0, "metric": m, "value": v.value, "status": v.status, "detail": v.detail}
                       for m, v in sc.items()]
    if not rows:
        raise ValueError("nothing to save: pick at least one strategy and press Apply")
    systems = sess.evaluator.systems  # what answered is part of the run's config: the model, the services
    # what answered and what judged are the run's config (show and the report name them): one builder for every
    # run the page stores
    cfg = session_run_config(sess, grid={name: {k: [v] for k, v in kw.items()} for name, kw in points
                                         if name not in systems},
                             limit=limit, systems=tuple(c.cfg for n, c in systems.items() if n in dict(points)))
    with ResultStore(db) as st:
        st.upsert_questions(sess.dataset.name, qs)
        st.store_finished_run(run_id, {"dataset": sess.dataset.name, "index_name": sess.retriever.reader.index,
                                       "config": cfg.to_dict(), "config_hash": cfg.hash,
                                       "versions": package_versions(), "git_commit": git_commit(),
                                       "planned": len(rows),
                                       "corpus": {d.doc_id: d.content_hash for d in sess.dataset.documents}},
                              qs, rows, scores, {"items": len(rows), "source": "workbench: Save as run", "seconds": 0.0})
    return run_id



def save_with_report(sess: Session, db: str, points: list[tuple[str, dict]], limit: int, workspace: str,
                     run_id: str | None = None) -> tuple[str, Path | None, str]:
    """Save as run, then its report: (run id, the report's path or None, why the report was not written or "").
    The run is stored whatever the report does: a report failure is said beside the save, never hides it."""
    from evals.report.html import write_report

    rid = save_as_run(sess, db, points, limit, run_id)
    try:
        return rid, write_report(rid, db=db, out_dir=Path(workspace) / "reports"), ""
    except Exception as e:  # noqa: BLE001 - said to the page as one line
        return rid, None, f"{type(e).__name__}: {e}"


def score_logged_file(sess: Session, workspace: str, db: str, path: str, name: str = "", metrics: str = "",
                      questions: str | None = None, on_progress=None,
                      batch: int = 2000) -> tuple[str, str, Path | None, str]:
    """The page's ``ragwb score FILE``: a system's logged outputs joined to the session's questions (by id, then
    text), scored and stored as a run, then its report. (run id, the line saying what was scored, the report's
    path or None, why the report was not written or ""). A bad file raises ValueError naming its row, and
    stores nothing (the check pass reads every record first). ``on_progress(n, total)`` after each ``batch``
    records stored (smaller than the CLI's 10,000, so the page's bar moves on a log of a few thousand rows)."""
    from evals.report.html import write_report

    from ..run.logged import gold_from, score_logged, scored_line

    path = (path or "").strip()
    if not path:
        raise ValueError("give the logged file's path (.jsonl, .csv or .parquet)")
    p = Path(path).expanduser()
    if not p.is_file():
        raise ValueError(f"{p}: no such file")
    asked = [m.strip() for m in (metrics or "").split(",") if m.strip()] or None
    res = score_logged(p, workspace, db, sess.spec, questions, (name or "").strip() or None, progress=False,
                       metrics=asked, options={"no_report": False}, batch=batch, on_progress=on_progress,
                       gold=gold_from(sess.spec, sess.dataset, sess.retriever))
    line = scored_line(res, p.name)
    try:
        return res["run_id"], line, write_report(res["run_id"], db=db, out_dir=Path(workspace) / "reports"), ""
    except Exception as e:  # noqa: BLE001 - said to the page as one line; the run is stored
        return res["run_id"], line, None, f"{type(e).__name__}: {e}"


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
    from rag.safeio import md_text as esc  # point names come from the user's plugins and services (issue 82)

    differs = f"**{esc(cov['index_difference'])}**; " if cov.get("index_difference") else ""
    return (differs + f"compared **{cov.get('points_compared')} of {cov.get('candidate_points')}** candidate points "
            f"(matched by parameters) on **{cov.get('questions_compared')}** shared questions"
            + (f"; not compared: {esc(', '.join(left))}" if left else ""))


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
    parts = [f"<h3>Turn {turn} of {len(conv)}: {html_body(q.text)}</h3>",
             f"<p>retrieval query ({html_body(query_mode)}): <i>{html_body(query)}</i>"
             f"{' <b>(bypassed: filler turn)</b>' if bypass else ''}; gold rewrite: "
             f"<i>{html_body(q.rewrite or '-')}</i></p>"]
    mctx = MemoryContext(embed=ev.embed, encoding=enc)
    for pol in policies:
        msgs = build_history(pol, make_memory_params(pol), past, q.text, mctx, bypass)
        toks = prompt_tokens(msgs, enc) - 3 if msgs else 0
        items = "".join(f"<li><b>{html_body(m['role'])}</b> ({prompt_tokens([m], enc) - 6} tokens)"
                        f"<pre style='white-space:pre-wrap;max-height:12em;overflow:auto'>"
                        f"{html_body(m['content'][:3000])}</pre></li>" for m in msgs)
        parts.append(f"<details open><summary><b>{html_body(pol)}</b>: {len(msgs)} history messages, {toks} "
                     f"tokens</summary><ol>{items or '<li>(no history)</li>'}</ol></details>")
    if ctx is not None:
        parts.append("<h4>Blocks for this turn</h4><ol>" + "".join(
            f"<li><code>{html_body(', '.join(b.page_ids[:1]))}</code> {b.n_tokens} tokens: "
            f"{html_body(b.text[:300])}</li>" for b in ctx.blocks) + "</ol>")
    return "".join(parts)

