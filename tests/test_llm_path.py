"""The LLM path end to end against a real HTTP server on 127.0.0.1 (no mocks)."""
import re

import duckdb
import pytest

from evals.cli import main
from rag.llm.client import LLMClient, LLMConfig
from openai_server import Handler, start


@pytest.fixture(scope="module")
def server():
    srv, url = start()
    yield url
    srv.shutdown()


def _run(ws, url, model, run_id, extra=()):
    return main(["run", "--dataset", "squad2", "--limit", "6", "--embedder", "hash", "--no-progress", "--no-report",
                 "--strategies", "chunks,parent_child", "--workspace", str(ws), "--run-id", run_id,
                 "--llm-base-url", url, "--llm-model", model, "--llm-key-env", "RAGWB_TEST_KEY", *extra])


def test_llm_answers_through_server_then_rerun_makes_zero_calls(server, tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("RAGWB_TEST_KEY", "sk-secret-never-stored")
    before = Handler.calls
    off = ["--judge", "none"]  # the answer calls alone (the default judge's: tests/test_judged_quality.py)
    assert _run(tmp_path, server, "local-extractive", "L1", off) == 0
    first = Handler.calls - before
    assert first == 12  # 6 questions x 2 strategies
    out = capsys.readouterr().out
    assert "0 hits, 12 misses" in out
    # the cost line comes before the run's first item: every prompt packed and counted (issue 63, items 8-9), its
    # prompt tokens exact (the answer calls' own count), an unknown price said so
    cost = next(x for x in out.splitlines() if x.startswith("ragwb run: "))
    tokens = int(re.search(r"\(([\d,]+) prompt tokens", cost).group(1).replace(",", ""))
    assert cost == (f"ragwb run: 12 item(s) to evaluate on squad2; 12 answer call(s) to local-extractive "
                    f"({tokens:,} prompt tokens, price unknown (--price MODEL=IN,OUT)); 0 already in the response "
                    "cache (free)")
    con = duckdb.connect(str(tmp_path / "results.duckdb"), read_only=True)
    assert con.execute("SELECT sum(prompt_tokens) FROM results WHERE run_id='L1'").fetchone()[0] == tokens
    con.close()
    assert out.index(cost) < out.index("0 hits, 12 misses")
    before = Handler.calls
    # a fully cached run says so and asks nothing; with a price, the line names the tokens and the dollars
    assert _run(tmp_path, server, "local-extractive", "L2", off + ["--price", "local-extractive=1,2"]) == 0
    assert Handler.calls == before  # every answer came from the response cache
    out = capsys.readouterr().out
    assert "ragwb run: 12 item(s) to evaluate on squad2; 0 calls (all cached: 12 in the response cache)" in out
    assert "12 hits, 0 misses, 0 calls" in out
    # half new: the new prompts' tokens and dollars, the cached half free (the last --strategies wins)
    assert _run(tmp_path, server, "local-extractive", "L2b", off + ["--price", "local-extractive=1,2", "--strategies",
                                                                    "chunks,full_documents"]) == 0
    assert Handler.calls == before + 6
    cost = next(x for x in capsys.readouterr().out.splitlines() if x.startswith("ragwb run: "))
    assert re.search(r"; 6 answer call\(s\) to local-extractive \([\d,]+ prompt tokens, up to \$0\.\d{4}\); 6 "
                     r"already in the response cache \(free\)$", cost), cost
    before = Handler.calls
    con = duckdb.connect(str(tmp_path / "results.duckdb"), read_only=True)
    rows = con.execute("SELECT answer_status, usage_source, cached FROM results WHERE run_id='L2'").fetchall()
    assert {r for r in rows} == {("ok", "endpoint", True)}
    dump = " ".join(str(r) for r in con.execute("SELECT * FROM runs").fetchall())
    assert "sk-secret-never-stored" not in dump and "RAGWB_TEST_KEY" in dump
    con.close()
    assert _run(tmp_path, server, "local-extractive", "L3", ["--no-cache", *off]) == 0
    assert Handler.calls == before + 12


@pytest.mark.parametrize("model,status", [("fault-429", "rate_limited"), ("fault-500", "error"),
                                          ("fault-slow", "timeout"), ("fault-badjson", "parse_error")])
def test_failing_endpoint_gives_every_question_a_status(server, tmp_path, model, status, capsys):
    # every item stored with its status, and the run's exit status says that every answer failed
    assert _run(tmp_path, server, model, "F", ["--retries", "1", "--timeout", "0.3"]) == 6
    assert f"every answer failed: 12 of 12 items ({status}=12)" in capsys.readouterr().err
    con = duckdb.connect(str(tmp_path / "results.duckdb"), read_only=True)
    res = con.execute("SELECT answer_status, count(*) FROM results WHERE run_id='F' GROUP BY 1").fetchall()
    assert res == [(status, 12)]
    f1 = con.execute("SELECT status, value FROM scores WHERE run_id='F' AND metric='f1'").fetchall()
    assert len(f1) == 12 and all(s == status and v is None for s, v in f1)
    con.close()


def test_retry_after_is_honoured(server):
    c = LLMClient(LLMConfig(server, "fault-flaky", retries=2, backoff=5.0), cache_path=None)
    res = c.chat([{"role": "user", "content": "hello there"}])
    assert res.status == "ok" and res.calls == 2 and res.latency_s < 2.0  # waited Retry-After (0.01 s), not 5 s


@pytest.mark.parametrize("model,status", [("fault-429", "rate_limited"), ("fault-500", "error"),
                                          ("fault-slow", "timeout"), ("fault-badjson", "parse_error"),
                                          ("local-extractive", "parse_error")])
def test_ragas_judge_failures_become_statuses(server, tmp_path, model, status):
    assert main(["run", "--dataset", "squad2", "--limit", "4", "--embedder", "hash", "--no-progress", "--no-report",
                 "--strategies", "chunks", "--workspace", str(tmp_path), "--run-id", "J", "--judges", "ragas_faithfulness",
                 "--judge-base-url", server,
                 "--judge-model", model, "--retries", "0", "--timeout", "0.5"]) == 0
    con = duckdb.connect(str(tmp_path / "results.duckdb"), read_only=True)
    rows = con.execute("SELECT r.answer, s.status, s.value FROM scores s JOIN results r USING "
                       "(run_id, strategy, point_id, question_id, repeat) WHERE s.metric='ragas_faithfulness'").fetchall()
    con.close()
    assert len(rows) == 4  # one judge row per item, none dropped
    for answer, st, value in rows:
        expected = "undetermined" if answer == "The document does not mention this." else status
        assert st == expected and value is None


def test_conversation_turns_send_history_and_llm_rewrites_through_server(server, tmp_path, capsys):
    """The LLM answerer receives the memory policy's history; rewrite queries and turn summaries are
    LLM calls through the same server; offline faithfulness scores the LLM's answers."""
    before = Handler.calls
    assert main(["run", "--dataset", "mtrag-govt", "--limit", "6", "--embedder", "hash", "--no-progress",
                 "--no-report", "--strategies", "chunks", "--memory", "full_history,retrieved_turns",
                 "--query-mode", "rewrite", "--workspace", str(tmp_path), "--run-id", "CV",
                 "--llm-base-url", server, "--llm-model", "local-extractive"]) == 0
    assert Handler.calls - before > 12  # 12 answers, plus rewrites and turn summaries
    con = duckdb.connect(str(tmp_path / "results.duckdb"), read_only=True)
    rows = con.execute("SELECT turn, prompt_tokens, query_mode, answer_status FROM results WHERE run_id='CV' "
                       "AND params->>'$.memory.policy' = 'full_history' ORDER BY turn").fetchall()
    assert [r[0] for r in rows] == list(range(1, 7)) and all(r[2] == "rewrite" and r[3] == "ok" for r in rows)
    assert rows[-1][1] > 2 * rows[0][1]  # the endpoint's usage grows with the history it was sent
    faith = con.execute("SELECT count(*) FROM scores WHERE run_id='CV' AND metric='faithfulness' AND status='ok'"
                        ).fetchone()[0]
    assert faith > 0
    con.close()


def test_client_counts_the_dollars_it_spends(server, tmp_path):
    c = LLMClient(LLMConfig(server, "local-extractive"), tmp_path / "c.sqlite", prices={"local-extractive": (1.0, 2.0)})
    res = c.chat([{"role": "user", "content": "Say hello."}])
    assert res.status == "ok" and res.prompt_tokens > 0
    assert c.stats.dollars_spent == pytest.approx((res.prompt_tokens * 1.0 + res.completion_tokens * 2.0) / 1e6)
    c.chat([{"role": "user", "content": "Say hello."}])  # a cache hit: saved, not spent again
    assert c.stats.dollars_saved == pytest.approx(c.stats.dollars_spent)


def test_run_on_a_terminal_waits_for_a_yes_after_its_cost_line(server, tmp_path):
    """`ragwb run` with an LLM answerer on a terminal: the cost line, then `Send up to N call(s)? [y/N]`; "n"
    stores nothing and sends nothing, "y" runs (a real pseudo-terminal, a real server; each step waits on what the
    command prints, with a deadline)."""
    from pty_helper import answer_prompt

    argv = ["run", "--dataset", "squad2", "--limit", "3", "--embedder", "hash", "--no-progress", "--no-report",
            "--strategies", "chunks", "--workspace", str(tmp_path), "--llm-base-url", server, "--llm-model",
            "local-extractive", "--llm-key-env", "RAGWB_TEST_KEY", "--judge", "none"]
    calls = Handler.calls
    code, said, at_prompt = answer_prompt(argv + ["--run-id", "NO"], "n", lambda: Handler.calls)
    assert code == 1 and "ragwb run: 3 item(s) to evaluate on squad2; 3 answer call(s)" in said, said
    assert "Send 3 call(s)? [y/N]" in said and "nothing sent for squad2" in said
    # a decline is not a finished run (issue 63, item 9): no "finished", no reports folder named
    assert "finished" not in said and "reports in" not in said
    assert Handler.calls == calls == at_prompt
    con = duckdb.connect(str(tmp_path / "results.duckdb"), read_only=True)
    assert con.execute("SELECT count(*) FROM runs WHERE run_id = 'NO'").fetchone() == (0,)
    con.close()
    code, said, at_prompt = answer_prompt(argv + ["--run-id", "YES"], "y", lambda: Handler.calls)
    assert code == 0 and at_prompt == calls and Handler.calls - calls == 3, said
    # every prompt cached now: the line says so and nothing is asked (issue 63, item 8)
    code, said, _ = answer_prompt(argv + ["--run-id", "AGAIN"], "y", lambda: Handler.calls, expect_prompt=False)
    assert code == 0 and "0 calls (all cached: 3 in the response cache)" in said and "[y/N]" not in said, said
    assert Handler.calls - calls == 3
