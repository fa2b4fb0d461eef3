"""Racing the budget grid (issue 45, docs/sweeps.md): the confidence sequence pinned to its formula and to a
simulation, a raced run that keeps the best point and stores why the others left, a kill -9 resumed without
repeating an item, and the gate over a raced run comparing only shared questions."""
import json
import math
import os
import re
import signal
import subprocess
import sys

import duckdb
import numpy as np
import pytest

from evals.analyze.race import RaceState, cs_halfwidth, race_step, simulate
from evals.cli import main

GRID = ["run", "--dataset", "squad2", "--limit", "300", "--embedder", "hash", "--no-progress", "--no-report",
        "--strategies", "chunks,full_documents", "--set", "chunks.top_k=1,4"]


def test_confidence_sequence_formula_and_its_coverage():
    # the Gaussian-mixture boundary by hand (Waudby-Smith et al., asymptotic CS), rho tuned for t* = 500
    a, t, sd = 0.05, 200, 0.3
    la = -2 * math.log(a)
    rho2 = (la + math.log(la + 1)) / 500
    want = sd * math.sqrt(2 * (t * rho2 + 1) / (t * t * rho2) * math.log(math.sqrt(t * rho2 + 1) / a))
    assert cs_halfwidth(sd, t, a) == pytest.approx(want)
    assert cs_halfwidth(sd, t, a) > 1.96 * sd / math.sqrt(t)  # wider than a fixed-n interval: the price of looking
    assert cs_halfwidth(sd, 2000, a) < cs_halfwidth(sd, 200, a)
    # anytime coverage: over 400 simulated streams of N(0, 1) with a look every 25, the running mean leaves the
    # sequence in at most ~alpha of them (asymptotic; 2x slack for the finite run)
    rng = np.random.default_rng(1)
    misses = 0
    for _ in range(400):
        x = rng.normal(size=1000)
        for end in range(25, 1001, 25):
            y = x[:end]
            if abs(y.mean()) > cs_halfwidth(y.std(ddof=1), end, a):
                misses += 1
                break
    assert misses / 400 <= 2 * a


def test_an_a_a_grid_loses_no_point_and_a_clear_loser_leaves():
    rng = np.random.default_rng(0)
    base = rng.random((800, 1))
    same = np.repeat(base, 5, axis=1)  # five points with identical answers
    costs = np.full_like(same, 100.0)
    pts = [f"p{i}" for i in range(5)]
    for seed in range(20):
        r = simulate(same, costs, pts, "f1", np.random.default_rng(seed).permutation(800))
        assert r["survivors"] == pts and r["share"] == 1.0
    worse = np.hstack([base, base - 0.2])
    r = simulate(worse, np.full_like(worse, 100.0), ["good", "bad"], "f1", np.arange(800))
    assert r["survivors"] == ["good"] and r["exits"][0].versus == "good" and r["share"] < 0.6
    # --race-cost: a cheaper point as good within the tolerance replaces a dearer one (the Pareto front stays)
    st = RaceState("f1", cost_tolerance=0.02, alive=["cheap", "dear"])
    out = race_step(st, {"cheap": base[:, 0], "dear": base[:, 0]}, {"cheap": 100.0, "dear": 900.0}, 800)
    assert [e.point for e in out] == ["dear"] and "cheaper" in out[0].reason and st.alive == ["cheap"]


def test_a_raced_run_keeps_the_best_stores_reasons_and_the_gate_pairs_shared_questions(tmp_path, capsys):
    ws = tmp_path / "ws"
    assert main(GRID + ["--workspace", str(ws), "--run-id", "FULL"]) == 0
    assert main(GRID + ["--workspace", str(ws), "--run-id", "RACED", "--race", "f1", "--race-batch", "30"]) == 0
    out = capsys.readouterr().out
    assert "race on f1" in out and "survivors:" in out
    con = duckdb.connect(str(ws / "results.duckdb"), read_only=True)
    full = con.execute("SELECT strategy || ' · ' || point_label, avg(s.value) FROM scores s JOIN results r "
                       "USING (run_id, strategy, point_id, question_id, repeat) WHERE run_id = 'FULL' AND metric = 'f1' "
                       "AND status = 'ok' GROUP BY 1").fetchall()
    n = dict(con.execute("SELECT strategy || ' · ' || point_label, count(*) FROM results WHERE run_id = 'RACED' "
                         "GROUP BY 1").fetchall())
    summ = json.loads(con.execute("SELECT summary FROM runs WHERE run_id = 'RACED'").fetchone()[0])
    status = con.execute("SELECT status FROM runs WHERE run_id = 'RACED'").fetchone()[0]
    con.close()
    best = max(full, key=lambda r: r[1])[0]
    race = summ["race"]
    assert status == "finished" and best in race["survivors"] and n[best] == 300
    assert race["exits"], "nothing left the race"
    for e in race["exits"]:
        assert re.match(r"raced out at question \d+: f1 -\d\.\d{3} \[-\d\.\d{3}, [-+]\d\.\d{3}\] vs ", e["reason"])
        assert n[e["point"]] == e["at_question"] < 300  # its items are the questions it answered
    assert race["planned"] == sum(n.values()) < race["full_grid_items"] == 900
    assert main(["show", "RACED", "--workspace", str(ws)]) == 0
    assert "raced out at question" in capsys.readouterr().out
    # the gate pairs the raced run with the full one on the questions both answered, and says so per point
    assert main(["gate", "--baseline", "FULL", "--candidate", "RACED", "--workspace", str(ws)]) in (0, 1)
    said = capsys.readouterr().out
    assert "300" in said and not re.search(r"\bnan\b", said)
    # each row says on how many questions it compared: a point that left is compared on what it answered
    for e in race["exits"]:
        strategy, point = e["point"].split(" · ")
        assert re.search(rf"\| {re.escape(strategy)} \| {re.escape(point)} \| f1 \| {e['at_question']} \|", said), said


def test_a_killed_race_resumes_without_repeating_an_item(tmp_path):
    ws = tmp_path / "ws"
    assert main(["ingest", "squad2", "--embedder", "hash", "--workspace", str(ws), "--no-progress"]) == 0
    race = GRID + ["--workspace", str(ws), "--race", "f1", "--race-batch", "30"]
    assert main(race + ["--run-id", "WHOLE"]) == 0
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    p = subprocess.Popen([sys.executable, "-m", "evals.cli"] + race + ["--run-id", "K"], env=env,
                         stderr=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    for line in p.stderr:  # kill -9 right after the first commit
        if re.search(r"committed \d+/", line):
            p.send_signal(signal.SIGKILL)
            break
    p.wait()
    con = duckdb.connect(str(ws / "results.duckdb"), read_only=True)
    partial = con.execute("SELECT count(*) FROM results WHERE run_id = 'K'").fetchone()[0]
    con.close()
    assert p.returncode == -signal.SIGKILL and 0 < partial < 900  # killed mid-race
    assert main(["run", "--resume", "K", "--workspace", str(ws), "--no-progress", "--no-report"]) == 0
    con = duckdb.connect(str(ws / "results.duckdb"), read_only=True)
    rows = {rid: con.execute("SELECT strategy, point_id, question_id FROM results WHERE run_id = ? ORDER BY ALL",
                             [rid]).fetchall() for rid in ("WHOLE", "K")}
    dup = con.execute("SELECT count(*) - count(DISTINCT (strategy, point_id, question_id, repeat)) FROM results "
                      "WHERE run_id = 'K'").fetchone()[0]
    sums = {rid: json.loads(con.execute("SELECT summary FROM runs WHERE run_id = ?", [rid]).fetchone()[0])["race"]
            for rid in ("WHOLE", "K")}
    con.close()
    assert dup == 0 and rows["K"] == rows["WHOLE"]  # the same race, each item once
    assert [e["reason"] for e in sums["K"]["exits"]] == [e["reason"] for e in sums["WHOLE"]["exits"]]


def test_race_flags_are_checked(tmp_path, capsys):
    assert main(GRID + ["--workspace", str(tmp_path), "--race", "f2"]) == 2
    assert "unknown metric 'f2'; valid:" in capsys.readouterr().err
    assert main(GRID + ["--workspace", str(tmp_path), "--race-batch", "20"]) == 2
    assert "without --race METRIC would do nothing" in capsys.readouterr().err


def test_the_workbench_races_a_sweep_into_the_store_with_a_live_leaderboard(tmp_path):
    """Issue 45, item 4: "Race these budgets" (the library call the page makes): a stored raced run, and a
    leaderboard after every batch with the points that left."""
    from evals.workbench import calls as interactive

    ws = tmp_path / "ws"
    sess = interactive.open_session("squad2", str(ws), "hash")
    looks = []
    rid = interactive.race_budgets(sess, str(ws / "results.duckdb"), str(ws), ["chunks"], "top_k", "1,4,16", {}, 300,
                                   "f1", batch=30, on_look=lambda seen, alive, exits: looks.append(
                                       interactive.race_leaderboard(seen, alive, exits)))
    assert len(looks) == 10 and list(looks[-1].columns) == ["point", "status", "after question", "why"]
    line, board = interactive.race_result(str(ws / "results.duckdb"), rid)
    assert rid in line and "items of the full grid" in line and len(board) == 3
    assert (board.status == "left").sum() == (looks[-1].status == "left").sum()
    with pytest.raises(ValueError, match="has no budget 'topk'"):
        interactive.race_budgets(sess, str(ws / "results.duckdb"), str(ws), ["chunks"], "topk", "1,4", {}, 100, "f1")
