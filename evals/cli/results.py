"""``ragwb runs``, ``show``, ``compare``, ``export``: reading stored runs."""
from __future__ import annotations

from pathlib import Path

from .common import add_store_args, non_negative_float, open_store


def say(*parts, **kw) -> None:
    """``print`` for everything ``show`` and its siblings print: each part's terminal escapes (ESC, BEL, C1, bidi
    overrides in a file name, a run id, a judge's note) shown as text, line breaks kept (issue 82)."""
    from rag.safeio import printable_lines

    print(*(printable_lines(str(x)) for x in parts), **kw)


def cmd_runs(a) -> int:
    import pandas as pd

    if not Path(a.db or Path(a.workspace) / "results.duckdb").exists():
        say("no runs yet: try `ragwb run`")
        return 0
    with open_store(a) as st:
        df = st.runs()
    if df.empty:
        say("no runs yet: try `ragwb run`")
        return 0
    import json

    # a run's strategy plugins as file@sha256[:12]: a changed plugin shows as a different hash
    df["plugins"] = [", ".join(f"{Path(k).name}@{v[:12]}" for k, v in json.loads(p).items()) if p else ""
                     for p in df["plugins"].fillna("")]
    if not df["plugins"].any():
        df = df.drop(columns=["plugins"])
    if "created_at" in df:  # to the second, as the report says it
        df["created_at"] = df["created_at"].astype(str).str.slice(0, 19)
    from rag.safeio import printable

    for c in df.columns:  # names from outside (a folder's, a run id): escapes shown, never sent raw (issue 73)
        df[c] = [printable(v) if isinstance(v, str) else v for v in df[c]]
    with pd.option_context("display.width", 200, "display.max_columns", 20):
        say(df.to_string(index=False, na_rep="n/a"))
    return 0


def metric_n_line(summ, metrics: list[str]) -> str:
    """"questions scored per metric: f1 4, evidence_recall 2, ..." when the metrics shown stand on different
    numbers of questions (a mixed questions file); "" when every one stands on the same n."""
    if summ is None or not len(summ) or "n_ok" not in summ:
        return ""
    n = summ[summ.metric.isin(metrics) & (summ.n_ok > 0)].groupby("metric").n_ok.max()
    if n.nunique() <= 1:
        return ""
    return "questions scored per metric (the most of any point): " + ", ".join(
        f"{m} {int(n[m])}" for m in metrics if m in n.index)


def cmd_show(a) -> int:
    import pandas as pd

    from evals.analyze.summary import (headline_metrics, headline_table, item_losses, run_scores, shared_questions,
                                       summarize_by, summarize_scores, with_losses)

    with open_store(a) as st:
        rid = st.resolve_run(a.run)
        run = st.run(rid)
        if a.per_1k:  # which point gives the most quality per 1,000 tokens, with intervals
            from evals.analyze.explore import quality_per_1k_tokens

            sc = st.scores(rid)
            t = quality_per_1k_tokens(sc, a.per_1k, cost=a.cost)
            if a.per_1k not in set(sc.metric):
                raise ValueError(f"run {rid} has no metric {a.per_1k!r}; it has: {', '.join(sorted(set(sc.metric)))}")
            say(f"run {rid}: {a.per_1k} per 1,000 {a.cost.replace('_', ' ')} (1000 x mean {a.per_1k} / mean "
                  f"{a.cost}, 95% bootstrap interval of the ratio; n = questions with both scored)")
            with pd.option_context("display.width", 250, "display.max_columns", 30):
                say(t.sort_values("per_1k_tokens", ascending=False).to_string(index=False, na_rep="n/a"))
            return 0
        if a.oracle:  # how much could routing save at most on this run?
            from evals.score.metrics import METRICS
            from evals.analyze.routing import oracle_bound

            t, info = oracle_bound(st.scores(rid), a.oracle, a.cost, a.tolerance,
                                   getattr(METRICS.get(a.oracle), "higher_is_better", True))
            say(f"run {rid}: the oracle router picks, per question, the cheapest point whose {a.oracle} is within "
                  f"{a.tolerance:g} of the best any point reached ({info['questions']} questions; {info['left_out']} "
                  f"with no ok score left out). No router can beat it on this run.")
            with pd.option_context("display.width", 250, "display.max_columns", 30):
                say(t.to_string(index=False, na_rep="n/a"))
            if info["summary"]:
                say(info["summary"])
            return 0
        if a.sufficiency:  # why a point loses: was the context enough, and what the answer did with it
            return show_sufficiency(run_scores(st, rid), rid)
        if a.turns:
            from evals.analyze.summary import conversation_table
            with pd.option_context("display.width", 250, "display.max_columns", 30):
                say(conversation_table(st, rid).to_string(index=False, na_rep="n/a"))
            return 0
        if a.metrics:  # commas as in `score --metrics`, or spaces
            a.metrics = [m.strip() for x in a.metrics for m in x.split(",") if m.strip()]
        sc_all = run_scores(st, rid)  # the stored scores and the judged metrics, read once
        from evals.analyze.summary import fits_the_data, judge_lines

        # the metrics with values on this set first, judged ones leading (asked-for metrics as asked)
        metrics = a.metrics or fits_the_data(headline_metrics(st, rid), sc_all)
        from evals.analyze.judge_health import health_lines

        judge_notes = judge_lines(run, a.workspace, set(sc_all.metric)) + health_lines(sc_all)
        summ = summarize_by(st, rid, a.by, metrics) if a.by else summarize_scores(sc_all, metrics)
        from evals.analyze.judgments import judged_notes

        judged = judged_notes(st, rid, sc_all)
        statuses = st.con.execute("SELECT status, count(*) FROM scores WHERE run_id=? GROUP BY 1 ORDER BY 1",
                                  [rid]).fetchall()
        losses = item_losses(st, rid)
        timing = st.con.execute(
            "SELECT count(*) FILTER (WHERE NOT coalesce(cached, false)), "
            "median(answer_ms) FILTER (WHERE NOT coalesce(cached, false)), count(*) FILTER (WHERE cached) "
            "FROM results WHERE run_id = ? AND usage_source = 'endpoint'", [rid]).fetchone()
        shared = None
        if not a.by and len(losses) > 1 and losses["lost"].any():  # compare points on the items they share
            keep = shared_questions(st, rid)
            shared = (len(keep), len(set(sc_all.question_id)),
                      summarize_scores(sc_all[sc_all.question_id.isin(keep)], metrics))
    from evals.analyze.summary import run_notes

    from evals.store import run_has_writer

    status = run["status"]
    if status == "running" and not run_has_writer(a.db or Path(a.workspace) / "results.duckdb", rid):
        status = "interrupted"  # as `ragwb runs` says it: the stored status is left as it was (history)
    from rag.safeio import printable

    say(f"run {printable(rid)}  dataset {printable(str(run['dataset']))}  status {status}  commit {run['git_commit']}")
    for note in run_notes(run, a.db or Path(a.workspace) / "results.duckdb") + judged:
        say(f"note: {note}")
    say("score statuses: " + ", ".join(f"{s}={n}" for s, n in statuses))
    if timing and timing[2]:  # a resumed or repeated LLM run: cached answers take ~0 ms; never averaged in
        say(f"answers: {timing[0]} called the endpoint (median {timing[1] or 0:.0f} ms), {timing[2]} came from the "
              "response cache (not timed)")
    with pd.option_context("display.width", 250, "display.max_columns", 30, "display.max_colwidth", 40):
        table = headline_table(summ, metrics, a.by)
        dropped = {}
        if not a.metrics:  # asked-for metrics are always shown; the default columns skip what never applies
            from evals.analyze.summary import drop_na_columns

            table, dropped = drop_na_columns(table, ("strategy", "point", a.by))
        if not a.by:
            from evals.analyze.judge_health import with_judged_n

            table = with_losses(with_judged_n(table, summ), losses)
        if dropped:
            from evals.analyze.summary import not_shown_line

            say("not shown (n/a on every row): " + not_shown_line(dropped))
        from evals.analyze.summary import LABELS, labelled
        say(labelled(table).to_string(index=False, na_rep="n/a") if len(table) else "no items committed yet")
        for line in judge_notes:  # how far to trust each judged column
            say(f"judge: {line}")
        n_line = metric_n_line(summ, [c for c in table.columns if c in metrics])
        if n_line:  # questions with and without answers or evidence: each mean stands on its own n
            say(n_line)
        if "faithfulness" in metrics and len(table):
            from evals.score.support import support_caption
            say(f"\n{LABELS['faithfulness']}: {support_caption()}")
        if not a.by and not a.metrics:  # a grid's headline: the pick, how far to trust it, its confirm part
            say_pick(a, rid, list(table.columns))
        if shared is not None:
            n, total, ssum = shared
            say(f"\nsome points lost items (column 'lost': answers that failed, left out of their means), so "
                  f"the rows above are means over different questions. On the {n} of {total} questions every "
                  "point answered:")
            t = headline_table(ssum, metrics)
            say(t.to_string(index=False, na_rep="n/a") if len(t) else "no question was answered by every point")
    return 0


def say_pick(a, rid: str, columns: list[str]) -> None:
    from evals.analyze.best import pick_lines

    with open_store(a) as st:
        for line in pick_lines(st, rid, columns):
            say(line)


def show_sufficiency(scores, rid: str) -> int:
    """``ragwb show RUN --sufficiency``: the decomposition table (evals/analyze/sufficiency.py)."""
    import pandas as pd

    from evals.analyze.sufficiency import OUTCOMES, decomposition, decomposition_table

    dec = decomposition(scores)
    if dec.empty:
        raise ValueError(f"run {rid} has no context_sufficiency scores (a run before sufficiency was scored; "
                         "run it again)")
    say(f"run {rid}: context sufficiency x answer outcome per point (count and share of the items placed; "
          f"docs/metrics.md, 'Context sufficiency'). {OUTCOMES[1]}: the context held the answer and the model "
          f"did not use it; {OUTCOMES[3]}: the context lacked it and the model answered anyway.")
    with pd.option_context("display.width", 250, "display.max_columns", 30, "display.max_colwidth", 60):
        say(decomposition_table(dec).to_string(index=False))
    return 0


def cmd_compare(a) -> int:
    """Two points of one run, paired on the questions both scored: deltas with intervals and verdicts."""
    import pandas as pd

    from evals.analyze.explore import paired_points, pick_point, points_of
    from evals.analyze.summary import run_scores

    with open_store(a) as st:
        rid = st.resolve_run(a.run)
        sc = run_scores(st, rid)
    pts = points_of(sc)
    a_, b_ = pick_point(pts, a.points[0], rid), pick_point(pts, a.points[1], rid)
    t = paired_points(sc, a_, b_, a.metrics or None, first=a.first)
    say(f"run {rid}: {b_} (B) against {a_} (A), paired over the questions both scored; delta = B - A with a 95% "
          "paired bootstrap interval; better / worse when the interval excludes 0 in the metric's direction")
    with pd.option_context("display.width", 250, "display.max_columns", 30):
        say(t.to_string(index=False, na_rep="n/a") if len(t) else "no metric has paired questions")
    from evals.analyze.explore import paired_notes

    for note in paired_notes(t):
        say(note)
    return 0


def cmd_export(a) -> int:
    with open_store(a) as st:
        rid = st.resolve_run(a.run)
        for p in st.export(rid, a.out or Path(a.workspace) / "export", a.format):
            say(p)
    return 0


def add_runs(sub) -> None:
    s = sub.add_parser("runs", help="list stored runs", description="List stored runs, newest first.")
    add_store_args(s)
    s.set_defaults(fn=cmd_runs)


def add_show(sub) -> None:
    s = sub.add_parser("show", help="summary table of a run (means with 95%% bootstrap intervals)")
    s.add_argument("run", help="run id, unique prefix, or 'latest'")
    s.add_argument("--metrics", nargs="*", default=None, help="metrics to show (default: headline set, plus page "
                   "metrics when the dataset has page evidence)")
    s.add_argument("--by", default=None, metavar="FIELD", help="break every metric down by a question field: "
                   "language, qtype, answerable, document, or any metadata field of the gold set (company; on code sets "
                   "code_language, kind, file)")
    s.add_argument("--per-1k", default=None, metavar="METRIC",
                   help="quality per 1,000 tokens of each point for METRIC (f1, faithfulness, ...), with 95%% "
                        "intervals, best first")
    s.add_argument("--oracle", default=None, metavar="METRIC",
                   help="the routing oracle for METRIC: per question the cheapest point within --tolerance of the "
                        "best, beside every fixed point (how much routing could save at most)")
    s.add_argument("--tolerance", type=non_negative_float, default=0.0, help="--oracle: quality tolerance (0)")
    s.add_argument("--cost", default="prompt_tokens", choices=["prompt_tokens", "context_tokens"],
                   help="the tokens --per-1k divides by (default prompt_tokens: what an LLM call is billed for)")
    s.add_argument("--sufficiency", action="store_true",
                   help="context sufficiency x answer outcome per point: sufficient and correct, sufficient and "
                        "wrong (the model ignored the context), insufficient and abstained, insufficient and answered "
                        "(docs/metrics.md)")
    s.add_argument("--turns", action="store_true", help="conversational runs: recall@5, prompt tokens at turn 1 and "
                   "turns 6+, history tokens, bypass accuracy and time per turn, per memory policy and query mode")
    add_store_args(s)
    s.set_defaults(fn=cmd_show)


def add_compare(sub) -> None:
    s = sub.add_parser("compare", help="two points of one run, paired: deltas with 95%% intervals and verdicts")
    s.add_argument("run", help="run id, unique prefix, or 'latest'")
    s.add_argument("--points", nargs=2, required=True, metavar=("A", "B"),
                   help="the two points: 'strategy · label' as `ragwb show` lists them, or a strategy with one point")
    s.add_argument("--metrics", nargs="*", default=None, help="metrics to compare (default: all)")
    s.add_argument("--first", default="f1", help="the metric listed first (default f1)")
    add_store_args(s)
    s.set_defaults(fn=cmd_compare)


def add_export(sub) -> None:
    s = sub.add_parser("export", help="write a run's results and scores as parquet or CSV")
    s.add_argument("run", help="run id, unique prefix, or 'latest'")
    s.add_argument("--format", choices=["parquet", "csv"], default="parquet", help="file format (parquet)")
    s.add_argument("--out", default=None, help="output folder (default: WORKSPACE/export)")
    add_store_args(s)
    s.set_defaults(fn=cmd_export)
