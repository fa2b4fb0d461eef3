"""Per-run summaries with bootstrap intervals, computed from per-question scores."""
from __future__ import annotations

import json

import numpy as np
import pandas as pd

from evals.score.metrics import METRICS
from evals.stats import bootstrap_ci
from evals.store import ResultStore

HEADLINE = ["f1", "em", "faithfulness", "citation_precision", "citation_recall", "abstention_accuracy",
            "evidence_recall", "doc_ndcg@10", "context_tokens", "cost_usd"]
PAGE_METRICS = ["page_recall@10", "page_ndcg@10"]
BUILTIN_GROUPS = ("language", "qtype", "answerable", "document")


CODE_METRICS = ["evidence_mrr@10", "evidence_ndcg@10", "symbol_recall@10", "symbol_mrr@10"]  # function-level ranking (code-search sets)


# judged quality, reference-free: first wherever a judge scored (plain questions have nothing else)
JUDGED_FIRST = ["llm_faithfulness", "ragas_faithfulness", "answer_relevance", "context_sufficiency"]
# reference-free metrics every answer gets: citations beyond precision/recall, the abstention rate, the stand-in
REFERENCE_FREE = ["citation_validity", "statement_coverage", "citation_support", "abstained",
                  "question_answer_similarity"]
# what a column is, where its name alone would claim more (show and the report print these labels)
LABELS = {"faithfulness": "lexical support (offline)",
          "question_answer_similarity": "q-a similarity (relevance stand-in)"}


def fits_the_data(metrics: list[str], scores: pd.DataFrame) -> list[str]:
    """The headline order for this run: the judged metrics first, then the rest, each group keeping its order, with
    the metrics that have an ok value before those that have none (which the tables collapse into one line)."""
    have = set(scores.loc[scores.status == "ok", "metric"]) if len(scores) else set()
    first = [m for m in JUDGED_FIRST if m in metrics]
    rest = [m for m in metrics if m not in first]
    ordered = first + rest
    return [m for m in ordered if m in have] + [m for m in ordered if m not in have]


def labelled(table: pd.DataFrame) -> pd.DataFrame:
    return table.rename(columns={k: v for k, v in LABELS.items() if k in table.columns})


def headline_metrics(store: ResultStore, run_id: str) -> list[str]:
    """The headline set, plus the page metrics whenever the run has page-level evidence, plus the
    function-level ranking metrics on a code set (a file is a page there: page metrics would repeat doc ones),
    plus the judged and reference-free metrics the run scored (judged ones first)."""
    base = _headline_base(store, run_id)
    scored = {m for (m,) in store.con.execute("SELECT DISTINCT metric FROM scores WHERE run_id = ?", [run_id]
                                              ).fetchall()}
    judged = [m for m in JUDGED_FIRST if m in scored]
    extra = [m for m in REFERENCE_FREE if m in scored and m not in base]
    at = base.index("abstention_accuracy") if "abstention_accuracy" in base else len(base)
    return judged + [m for m in base[:at] if m not in judged] + extra + [m for m in base[at:] if m not in judged]


def _headline_base(store: ResultStore, run_id: str) -> list[str]:
    code = store.con.execute("SELECT count(*) FROM run_gold WHERE run_id = ? AND metadata LIKE '%\"code_language\"%'",
                             [run_id]).fetchone()[0]
    esc = ["escalated"] if store.con.execute("SELECT count(*) FROM scores WHERE run_id = ? AND metric = 'escalated'",
                                             [run_id]).fetchone()[0] else []
    if code:
        return HEADLINE[:7] + CODE_METRICS + HEADLINE[7:-2] + esc + HEADLINE[-2:] + judged_metrics(store, run_id)
    has_page = store.con.execute("SELECT count(*) FROM scores WHERE run_id = ? AND metric = 'page_recall@10'",
                                 [run_id]).fetchone()[0]
    return HEADLINE[:8] + (PAGE_METRICS if has_page else []) + esc + HEADLINE[8:] + judged_metrics(store, run_id)


def judged_metrics(store: ResultStore, run_id: str) -> list[str]:
    """The judged metrics, judged@10 first, when any question of the run has a relevance judgment."""
    from .judgments import JUDGED_METRICS, question_key

    texts = store.con.execute("SELECT text FROM run_gold WHERE run_id = ?", [run_id]).fetchall()
    if store.judgments({question_key(t) for (t,) in texts}).empty:
        return []
    return ["judged@10"] + [m for m in JUDGED_METRICS if m != "judged@10"]


def question_groups(store: ResultStore, run_id: str, by: str) -> pd.Series:
    """question_id -> group value for ``by``: language, qtype, answerable, document (the first gold
    document) or any question metadata field (company, document type, ...)."""
    q = store.run_questions(run_id)  # the run's own gold, as it was when the run started
    if q.empty:
        raise ValueError(f"no stored questions for run {run_id!r}")
    if by in ("language", "qtype", "answerable"):
        return q.set_index("question_id")[by].astype(str)
    if by == "document":
        first = [((json.loads(e) or [{}])[0].get("doc_id") or "(none)") for e in q["evidence"]]
        return pd.Series(first, index=q["question_id"])
    meta = [json.loads(m) if isinstance(m, str) and m else {} for m in q.get("metadata", [None] * len(q))]
    fields = sorted({k for m in meta for k in m})
    if by not in fields:
        raise ValueError(f"unknown breakdown field {by!r}; valid: {', '.join(list(BUILTIN_GROUPS) + fields)}")
    return pd.Series([str(m.get(by, "(none)")) for m in meta], index=q["question_id"])


def summarize_by(store: ResultStore, run_id: str, by: str, metrics: list[str] | None = None,
                 seed: int = 0, n_resamples: int = 1000) -> pd.DataFrame:
    """The run summary split by a question field; column ``by`` holds the group."""
    groups = question_groups(store, run_id, by)
    df = run_scores(store, run_id)
    df = df.assign(**{"_group": df.question_id.map(groups).fillna("(none)")})
    parts = []
    for g, sub in df.groupby("_group", sort=True):
        s = summarize_scores(sub, metrics, seed, n_resamples)
        s.insert(0, by, g)
        parts.append(s)
    return pd.concat(parts, ignore_index=True) if parts else pd.DataFrame()


def run_scores(store: ResultStore, run_id: str, part: str = "tune") -> pd.DataFrame:
    """A run's stored scores plus its judged metrics (from the relevance judgments stored now; none when no
    question of the run has one). Everything that summarises, compares, reports or gates a run reads this.
    ``part``: a run with confirm questions (evals/run/confirm.py) is read on its tune part unless asked."""
    from .judgments import judged_scores

    sc = store.scores(run_id, part)
    j = judged_scores(store, run_id)
    confirm = store.confirm_questions(run_id)
    if confirm is not None and not j.empty and part != "all":
        j = j[j.question_id.isin(set(confirm)) == (part == "confirm")]
    if j.empty:
        return sc
    labels = sc[["strategy", "point_id", "point_label"]].drop_duplicates(["strategy", "point_id"])
    if labels.empty:
        labels = store.con.execute("SELECT DISTINCT strategy, point_id, point_label FROM results WHERE run_id = ?",
                                   [run_id]).df()
    return pd.concat([sc, j.merge(labels, on=["strategy", "point_id"], how="left")], ignore_index=True)


def summarize(store: ResultStore, run_id: str, metrics: list[str] | None = None, seed: int = 0,
              n_resamples: int = 1000) -> pd.DataFrame:
    """strategy, point, metric, n, n_ok, mean, low, high (95% bootstrap over questions)."""
    return summarize_scores(run_scores(store, run_id), metrics, seed, n_resamples)


def summarize_scores(df: pd.DataFrame, metrics: list[str] | None = None, seed: int = 0,
                     n_resamples: int = 1000) -> pd.DataFrame:
    """The same summary from a long frame of scores (strategy, point_label, metric, question_id, value, status)."""
    if metrics:
        df = df[df.metric.isin(metrics)]
    rows = []
    if df.empty:
        return pd.DataFrame(rows)
    # one pass over plain arrays: per group, pandas' per-group sub-frames cost ~6 ms each
    status = df["status"].to_numpy(object)
    value = df["value"].to_numpy(np.float64, na_value=np.nan)
    qid = df["question_id"].to_numpy(object)
    detail = df["detail"].to_numpy(object) if "detail" in df else None
    groups = df.groupby(["strategy", "point_label", "metric"], sort=True).indices
    for key in sorted(groups):
        strategy, label, metric = key
        pos = groups[key]
        st = status[pos]
        ok = pos[st == "ok"]
        per_q = _per_question_values(qid[ok], value[ok])
        if per_q is None:  # repeats or missing values: pandas' mean over repeats (it skips NaN)
            g = df.iloc[ok]
            per_q = g.groupby("question_id")["value"].mean().to_numpy()
        mean, lo, hi = bootstrap_ci(per_q, n_resamples=n_resamples, seed=seed or 20261122)
        na = pos[st == "not_applicable"]
        # every distinct reason, sorted (items n/a for different causes say each; never the first row's by chance)
        why = "; ".join(sorted({str(x) for x in detail[na]})) if len(ok) == 0 and len(na) and detail is not None else ""
        rows.append({"strategy": strategy, "point": label, "metric": metric, "n": len(pos), "n_ok": len(ok),
                     "mean": mean, "low": lo, "high": hi, "na_reason": why,
                     "higher_is_better": METRICS[metric].higher_is_better if metric in METRICS else True})
    return pd.DataFrame(rows)


def _per_question_values(qids: np.ndarray, values: np.ndarray) -> np.ndarray | None:
    """The values in question-id order when every question has exactly one (no repeats) and none is
    missing: what ``groupby("question_id").value.mean()`` gives then, without building groups.
    None otherwise (the caller averages repeats the pandas way)."""
    if np.isnan(values).any():
        return None
    order = np.argsort(qids, kind="stable")
    ordered = qids[order]
    if (ordered[1:] == ordered[:-1]).any():
        return None
    return values[order]


def headline_table(summary: pd.DataFrame, metrics: list[str] = HEADLINE, by: str | None = None,
                   numeric: bool = False) -> pd.DataFrame:
    """Wide table: one row per strategy x point (x group), 'mean [low, high]' per headline metric.
    ``numeric``: plain float means (3 decimals, sortable as numbers) and an ``n/a`` column saying why
    a metric has no value (the interactive tables; intervals are in the paired comparison)."""
    index = ([by] if by else []) + ["strategy", "point"]
    if summary.empty or "metric" not in summary:
        return pd.DataFrame(columns=index)
    s = summary[summary.metric.isin(metrics)].copy()
    if numeric:
        s["val"] = s["mean"].where(s["n_ok"] > 0).astype(float).round(3)
        wide = s.drop_duplicates(index + ["metric"]).set_index(index + ["metric"])["val"].unstack("metric")
        wide = wide[[m for m in metrics if m in wide.columns]].reset_index()
        wide.columns.name = None
        na = s[s["n_ok"] == 0].groupby(index).apply(
            lambda g: "; ".join(f"{m}: {r or 'no ok scores'}" for m, r in zip(g["metric"], g.get(
                "na_reason", pd.Series([""] * len(g), index=g.index)).fillna(""))), include_groups=False)
        wide["n/a"] = [na.get(tuple(r[c] for c in index), "") if len(na) else "" for _, r in wide.iterrows()]
        order = sorted(range(len(wide)), key=lambda i: tuple(natural_key(str(wide.iloc[i][c])) for c in index))
        return wide.iloc[order].reset_index(drop=True)
    def fmt(r):
        if r["n_ok"] == 0:  # never a number: say why ("n/a (extractive answers copy the context)")
            return f"n/a ({r['na_reason']})" if r.get("na_reason") else "n/a (no ok scores)"
        if r["metric"].endswith("tokens"):
            return f"{r['mean']:.1f}"
        if r["metric"] == "cost_usd":  # dollars a question: $0.00015 is no 0.000 (issue 83), 3 significant digits
            return f"${r['mean']:.3g} [${r['low']:.3g}, ${r['high']:.3g}]"
        return f"{r['mean']:.3f} [{r['low']:.3f}, {r['high']:.3f}]"

    s["cell"] = s.apply(fmt, axis=1)
    if s.empty:
        return pd.DataFrame(columns=index)
    wide = s.pivot_table(index=index, columns="metric", values="cell", aggfunc="first")
    # a point with no score at all for a metric another point has (full documents cite no chunk) reads "n/a", not NaN
    wide = wide[[m for m in metrics if m in wide.columns]].fillna("n/a (not scored)").reset_index()
    wide.columns.name = None
    # budget points in numeric order (top_k=2 before top_k=16), not as strings
    order = sorted(range(len(wide)), key=lambda i: tuple(natural_key(str(wide.iloc[i][c])) for c in index))
    return wide.iloc[order].reset_index(drop=True)


def drop_na_columns(table: pd.DataFrame, keep: tuple = ("strategy", "point")) -> tuple[pd.DataFrame, dict]:
    """The headline table less the metric columns that are "n/a (...)" on every row, and metric -> the
    reason(s) (so a code set's f1/em/faithfulness n/a do not push its evidence columns off screen; the
    caller says in one line what was left out and why)."""
    dropped = {}
    for c in table.columns:
        if c in keep or table[c].dtype.kind != "O" or not len(table):
            continue
        cells = table[c].astype(str)
        if cells.str.startswith("n/a").all():
            why = sorted({x[len("n/a ("):-1] if x.startswith("n/a (") else "no ok scores" for x in cells})
            dropped[c] = "; ".join(why)
    return table.drop(columns=list(dropped)), dropped


def item_losses(store: ResultStore, run_id: str) -> pd.DataFrame:
    """Per strategy x point: items stored, items whose answer failed (any status but ok: context
    overflow, timeouts, errors) and those statuses, so a mean is never read without its n."""
    with store.session() as con:
        cond = store._part(con, run_id, "tune", "question_id")  # a confirm part is its own figure, not these rows
        df = con.execute(
            "SELECT strategy, point_label AS point, count(*) AS items, "
            "count(*) FILTER (WHERE answer_status <> 'ok') AS lost, "
            "string_agg(DISTINCT answer_status, ',' ORDER BY answer_status) FILTER (WHERE answer_status <> 'ok') AS lost_as "
            f"FROM results WHERE run_id = ? AND {cond} GROUP BY ALL", [run_id]).df()
    df["lost_as"] = df["lost_as"].fillna("")
    return df


def shared_questions(store: ResultStore, run_id: str) -> set[str]:
    """The questions every point of the run answered (answer status ok in every repeat)."""
    with store.session() as con:
        cond = store._part(con, run_id, "tune", "question_id")
        n_points = con.execute("SELECT count(DISTINCT (strategy, point_id)) FROM results WHERE run_id = ?",
                               [run_id]).fetchone()[0]
        rows = con.execute(
            f"SELECT question_id FROM results WHERE run_id = ? AND {cond} GROUP BY question_id "
            "HAVING count(DISTINCT (strategy, point_id)) FILTER (WHERE answer_status = 'ok') = ? "
            "AND bool_and(answer_status = 'ok')", [run_id, n_points]).fetchall()
    return {r[0] for r in rows}


def with_losses(table: pd.DataFrame, losses: pd.DataFrame) -> pd.DataFrame:
    """The headline table with each point's items and lost items beside its means."""
    if table.empty or losses.empty or "strategy" not in table:
        return table
    out = table.merge(losses, on=["strategy", "point"], how="left")
    cols = list(table.columns[:2]) + ["items", "lost"] + [c for c in table.columns[2:]]
    out["lost"] = [f"{int(n)} ({w})" if n else "0" for n, w in zip(out["lost"].fillna(0), out["lost_as"])]
    return out[cols]


def natural_key(label: str) -> tuple:
    """'top_k=16' sorts after 'top_k=2': digit runs compare as numbers."""
    import re

    return tuple((0, float(t), "") if re.fullmatch(r"\d+(?:\.\d+)?", t) else (1, 0.0, t)
                 for t in re.findall(r"\d+(?:\.\d+)?|\D+", label))


def conversation_table(store: ResultStore, run_id: str) -> pd.DataFrame:
    """Per strategy x memory policy x query mode: passage recall@5, mean prompt tokens at turn 1 and at
    turns 6 and later, mean history tokens, bypass accuracy, and milliseconds per turn."""
    res = store.results(run_id)
    if res.empty or res.turn.isna().all():
        raise ValueError(f"run {run_id} has no conversational items")
    sc = store.scores(run_id)
    df = conversation_frame(res, sc)
    res = res[res.turn.notna()]
    # one rule with plain `show`: a prompt counts only when its answer came back (a refused or failed
    # prompt was never answered), and a cached answer's ~0 ms is no latency (left out of ms per turn)
    ok = (res.answer_status == "ok").to_numpy()
    df["prompt_tokens"] = df["prompt_tokens"].where(ok)
    answer_ms = res.answer_ms.where(~res.cached.fillna(False).astype(bool))
    df["ms"] = (res.retrieve_ms + res.pack_ms + answer_ms + res.score_ms).to_numpy()
    hist = sc[sc.metric == "history_tokens"].groupby(["strategy", "point_id"]).value.mean()
    byp = sc[(sc.metric == "bypass_correct") & (sc.status == "ok")].groupby(["strategy", "point_id"]).value.mean()
    pids = res.set_index("point_label").point_id.to_dict()
    rows = []
    for (strategy, mem, mode, label), g in df.groupby(["strategy", "memory", "query_mode", "point_label"]):
        key = (strategy, pids[label])
        rows.append({"strategy": strategy, "memory": mem, "query_mode": mode,
                     "recall@5": round(float(g["passage_recall@5"].mean()), 3),
                     "prompt_tokens_turn1": round(float(g[g.turn == 1].prompt_tokens.mean()), 0),
                     "prompt_tokens_turn6+": round(float(g[g.turn >= 6].prompt_tokens.mean()), 0),
                     "prompt_tokens_max": int(g.prompt_tokens.max()) if g.prompt_tokens.notna().any() else 0,
                     "history_tokens": round(float(hist.get(key, 0.0)), 0),
                     "bypass_accuracy": round(float(byp.get(key, float("nan"))), 3),
                     "ms_per_turn": round(float(g.ms.mean()), 1), "turns": len(g)})
    return pd.DataFrame(rows)


def run_notes(run: dict, db=None) -> list[str]:
    """What a reader of ``show`` and the report must know about a run beyond its scores: logged records that
    matched no gold question (scored on the gold-free metrics only), ids the gold set does not have, and a
    'running' run with no live writer (interrupted: how to resume)."""
    import json

    notes = []
    try:
        summ = json.loads(run.get("summary") or "{}") if isinstance(run.get("summary"), str) else (run.get("summary") or {})
    except ValueError:
        summ = {}
    un = summ.get("unmatched") or []
    n_un = summ.get("unmatched_count", len(un))  # the summary names the first rows; the count is whole
    if n_un:
        total = summ.get("records") or summ.get("items") or "?"
        total = f"{total:,}" if isinstance(total, int) else total
        notes.append(f"{n_un:,} of {total} logged records matched no gold question (scored on the metrics that "
                     f"need no gold only): rows {', '.join(map(str, un[:10]))}{' ...' if n_un > 10 else ''}")
    n_bad = summ.get("bad_row_count") or 0
    if n_bad:  # rows no store can keep (a lone surrogate): skipped, named, never a half-committed run
        bad = summ.get("bad_rows") or []
        notes.append(f"{n_bad:,} bad logged row(s) skipped: " + "; ".join(f"row {b['row']}: {b['why']}" for b in bad[:5])
                     + (" ..." if n_bad > 5 else ""))
    ids = summ.get("unknown_question_ids") or []
    n_ids = summ.get("unknown_question_id_count", len(ids))
    if n_ids:
        notes.append(f"{n_ids:,} logged records carry a question_id the gold set does not have: rows "
                     f"{', '.join(map(str, ids[:10]))}{' ...' if n_ids > 10 else ''}")
    race = summ.get("race")
    if race:  # a raced run: each point's n is the questions it answered before it left
        notes.append(f"raced on {race['metric']}: {race['planned']:,} of {race['full_grid_items']:,} items of the full "
                     f"grid; survivors: {', '.join(race['survivors'])}")
        notes += [f"{e['point']} {e['reason']}" for e in race.get("exits", [])]
        notes.append("points that left answered fewer questions: compare them on the questions both answered "
                     "(`ragwb compare`, the gate and the report's paired tables pair by question)")
    if run.get("status") == "running" and db is not None:
        from evals.store import run_has_writer

        if not run_has_writer(db, run["run_id"]):
            notes.append(f"interrupted: no process is writing this run; resume it with `ragwb run --resume "
                         f"{run['run_id']}`")
    return notes


def conversation_frame(results: pd.DataFrame, scores: pd.DataFrame) -> pd.DataFrame:
    """One row per conversational item: turn, memory policy label, query mode, prompt tokens, passage recall@5."""
    import json

    r = results[results.turn.notna()].copy()
    if r.empty:
        return r
    mem = [json.loads(p).get("memory", {}) for p in r.params]
    r["memory"] = [m.get("policy", "") + "".join(f",{k}={v}" for k, v in sorted(m.items()) if k != "policy")
                   for m in mem]
    rec = scores[scores.metric == "passage_recall@5"][["strategy", "point_id", "question_id", "repeat", "value"]]
    r = r.merge(rec.rename(columns={"value": "passage_recall@5"}), how="left",
                on=["strategy", "point_id", "question_id", "repeat"])
    return r[["strategy", "point_label", "memory", "query_mode", "conversation_id", "turn", "prompt_tokens",
              "passage_recall@5"]]


def judge_alignment(run: dict, workspace, present: set):
    """The alignment table of a run's judges (evals/score/agreement.py alignment_table); None for a run with none."""
    from evals.score.agreement import alignment_table, judge_settings
    from evals.score.judges import judge_metric

    cfg = run.get("config") or {}
    judge = cfg.get("judge")
    if not judge:
        return None
    names = tuple(cfg.get("judges") or ()) or ("ragas_faithfulness",)
    settings = judge_settings(judge, cfg.get("judge_repeats", 1))
    models = list(cfg.get("jury") or ()) or [judge.get("model", "")]
    rows = [(n, m, judge.get("base_url"), settings) for n in names if judge_metric(n) in present for m in models]
    return alignment_table(workspace, rows) if rows else None


def judge_lines(run: dict, workspace, present: set) -> list[str]:
    """How far to trust each LLM-judged metric of a run: the judge's stored agreement with people (``ragwb
    agreement``), or that it was never measured and the command that measures it. [] for a run with no judge."""
    from evals.score.agreement import agreement_line
    from evals.score.judges import judge_metric

    cfg = run.get("config") or {}
    judge = cfg.get("judge")
    if not judge:
        return []
    names = tuple(cfg.get("judges") or ()) or ("ragas_faithfulness",)  # a run that named none ran ragas's
    from evals.score.agreement import judge_settings

    settings = judge_settings(judge, cfg.get("judge_repeats", 1))
    models = list(cfg.get("jury") or ()) or [judge.get("model", "")]  # a jury: each juror's own figure
    return [agreement_line(workspace, n, m, judge.get("base_url"), settings)
            for n in names if judge_metric(n) in present for m in models]


def not_shown_line(dropped: dict) -> str:
    """The metrics n/a on every row, in one line, each reason said once: "f1, em (answerability unknown ...);
    cost_usd (price unknown ...)". Empty when none (show, the report and the page print it under the table)."""
    by_reason: dict[str, list[str]] = {}
    for m, why in dropped.items():
        by_reason.setdefault(why, []).append(m)
    return "; ".join(f"{', '.join(ms)} ({why})" for why, ms in by_reason.items())
