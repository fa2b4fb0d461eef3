"""The researcher's views of one run, on hand-made score frames: the question x point matrix and
its filters, paired comparison verdicts, quality per 1,000 tokens, Pareto ties, the sortable table."""
from types import SimpleNamespace

import numpy as np
import pandas as pd

from evals.report.charts import quality_cost_frame
from evals.analyze.explore import filter_matrix, matrix_html, paired_points, question_matrix, quality_per_1k_tokens


def frame(values: dict, tokens: dict | None = None, status: dict | None = None) -> pd.DataFrame:
    """values: point -> list of f1 per question (q0, q1, ...)."""
    rows = []
    for point, vals in values.items():
        strat, label = point.split(" · ")
        for i, v in enumerate(vals):
            st = (status or {}).get((point, i), "ok")
            rows.append({"strategy": strat, "point_label": label, "question_id": f"q{i}", "repeat": 0,
                         "metric": "f1", "value": None if st != "ok" else v, "status": st})
            rows.append({"strategy": strat, "point_label": label, "question_id": f"q{i}", "repeat": 0,
                         "metric": "context_tokens", "value": (tokens or {}).get(point, 1000.0), "status": "ok"})
    return pd.DataFrame(rows)


QS = [SimpleNamespace(qid=f"q{i}", text=t, answerable=a, metadata={"company": c})
      for i, (t, a, c) in enumerate([("Who founded Acme?", True, "ACME"), ("When did <b>it</b> start?", False, "ACME"),
                                     ("Where is the plant?", True, "INTC"), ("How many staff?", True, "INTC")])]


def test_matrix_marks_disagreement_failures_and_filters():
    sc = frame({"chunks · top_k=2": [1.0, 0.0, 0.5, 0.2], "chunks · top_k=16": [1.0, 0.9, 0.4, 0.2],
                "hybrid · defaults": [0.9, 0.1, 0.5, 0.0]}, status={("hybrid · defaults", 3): "timeout"})
    m = question_matrix(sc, QS)
    # points in numeric order, one numeric column each
    assert m.attrs["points"] == ["chunks · top_k=2", "chunks · top_k=16", "hybrid · defaults"]
    assert m["chunks · top_k=16"].dtype.kind == "f"
    assert list(m.disagree) == [False, True, False, False] and m.spread[1] == 0.9
    assert list(m.failures) == [0, 0, 0, 1] and np.isnan(m.loc[3, "hybrid · defaults"])
    assert list(filter_matrix(m, disagree=True).question_id) == ["q1"]
    assert list(filter_matrix(m, failures=True).question_id) == ["q3"]
    assert list(filter_matrix(m, unanswerable=True).question_id) == ["q1"]
    assert list(filter_matrix(m, field="company", value="INTC").question_id) == ["q2", "q3"]
    assert list(filter_matrix(m, search="acme").question_id) == ["q0"]
    assert filter_matrix(m, disagree=True, field="company", value="INTC").empty


def test_paired_points_verdicts_follow_the_interval():
    better = [0.0] * 10 + [1.0] * 10
    sc = frame({"a · x=1": [0.0] * 20, "b · x=2": better, "c · x=3": [0.0, 1.0] * 10, "d · x=4": [0.0, 1.0] * 10})
    p = paired_points(sc, "a · x=1", "b · x=2", ["f1"]).iloc[0]
    assert p.n == 20 and p.delta == 0.5 and p.low > 0 and p.verdict == "better"
    p = paired_points(sc, "b · x=2", "a · x=1", ["f1"]).iloc[0]
    assert p.verdict == "worse" and p.high < 0
    p = paired_points(sc, "c · x=3", "d · x=4", ["f1"]).iloc[0]
    assert p.delta == 0 and p.verdict == "tie"
    # lower is better for tokens: fewer tokens is "better"
    sc2 = frame({"a · x=1": [0.5] * 5, "b · x=2": [0.5] * 5}, tokens={"a · x=1": 900.0, "b · x=2": 300.0})
    sc2.loc[sc2.metric == "context_tokens", "value"] += np.arange((sc2.metric == "context_tokens").sum())
    t = paired_points(sc2, "a · x=1", "b · x=2", ["context_tokens"]).iloc[0]
    assert t.delta < 0 and t.verdict == "better"


def test_quality_per_1k_tokens_is_a_ratio_of_means_with_an_interval():
    sc = frame({"a · x=1": [1.0, 0.0, 1.0, 0.0], "b · x=2": [1.0, 1.0, 1.0, 1.0]},
               tokens={"a · x=1": 500.0, "b · x=2": 2000.0})
    k = quality_per_1k_tokens(sc, "f1").set_index("point")
    assert k.loc["a · x=1", "per_1k_tokens"] == 1.0  # 1000 * 0.5 / 500
    assert k.loc["b · x=2", "per_1k_tokens"] == 0.5  # 1000 * 1.0 / 2000
    assert k.loc["a · x=1", "low"] < 1.0 < k.loc["a · x=1", "high"]
    assert k.loc["b · x=2", "low"] == k.loc["b · x=2", "high"] == 0.5


def test_pareto_ties_mark_dominated_points_whose_interval_overlaps():
    s = pd.DataFrame([
        {"strategy": "a", "point": "p", "metric": "f1", "mean": 0.80, "low": 0.70, "high": 0.90, "n_ok": 50},
        {"strategy": "b", "point": "p", "metric": "f1", "mean": 0.75, "low": 0.65, "high": 0.85, "n_ok": 50},
        {"strategy": "c", "point": "p", "metric": "f1", "mean": 0.30, "low": 0.25, "high": 0.35, "n_ok": 50}]
        + [{"strategy": k, "point": "p", "metric": "context_tokens", "mean": c, "low": c, "high": c, "n_ok": 50}
           for k, c in (("a", 100.0), ("b", 200.0), ("c", 300.0))])
    df = quality_cost_frame(s, "f1").set_index("strategy")
    assert df.loc["a", "pareto"] and not df.loc["b", "pareto"] and not df.loc["c", "pareto"]
    assert df.loc["b", "tie"] and not df.loc["c", "tie"]  # b's interval reaches a's; c's does not


def test_matrix_html_is_sortable_escaped_and_colour_coded():
    sc = frame({"chunks · top_k=2": [1.0, 0.0, 0.5, 0.2]})
    h = matrix_html(question_matrix(sc, QS))
    assert "rwbSort('qmatrix'," in h and "function rwbSort" in h
    assert "&lt;b&gt;it&lt;/b&gt;" in h and "<b>it</b>" not in h
    assert "background:rgb(" in h and "data-v='1.0'" in h


def _summarize_scores_reference(df, n_resamples=1000, seed=0):
    """The per-group pandas summary summarize_scores replaced (kept here as the oracle)."""
    import pandas as pd

    from evals.score.metrics import METRICS
    from evals.stats import bootstrap_ci
    rows = []
    for (strategy, label, metric), g in df.groupby(["strategy", "point_label", "metric"], sort=True):
        ok = g[g.status == "ok"]
        per_q = ok.groupby("question_id")["value"].mean()
        mean, lo, hi = bootstrap_ci(per_q.to_numpy(), n_resamples=n_resamples, seed=seed or 20261122)
        na = g[g.status == "not_applicable"]
        why = str(na["detail"].iloc[0]) if len(ok) == 0 and len(na) and "detail" in g else ""
        rows.append({"strategy": strategy, "point": label, "metric": metric, "n": len(g), "n_ok": len(ok),
                     "mean": mean, "low": lo, "high": hi, "na_reason": why,
                     "higher_is_better": METRICS[metric].higher_is_better if metric in METRICS else True})
    return pd.DataFrame(rows)


def test_summarize_scores_equals_the_per_group_pandas_summary():
    import random

    import pandas as pd

    from evals.analyze.summary import summarize_scores
    rng = random.Random(3)
    rows = []
    for strategy in ("chunks", "hybrid"):
        for label in ("defaults", "top_k=12", "top_k=2"):
            for metric in ("f1", "faithfulness", "context_tokens", "doc_ndcg@10", "custom"):
                for q in rng.sample(range(300), 120):
                    reps = 2 if metric == "custom" and label == "top_k=2" else 1  # repeats: averaged first
                    for rep in range(reps):
                        st = ("not_applicable" if metric == "faithfulness" else
                              rng.choice(["ok"] * 8 + ["timeout", "parse_error"]))
                        v = rng.random() * (500 if metric == "context_tokens" else 1)
                        if metric == "doc_ndcg@10" and label == "top_k=12" and q % 50 == 0:
                            v = float("nan")  # a missing value in an ok row: skipped like pandas does
                        rows.append({"strategy": strategy, "point_label": label, "question_id": f"q{q}",
                                     "repeat": rep, "metric": metric, "value": v, "status": st,
                                     "detail": "extractive answers copy the context" if st == "not_applicable" else ""})
    df = pd.DataFrame(rows).sample(frac=1, random_state=1).reset_index(drop=True)  # row order must not matter
    got, want = summarize_scores(df), _summarize_scores_reference(df)
    assert len(got) == 2 * 3 * 5
    pd.testing.assert_frame_equal(got, want, check_exact=True)
    assert summarize_scores(df.iloc[:0]).empty


def test_session_summary_groups_the_applied_frame_like_groupby(tmp_path):
    """summarize_session slices evaluate_points' frame by the point lengths it noted instead of
    grouping ~100,000 string pairs; any other frame (filtered, shuffled) is grouped. Both equal the
    plain summary of the frame."""
    from evals.workbench.calls import evaluate_points, open_session, points_from_budgets, summarize_session
    from evals.analyze.summary import summarize_scores

    sess = open_session("xquad-en", str(tmp_path / "ws"), "hash")
    pts = points_from_budgets(["chunks", "hybrid", "full_documents"], {"chunks__top_k": 3})
    scores = evaluate_points(sess, pts, 25)
    want = summarize_scores(scores).reset_index(drop=True)
    got = summarize_session(sess, scores)
    assert sess.layout[0]() is scores and len(got) == len(want) > 0
    pd.testing.assert_frame_equal(got, want, check_exact=True)
    shuffled = scores.sample(frac=1, random_state=2).reset_index(drop=True)  # not the noted frame: grouped
    pd.testing.assert_frame_equal(summarize_session(sess, shuffled), want, check_exact=True)
    part = scores[scores.strategy != "hybrid"]
    pd.testing.assert_frame_equal(summarize_session(sess, part),
                                  summarize_scores(part).reset_index(drop=True), check_exact=True)
    # side by side: one metric table for both points, one row per metric, so the two points' rows line up
    # (issue 37, 13); a metric one point lacks is a row with empty cells for it, never a shifted row
    import re

    from evals.workbench.calls import item_for, side_by_side_html

    qid = sess.dataset.questions[0].qid
    a, b = "chunks · top_k=3", "full_documents · defaults"
    page = side_by_side_html(sess, qid, a, b)
    first_table = page[:page.index("</table>")]
    want_metrics = sorted(set(item_for(sess, a, qid)[1]) | set(item_for(sess, b, qid)[1]))
    assert re.findall(r"<tr><td[^>]*>([^<]+)</td>", first_table) == want_metrics
    assert page.count("<table") == 1 and "value (A)" in first_table and "status (B)" in first_table
    assert page.count("showing: ") == 2  # both answers and their blocks still shown
    assert side_by_side_html(sess, qid, a).count("<table") == 1  # one point: its own table, as before
    # the Sweep starts from the applied budgets, overlays strategies, and a wrong name says which are valid
    from evals.workbench.calls import sweep_from_applied

    sw = sweep_from_applied(sess, ["chunks", "hybrid"], "max_context_tokens", "300,600",
                            {"chunks__top_k": 3}, 10)
    assert set(sw.point_label) == {"max_context_tokens=300,top_k=3", "max_context_tokens=600,top_k=3",
                                   "max_context_tokens=300", "max_context_tokens=600"}
    import pytest
    with pytest.raises(ValueError, match="strategy 'chunks' has no budget 'topk'; valid: .*top_k"):
        sweep_from_applied(sess, ["chunks"], "topk", "2,4", {}, 10)
    # Save as run: the applied items become a stored run that runs, show and the gate read; nothing re-done
    from evals.cli import main
    from evals.workbench.calls import save_as_run

    db = tmp_path / "ws" / "results.duckdb"
    n_items = len(sess.items)
    rid = save_as_run(sess, str(db), pts, 25, "SAVED")
    assert rid == "SAVED" and len(sess.items) == n_items
    assert main(["runs", "--workspace", str(tmp_path / "ws")]) == 0
    assert main(["show", "SAVED", "--workspace", str(tmp_path / "ws")]) == 0
    assert main(["gate", "--baseline", "SAVED", "--candidate", "SAVED", "--workspace", str(tmp_path / "ws"),
                 "--json", str(tmp_path / "g.json")]) == 0
    import duckdb
    con = duckdb.connect(str(db), read_only=True)
    assert con.execute("SELECT status, planned FROM runs").fetchone() == ("finished", 75)
    assert con.execute("SELECT count(*) FROM results").fetchone()[0] == 75
    con.close()
    with pytest.raises(ValueError, match="press Apply first"):
        save_as_run(sess, str(db), [("parent_child", {})], 25)
    # saving twice under one id answers in the notebook's words (it has no --run-id or --resume)
    with pytest.raises(ValueError, match="already called 'SAVED'") as e:
        save_as_run(sess, str(db), pts, 25, "SAVED")
    assert "--run-id" not in str(e.value) and "--resume" not in str(e.value)


def test_a_click_on_a_filtered_matrix_opens_the_row_shown_and_apply_keeps_the_drilldown():
    from evals.analyze.explore import clicked_question, drilldown_choice

    sc = frame({"chunks · top_k=2": [1.0, 0.0, 0.5, 0.2], "hybrid · defaults": [0.9, 0.9, 0.5, 0.0]})
    m = filter_matrix(question_matrix(sc, QS), search="t?")  # q1 and q2 ("...start?", "...plant?")
    assert list(m.question_id) == ["q1", "q2"]
    cell = SimpleNamespace(row="1", column="hybrid · defaults", value=0.5)  # the table's row id: a position
    assert clicked_question(m, cell) == "q2"  # not the frame's original label 1 (q1)
    pts = ["chunks · top_k=2", "hybrid · defaults"]
    c = drilldown_choice(m, pts, cell)
    assert c == {"q": "q2", "a": "hybrid · defaults", "b": "(none)"}
    # after an Apply the labels change: the same question stays, each side moves to its strategy's new point
    new = ["chunks · top_k=4", "full_documents · defaults", "hybrid · alpha=0.5"]
    kept = drilldown_choice(m, new, None, {"q": "q2", "a": "hybrid · defaults", "b": "chunks · top_k=2"})
    assert kept == {"q": "q2", "a": "hybrid · alpha=0.5", "b": "chunks · top_k=4"}
    # a question the new filter hides falls back to the first row shown
    assert drilldown_choice(m.iloc[:1], new, None, {"q": "q2"})["q"] == "q1"


def test_a_strategy_keeps_its_colour_whatever_else_the_chart_draws():
    from evals.report.charts import quality_cost_figure, strategy_colour
    from evals.analyze.summary import summarize_scores

    now = summarize_scores(frame({"chunks · top_k=2": [1.0, 0.0, 0.5, 0.2], "hybrid · defaults": [0.9, 0.1, 0.5, 0.0]}))
    before = summarize_scores(frame({"chunks · top_k=8": [0.5, 0.5, 0.5, 0.5]}))

    def colours(fig):
        return {t.name: t.marker.color for t in fig.data
                if t.name not in ("earlier budgets", "Pareto front", "tied with the front")}

    plain, with_history = quality_cost_figure(now, "f1"), quality_cost_figure(now, "f1", history=before)
    assert colours(plain) == colours(with_history) == {"chunks": strategy_colour("chunks"),
                                                       "hybrid": strategy_colour("hybrid")}
    assert strategy_colour("chunks") != strategy_colour("hybrid")
    assert strategy_colour("my_plugin") == strategy_colour("my_plugin")  # stable for names it does not know


def test_b_worse_than_a_filter_and_the_paired_table_leads_with_the_chosen_metric():
    sc = frame({"chunks · top_k=2": [1.0, 0.0, 0.5, 0.2], "hybrid · defaults": [0.9, 0.1, 0.5, 0.0]},
               status={("hybrid · defaults", 3): "timeout"})
    m = question_matrix(sc, QS)
    worse = filter_matrix(m, worse=("chunks · top_k=2", "hybrid · defaults"))
    assert list(worse.question_id) == ["q0"]  # q3: hybrid not scored, so not "worse"
    p = paired_points(sc, "chunks · top_k=2", "hybrid · defaults", first="context_tokens")
    assert list(p.metric) == ["context_tokens", "f1"]
    assert list(paired_points(sc, "chunks · top_k=2", "hybrid · defaults", first="f1").metric) == ["f1",
                                                                                                 "context_tokens"]


def test_the_applied_budgets_table_says_what_changed_since_the_defaults():
    from evals.workbench.calls import applied_budgets_table, points_from_budgets

    t = applied_budgets_table(points_from_budgets(["chunks", "hybrid"], {"chunks__top_k": 4, "hybrid__alpha": 0.8}))
    assert t.to_dict("records") == [
        {"strategy": "chunks", "point": "top_k=4", "changed since the shipped defaults": "top_k 8 -> 4"},
        {"strategy": "hybrid", "point": "defaults", "changed since the shipped defaults": "shipped defaults"}]


def test_chart_symbols_are_fixed_per_strategy_and_the_pareto_status_is_an_outline():
    """Issue 37, item 8: a strategy's legend symbol never changes with its Pareto status; the status is the
    outline (black: front, grey: tied), said in the caption; labels are not clipped; history is open circles."""
    import pandas as pd

    from evals.report.charts import PARETO_CAPTION, quality_cost_figure, strategy_colour, strategy_symbol

    rows = []
    for strat, pts in {"chunks": [("top_k=2", 100, 0.30, 0.25, 0.35), ("top_k=8", 400, 0.50, 0.45, 0.55)],
                       "hybrid": [("defaults", 500, 0.49, 0.30, 0.60)],
                       "full_documents": [("defaults", 5000, 0.40, 0.38, 0.42)]}.items():
        for point, cost, m, lo, hi in pts:
            rows += [{"strategy": strat, "point": point, "metric": "f1", "n_ok": 50, "mean": m, "low": lo, "high": hi},
                     {"strategy": strat, "point": point, "metric": "context_tokens", "n_ok": 50, "mean": cost,
                      "low": cost, "high": cost}]
    summary = pd.DataFrame(rows)
    history = summary.assign(mean=summary["mean"] * 0.9)
    fig = quality_cost_figure(summary, "f1", history=history)
    by = {t.name: t for t in fig.data}
    assert by["earlier budgets"].marker.symbol == "circle-open"
    for name in ("chunks", "hybrid", "full_documents"):  # one symbol a strategy, never a list (issue 52: not all circles)
        assert by[name].marker.symbol == strategy_symbol(name) and by[name].cliponaxis is False
    assert len({by[n].marker.symbol for n in ("chunks", "hybrid", "full_documents")}) == 3
    # a deployed service (any name no strategy has) gets a colour and a symbol no registered strategy uses
    from rag.strategies import STRATEGIES

    shapes = {(strategy_colour(n), strategy_symbol(n)) for n in STRATEGIES}
    for system in ("v1", "prod-rag", "full_documents_v2"):
        assert strategy_colour(system) not in {c for c, _ in shapes}
        assert strategy_symbol(system) not in {s for _, s in shapes}
    # the status is a ring of its own (issue 83, item 14): the strategy's marker keeps its colour, outline-free
    assert all(by[n].marker.line.width == 0 for n in ("chunks", "hybrid", "full_documents"))
    assert list(by["Pareto front"].x) == [100, 400]  # both chunks points: top_k=8's interval lies above top_k=2's
    assert list(by["tied with the front"].x) == [500]  # hybrid: its interval reaches chunks top_k=8's
    assert "Black ring: on the Pareto front" in PARETO_CAPTION
    assert any("black ring" in (a.text or "") for a in fig.layout.annotations)
    lo, hi = fig.layout.xaxis.range
    assert lo < 90 and hi > 5000  # room beyond the outermost points (history included) for their labels
