"""Confirm questions (issue 81, item 1 and 6): ``ragwb run --confirm SHARE|N`` sets questions aside by a seeded hash of
the id, the grid tunes on the rest, the point it picks is scored on the questions that did not pick it; the cost line
counts both parts; every reader sees the tune part; show, best, the report and the gate say the confirm figures."""
import json
import re

import duckdb
import pytest

from evals.cli import main
from evals.run.confirm import hash_share, parse_confirm, split
from openai_server import Handler, start
from rag.models import Question

GRID = ["--dataset", "squad2", "--embedder", "hash", "--no-progress", "--strategies", "chunks",
        "--set", "chunks.top_k=1,2,4,8"]


def _q(i):
    return Question(qid=f"q{i}", text=f"question {i}?", answers=[], answerable=None)


@pytest.mark.parametrize("bad", ["0", "1", "-0.3", "nan", "abc", "inf", "2.5", "1e3", ""])
def test_a_bad_confirm_is_refused_in_one_line_before_any_run(tmp_path, capsys, bad):
    assert main(["run", *GRID, "--limit", "40", "--workspace", str(tmp_path), "--confirm", bad]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("ragwb run: error: --confirm takes a share"), err
    assert not (tmp_path / "results.duckdb").exists()  # nothing stored, nothing evaluated


def test_a_share_that_leaves_fewer_than_two_in_a_part_is_refused_and_stores_nothing(tmp_path, capsys):
    assert main(["run", *GRID, "--limit", "20", "--workspace", str(tmp_path), "--confirm", "0.01"]) == 2
    err = capsys.readouterr().err.strip().splitlines()[-1]
    assert re.search(r"--confirm a share of 0.01 of 20 questions leaves \d+ to tune on and [01] to confirm on; each "
                     "part needs at least 2", err), err
    con = duckdb.connect(str(tmp_path / "results.duckdb"), read_only=True)
    assert con.execute("SELECT count(*) FROM runs").fetchone()[0] == 0
    con.close()
    assert main(["run", *GRID, "--limit", "20", "--workspace", str(tmp_path), "--confirm", "19"]) == 2
    assert "leaves 1 to tune on and 19 to confirm on" in capsys.readouterr().err
    assert main(["run", *GRID, "--limit", "20", "--workspace", str(tmp_path), "--confirm-metric", "f1"]) == 2
    assert "without --confirm" in capsys.readouterr().err


def test_the_split_is_a_seeded_hash_that_never_moves_an_earlier_question():
    assert parse_confirm("0.3") == {"share": 0.3} and parse_confirm("25") == {"n": 25}
    qs = [_q(i) for i in range(400)]
    tune, conf = split(qs, {"share": 0.25, "seed": 0})
    assert 70 <= len(conf) <= 130 and len(tune) + len(conf) == 400
    assert {q.qid for q in conf} == {q.qid for q in qs if hash_share(q.qid, 0) < 0.25}
    # adding questions later: every earlier question stays in its part
    tune2, conf2 = split(qs + [_q(i) for i in range(400, 800)], {"share": 0.25, "seed": 0})
    assert {q.qid for q in conf} == {q.qid for q in conf2 if int(q.qid[1:]) < 400}
    # another seed, another part; a count takes the lowest hashes; a stored part is kept as stored
    assert {q.qid for q in split(qs, {"share": 0.25, "seed": 1})[1]} != {q.qid for q in conf}
    n_conf = split(qs, {"n": 30, "seed": 0})[1]
    assert len(n_conf) == 30 and max(hash_share(q.qid, 0) for q in n_conf) < min(
        hash_share(q.qid, 0) for q in qs if q not in n_conf)
    assert [q.qid for q in split(qs, {"n": 30}, stored=["q5", "q7"])[1]] == ["q5", "q7"]


def _one(db, sql, args=()):
    con = duckdb.connect(str(db), read_only=True)
    try:
        return con.execute(sql, list(args)).fetchall()
    finally:
        con.close()


def test_a_confirm_grid_picks_on_the_tune_part_and_says_its_confirm_score_everywhere(tmp_path, capsys):
    ws = tmp_path / "ws"
    assert main(["run", *GRID, "--limit", "120", "--workspace", str(ws), "--confirm", "0.3", "--run-id", "C"]) == 0
    out = capsys.readouterr()
    db = ws / "results.duckdb"
    conf = json.loads(_one(db, "SELECT options FROM runs WHERE run_id='C'")[0][0])["confirm_questions"]
    assert 20 <= len(conf) <= 55
    n_tune = 120 - len(conf)
    # the grid on the tune part, one point on the confirm part: nothing more, nothing less
    per_point = dict(_one(db, "SELECT point_label, count(*) FROM results WHERE run_id='C' GROUP BY 1"))
    picked = [p for p, n in per_point.items() if n == n_tune + len(conf)]
    assert len(picked) == 1 and sorted(per_point.values()) == [n_tune] * 3 + [n_tune + len(conf)], per_point
    assert _one(db, "SELECT status FROM runs WHERE run_id='C'")[0][0] == "finished"
    assert f"confirm: chunks · {picked[0]} (picked on f1 from 4 point(s) on {n_tune} tune questions) on " \
           f"{len(conf)} confirm questions" in out.err
    # the pick is the best tune mean (ties to the cheaper context), as `best` picks
    tune_means = dict(_one(db, "SELECT r.point_label, avg(s.value) FROM scores s JOIN results r USING (run_id, "
                               "strategy, point_id, question_id, repeat) WHERE s.run_id='C' AND s.metric='f1' AND "
                               "s.status='ok' AND NOT list_contains(?, s.question_id) GROUP BY 1", [conf]))
    assert tune_means[picked[0]] == pytest.approx(max(tune_means.values()))
    oracle = _one(db, "SELECT avg(v), count(*) FROM (SELECT s.question_id, avg(s.value) v FROM scores s JOIN results r "
                      "USING (run_id, strategy, point_id, question_id, repeat) WHERE s.run_id='C' AND s.metric='f1' "
                      "AND s.status='ok' AND r.point_label=? AND list_contains(?, s.question_id) GROUP BY 1)",
                  [picked[0], conf])[0]
    line = next(x for x in out.out.splitlines() if x.strip().startswith("confirm: "))
    assert f"confirm {oracle[0]:.3f} [" in line and f"(n={oracle[1]} questions that did not choose it)" in line
    assert f"tune f1 {tune_means[picked[0]]:.3f} (the best of 4 point(s) on {n_tune} tune questions)" in line
    assert f"gap {tune_means[picked[0]] - oracle[0]:+.3f} (optimism" in line
    # best --json: in-sample on the tune part, confirm from the confirm part
    assert main(["best", "C", "--metric", "f1", "--json", "--workspace", str(ws)]) == 0
    got = json.loads(capsys.readouterr().out)
    assert got["label"] == picked[0] and got["score"]["n"] == n_tune
    assert got["score"]["mean"] == pytest.approx(tune_means[picked[0]])
    assert got["confirm"]["n"] == oracle[1] and got["confirm"]["mean"] == pytest.approx(oracle[0])
    assert got["confirm"]["low"] < oracle[0] < got["confirm"]["high"] and got["confirm"]["candidates"] == 4
    # show: every table on the tune part (the picked point's n is the others'), then the pick and its confirm line
    assert main(["show", "C", "--workspace", str(ws)]) == 0
    shown = capsys.readouterr().out
    rows = [x for x in shown.splitlines() if x.strip().startswith("chunks ")]
    assert len(rows) == 4 and all(f" {n_tune} " in x for x in rows), rows
    assert re.search(r"^pick on f1: chunks · \S+ [0-9.]+ in-sample \(the best of 4 points, optimistic\); expected on "
                     r"new questions [0-9.]+ \[", shown, re.M), shown
    assert line.strip() in shown
    # the report: its own section, and the chart's hover of the best point
    assert main(["report", "C", "--workspace", str(ws)]) == 0
    html = (ws / "reports" / "report-C.html").read_text()
    assert "<h2>The pick: how far to trust the best point</h2>" in html
    assert f"confirm {oracle[0]:.3f}" in html and "questions that did not choose it" in html
    assert re.search(r"the pick on f1 of 4 points: expected on new questions [0-9.]+ \[", html)
    # best with another metric: its point was not confirmed, and that is said (never a confirm figure of another)
    assert main(["best", "C", "--metric", "page_recall@10", "--workspace", str(ws)]) == 0
    other = capsys.readouterr().out
    if "best on page_recall@10: chunks · " + picked[0] + ":" not in other:
        assert "was not evaluated on the run's" in other and "picked on f1" in other
    # the gate on the confirm questions alone: a second run of every point on every question, paired there only
    assert main(["run", *GRID, "--limit", "120", "--workspace", str(ws), "--run-id", "ALL"]) == 0
    capsys.readouterr()
    assert main(["gate", "--baseline", "ALL", "--candidate", "C", "--questions", "confirm", "--metrics", "f1",
                 "--allow-missing-points", "--workspace", str(ws), "--json", str(tmp_path / "g.json")]) == 0
    assert f"gate on {len(conf)} confirm questions" in capsys.readouterr().err
    g = json.loads((tmp_path / "g.json").read_text())
    assert [r["point"] for r in g["rows"]] == [picked[0]] and g["rows"][0]["n"] == len(conf)
    assert main(["gate", "--baseline", "ALL", "--candidate", "ALL", "--questions", "confirm", "--workspace",
                 str(ws)]) == 2
    assert "neither the candidate run ALL nor the baseline has confirm questions" in capsys.readouterr().err


def test_a_confirm_run_killed_in_its_confirm_part_resumes_only_what_is_missing(tmp_path, capsys):
    ws = tmp_path / "ws"
    assert main(["run", *GRID, "--limit", "60", "--workspace", str(ws), "--confirm", "0.4", "--run-id", "K",
                 "--no-report"]) == 0
    db = ws / "results.duckdb"
    conf = json.loads(_one(db, "SELECT options FROM runs WHERE run_id='K'")[0][0])["confirm_questions"]
    before = _one(db, "SELECT count(*) FROM results WHERE run_id='K'")[0][0]
    con = duckdb.connect(str(db))  # as a kill in the confirm part leaves it: the grid stored, the confirm half
    for t in ("scores", "results"):
        con.execute(f"DELETE FROM {t} WHERE run_id='K' AND list_contains(?, question_id) AND question_id >= ?",
                    [conf, sorted(conf)[len(conf) // 2]])
    con.execute("UPDATE runs SET status='running' WHERE run_id='K'")
    con.close()
    capsys.readouterr()
    assert main(["run", "--resume", "K", "--workspace", str(ws), "--no-progress", "--no-report"]) == 0
    out = capsys.readouterr()
    assert _one(db, "SELECT count(*) FROM results WHERE run_id='K'")[0][0] == before
    assert _one(db, "SELECT status FROM runs WHERE run_id='K'")[0][0] == "finished"
    assert "confirm: chunks · " in out.out and "already done, resumed" in out.out
    assert main(["run", "--resume", "K", "--confirm", "0.2", "--workspace", str(ws)]) == 2
    assert "keeps the confirm part it started with" in capsys.readouterr().err


def test_the_cost_line_counts_the_confirm_part_before_anything_is_sent(tmp_path, capsys, monkeypatch):
    srv, url = start()
    try:
        before = Handler.calls
        assert main(["run", *GRID[:-2], "--set", "chunks.top_k=1,2", "--limit", "12", "--workspace", str(tmp_path),
                     "--confirm", "4", "--llm-base-url", url, "--llm-model", "local-extractive", "--judge", "none",
                     "--no-report", "--run-id", "S"]) == 0
        out = capsys.readouterr().out
        cost = next(x for x in out.splitlines() if x.startswith("ragwb run: "))
        # 2 points x 8 tune questions, then one point on 4: 20 items, each one answer call at most
        assert cost.startswith("ragwb run: 20 item(s) to evaluate on squad2; 16 answer call(s) to local-extractive")
        assert cost.endswith("then the picked point on the 4 confirm question(s): up to 4 item(s) and 4 call(s) "
                             "(answer and judge calls; those in the response cache are free)"), cost
        assert Handler.calls - before == 20
        assert out.index(cost) < out.index("confirm: chunks · ")
    finally:
        srv.shutdown()


def test_a_raced_front_confirms_each_front_point(tmp_path, capsys):
    ws = tmp_path / "ws"
    assert main(["run", *GRID, "--limit", "100", "--workspace", str(ws), "--confirm", "0.3", "--race", "f1",
                 "--race-batch", "20", "--race-cost", "0.0", "--run-id", "F", "--no-report"]) == 0
    capsys.readouterr()
    db = ws / "results.duckdb"
    conf = set(json.loads(_one(db, "SELECT options FROM runs WHERE run_id='F'")[0][0])["confirm_questions"])
    on_confirm = {p for (p,) in _one(db, "SELECT DISTINCT point_label FROM results WHERE run_id='F' AND "
                                         "list_contains(?, question_id)", [sorted(conf)])}
    assert main(["best", "F", "--metric", "f1", "--race-cost", "0.0", "--workspace", str(ws)]) == 0
    out = capsys.readouterr().out
    front = re.search(r"^front on f1 vs context_tokens: (.*)$", out, re.M).group(1)
    names = {x.split(" (")[0].split(" · ")[1] for x in front.split("; ")}
    assert names == on_confirm and len(re.findall(r"^confirm: chunks · ", out, re.M)) == len(names)
    assert _one(db, "SELECT status FROM runs WHERE run_id='F'")[0][0] == "finished"


def test_the_page_races_with_confirm_questions_and_says_the_confirm_line(browser, tmp_path):
    """In Chromium: a confirm share on the page's Budget curve, Race these budgets, and the race's result and Best
    config say the winner's tune score, its confirm score with its interval and n, and the gap (optimism)."""
    import subprocess
    import sys
    from pathlib import Path

    from test_workbench_own import _port, _wait_http

    root = Path(__file__).resolve().parents[1]
    docs = tmp_path / "bees"
    docs.mkdir()
    facts = [("hives", "A hive holds frames of comb", "frames of comb"),
             ("swarms", "A swarm leaves with the old queen", "the old queen"),
             ("feeding", "Colonies are fed sugar syrup in autumn", "in autumn"),
             ("mites", "Varroa mites are counted with a sugar roll", "a sugar roll")]
    for name, fact, _ in facts:
        body = "\n\n".join(f"{fact}, as note {i} of the {name} chapter says to a beekeeper with two hives."
                           for i in range(10))
        (docs / f"{name}.md").write_text(f"# {name.title()}\n\n{body}\n")
    qs = tmp_path / "questions.jsonl"
    asks = [("What does a hive hold?", 0), ("Who leaves with a swarm?", 1), ("When are colonies fed?", 2),
            ("How are mites counted?", 3)] * 4
    qs.write_text("".join(json.dumps({"id": f"b{i}", "question": f"{q} ({i})", "answers": [facts[k][2]]}) + "\n"
                          for i, (q, k) in enumerate(asks)))
    port = _port()
    proc = subprocess.Popen([sys.executable, "-m", "marimo", "run", "--headless", "--no-token", "--port", str(port),
                             str(root / "notebooks" / "workbench.py"), "--", "--dataset", str(docs), "--questions",
                             str(qs), "--embedder", "hash", "--workspace", str(tmp_path / "ws"), "--limit", "16"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        _wait_http(f"http://127.0.0.1:{port}/")
        page = browser.new_page(viewport={"width": 1440, "height": 1000})
        errors: list[str] = []
        page.on("pageerror", lambda e: errors.append(str(e)))
        page.goto(f"http://127.0.0.1:{port}/")
        race = page.get_by_role("button", name=re.compile(r"^Race these budgets"))
        race.wait_for(timeout=180000)
        share = page.get_by_role("textbox", name=re.compile(r"confirm share"))
        share.wait_for(timeout=60000)
        share.fill("0.3")
        share.press("Enter")
        page.wait_for_selector("text=/with 0.3 of the questions set aside to confirm the pick/", timeout=60000)
        race.click()
        page.wait_for_selector("text=/Raced and stored as/", timeout=180000)
        line = page.locator("text=/Raced and stored as/").first
        try:
            page.wait_for_selector("text=/confirm: chunks · .*questions that did not choose it/", timeout=60000)
        finally:
            text = line.inner_text()
        text = text[text.index("confirm: chunks"):]
        assert re.search(r"tune f1 [0-9.]+ \(the best of 4 point\(s\) on \d+ tune questions\), confirm [0-9.]+ "
                         r"\[[0-9.]+, [0-9.]+\] \(n=\d+ questions that did not choose it\), gap [+-][0-9.]+ "
                         r"\(optimism", text), text
        assert "under 20 confirm questions: too few to tell close points apart" in text  # 16 questions in all
        assert re.search(r"pick on f1: chunks · .* expected on new questions [0-9.]+ \[", line.inner_text())
        page.get_by_role("button", name="Best config of the stored sweep (TOML to paste)").click()
        page.wait_for_selector("text=/^best on f1: /", timeout=60000)
        prose = page.locator("text=/^best on f1: /").first.inner_text()
        assert re.search(r"expected on new questions: f1 [0-9.]+ \[", prose) and "P(best): chunks · " in prose
        assert re.search(r"confirm: chunks · .*questions that did not choose it.*gap [+-][0-9.]+ \(optimism", prose)
        assert page.locator("text=Traceback").count() == 0 and errors == [], errors
        page.close()
    finally:
        proc.terminate()
        proc.wait(timeout=30)


def test_a_race_that_dropped_points_estimates_on_the_questions_every_survivor_has(tmp_path, capsys):
    """Issue 81, bad input: a race's points do not share questions; the estimate uses the questions every surviving
    point was scored on, and says how many (counted here from the store)."""
    ws = tmp_path / "ws"
    assert main(["run", *GRID[:-1], "chunks.top_k=1,2,4,8,16", "--limit", "200", "--race", "evidence_recall",
                 "--race-batch", "20", "--workspace", str(ws), "--run-id", "R", "--no-report"]) == 0
    summary = json.loads(_one(ws / "results.duckdb", "SELECT summary FROM runs WHERE run_id='R'")[0][0])
    survivors = summary["race"]["survivors"]
    if len(survivors) == 5:
        pytest.fail(f"the race ruled nothing out (the case this test is for): {summary['race']}")
    labels = [p.split(" · ")[1] for p in survivors]
    shared = _one(ws / "results.duckdb", "SELECT count(*) FROM (SELECT s.question_id FROM scores s JOIN results r "
                  "USING (run_id, strategy, point_id, question_id, repeat) WHERE s.run_id='R' AND s.metric="
                  "'evidence_recall' AND s.status='ok' AND list_contains(?, r.point_label) GROUP BY 1 "
                  "HAVING count(DISTINCT r.point_label) = ?)", [labels, len(labels)])[0][0]
    capsys.readouterr()
    assert main(["best", "R", "--metric", "evidence_recall", "--json", "--workspace", str(ws)]) == 0
    got = json.loads(capsys.readouterr().out)
    assert got["shared_questions"] == shared and got["candidates"] == len(survivors) and got["point"] in survivors
    assert main(["best", "R", "--metric", "evidence_recall", "--workspace", str(ws)]) == 0
    assert (f"{len(survivors)} of 5 points survived the race; on the {shared:,} questions every surviving point was "
            "scored on") in capsys.readouterr().out
