import json
import os
import re
import signal
import subprocess
import sys

import duckdb

from evals.cli import main
from evals.analyze.gate import gate, per_question
from evals.store import ResultStore

RUN = ["run", "--dataset", "squad2", "--limit", "12", "--embedder", "hash", "--no-progress"]
KEYS = ["strategy", "point_id", "question_id", "repeat", "answer", "answer_status", "blocks", "context_tokens"]


def _rows(db, run_id):
    con = duckdb.connect(str(db), read_only=True)
    r = con.execute(f"SELECT {', '.join(KEYS)} FROM results WHERE run_id=? ORDER BY 1,2,3,4", [run_id]).fetchall()
    s = con.execute("SELECT strategy, point_id, question_id, metric, value, status FROM scores WHERE run_id=? "
                    "ORDER BY 1,2,3,4", [run_id]).fetchall()
    con.close()
    return r, s


def test_run_schema_show_export_and_report(tmp_path, capsys):
    ws = tmp_path / "ws"
    assert main(RUN + ["--workspace", str(ws), "--run-id", "A", "--set", "chunks.top_k=2,8",
                       "--strategies", "chunks,hybrid"]) == 0
    db = ws / "results.duckdb"
    con = duckdb.connect(str(db), read_only=True)
    tables = {r[0] for r in con.execute("SELECT table_name FROM information_schema.tables").fetchall()}
    assert {"runs", "questions", "results", "scores", "aggregates"} <= tables
    n = con.execute("SELECT count(*) FROM results WHERE run_id='A'").fetchone()[0]
    assert n == 12 * 3  # chunks x 2 points + hybrid x 1
    statuses = {r[0] for r in con.execute("SELECT DISTINCT status FROM scores").fetchall()}
    assert statuses <= {"ok", "undetermined", "not_applicable"}
    cfg = json.loads(con.execute("SELECT config FROM runs WHERE run_id='A'").fetchone()[0])
    assert cfg["grid"]["chunks"]["top_k"] == [2, 8] and "api_key\"" not in json.dumps(cfg)
    con.close()
    assert main(["show", "A", "--workspace", str(ws)]) == 0
    assert "chunks" in capsys.readouterr().out
    assert main(["export", "A", "--format", "csv", "--out", str(tmp_path / "x"), "--workspace", str(ws)]) == 0
    assert (tmp_path / "x" / "A_scores.csv").exists()
    html = (ws / "reports" / "report-A.html").read_text()
    assert "plotly" in html and "Pareto" in html


def test_unknown_strategy_errors_with_valid_names(tmp_path, capsys):
    assert main(RUN + ["--workspace", str(tmp_path), "--strategies", "bogus"]) == 2
    assert "valid: chunks" in capsys.readouterr().err


def test_killed_run_resumes_to_exactly_the_uninterrupted_rows(tmp_path):
    ws_full, ws_kill = tmp_path / "full", tmp_path / "kill"
    assert main(RUN + ["--workspace", str(ws_full), "--run-id", "R", "--no-report", "--limit", "300"]) == 0
    # pre-ingest so the child spends its time writing items, then kill it mid-run
    assert main(["ingest", "squad2", "--embedder", "hash", "--workspace", str(ws_kill), "--no-progress"]) == 0
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    p = subprocess.Popen([sys.executable, "-m", "evals.cli"] + RUN + ["--workspace", str(ws_kill), "--run-id", "R",
                         "--no-report", "--limit", "300"], env=env, stderr=subprocess.PIPE, stdout=subprocess.PIPE,
                         text=True)
    first = None
    for line in p.stderr:  # kill -9 right after the first commit (batches are committed every second)
        m = re.search(r"committed (\d+)/1500", line)
        if m:
            first = int(m.group(1))
            p.send_signal(signal.SIGKILL)
            break
    p.wait()
    db = ws_kill / "results.duckdb"
    con = duckdb.connect(str(db), read_only=True)
    partial = con.execute("SELECT count(*) FROM results WHERE run_id='R'").fetchone()[0]
    con.close()
    assert first and first <= partial < 1500
    assert main(["run", "--resume", "R", "--workspace", str(ws_kill), "--no-progress", "--no-report"]) == 0
    assert _rows(ws_kill / "results.duckdb", "R") == _rows(ws_full / "results.duckdb", "R")


def _two_runs(tmp_path):
    ws = tmp_path / "ws"
    for rid in ("B", "C"):
        assert main(RUN + ["--workspace", str(ws), "--run-id", rid, "--no-report", "--strategies", "chunks"]) == 0
    return ws, ws / "results.duckdb"


def test_gate_identical_pass_regression_errors_and_question_sets(tmp_path, capsys):
    ws, db = _two_runs(tmp_path)
    assert main(["gate", "--baseline", "B", "--candidate", "C", "--workspace", str(ws),
                 "--json", str(tmp_path / "g.json")]) == 0
    assert "PASSED" in capsys.readouterr().out
    with ResultStore(db, read_only=True) as st:
        base, cand = per_question(st, "B"), per_question(st, "C")
    # forced regression on one metric
    c = cand[1].copy()
    c.loc[c.metric == "context_tokens", "value"] *= 2  # lower is better: doubling is a regression
    res = gate(base, (cand[0], c))
    assert not res["passed"] and any("context_tokens" in f for f in res["failures"])
    assert all("context_tokens" in f for f in res["failures"])
    # error rate over the cap
    c = cand[1].copy()
    c.loc[c.index[: len(c) // 10], "status"] = "timeout"
    res = gate(base, (cand[0], c))
    assert not res["passed"] and any("of its items (cap 2.0%)" in f for f in res["failures"])
    # the cap counts a point's items: one point losing half its items fails, however few scores that is
    c = cand[1].copy()
    pt = c.point_label.iloc[0]
    qs = sorted(set(c[c.point_label == pt].question_id))[::2]
    hit = (c.point_label == pt) & c.question_id.isin(qs) & (c.metric == "f1")
    c.loc[hit, "status"] = "context_overflow"
    assert hit.sum() / len(c) < 0.2  # as a share of all scores it would pass a 20% cap
    res = gate(base, (cand[0], c), max_error_rate=0.2)
    assert not res["passed"] and any(f"point {pt} lost 50.0% of its items (cap 20.0%)" in f and "context_overflow" in f
                                     for f in res["failures"])
    # different question sets name the questions
    c = cand[1][cand[1].question_id != cand[1].question_id.iloc[0]]
    res = gate(base, (cand[0], c))
    assert any(cand[1].question_id.iloc[0] in f for f in res["failures"])
    # seeded, reproducible
    assert gate(base, cand)["rows"] == gate(base, cand)["rows"]
    # committed baseline file round trip
    bf = tmp_path / "baseline.json.gz"
    assert main(["gate", "--candidate", "B", "--write-baseline", str(bf), "--workspace", str(ws)]) == 0
    assert main(["gate", "--baseline", str(bf), "--candidate", "C", "--workspace", str(ws), "--json", ""]) == 0


def test_the_gate_bootstrap_shared_across_metrics_equals_one_bootstrap_per_metric():
    import numpy as np

    from evals.stats import paired_bootstrap, paired_bootstrap_columns

    rng = np.random.default_rng(3)
    for n in (1, 40, 1500):  # the counts path, and the chunked gather path (n x 2000 > 2M)
        B = rng.random((n, 3))
        C = B + rng.normal(0, 0.1, (n, 3))
        C[:, 1] = B[:, 1]  # a column with no change at all
        shared = paired_bootstrap_columns(B, C, 2000, seed=11)
        alone = [paired_bootstrap(B[:, j], C[:, j], 2000, seed=11) for j in range(3)]
        for s, a in zip(shared, alone):
            assert s == a or all(s[k] == a[k] or (s[k] != s[k] and a[k] != a[k]) for k in s)
