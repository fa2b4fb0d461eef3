"""Pooled relevance judgments (docs/judgments.md): pool export, checked imports, an LLM judge through a real
127.0.0.1 server, judged metrics pinned to pytrec_eval, kappa to scikit-learn, PPI to its formula."""
import csv
import math

import duckdb
import numpy as np
import pytest

from evals.analyze.judgments import (judged_item_scores, passage_key, ppi_mean, question_key, weighted_kappa)
from evals.cli import main
from evals.score.relevance import parse_grade
from openai_server import Handler, start

RUN = ["run", "--dataset", "squad2", "--limit", "8", "--embedder", "hash", "--no-progress", "--no-report",
       "--strategies", "chunks,hybrid"]


@pytest.fixture(scope="module")
def server():
    srv, url = start()
    yield url
    srv.shutdown()


@pytest.fixture(scope="module")
def run_ws(tmp_path_factory):
    ws = tmp_path_factory.mktemp("judge")
    assert main(RUN + ["--workspace", str(ws), "--run-id", "R1"]) == 0
    return ws


def _rows(path):
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


def _write(path, rows, fields=None):
    fields = fields or list(rows[0])
    with open(path, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=fields)
        w.writeheader()
        w.writerows(rows)


def _judgments(ws):
    con = duckdb.connect(str(ws / "results.duckdb"), read_only=True)
    try:
        return con.execute("SELECT judge, question_id, passage_key, grade, status FROM judgments "
                           "ORDER BY judge, question_id, passage_key").fetchall()
    finally:
        con.close()


def test_pool_export_import_and_judged_metrics_in_show_and_gate(run_ws, tmp_path, capsys):
    ws = run_ws
    pool = tmp_path / "pool.csv"
    assert main(["judge", "R1", "--workspace", str(ws), "--export", str(pool), "--depth", "3"]) == 0
    rows = _rows(pool)
    assert list(rows[0]) == ["question_id", "question", "doc", "page", "passage_key", "text", "grade", "retrieved_by"]
    pairs = [(r["question_id"], r["passage_key"]) for r in rows]
    assert len(pairs) == len(set(pairs))  # one row per distinct (question, passage)
    assert all(r["passage_key"] == passage_key(r["text"]) for r in rows)
    # the union over both points: a passage both retrieved names both, each with its rank <= 3
    assert any("chunks · defaults@" in r["retrieved_by"] and "hybrid · defaults@" in r["retrieved_by"] for r in rows)
    assert all(int(x.rsplit("@", 1)[1]) <= 3 for r in rows for x in r["retrieved_by"].split("; "))
    assert {r["question_id"] for r in rows} == {r["question_id"] for r in rows if r["question"]}

    # a person grades the first half; the import stores them by question and passage content
    half = rows[: len(rows) // 2]
    for i, r in enumerate(half):
        r["grade"] = str(i % 4)
    _write(pool, half + [dict(r, grade="") for r in rows[len(rows) // 2:]])
    assert main(["judge", "R1", "--workspace", str(ws), "--import", str(pool), "--judge-name", "ana"]) == 0
    out = capsys.readouterr().out
    assert f"stored {len(half)} judgments by human:ana" in out and "had no grade yet" in out
    stored = _judgments(ws)
    assert len(stored) == len(half) and {s[0] for s in stored} == {"human:ana"}

    # a second export leaves the judged pairs out
    again = tmp_path / "again.csv"
    assert main(["judge", "R1", "--workspace", str(ws), "--export", str(again), "--depth", "3"]) == 0
    assert len(_rows(again)) == len(rows) - len(half)

    # show adds the judged metrics, judged@10 first, with whose grades they are
    assert main(["show", "R1", "--workspace", str(ws)]) == 0
    out = capsys.readouterr().out
    assert "judged@10" in out and "judged_ndcg@10" in out and "human:ana" in out
    assert "judged@10 below 0.8" in out  # depth 3 of 10: most of every top 10 is unjudged, and it says so
    import re as _re
    cover = _re.search(r"judged means cover (\d+) of (\d+) questions", out)
    assert cover and int(cover.group(2)) == 8 and 0 < int(cover.group(1)) <= 8, out
    # ... and so does the HTML report
    assert main(["report", "R1", "--workspace", str(ws), "--out", str(tmp_path / "rep")]) == 0
    page = next((tmp_path / "rep").glob("*.html")).read_text()
    assert "judged_ndcg@10" in page and "human:ana" in page and "judged@10 below 0.8" in page

    # a later run reuses the judgments (keyed by content, not by run); the gate compares its judged metrics
    assert main(RUN + ["--workspace", str(ws), "--run-id", "R2"]) == 0
    capsys.readouterr()
    assert main(["gate", "--baseline", "R1", "--candidate", "R2", "--workspace", str(ws)]) == 0
    out = capsys.readouterr().out
    assert "| judged_ndcg@10 |" in out
    # the judged metrics are computed on read: nothing was written into either run's scores
    con = duckdb.connect(str(ws / "results.duckdb"), read_only=True)
    assert con.execute("SELECT count(*) FROM scores WHERE metric LIKE 'judged%'").fetchone()[0] == 0
    con.close()


def test_a_bad_pool_file_says_each_problem_and_stores_nothing(run_ws, tmp_path, capsys):
    ws = run_ws
    pool = tmp_path / "pool.csv"
    assert main(["judge", "R1", "--workspace", str(ws), "--export", str(pool), "--include-judged"]) == 0
    rows = _rows(pool)
    before = _judgments(ws)
    bad = [dict(rows[0], grade="2"), dict(rows[1], grade="5"), dict(rows[2], question_id="nope", grade="1"),
           dict(rows[3], passage_key="0000000000000000", grade="1"), dict(rows[4], text="edited!", grade="1"),
           dict(rows[5], grade="high")]
    _write(pool, bad)
    capsys.readouterr()
    assert main(["judge", "R1", "--workspace", str(ws), "--import", str(pool), "--judge-name", "bo"]) == 2
    err = capsys.readouterr().err
    assert "line 3: grade 5 is outside 0-3" in err
    assert "line 4: unknown question_id 'nope'" in err
    assert "line 5: unknown passage_key '0000000000000000'" in err
    assert "line 6" not in err  # an edited text cell is no error: the grade is keyed by passage_key (issue 44, 12)
    assert "line 7: grade 'high' is not a number" in err
    assert "4 bad row(s); nothing was stored" in err
    assert _judgments(ws) == before  # the good first row was not stored either

    # one judge grading a pair twice with two grades is a conflict naming both lines (issue 54, 6: rows that fold to
    # one key, as an id with a tab does, replaced grades silently); the same grade twice is stored once, said
    r = rows[0]

    def cy_twice(fold: str, first: str, second: str) -> None:  # human:cy grades one pair twice, its id spelled twice
        _write(pool, [dict(r, grade=first, judge="human:cy"),
                      dict(r, question_id=r["question_id"] + fold, grade=second, judge="human:cy"),
                      dict(r, grade="0", judge="human:di")], fields=list(r) + ["judge"])

    cy_twice("\t", "1", "3")
    assert main(["judge", "R1", "--workspace", str(ws), "--import", str(pool)]) == 2
    err = capsys.readouterr().err
    assert "line 3: human:cy grades passage" in err and "but line 2 grades the same pair 1" in err
    assert _judgments(ws) == before
    cy_twice("\r", "3", "3")
    assert main(["judge", "R1", "--workspace", str(ws), "--import", str(pool)]) == 0
    out = capsys.readouterr().out
    assert "the same grade as line 2 for the same pair: stored once" in out and "stored 2 judgments" in out
    got = {(j, g) for j, q, p, g, s in _judgments(ws) if p == r["passage_key"] and q == r["question_id"]}
    assert ("human:cy", 3) in got and ("human:di", 0) in got and ("human:cy", 1) not in got


def test_llm_judge_through_a_real_server_statuses_cache_agreement_and_ppi(run_ws, server, tmp_path, capsys,
                                                                          monkeypatch):
    ws = run_ws
    monkeypatch.setenv("RAGWB_TEST_KEY", "sk-judge-secret-123")
    base = ["judge", "R1", "--workspace", str(ws), "--judge-base-url", server, "--judge-key-env", "RAGWB_TEST_KEY",
            "--depth", "3"]
    # a server that fails: every pair stored with status error and the reason, no grade, the key scrubbed
    assert main(base + ["--judge-model", "fault-500", "--retries", "0"]) == 6  # every pair failed: CI must see it
    failed = [s for s in _judgments(ws) if s[0] == "llm:fault-500"]
    assert failed and all(s[3] is None and s[4] == "error" for s in failed)
    con = duckdb.connect(str(ws / "results.duckdb"), read_only=True)
    assert "sk-judge-secret-123" not in str(con.execute("SELECT * FROM judgments").fetchall())
    con.close()
    # a working judge grades every pooled pair; a rerun makes zero calls (cached, already graded)
    capsys.readouterr()
    calls = Handler.calls
    assert main(base + ["--judge-model", "grader"]) == 0
    out = capsys.readouterr().out
    assert "statuses: ok" in out
    graded = [s for s in _judgments(ws) if s[0] == "llm:grader"]
    assert graded and all(s[4] == "ok" and s[3] in (0, 1, 2, 3) for s in graded)
    # the cost line came before the grading, and it counted exactly the calls sent; an unknown price, never $0
    cost = next(x for x in out.splitlines() if x.startswith("ragwb judge: "))
    assert out.index(cost) < out.index("statuses: ok") and "price unknown" in cost and "$0.0000" not in out
    assert cost.startswith(f"ragwb judge: {Handler.calls - calls} call(s) to grader ("), (cost, Handler.calls - calls)
    calls = Handler.calls
    assert main(base + ["--judge-model", "grader"]) == 0
    assert Handler.calls == calls and "0 of" in capsys.readouterr().out.split("judge llm:grader: ")[1]

    # a person grades the same pool: agreement (kappa and confusion) and prediction-powered estimates
    pool = tmp_path / "p.csv"
    assert main(["judge", "R1", "--workspace", str(ws), "--export", str(pool), "--depth", "3",
                 "--include-judged"]) == 0
    rows = _rows(pool)
    for r in rows:  # this person agrees with the grader except on passages the grader called 1
        g = next(s[3] for s in graded if s[1] == r["question_id"] and s[2] == r["passage_key"])
        r["grade"] = str(0 if g == 1 else g)
    _write(pool, rows)
    assert main(["judge", "R1", "--workspace", str(ws), "--import", str(pool), "--judge-name", "eve"]) == 0
    capsys.readouterr()
    assert main(["judge", "R1", "--workspace", str(ws), "--agreement", "--ppi"]) == 0
    out = capsys.readouterr().out
    assert "human:eve" in out and "llm:grader" in out and "confusion: rows" in out
    assert "prediction-powered" in out


def test_judged_metrics_match_pytrec_eval_on_graded_cases():
    pytrec_eval = pytest.importorskip("pytrec_eval")
    texts = [f"passage {i}" for i in range(12)]
    qk = question_key("q")
    grades = {(qk, passage_key(texts[i])): g for i, g in {0: 3, 2: 1, 4: 2, 7: 0, 11: 3}.items()}
    grades[(qk, passage_key("not retrieved"))] = 2
    blocks = [{"n": i + 1, "text": t} for i, t in enumerate(texts)]
    gs = [g for (q, _), g in grades.items() if q == qk]
    got = judged_item_scores(blocks, grades, qk, sum(g >= 2 for g in gs), sorted(gs, reverse=True), True)
    qrel = {"q": {k[1]: g for k, g in grades.items()}}
    run = {"q": {passage_key(t): float(100 - i) for i, t in enumerate(texts)}}
    ev = pytrec_eval.RelevanceEvaluator(qrel, {"ndcg_cut_10", "P_5", "recall_10"}, relevance_level=2).evaluate(run)["q"]
    assert got["judged_ndcg@10"][0] == pytest.approx(ev["ndcg_cut_10"], abs=1e-12)
    assert got["judged_precision@5"][0] == pytest.approx(ev["P_5"], abs=1e-12)
    assert got["judged_recall@10"][0] == pytest.approx(ev["recall_10"], abs=1e-12)
    assert got["judged_recall@10"][0] == 0.5  # 0 and 4 of the four judged >= 2 (0, 4, 11, the unretrieved one)
    assert got["judged@10"][0] == pytest.approx(4 / 10)  # 0, 2, 4, 7 judged in the top 10
    # the same passage twice counts once; no judgments at all is not_applicable, never 0
    dup = judged_item_scores(blocks[:1] * 3, grades, qk, 3, sorted(gs, reverse=True), True)
    assert dup["judged@10"][0] == 1.0
    none = judged_item_scores(blocks, {}, qk, 0, [], False)
    assert {v[1] for v in none.values()} == {"not_applicable"}


def test_kappa_matches_scikit_learn_and_ppi_corrects_a_biased_judge():
    from sklearn.metrics import cohen_kappa_score

    rng = np.random.default_rng(0)
    a = rng.integers(0, 4, 300).tolist()
    b = [min(3, max(0, x + int(rng.integers(-1, 2)))) for x in a]
    assert weighted_kappa(a, b) == pytest.approx(cohen_kappa_score(a, b, weights="quadratic"), abs=1e-12)
    assert weighted_kappa(a, b, "linear") == pytest.approx(cohen_kappa_score(a, b, weights="linear"), abs=1e-12)
    assert weighted_kappa(a, b, "none") == pytest.approx(cohen_kappa_score(a, b), abs=1e-12)
    # the truth: mean 0.5; the LLM reads 0.2 too high everywhere; people labelled 200 of 5,000
    truth = rng.random(5000)
    llm = truth + 0.2 + rng.normal(0, 0.05, 5000)
    r = ppi_mean(llm, truth[:200], llm[:200])
    assert r["llm_only"] == pytest.approx(truth.mean() + 0.2, abs=0.01)
    assert r["low"] <= truth.mean() <= r["high"]
    assert r["estimate"] == pytest.approx(llm.mean() + (truth[:200] - llm[:200]).mean())
    se = math.sqrt(llm.var(ddof=1) / 5000 + (truth[:200] - llm[:200]).var(ddof=1) / 200)
    assert r["high"] - r["low"] == pytest.approx(2 * 1.959964 * se)


def test_parse_grade_reads_the_final_score_and_nothing_else():
    assert parse_grade("M: 2\nT: 3\n##final score: 2") == 2
    assert parse_grade("##final score: **3**") == 3
    assert parse_grade("3") == 3
    assert parse_grade('{"grade": 2}') == 2 and parse_grade('{"grade": 9}') is None  # --judge-format json_schema
    assert parse_grade("##final score: N") is None
    assert parse_grade("I think it is relevant") is None
    assert parse_grade("final score: 7") is None


def test_pool_export_escapes_formulas_and_import_reads_spreadsheet_saves(run_ws, tmp_path, capsys):
    """Issue 44, items 12-13: a passage starting with '=' is text in a spreadsheet (OWASP: a leading quote); a
    ';'-separated cp1252 save imports (said), keyed by passage_key even where the text cell changed."""
    import csv as _csv

    from evals.analyze.judgments import escape_cell, sniff_delimiter, unescape_cell

    for v in ("=HYPERLINK(\"http://x\")", "+1", "-2", "@SUM(A1)", "\tx", "\rx"):
        assert escape_cell(v) == "'" + v and unescape_cell(escape_cell(v)) == v
    assert escape_cell("plain") == "plain" and escape_cell("it's") == "it's"
    assert sniff_delimiter("question_id;question;grade\n") == ";" and sniff_delimiter("a;b\n") == ","
    ws = run_ws
    pool = tmp_path / "pool.csv"
    assert main(["judge", "R1", "--workspace", str(ws), "--export", str(pool), "--include-judged"]) == 0
    rows = _rows(pool)
    assert not any(str(r["text"]).startswith(("=", "+", "-", "@")) for r in rows)
    # a European spreadsheet's save: ';' separators, cp1252, a text cell evaluated into something else
    out = tmp_path / "saved.csv"
    with open(out, "w", newline="", encoding="cp1252", errors="replace") as f:
        w = _csv.DictWriter(f, fieldnames=list(rows[0]), delimiter=";")
        w.writeheader()
        w.writerow(dict(rows[0], grade="2", text="#NAME? café"))
    capsys.readouterr()
    assert main(["judge", "R1", "--workspace", str(ws), "--import", str(out), "--judge-name", "eu"]) == 0
    said = capsys.readouterr().out
    assert "read as cp1252" in said and "';'" in said and "graded by passage_key" in said
    assert ("human:eu", 2) in {(j, g) for j, q, p, g, s in _judgments(ws) if p == rows[0]["passage_key"]}


def test_judged_metrics_read_the_passage_keys_kept_with_each_item_or_its_blocks(run_ws, tmp_path):
    """Issue 56's speed item: each item keeps its ranked passage keys when it is written, so a run's judged read is
    a lookup (the gate at 50,000 items: docs/performance.md). A run stored before (no keys) reads its blocks: the
    same values, statuses and reasons."""
    import duckdb
    import pandas as pd

    from evals.analyze.judgments import build_pool, judged_scores, question_key
    from evals.store import ResultStore

    db = run_ws / "results.duckdb"
    with ResultStore(db) as st:
        pool = build_pool(st, "R1", 10).rows
        st.add_judgments([{"question_key": question_key(q), "passage_key": pk, "judge": "human:t", "grade": i % 4,
                           "question_id": qid, "question": q, "text": "", "status": "ok", "detail": ""}
                          for i, (qid, q, pk) in enumerate(zip(pool.question_id, pool.question, pool.passage_key))
                          if i % 3], source="test")
        with st.session() as con:
            assert con.execute("SELECT count(*) FROM results WHERE run_id = 'R1' AND passage_keys IS NULL"
                               ).fetchone()[0] == 0
        kept = judged_scores(st, "R1")
    con = duckdb.connect(str(db))
    con.execute("UPDATE results SET passage_keys = NULL WHERE run_id = 'R1'")  # as a run stored before the keys
    con.close()
    with ResultStore(db, read_only=True) as st:
        parsed = judged_scores(st, "R1")
    assert len(kept) and (kept.status == "ok").any()
    pd.testing.assert_frame_equal(kept.reset_index(drop=True), parsed.reset_index(drop=True))


def test_the_column_wise_judged_metrics_equal_the_row_loop():
    """judged_frame (a stored run's items, the gate's read) gives what judged_rows gives item by item: values,
    statuses and details in the same order, on messy items: a question with no judgments, one judged only 0,
    an item with no blocks, unjudged passages, a passage twice, repeats."""
    import numpy as np

    from evals.analyze.judgments import judged_frame, judged_rows

    grades = {("qa", "p1"): 3, ("qa", "p2"): 0, ("qa", "p9"): 2, ("qb", "p1"): 0, ("qc", "p4"): 1}
    qkeys = {"A": "qa", "B": "qb", "C": "qc", "D": "qd"}
    items = [("chunks", "x", "A", 0, "p1,p2,p3"), ("chunks", "x", "A", 1, "p3,p9,p1,p5,p6,p7,p8,p2,p10,p11"),
             ("hybrid", "y", "B", 0, "p1"), ("hybrid", "y", "C", 0, ""), ("hybrid", "y", "D", 0, "p1,p2"),
             ("chunks", "x", "C", 0, "p4,p4x")]
    rows = list(judged_rows(items, qkeys, grades))
    frame = judged_frame("R", *[list(c) for c in zip(*items)], qkeys, grades)
    assert list(frame.run_id.unique()) == ["R"] and len(frame) == len(rows)
    for r, (_, f) in zip(rows, frame.drop(columns="run_id").iterrows()):
        want = list(r)
        got = [f.strategy, f.point_id, f.question_id, int(f["repeat"]), f.metric,
               None if np.isnan(f.value) else f.value, f.status, f.detail]
        assert got == want, (got, want)
