"""The oracle bound of routing (issue 28, part 1), computed by hand on a small frame: ties on quality and on
cost, missing scores, not_applicable, and the tolerance."""
import pandas as pd
import pytest

from evals.analyze.routing import oracle_bound


def _frame(rows):
    out = []
    for q, point, f1, tokens, status in rows:
        s, label = point.split(" · ")
        out.append({"strategy": s, "point_label": label, "question_id": q, "repeat": 0, "metric": "f1",
                    "value": f1, "status": status})
        out.append({"strategy": s, "point_label": label, "question_id": q, "repeat": 0, "metric": "prompt_tokens",
                    "value": tokens, "status": "ok"})
    return pd.DataFrame(out)


A, B, C = "a · cheap", "b · rich", "c · cheap2"
ROWS = [("q0", A, 1.0, 100, "ok"), ("q0", B, 1.0, 500, "ok"), ("q0", C, 0.2, 300, "ok"),   # tie on quality: cheapest
        ("q1", A, 0.0, 100, "ok"), ("q1", B, 0.8, 500, "ok"), ("q1", C, 0.1, 300, "ok"),
        ("q2", A, None, 100, "timeout"), ("q2", B, 0.5, 500, "ok"), ("q2", C, None, 300, "timeout"),  # one scored
        ("q3", A, None, 100, "not_applicable"), ("q3", B, None, 500, "not_applicable"),  # nothing: left out
        ("q3", C, None, 300, "not_applicable"),
        ("q4", A, 0.7, 100, "ok"), ("q4", B, 0.4, 500, "ok"), ("q4", C, 0.9, 100, "ok")]  # tie on cost: better one


def test_oracle_picks_the_cheapest_point_within_tolerance_of_the_best():
    t, info = oracle_bound(_frame(ROWS), "f1", "prompt_tokens", 0.0)
    o = t.iloc[-1]
    # q0 -> a (1.0, 100); q1 -> b (0.8, 500); q2 -> b (0.5, 500); q4 -> c (0.9, 100)
    assert o["f1"] == pytest.approx((1.0 + 0.8 + 0.5 + 0.9) / 4) and o["prompt_tokens"] == pytest.approx(1200 / 4)
    assert info["questions"] == 4 and info["left_out"] == 1
    chosen = dict(zip(t.point, t.chosen))
    assert chosen[A] == 1 and chosen[B] == 2 and chosen[C] == 1
    fixed = t.set_index("point")
    assert fixed.loc[A, "n"] == 3 and fixed.loc[A, "f1"] == pytest.approx((1.0 + 0.0 + 0.7) / 3)
    assert info["best_fixed"] == B and info["saving_vs_best_fixed"] == pytest.approx(1 - 300 / 500)


def test_a_tolerance_trades_quality_for_tokens():
    t, _ = oracle_bound(_frame(ROWS), "f1", "prompt_tokens", 0.9)
    o = t.iloc[-1]
    # q0 -> a; q1: a is within 0.9 of 0.8 -> a (0.0, 100); q2 -> b (only one); q4: everything is within 0.9 of 0.9,
    # a and c cost 100 -> the better of them, c
    assert o["f1"] == pytest.approx((1.0 + 0.0 + 0.5 + 0.9) / 4) and o["prompt_tokens"] == pytest.approx(800 / 4)


def test_bad_tolerance_and_missing_metric_are_errors():
    with pytest.raises(ValueError, match="tolerance"):
        oracle_bound(_frame(ROWS), "f1", "prompt_tokens", -1)
    with pytest.raises(ValueError, match="no ok scores of 'faithfulness'"):
        oracle_bound(_frame(ROWS), "faithfulness", "prompt_tokens", 0)


def test_show_oracle_and_the_report_section(tmp_path, capsys):
    from evals.cli import main
    from evals.report.html import write_report

    ws = tmp_path / "ws"
    assert main(["run", "--dataset", "squad2", "--limit", "20", "--embedder", "hash", "--no-progress", "--no-report",
                 "--workspace", str(ws), "--run-id", "O", "--strategies", "chunks,full_documents"]) == 0
    capsys.readouterr()
    assert main(["show", "O", "--oracle", "f1", "--workspace", str(ws)]) == 0
    out = capsys.readouterr().out
    assert "oracle (tolerance 0)" in out and "best fixed point chunks · defaults" in out
    html = write_report("O", db=ws / "results.duckdb", out_dir=tmp_path / "rep").read_text()
    assert "How much could routing save at most?" in html


# --------------------------------------------------------------------------- the learned router, routed, escalation

import json  # noqa: E402
import sys  # noqa: E402
from pathlib import Path  # noqa: E402

import numpy as np  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent))
FAST = ["--embedder", "hash", "--no-progress", "--no-report"]


def test_cross_validation_never_trains_on_a_question_it_tests():
    from evals.analyze.routing import cv_folds

    # a question's repeats and a conversation's turns share a group
    groups = ["q1", "q1", "q2", "c1", "c1", "c1", "q3", "q4", "q4", "q5", "c2", "c2"]
    folds = cv_folds(groups, 5)
    assert len(folds) == 5
    seen = []
    for tr, te in folds:
        assert not {groups[i] for i in tr} & {groups[i] for i in te}
        seen.extend(te.tolist())
    assert sorted(seen) == list(range(len(groups)))  # every item tested exactly once
    assert [list(te) for _, te in folds] == [list(te) for _, te in cv_folds(groups, 5)]  # deterministic
    with pytest.raises(ValueError, match="at least 2 groups"):
        cv_folds(["only", "only"], 5)


def test_oracle_choice_and_sufficiency_by_hand():
    from evals.analyze.routing import oracle_choice, sufficient

    q = np.array([[1.0, 1.0, 0.2], [0.0, 0.8, 0.75], [0.7, 0.4, 0.9]])
    c = np.array([[100, 500, 300], [100, 500, 300], [100, 500, 100]], float)
    assert oracle_choice(q, c, 0.0).tolist() == [0, 1, 2]
    assert oracle_choice(q, c, 0.1).tolist() == [0, 2, 2]  # 0.75 is within 0.1 of 0.8 and cheaper
    assert sufficient(q, 0.1).tolist() == [[True, True, False], [False, True, True], [False, False, True]]


@pytest.fixture(scope="module")
def routed_run(tmp_path_factory):
    """A stored run with two points (chunks top 1, full documents) on squad2, and a router trained on it."""
    from evals.cli import main

    ws = tmp_path_factory.mktemp("route") / "ws"
    assert main(["run", "--dataset", "squad2", "--limit", "60", "--strategies", "chunks,full_documents",
                 "--set", "chunks.top_k=1", *FAST, "--workspace", str(ws), "--run-id", "BASE"]) == 0
    # a saved router, so each test can run alone (the first test trains the same one again: same bytes)
    assert main(["route", "BASE", "--metric", "f1", "--tolerance", "0.05", "--workspace", str(ws)]) == 0
    return ws


def test_router_cross_validated_saved_and_reproduced_by_the_routed_strategy(routed_run, capsys):
    from evals.cli import main
    from evals.analyze.routing import learn_router
    from evals.store import ResultStore
    from rag.index.workspace import Workspace
    from rag.index.retrieval import Retriever
    from rag.strategies.routing import load_router, question_features

    ws = routed_run
    out = ws / "route.json"
    assert main(["route", "BASE", "--metric", "f1", "--tolerance", "0.05", "--workspace", str(ws),
                 "--json", str(out), "--curve", "0.05,0.99"]) == 0
    printed = capsys.readouterr().out
    assert "router (out of fold)" in printed and "oracle (tolerance 0.05)" in printed and "best fixed" in printed
    res = json.loads(out.read_text())
    path = Path(res["router"])
    assert path.exists() and path.with_suffix(".json").exists() and res["sha256"][:12] in path.name
    rows = {r["point"]: r for r in res["table"]}
    router, oracle = rows["router (out of fold)"], rows["oracle (tolerance 0.05)"]
    assert oracle["f1"] >= max(r["f1"] for r in res["table"] if r["kind"] == "fixed") - 1e-9
    assert router["f1"] <= oracle["f1"] + 0.05 + 1e-9 and router["low"] <= router["f1"] <= router["high"]
    assert (ws / "reports" / "route-BASE-f1.html").exists()
    curve = {r["point"]: r for r in res["table"] if r["kind"] == "router-curve"}
    assert set(curve) == {"router (confidence 0.05)", "router (confidence 0.99)"}
    # a surer router spends at least as much: a higher bar only moves picks to costlier points
    cheapest = min(r["prompt_tokens"] for r in res["table"] if r["kind"] == "fixed")
    assert curve["router (confidence 0.05)"]["prompt_tokens"] == pytest.approx(cheapest)
    assert curve["router (confidence 0.99)"]["prompt_tokens"] >= curve["router (confidence 0.05)"]["prompt_tokens"]
    # the same run, the same seed: the same router, byte for byte
    with ResultStore(ws / "results.duckdb", read_only=True) as st:
        again = learn_router(st, Workspace(ws), "BASE", "f1", "prompt_tokens", 0.05, 5, 0)
    from rag.strategies.routing import save_router

    assert save_router(again.router, ws / "routers2").name == path.name
    # every fold's test questions are out of its training set (groups are questions here)
    for tr, te in again.folds:
        assert not {again.groups[i] for i in tr} & {again.groups[i] for i in te}

    # routed as a strategy: the choice stored per item is the router's choice on that question
    assert main(["run", "--dataset", "squad2", "--limit", "60", "--strategies", "routed", "--set",
                 f"routed.model={path}", *FAST, "--workspace", str(ws), "--run-id", "ROUTED"]) == 0
    with ResultStore(ws / "results.duckdb", read_only=True) as st:
        got = st.con.execute("SELECT r.question_id, q.text, r.counters FROM results r JOIN run_gold q "
                             "ON q.run_id = r.run_id AND q.question_id = r.question_id WHERE r.run_id = 'ROUTED'"
                             ).fetchall()
    router_obj = load_router(path)
    r = Retriever(Workspace(ws), Workspace(ws).index_name("squad2", __import__("rag.index.workspace").index.workspace.IndexConfig(
        embedder=__import__("rag.index.embedders").index.embedders.EmbedderConfig("hash"))))
    assert len(got) == 60
    picks = set()
    for _, text, counters in got:
        j, p = router_obj.choose(question_features(r, text))
        want = router_obj.points[j]
        c = json.loads(counters)
        assert c["routed_to"] == f"{want['strategy']} · {want['label']}" and c["router"] == router_obj.sha256[:12]
        assert c["route_p"] == pytest.approx(p, abs=1e-4)
        picks.add(c["routed_to"])
    assert picks  # and the shape it picked is what was retrieved (its counters are the inner shape's)


def test_routed_needs_a_router_file_and_refuses_a_changed_one(routed_run, tmp_path, capsys):
    from evals.cli import main

    ws = routed_run
    assert main(["run", "--dataset", "squad2", "--limit", "5", "--strategies", "routed", *FAST,
                 "--workspace", str(ws)]) == 2
    assert "routed needs a router: --set routed.model=PATH" in capsys.readouterr().err
    model = sorted((ws / "routers").glob("*.pkl"))[0]
    bad = tmp_path / model.name
    bad.write_bytes(model.read_bytes() + b"x")
    bad.with_suffix(".json").write_text(model.with_suffix(".json").read_text())
    assert main(["run", "--dataset", "squad2", "--limit", "5", "--strategies", "routed", "--set",
                 f"routed.model={bad}", *FAST, "--workspace", str(ws)]) == 2
    assert "differs from the one recorded" in capsys.readouterr().err


def test_escalation_through_a_real_server_that_abstains_on_small_contexts(tmp_path):
    from openai_server import Handler, start

    from evals.cli import main
    from evals.analyze.routing import escalation
    from evals.store import ResultStore

    srv, url = start()
    try:
        Handler.abstain_below = 1200  # chunks top 2: some prompts shorter (abstain); full documents: long (answer)
        ws = tmp_path / "ws"
        calls0 = Handler.calls
        assert main(["run", "--dataset", "squad2", "--limit", "30", "--strategies", "chunks,full_documents,escalate",
                     "--set", "chunks.top_k=2", "--set", "escalate.cheap_params=top_k=2", *FAST, "--workspace",
                     str(ws), "--run-id", "LLM", "--llm-base-url", url, "--llm-model", "abstain-short",
                     "--concurrency", "2", "--no-cache"]) == 0
        assert Handler.calls - calls0 >= 90  # every item of every point went through the server
    finally:
        Handler.abstain_below = 2000
        srv.shutdown()
    with ResultStore(ws / "results.duckdb", read_only=True) as st:
        t, info = escalation(st, "LLM", "chunks", "full_documents", "f1", "prompt_tokens")
        rows = st.con.execute("SELECT strategy, question_id, answer, prompt_tokens FROM results WHERE run_id = 'LLM'"
                              ).df()
    cheap = rows[rows.strategy == "chunks"].set_index("question_id")
    rich = rows[rows.strategy == "full_documents"].set_index("question_id")
    abstained = {q for q, a in cheap.answer.items() if a.strip() == "The document does not mention this."}
    assert 0 < len(abstained) < 30  # the server abstained on some questions only
    items = {r["question_id"]: r for r in info["items"]}
    assert {q for q, r in items.items() if r["escalated"]} == abstained
    for q, r in items.items():  # the composite's cost counts both calls where it escalated
        want = cheap.prompt_tokens[q] + (rich.prompt_tokens[q] if q in abstained else 0)
        assert r["composite_c"] == pytest.approx(want)
        assert r["composite_q"] == (r["rich_q"] if q in abstained else r["cheap_q"])
    assert info["escalation_rate"] == pytest.approx(len(abstained) / len(items))
    comp = t.iloc[-1]
    assert comp["escalation_rate"] == pytest.approx(info["escalation_rate"])
    assert comp["prompt_tokens"] == pytest.approx(np.mean([r["composite_c"] for r in items.values()]))

    # the live escalate point (the mechanism, through the server) is the composite, question by question
    with ResultStore(ws / "results.duckdb", read_only=True) as st:
        live = st.con.execute("SELECT question_id, answer, prompt_tokens, counters FROM results "
                              "WHERE run_id = 'LLM' AND strategy = 'escalate'").df().set_index("question_id")
        esc = st.con.execute("SELECT question_id, value FROM scores WHERE run_id = 'LLM' AND strategy = 'escalate' "
                             "AND metric = 'escalated'").df().set_index("question_id")["value"]
    assert len(live) == 30
    for q, r in items.items():
        assert json.loads(live.counters[q])["escalated"] == (q in abstained) and esc[q] == float(q in abstained)
        assert live.prompt_tokens[q] == pytest.approx(r["composite_c"])
        assert live.answer[q] == (rich.answer[q] if q in abstained else cheap.answer[q])


def test_escalate_on_a_conversation_set_answers_each_turn_again_where_it_abstained(tmp_path):
    """Conversation turns are evaluated apart from single questions: escalate must escalate there too,
    and the live point must equal the composite of its two stored points."""
    from evals.cli import main
    from evals.analyze.routing import escalation
    from evals.store import ResultStore

    ws = tmp_path / "ws"
    assert main(["run", "--dataset", "mtrag-govt", "--limit", "30", "--strategies", "escalate,chunks,full_documents",
                 "--memory", "window", *FAST, "--workspace", str(ws), "--run-id", "CONV"]) == 0
    with ResultStore(ws / "results.duckdb", read_only=True) as st:
        pts = {p: p for p in st.scores("CONV").assign(p=lambda d: d.strategy + " · " + d.point_label).p.unique()}
        cheap = next(p for p in pts if p.startswith("chunks"))
        rich = next(p for p in pts if p.startswith("full_documents"))
        _, info = escalation(st, "CONV", cheap, rich, "f1", "prompt_tokens")
        live = st.con.execute("SELECT question_id, prompt_tokens, counters FROM results WHERE run_id = 'CONV' AND "
                              "strategy = 'escalate'").df().set_index("question_id")
    assert 0 < info["escalated"] < len(live) == 30
    for r in info["items"]:
        assert json.loads(live.counters[r["question_id"]])["escalated"] == bool(r["escalated"])
        assert live.prompt_tokens[r["question_id"]] == pytest.approx(r["composite_c"])


def test_route_refuses_options_that_would_do_nothing(routed_run, capsys):
    from evals.cli import main

    assert main(["route", "BASE", "--escalate", "chunks", "full_documents", "--tolerance", "0.1",
                 "--workspace", str(routed_run)]) == 2
    assert "--tolerance would do nothing" in capsys.readouterr().err
    assert main(["route", "BASE", "--confidence", "1.5", "--workspace", str(routed_run)]) == 2
    assert "probability in (0, 1]" in capsys.readouterr().err
    assert main(["run", "--dataset", "squad2", "--limit", "5", "--strategies", "escalate", "--set",
                 "escalate.cheap_params=top_k", *FAST, "--workspace", str(routed_run)]) == 2
    assert "'top_k' is not NAME=VALUE" in capsys.readouterr().err
