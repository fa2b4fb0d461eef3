"""Issue 61: judged quality on the data teams bring. A judge by default wherever an LLM is configured (the answering
endpoint and model), answer relevance (LLM-judged; an offline stand-in labelled so), context sufficiency (gold
evidence offline, an LLM autorater otherwise) and its decomposition per point, each judge's agreement with people
stored with its identity and printed beside its metrics. The judge is the 127.0.0.1 test server's deterministic
one (tests/openai_server.py ``judge_reply``), which tells supported from unsupported and relevant from off-topic
from the prompt text alone, so these tests can fail."""
import json
import re
import shutil
from pathlib import Path

import duckdb
import numpy as np
import pandas as pd
import pytest

from evals.cli import main
from evals.score.metrics import Score, ScoringInput, score_relevance_standin, score_sufficiency
from openai_server import Handler, start
from rag.llm.client import LLMClient, LLMConfig
from rag.models import Evidence, Question

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT / "tests" / "data" / "as_written"
JUDGED = ("llm_faithfulness", "answer_relevance", "context_sufficiency")


@pytest.fixture(scope="module")
def llm():
    srv, url = start()
    yield url
    srv.shutdown()


def _client(url: str, tmp_path: Path) -> LLMClient:
    return LLMClient(LLMConfig(url, "local-extractive", max_tokens=256), tmp_path / "llm.sqlite")


# ---------------------------------------------------------------- the judges against a real server

def test_each_judge_tells_good_from_bad_by_the_prompt_text(llm, tmp_path):
    from evals.score.judges import get_judge

    c = _client(llm, tmp_path)
    ctx = ["Full-time staff get 25 days of annual leave a year. Part-time staff get a pro-rata share."]
    faith = get_judge("llm_faithfulness", c)
    assert faith.score("q", "Full-time staff get 25 days of annual leave [1].", ctx).value == 1.0
    assert faith.score("q", "Interns receive company shares on arrival [1].", ctx).value == 0.0
    both = faith.score("q", "Full-time staff get 25 days of annual leave [1]. Interns receive company shares.", ctx)
    assert both.value == 0.5 and both.status == "ok"
    rel = get_judge("llm_answer_relevance", c)
    q = "How many days of annual leave do full-time staff get?"
    assert rel.score(q, "Full-time staff get 25 days of annual leave.", ctx).value == 1.0
    off = rel.score(q, "The meal allowance abroad is 45 euros.", ctx)
    assert off.value == 0.0 and off.status == "ok" and off.detail == "rating 0 of 3"
    abst = rel.score(q, "The document does not mention this.", ctx)
    assert abst.status == "not_applicable" and abst.value is None
    suff = get_judge("llm_context_sufficiency", c)
    assert suff.score(q, "", ctx).value == 1.0
    assert suff.score("What is the meal allowance when travelling abroad?", "", ctx).value == 0.0
    empty = suff.score(q, "", [])
    assert empty.value == 0.0 and "no context" in empty.detail  # no call for an empty context
    # a reply that is not the asked JSON is a parse_error, never a value
    bad = get_judge("llm_answer_relevance", LLMClient(LLMConfig(llm, "questioner-text"), None))
    bad.SYSTEM = "Say anything."  # the server no longer recognises it as a judge prompt
    assert bad.score(q, "Full-time staff get 25 days.", ctx).status == "parse_error"


# ---------------------------------------------------------------- formulas and edge cases (docs/metrics.md)

class _B:
    def __init__(self, doc, start=0, end=10):
        self.doc_ids, self.page_ids, self.spans, self.text, self.n_tokens = (doc,), (), ((doc, start, end),), "x", 1


def _q(**kw) -> Question:
    base = dict(qid="q", text="How many days?", answers=[], answerable=None, evidence=[], language="en")
    base.update(kw)
    return Question(**base)


def test_sufficiency_from_gold_evidence_unanswerable_and_none():
    e1, e2 = Evidence("d1", start=2, end=5), Evidence("d2", start=0, end=3)
    both = score_sufficiency(ScoringInput(_q(evidence=[e1, e2], answerable=True, answers=["x"]),
                                          [_B("d1"), _B("d2")], "An answer."))
    assert both["context_sufficiency"].value == 1.0 and "2 of 2" in both["context_sufficiency"].detail
    one = score_sufficiency(ScoringInput(_q(evidence=[e1, e2]), [_B("d1")], "An answer."))
    assert one["context_sufficiency"].value == 0.0 and "1 of 2" in one["context_sufficiency"].detail  # a hop missing
    un = score_sufficiency(ScoringInput(_q(answerable=False), [_B("d1")], "The document does not mention this."))
    assert un["context_sufficiency"].value == 0.0 and un["abstained"].value == 1.0
    plain = score_sufficiency(ScoringInput(_q(), [_B("d1")], "Some answer."))
    assert plain["context_sufficiency"].status == "not_applicable" and "autorater" in plain["context_sufficiency"].detail
    assert plain["abstained"].value == 0.0
    failed = score_sufficiency(ScoringInput(_q(), [_B("d1")], "", answer_status="timeout"))
    assert failed["abstained"].status == "timeout" and failed["abstained"].value is None


def test_the_relevance_stand_in_is_a_cosine_and_says_nothing_for_an_abstention():
    def embed(texts):
        table = {"How many days?": [1.0, 0.0], "Twenty days.": [0.6, 0.8], "Other.": [0.0, 1.0]}
        return np.array([table[t] for t in texts])

    s = score_relevance_standin(ScoringInput(_q(), [], "Twenty days [1].", embed=embed))
    assert s["question_answer_similarity"].value == pytest.approx(0.6)  # citations stripped before embedding
    assert score_relevance_standin(ScoringInput(_q(), [], "Other.", embed=embed))[
        "question_answer_similarity"].value == 0.0
    ab = score_relevance_standin(ScoringInput(_q(), [], "The document does not mention this.", embed=embed))
    assert ab["question_answer_similarity"].status == "not_applicable"


def _frame(rows):
    out = []
    for qid, metrics in rows:
        for m, v in metrics.items():
            out.append({"strategy": "chunks", "point_label": "defaults", "question_id": qid, "repeat": 0, "metric": m,
                        "value": v, "status": "ok" if v is not None else "not_applicable", "detail": ""})
    return pd.DataFrame(out)


def test_the_decomposition_places_every_item_and_counts_what_it_cannot():
    from evals.analyze.sufficiency import OUTCOMES, UNPLACED, decomposition, item_outcomes

    sc = _frame([
        ("a", {"context_sufficiency": 1.0, "abstained": 0.0, "f1": 0.9, "llm_faithfulness": 0.0}),  # f1 decides
        ("b", {"context_sufficiency": 1.0, "abstained": 0.0, "f1": None, "llm_faithfulness": 0.2}),  # ignored
        ("c", {"context_sufficiency": 1.0, "abstained": 1.0}),  # abstained on a sufficient context: ignored
        ("d", {"context_sufficiency": 0.0, "abstained": 1.0}),  # the right call
        ("e", {"context_sufficiency": 0.0, "abstained": 0.0, "llm_faithfulness": 1.0}),  # answered anyway
        ("f", {"context_sufficiency": None, "abstained": 0.0, "llm_faithfulness": 1.0}),  # sufficiency unknown
        ("g", {"context_sufficiency": 1.0, "abstained": 0.0}),  # no outcome metric: cannot say correct
        ("h", {"context_sufficiency": 1.0, "abstained": 0.0, "faithfulness": 0.5}),  # the offline scorer, last
    ])
    got = dict(zip(item_outcomes(sc).question_id, item_outcomes(sc).outcome))
    assert got == {"a": OUTCOMES[0], "b": OUTCOMES[1], "c": OUTCOMES[1], "d": OUTCOMES[2], "e": OUTCOMES[3],
                   "f": UNPLACED, "g": UNPLACED, "h": OUTCOMES[0]}
    d = decomposition(sc).iloc[0]
    assert d["n"] == 8 and d["placed"] == 6 and d[UNPLACED] == 2
    assert d[OUTCOMES[1] + " share"] == pytest.approx(2 / 6)
    assert d["correct decided by"] == "f1 1, llm_faithfulness 1, faithfulness 1"


def test_balanced_accuracy_and_the_stored_agreement_line(tmp_path):
    from evals.score.agreement import agreement_line, balanced_accuracy, remember_agreement

    y = np.array([1, 1, 1, 0, 0])
    s = np.array([0.9, 0.8, 0.1, 0.2, 0.7])
    assert balanced_accuracy(y, s, 0.5) == pytest.approx((2 / 3 + 1 / 2) / 2)
    assert np.isnan(balanced_accuracy(np.array([1, 1]), np.array([0.9, 0.1]), 0.5))  # one class: no figure
    url = "http://user:sekrit@127.0.0.1:9/v1"
    line = agreement_line(tmp_path, "llm_faithfulness", "m", url)
    assert "agreement not measured (ragwb agreement" in line and "sekrit" not in line
    remember_agreement(tmp_path, "llm_faithfulness", "m", url, {
        "n": 400, "failed": 0, "threshold": 0.5, "balanced_accuracy": 0.71, "balanced_accuracy_95ci": [0.66, 0.76],
        "auroc": 0.8, "auroc_95ci": [0.75, 0.85]})
    assert "sekrit" not in (tmp_path / "judge_agreement.json").read_text()  # scrubbed where it is stored
    assert "balanced accuracy 0.71 [0.66, 0.76] on 400 labelled claims" in agreement_line(
        tmp_path, "llm_faithfulness", "m", url)
    # another model, or another prompt, is another judge: never measured until asked
    assert "not measured" in agreement_line(tmp_path, "llm_faithfulness", "m2", url)
    assert "agreement not measured (ragwb agreement" in agreement_line(tmp_path, "llm_answer_relevance", "m", url)
    assert "no human-labelled set" in agreement_line(tmp_path, "ragas_context_recall", "m", url)
    (tmp_path / "judge_agreement.json").write_text("{not json")
    assert "not measured" in agreement_line(tmp_path, "llm_faithfulness", "m", url)  # damaged: no made-up figure


# ---------------------------------------------------------------- the CLI on the data teams bring

def _folder(tmp_path: Path) -> Path:
    shutil.copytree(DATA / "handbook", tmp_path / "handbook")
    return tmp_path / "handbook"


def _judge_bodies(start: int) -> dict:
    kinds = {"You check whether statements": "faithfulness", "You rate whether an answer": "relevance",
             "You decide whether a context": "sufficiency"}
    out = {k: 0 for k in kinds.values()}
    out["answer"] = 0
    for raw in Handler.bodies[start:]:
        msgs = json.loads(raw).get("messages", [])
        sysmsg = next((m["content"] for m in msgs if m.get("role") == "system"), "")
        kind = next((v for k, v in kinds.items() if sysmsg.startswith(k)), "answer")
        out[kind] += 1
    return out


@pytest.mark.parametrize("shape", ["plain", "mixed", "evidence_only"])
def test_a_run_with_an_llm_is_judged_by_default_counted_first_and_a_rerun_sends_nothing(shape, llm, tmp_path,
                                                                                         capsys):
    docs, ws = _folder(tmp_path), tmp_path / "ws"
    args = ["run", "--dataset", str(docs), "--questions", str(DATA / f"{shape}.jsonl"), "--embedder", "hash",
            "--workspace", str(ws), "--no-progress", "--llm-base-url", llm, "--llm-model", "local-extractive"]
    n0 = len(Handler.bodies)
    assert main(args + ["--run-id", "R1"]) == 0
    out = capsys.readouterr().out
    sent = _judge_bodies(n0)
    # one cost line, before the first call: the answers exact (every prompt packed first), the judge calls a
    # bound where they read an answer not known yet (an abstention is not judged), the autorater's exact
    line = next(x for x in out.splitlines() if x.startswith("ragwb run:"))
    answers = int(re.search(r"; (\d+) answer call", line).group(1))
    judges = int(re.search(r"up to (\d+) judge call\(s\) to local-extractive", line).group(1))
    auto = int((re.search(r"llm_context_sufficiency (\d+)", line) or re.search("()0", "0")).group(1) or 0)
    assert sent["answer"] == answers and sent["faithfulness"] + sent["relevance"] + sent["sufficiency"] <= judges
    assert sent["sufficiency"] == auto
    assert sent["faithfulness"] > 0 and sent["relevance"] > 0
    con = duckdb.connect(str(ws / "results.duckdb"), read_only=True)
    gold = con.execute("SELECT answerable, evidence FROM run_gold WHERE run_id = 'R1'").fetchall()
    points = con.execute("SELECT count(DISTINCT strategy || point_id) FROM results WHERE run_id = 'R1'").fetchone()[0]
    # the autorater is asked only where neither gold evidence nor a declared unanswerable decides sufficiency
    without = sum(1 for a, e in gold if not json.loads(e or "[]") and str(a).lower() not in ("false", "0"))
    # (at most once an item: two points that pack the same context share one autorater call)
    assert without * points - points <= auto <= without * points and (without == 0) == (auto == 0)
    if shape == "evidence_only":
        assert auto == 0 and sent["sufficiency"] == 0
    per_point = con.execute(
        "SELECT strategy, metric, count(*) FILTER (WHERE status = 'ok') FROM scores WHERE run_id = 'R1' AND metric "
        "IN ('llm_faithfulness', 'answer_relevance', 'context_sufficiency') GROUP BY ALL").fetchall()
    suff = con.execute("SELECT detail FROM scores WHERE run_id = 'R1' AND metric = 'context_sufficiency' AND "
                       "status = 'ok'").fetchall()
    con.close()
    have = {(s, m) for s, m, n in per_point if n > 0}
    strategies = {s for s, _, _ in per_point}
    assert len(strategies) == points and all((s, m) in have for s in strategies for m in JUDGED), per_point
    assert any(d.startswith("gold evidence") for (d,) in suff) == (shape != "plain")
    assert any(d.startswith("LLM autorater") for (d,) in suff) == (shape != "evidence_only")
    # a rerun sends 0 calls: answers and judgments all come from the response cache
    n1 = len(Handler.bodies)
    assert main(args + ["--run-id", "R2"]) == 0
    assert len(Handler.bodies) == n1
    assert "0 calls (all cached: " in capsys.readouterr().out
    # show: the judged metrics first, the citation metrics, the n/a ones in one line, the judge's agreement line
    assert main(["show", "R1", "--workspace", str(ws)]) == 0
    shown = capsys.readouterr().out
    header = next(x for x in shown.splitlines() if x.strip().startswith("strategy"))
    assert header.index("llm_faithfulness") < header.index("answer_relevance") < header.index("context_sufficiency")
    assert "citation_validity" in header and "lexical support (offline)" in header
    assert header.index("context_sufficiency") < header.index("lexical support")
    assert "judge: llm_faithfulness judged by local-extractive: agreement not measured (ragwb agreement" in shown
    if shape == "plain":
        assert re.search(r"not shown \(n/a on every row\): f1, em, abstention_accuracy \(answerability unknown", shown)
    assert main(["show", "R1", "--workspace", str(ws), "--sufficiency"]) == 0
    table = capsys.readouterr().out
    assert "insufficient, abstained (right call)" in table and "correct decided by" in table
    report = (ws / "reports" / "report-R1.html").read_text()
    summary = report[report.index("<h2>Summary"):report.index("<h2>Quality vs")]
    assert summary.index("llm_faithfulness") < summary.index("answer_relevance") < summary.index("lexical support")
    assert "citation_validity" in summary and "judge: llm_faithfulness judged by local-extractive" in summary
    assert 'id="sufficiency"' in report and "Why points lose" in report


def test_judge_none_sends_only_answers_and_a_named_judge_overrides_the_default(llm, tmp_path, capsys):
    docs, ws = _folder(tmp_path), tmp_path / "ws"
    base = ["run", "--dataset", str(docs), "--questions", str(DATA / "plain.jsonl"), "--embedder", "hash",
            "--workspace", str(ws), "--no-progress", "--no-report", "--strategies", "chunks",
            "--llm-base-url", llm, "--llm-model", "local-extractive"]
    n0 = len(Handler.bodies)
    assert main(base + ["--run-id", "N", "--judge", "none"]) == 0
    sent = _judge_bodies(n0)
    assert sent["answer"] > 0 and sent["faithfulness"] == sent["relevance"] == sent["sufficiency"] == 0
    assert "judge call" not in capsys.readouterr().out
    assert main(base + ["--run-id", "X", "--judge", "none", "--judge-base-url", llm, "--judge-model", "j"]) == 2
    assert "--judge none turns the LLM judge off" in capsys.readouterr().err
    n0 = len(Handler.bodies)
    assert main(base + ["--run-id", "O", "--judge-base-url", llm, "--judge-model", "other-judge",
                        "--judges", "llm_answer_relevance"]) == 0
    models = {(json.loads(b)["model"], _kind(b)) for b in Handler.bodies[n0:]}
    assert ("other-judge", "relevance") in models and not any(m == "local-extractive" and k != "answer"
                                                               for m, k in models)
    con = duckdb.connect(str(ws / "results.duckdb"), read_only=True)
    ms = {m for (m,) in con.execute("SELECT DISTINCT metric FROM scores WHERE run_id = 'O'").fetchall()}
    con.close()
    assert "answer_relevance" in ms and "llm_faithfulness" not in ms


def _kind(raw: bytes) -> str:
    msgs = json.loads(raw).get("messages", [])
    sysmsg = next((m["content"] for m in msgs if m.get("role") == "system"), "")
    return "relevance" if sysmsg.startswith("You rate whether") else "answer" if "Question:" in (
        msgs[-1].get("content") or "") and not sysmsg.startswith("You") else "judge"


def test_offline_nothing_is_judged_and_the_stand_in_is_labelled(tmp_path, capsys):
    docs, ws = _folder(tmp_path), tmp_path / "ws"
    assert main(["run", "--dataset", str(docs), "--questions", str(DATA / "plain.jsonl"), "--embedder", "hash",
                 "--workspace", str(ws), "--no-progress", "--run-id", "OFF"]) == 0
    out = capsys.readouterr().out
    assert "judge call" not in out
    con = duckdb.connect(str(ws / "results.duckdb"), read_only=True)
    ms = dict(con.execute("SELECT metric, count(*) FILTER (WHERE status = 'ok') FROM scores WHERE run_id = 'OFF' "
                          "GROUP BY 1").fetchall())
    na = con.execute("SELECT DISTINCT detail FROM scores WHERE run_id = 'OFF' AND metric = 'context_sufficiency'"
                     ).fetchall()
    con.close()
    assert "llm_faithfulness" not in ms and "answer_relevance" not in ms
    assert ms["question_answer_similarity"] > 0 and ms["abstained"] > 0
    assert na == [("no gold evidence: an LLM autorater decides (--llm-base-url, or --judge-base-url; "
                   "docs/metrics.md, 'Context sufficiency')",)]
    assert main(["show", "OFF", "--workspace", str(ws)]) == 0
    shown = capsys.readouterr().out
    assert "q-a similarity (relevance stand-in)" in shown and "judge:" not in shown


@pytest.mark.parametrize("shape", ["plain", "mixed", "evidence_only"])
def test_the_page_judges_every_point_behind_its_cost_line_and_save_as_run_keeps_the_judge(shape, llm, tmp_path):
    """The workbench's library path (what its cells call) on the data teams bring: the page's own flags pick the
    judge (the answering model, no environment variable), the Apply line counts its calls before any is sent, every
    point gets the judged metrics, the line counted again is 0 calls, and Save as run stores the judge's identity
    for show and the report."""
    from evals.workbench import calls as interactive
    from evals.report.html import write_report

    docs, ws = _folder(tmp_path), tmp_path / "ws"
    wb = interactive.workbench_args(["--llm-base-url", llm, "--llm-model", "local-extractive"], environ={})
    assert wb.error == "" and wb.judge is not None and wb.judge.model == "local-extractive"
    assert interactive.workbench_args(["--llm-base-url", llm, "--llm-model", "m", "--judge", "none"],
                                      environ={}).judge is None
    base = interactive.open_session(str(docs), str(ws), "hash", questions=str(DATA / f"{shape}.jsonl"))
    sess = interactive.session_for_answerer({}, base, f"LLM: {wb.llm.model}", wb.llm, {}, wb.judge)
    points = interactive.points_from_budgets(["chunks", "hybrid"], {})
    n = len(sess.dataset.questions)
    plan = interactive.answer_plan(sess, points, n)
    assert plan.new_calls > 0 and plan.judge_calls > 0 and "judge call(s) to local-extractive" in plan.line("m")
    sent = len(Handler.bodies)
    scores = interactive.evaluate_points(sess, points, n)
    calls = len(Handler.bodies) - sent
    assert plan.new_calls <= calls <= plan.calls  # never more than the line said
    ok = scores[scores.status == "ok"]
    for s in ("chunks", "hybrid"):
        have = set(ok[ok.strategy == s].metric)
        assert {"llm_faithfulness", "answer_relevance", "context_sufficiency"} <= have, (s, have)
    again = interactive.answer_plan(sess, points, n)
    assert again.calls == 0  # everything answered and judged is in the cache (and in the session)
    db = str(ws / "results.duckdb")
    rid = interactive.save_as_run(sess, db, points, n)
    html = write_report(rid, db=db, out_dir=tmp_path / "rep").read_text()
    assert "judge: llm_faithfulness judged by local-extractive" in html and "Why points lose" in html
