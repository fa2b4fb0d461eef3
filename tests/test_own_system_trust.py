"""A team's own system, trusted (issue 33): each test pins one defect found by a new and a hostile user, with
real files, a real HTTP service and OpenAI-compatible server on 127.0.0.1, the real CLI and store."""
import base64
import json
import os
import sys
import threading
import time
from pathlib import Path

import duckdb
import pytest

from evals.cli import main

FAST = ["--embedder", "hash", "--no-progress", "--no-report"]


@pytest.fixture(scope="module")
def service():
    import rag_service

    srv, url = rag_service.start()
    yield url
    srv.shutdown()


@pytest.fixture(scope="module")
def llm_server():
    from openai_server import start

    srv, url = start()
    yield url
    srv.shutdown()


# (the strategy registry is restored after every test: tests/conftest.py)


def _db(ws):
    return duckdb.connect(str(ws / "results.duckdb"), read_only=True)


def _all_text(ws: Path) -> str:
    """Every stored byte of a workspace as text: the store, caches, reports."""
    out = []
    for p in ws.rglob("*"):
        if p.is_file():
            out.append(p.read_bytes().decode("latin-1"))
    return "\n".join(out)


# --------------------------------------------------------------------------- wrong numbers, mixed data

def test_a_service_answer_is_checked_on_every_metric_the_offline_answerer_is_exempt_from(service, tmp_path):
    ws = tmp_path / "ws"
    assert main(["run", "--dataset", "squad2", "--limit", "2", "--workspace", str(ws), *FAST,
                 "--system", f"zorb={service}/zorbland", "--strategies", "chunks", "--run-id", "Z"]) == 0
    con = _db(ws)
    rows = dict(con.execute("SELECT metric, any_value(status) FROM scores WHERE strategy='zorb' AND metric IN "
                            "('faithfulness','citation_validity','citation_support','statement_coverage') "
                            "GROUP BY 1").fetchall())
    validity = con.execute("SELECT avg(value) FROM scores WHERE strategy='zorb' AND metric='citation_validity'"
                           ).fetchone()[0]
    chunks = dict(con.execute("SELECT metric, any_value(status) FROM scores WHERE strategy='chunks' AND metric IN "
                              "('faithfulness','citation_validity') GROUP BY 1").fetchall())
    con.close()
    assert set(rows) == {"faithfulness", "citation_validity", "statement_coverage"}  # [9] cites no block: no pairs
    assert all(st == "ok" for st in rows.values())
    assert validity == 0.0  # "[9]" with 4 contexts cites a block that does not exist
    assert chunks == {"faithfulness": "not_applicable", "citation_validity": "not_applicable"}  # ours, exempt


def test_score_uses_the_questions_file_a_folder_remembers(tmp_path, capsys):
    folder = tmp_path / "docs"
    folder.mkdir()
    (folder / "a.md").write_text("# Zorbs\n\nThe zorb of Quux is green and weighs four grams.\n")
    gold = tmp_path / "gold.jsonl"
    gold.write_text(json.dumps({"id": "q1", "question": "What colour is the zorb of Quux?", "answers": ["green"],
                                "evidence": [{"doc": "a.md", "text": "The zorb of Quux is green"}]}) + "\n")
    ws = tmp_path / "ws"
    assert main(["ingest", str(folder), "--questions", str(gold), "--workspace", str(ws), "--embedder", "hash",
                 "--no-progress"]) == 0
    log = tmp_path / "log.jsonl"
    log.write_text(json.dumps({"question_id": "q1", "question": "What colour is the zorb of Quux?",
                               "answer": "green", "contexts": ["The zorb of Quux is green and weighs four grams."]})
                   + "\n")
    capsys.readouterr()
    assert main(["score", str(log), "--dataset", str(folder), "--workspace", str(ws), "--embedder", "hash",
                 "--no-progress", "--no-report"]) == 0
    out = capsys.readouterr()
    assert "1 matched the gold set, 0 did not" in out.out and "questions file remembered" in out.err


def test_the_same_records_from_a_renamed_log_are_the_same_point_for_the_gate(tmp_path, capsys):
    recs = [{"question": q, "answer": a, "contexts": [c]} for q, a, c in
            [("Who wrote it?", "Ann [1].", "Ann wrote it."), ("When?", "In 1990 [1].", "It was 1990.")]]
    a, b = tmp_path / "prod_monday.jsonl", tmp_path / "renamed.jsonl"
    for p in (a, b):
        p.write_text("".join(json.dumps(r) + "\n" for r in recs))
    ws = tmp_path / "ws"
    assert main(["score", str(a), "--workspace", str(ws), "--run-id", "A", "--no-report"]) == 0
    assert main(["score", str(b), "--workspace", str(ws), "--run-id", "B", "--no-report"]) == 0
    capsys.readouterr()
    assert main(["gate", "--baseline", "A", "--candidate", "B", "--workspace", str(ws),
                 "--metrics", "faithfulness", "--allow-missing-points"]) == 0
    out = capsys.readouterr().out
    assert "compared 1 of 1 candidate points" in out
    con = _db(ws)
    files = [json.loads(c)["logged"]["file"] for (c,) in con.execute("SELECT config FROM runs ORDER BY run_id").fetchall()]
    con.close()
    assert files[0].endswith("prod_monday.jsonl") and files[1].endswith("renamed.jsonl")  # kept in the run


def test_a_change_to_a_module_the_plugin_imports_refuses_the_resume(tmp_path, capsys):
    (tmp_path / "myhelpers.py").write_text("TOP = 2\n")
    plug = tmp_path / "plug_with_helper.py"
    plug.write_text('''
from dataclasses import dataclass
from rag.extend import BaseParams, Context, Strategy, chunk_raw, counters, pack_blocks, params_dict, register_strategy
import myhelpers


@register_strategy
class Helped(Strategy):
    name = "helped"
    Params = BaseParams

    def pack(self, r, pool, p):
        raw = [chunk_raw(r, int(i), s) for i, s in zip(pool.dense_idx[:myhelpers.TOP], pool.dense_scores)]
        return Context(self.name, params_dict(p), pack_blocks(raw, p, r.reader.config.chunking.encoding),
                       counters(len(raw)))
''')
    sys.path.insert(0, str(tmp_path))
    try:
        ws = tmp_path / "ws"
        assert main(["run", "--dataset", "xquad-en", "--limit", "3", "--workspace", str(ws), *FAST, "--plugins",
                     str(plug), "--strategies", "helped", "--run-id", "H"]) == 0
        with duckdb.connect(str(ws / "results.duckdb")) as con:
            con.execute("DELETE FROM scores WHERE run_id='H'")
            con.execute("DELETE FROM results WHERE run_id='H'")
        (tmp_path / "myhelpers.py").write_text("TOP = 5\n")  # the plugin file itself is unchanged
        capsys.readouterr()
        assert main(["run", "--resume", "H", "--workspace", str(ws), *FAST]) == 2
        err = capsys.readouterr().err
        assert "plugin(s) changed since the run recorded them" in err and "myhelpers.py" in err
    finally:
        sys.path.remove(str(tmp_path))
        sys.modules.pop("myhelpers", None)


def test_a_point_given_twice_is_one_point_said_once(tmp_path, capsys):
    ws = tmp_path / "ws"
    rc = main(["run", "--dataset", "xquad-en", "--limit", "5", "--workspace", str(ws), *FAST,
               "--strategies", "chunks", "--set", "chunks.top_k=4,4", "--run-id", "D"])
    err = capsys.readouterr().err
    assert rc == 0 and err.count("given more than once") == 1 and "chunks top_k=4" in err
    con = _db(ws)
    status, n = con.execute("SELECT status, (SELECT count(*) FROM results WHERE run_id='D') FROM runs").fetchone()
    con.close()
    assert status == "finished" and n == 5


def test_a_second_resumer_of_a_run_is_refused_before_any_call(tmp_path, capsys, llm_server):
    from openai_server import Handler

    from evals.store import run_writer

    ws = tmp_path / "ws"
    base = ["--workspace", str(ws), *FAST, "--llm-base-url", llm_server, "--llm-model", "local-extractive",
            "--concurrency", "1"]
    assert main(["run", "--dataset", "xquad-en", "--limit", "3", "--strategies", "chunks", "--run-id", "R",
                 *base]) == 0
    with duckdb.connect(str(ws / "results.duckdb")) as con:
        con.execute("DELETE FROM scores WHERE run_id='R'")
        con.execute("DELETE FROM results WHERE run_id='R'")
        con.execute("UPDATE runs SET status='running' WHERE run_id='R'")
    calls = Handler.calls
    held = threading.Event()
    release = threading.Event()

    def other_writer():  # another process resuming R, holding the run's writer lock
        with run_writer(ws / "results.duckdb", "R"):
            held.set()
            release.wait(30)

    t = threading.Thread(target=other_writer)
    t.start()
    try:
        assert held.wait(10)
        capsys.readouterr()
        assert main(["run", "--resume", "R", *base, "--no-cache"]) == 2
        err = capsys.readouterr().err
        assert "run R is being written by" in err and "one writer per run" in err
        assert Handler.calls == calls  # told before any call
        capsys.readouterr()
        assert main(["runs", "--workspace", str(ws)]) == 0
        assert "running" in capsys.readouterr().out  # a live writer: still running
    finally:
        release.set()
        t.join()
    capsys.readouterr()
    assert main(["runs", "--workspace", str(ws)]) == 0
    assert "interrupted" in capsys.readouterr().out  # nobody writes it now
    assert main(["show", "R", "--workspace", str(ws)]) == 0
    assert "ragwb run --resume R" in capsys.readouterr().out
    assert main(["run", "--resume", "R", *base]) == 0  # and it resumes


def test_export_and_report_write_under_their_own_workspace(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    for name in ("A", "B"):
        assert main(["run", "--dataset", "xquad-en", "--limit", "2", "--workspace", name, *FAST,
                     "--strategies", "chunks", "--run-id", "SAME"]) == 0
        assert main(["export", "SAME", "--workspace", name, "--format", "csv"]) == 0
        assert main(["report", "SAME", "--workspace", name]) == 0
    assert not (tmp_path / "results").exists()
    for name in ("A", "B"):
        assert list((tmp_path / name / "export").glob("*SAME*"))
        assert list((tmp_path / name / "reports").glob("report-SAME*.html"))


def test_deeply_nested_code_falls_back_to_line_windows(tmp_path):
    from rag.ingest.folders import load_folder

    folder = tmp_path / "code"
    folder.mkdir()
    depth = 20_000
    (folder / "Deep.java").write_text("class A {\n" * depth + "}\n" * depth)
    (folder / "deep.rb").write_text("module M\n" * depth + "end\n" * depth)
    (folder / "deep.py").write_text("x = (\n" + "f(\n" * depth + ")\n" * depth + ")\n")
    (folder / "ok.py").write_text("def ok():\n    return 1\n")
    ds = load_folder(folder)
    assert sorted(d.doc_id for d in ds.documents) == ["Deep.java", "deep.py", "deep.rb", "ok.py"]
    warn = {s.path.split("/")[-1]: s.reason for s in ds.skipped}
    assert all("line windows" in warn[n] for n in ("Deep.java", "deep.rb", "deep.py"))


def test_a_file_name_that_is_not_utf8_is_skipped_and_named(tmp_path, capsys):
    folder = tmp_path / "docs"
    folder.mkdir()
    (folder / "good.md").write_text("# Good\n\nThe zorb is green.\n")
    bad = os.fsencode(str(folder)) + b"/bad\xff\xfe.md"
    with open(bad, "wb") as fh:
        fh.write(b"# Bad\n\nHidden.\n")
    ws = tmp_path / "ws"
    gold = tmp_path / "gold.jsonl"
    gold.write_text(json.dumps({"id": "q", "question": "What colour is the zorb?", "answers": ["green"]}) + "\n")
    assert main(["ingest", str(folder), "--questions", str(gold), "--workspace", str(ws), "--embedder", "hash",
                 "--no-progress"]) == 0
    cap = capsys.readouterr()
    err = cap.out + cap.err
    assert "bad\\xff\\xfe.md" in err and "not valid UTF-8" in err
    assert main(["run", "--dataset", str(folder), "--workspace", str(ws), *FAST, "--strategies", "chunks"]) == 0


LIAR = '''
from rag.extend import BaseParams, Block, Context, Strategy, register_strategy


@register_strategy
class Liar(Strategy):
    name = "liar"
    Params = BaseParams

    def pack(self, r, pool, p):
        text = "word " * 200_000
        return Context(self.name, {}, [Block(1, text, "chunks", (), (), (), (), 5, 1.0)])
'''


def test_a_plugin_block_is_counted_here_and_held_to_the_budget(tmp_path):
    plug = tmp_path / "liar.py"
    plug.write_text(LIAR)
    ws = tmp_path / "ws"
    assert main(["run", "--dataset", "xquad-en", "--limit", "1", "--workspace", str(ws), *FAST, "--plugins",
                 str(plug), "--strategies", "liar", "--set", "liar.max_context_tokens=0,100"]) == 0
    con = _db(ws)
    rows = con.execute("SELECT params, context_tokens, blocks, counters FROM results").fetchall()
    con.close()
    by_budget = {json.loads(p)["max_context_tokens"]: (t, json.loads(b), json.loads(c)) for p, t, b, c in rows}
    whole, held = by_budget[0], by_budget[100]
    assert whole[0] >= 200_000 and whole[2]["claimed_tokens"] == 5  # what is sent, not what was claimed
    assert held[0] <= 100 and len(held[1]) <= 1 and held[2]["held_to_budget"]["tokens_before"] >= 200_000


BAD_PLUGIN = '''
import sys
import time
from rag.extend import BaseParams, Context, Strategy, register_strategy


@register_strategy
class Bad(Strategy):
    name = "bad"
    Params = BaseParams

    def pack(self, r, pool, p):
        q = pool.question
        if "Normans" in q:
            return {}
        if "Normandy" in q:
            return None
        if "France" in q:
            return Context(self.name, {}, ["not a block"])
        if "Rollo" in q:
            sys.exit(3)
        while True:  # the rest never return
            pass
'''


def test_a_plugin_that_loops_exits_or_returns_junk_costs_its_items_only(tmp_path):
    plug = tmp_path / "bad.py"
    plug.write_text(BAD_PLUGIN)
    ws = tmp_path / "ws"
    t0 = time.perf_counter()
    assert main(["run", "--dataset", "squad2", "--limit", "6", "--workspace", str(ws), *FAST, "--plugins",
                 str(plug), "--strategies", "bad,chunks", "--plugin-timeout", "0.5", "--max-failure-rate", "1",
                 "--run-id", "BAD"]) in (0, 6)
    assert time.perf_counter() - t0 < 60
    con = _db(ws)
    errors = [e for (e,) in con.execute("SELECT answer_error FROM results WHERE strategy='bad'").fetchall()]
    status, chunks = con.execute("SELECT status, (SELECT count(*) FROM results WHERE strategy='chunks') FROM runs"
                                 ).fetchone()
    con.close()
    assert status == "finished" and chunks == 6 and len(errors) == 6
    text = " | ".join(errors)
    assert "returned dict, not a Context" in text or "returned NoneType, not a Context" in text
    assert "took longer than its time limit of 0.5 s" in text
    assert all(e.startswith("strategy bad ") for e in errors)


def test_a_question_without_reference_answers_gets_no_answer_scores(tmp_path):
    folder = tmp_path / "docs"
    folder.mkdir()
    (folder / "a.md").write_text("# A\n\nThe zorb is green.\n")
    gold = tmp_path / "gold.jsonl"
    gold.write_text(json.dumps({"id": "q1", "question": "What colour is the zorb?", "answers": [],
                                "answerable": True}) + "\n"
                    + json.dumps({"id": "q2", "question": "What is green?", "answers": ["the zorb"]}) + "\n")
    ws = tmp_path / "ws"
    assert main(["run", "--dataset", str(folder), "--questions", str(gold), "--workspace", str(ws), *FAST,
                 "--strategies", "chunks"]) == 0
    con = _db(ws)
    rows = {(q, m): (v, s) for q, m, v, s in con.execute(
        "SELECT question_id, metric, value, status FROM scores WHERE metric IN ('em','f1')").fetchall()}
    con.close()
    assert rows[("q1", "f1")] == (None, "not_applicable") and rows[("q1", "em")][1] == "not_applicable"
    assert rows[("q2", "f1")][1] == "ok"


def test_a_service_usage_out_of_range_keeps_the_answer_and_counts_here(service, tmp_path):
    ws = tmp_path / "ws"
    assert main(["run", "--dataset", "squad2", "--limit", "2", "--workspace", str(ws), *FAST,
                 "--system", f"u={service}/badusage", "--strategies", "none"]) == 0
    con = _db(ws)
    rows = con.execute("SELECT answer_status, answer, usage_source, prompt_tokens, answer_error FROM results"
                       ).fetchall()
    con.close()
    for st, ans, src, pt, err in rows:
        assert st == "ok" and ans and src == "tokenizer" and 0 < pt < 100_000 and "tokens counted here" in err


# --------------------------------------------------------------------------- secrets and code execution

def test_a_router_without_a_valid_signature_is_never_unpickled(tmp_path, capsys):
    import hashlib
    import pickle

    from rag.strategies.routing import load_router

    marker = tmp_path / "pwned"

    class Evil:
        def __reduce__(self):
            return (os.system, (f"touch {marker}",))

    blob = pickle.dumps(Evil())
    pkl = tmp_path / "router-x.pkl"
    pkl.write_bytes(blob)
    with pytest.raises(ValueError, match="signature file router-x.json is missing"):
        load_router(pkl)
    # a sidecar with the right sha256 is not a signature: anyone can compute a hash
    pkl.with_suffix(".json").write_text(json.dumps({"sha256": hashlib.sha256(blob).hexdigest()}))
    with pytest.raises(ValueError, match="signature does not match"):
        load_router(pkl)
    pkl.with_suffix(".json").write_text("{not json")
    with pytest.raises(ValueError, match="not a readable signature file"):
        load_router(pkl)
    assert not marker.exists()
    ws = tmp_path / "ws"
    assert main(["run", "--dataset", "xquad-en", "--limit", "1", "--workspace", str(ws), *FAST,
                 "--strategies", "routed", "--set", f"routed.model={pkl}"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "never unpickled" in err and not marker.exists()


def test_a_password_in_a_url_echoed_back_in_any_encoding_is_stored_and_printed_nowhere(service, tmp_path, capsys,
                                                                                        monkeypatch):
    monkeypatch.setenv("HDR_KEY", "env-header-Secr3t")
    mp = tmp_path / "map.toml"
    mp.write_text('[request]\nheaders = {"X-Literal" = "literal-Secr3t-value", "X-Env" = "env:HDR_KEY"}\n')
    user_url = service.replace("http://", "http://alice:pa55-W0rd%2Fx@") + "/echo?api_key=Q%2BSEC/RET%3D9"
    ws = tmp_path / "ws"
    assert main(["run", "--dataset", "squad2", "--limit", "2", "--workspace", str(ws), "--embedder", "hash",
                 "--no-progress", "--system", f"e={user_url}", "--system-map", f"e={mp}", "--strategies", "none",
                 "--run-id", "SEC"]) == 0
    printed = capsys.readouterr()
    assert main(["show", "SEC", "--workspace", str(ws)]) == 0
    printed_show = capsys.readouterr().out
    stored = _all_text(ws)
    con = _db(ws)
    answers = [a for (a,) in con.execute("SELECT answer FROM results").fetchall()]
    con.close()
    assert answers and all("headers" in a for a in answers)  # the echo was stored, scrubbed
    basic = base64.b64encode(b"alice:pa55-W0rd/x").decode()
    for secret in ("pa55-W0rd", "pa55-W0rd%2Fx", basic, "Q%2BSEC/RET%3D9", "Q+SEC/RET=9", "literal-Secr3t-value",
                   "env-header-Secr3t"):
        for where in (stored, printed.out, printed.err, printed_show):
            assert secret not in where, secret


def test_a_query_key_is_sent_as_a_query_and_scrubbed_from_an_llm_echo(llm_server, tmp_path, capsys, monkeypatch):
    from openai_server import Handler

    monkeypatch.setenv("MY_KEY", "sk-live-Abcdefghijklmnop1234")
    url = llm_server + "?api_key=Q%2BSEC/RET%3D9"
    ws = tmp_path / "ws"
    # the echoing model also judges (by default) and gives no verdict: the run says so and exits 7 (issue 71); its
    # lines, stored and printed, hold no secret either
    assert main(["run", "--dataset", "xquad-en", "--limit", "1", "--workspace", str(ws), *FAST, "--strategies",
                 "chunks", "--llm-base-url", url, "--llm-model", "fault-echo-200", "--llm-key-env", "MY_KEY"]) == 7
    out = capsys.readouterr()
    stored = _all_text(ws)
    sent = Handler.requests[-1]
    assert "api_key=Q%2BSEC" in sent[0] and sent[0].split("?")[0].endswith("/chat/completions")
    assert sent[1] == "Bearer sk-live-Abcdefghijklmnop1234"  # sent as it is
    for secret in ("Q%2BSEC/RET%3D9", "Q+SEC/RET=9", "sk-live-Abcdefghijklmnop1234"):
        assert secret not in stored and secret not in out.out + out.err
    # the embeddings client sends its query as a query too (it used to glue it into the path: a 404)
    from rag.index.embedders import EmbedderConfig, get_embedder

    emb = get_embedder(EmbedderConfig("openai", url, "hash-model", "MY_KEY"))
    assert emb.embed_passages(["one", "two"]).shape[0] == 2
    assert Handler.requests[-1][0].split("?")[0].endswith("/embeddings") and "api_key=" in Handler.requests[-1][0]


# --------------------------------------------------------------------------- hangs and size

def test_a_slow_body_meets_one_deadline_for_the_whole_response(service, llm_server, tmp_path):
    import rag_service
    from openai_server import Handler

    rag_service.Service.trickle = Handler.trickle = 0.2  # ~100 bytes: 20 s if read to the end
    ws = tmp_path / "ws"
    t0 = time.perf_counter()
    assert main(["run", "--dataset", "squad2", "--limit", "1", "--workspace", str(ws), *FAST,
                 "--system", f"t={service}/trickle", "--strategies", "none", "--timeout", "1", "--retries", "0",
                 "--max-failure-rate", "1"]) == 6
    assert time.perf_counter() - t0 < 8
    t0 = time.perf_counter()
    assert main(["run", "--dataset", "xquad-en", "--limit", "1", "--workspace", str(ws), *FAST, "--strategies",
                 "chunks", "--llm-base-url", llm_server, "--llm-model", "fault-trickle", "--timeout", "1",
                 "--retries", "0", "--max-failure-rate", "1"]) == 6
    assert time.perf_counter() - t0 < 8
    con = _db(ws)
    st = {s for (s,) in con.execute("SELECT answer_status FROM results").fetchall()}
    con.close()
    assert st == {"timeout"}


def test_a_response_over_the_cap_fails_its_item_and_is_stored_nowhere(service, llm_server, tmp_path):
    ws = tmp_path / "ws"
    assert main(["run", "--dataset", "squad2", "--limit", "1", "--workspace", str(ws), *FAST,
                 "--system", f"h={service}/huge", "--strategies", "none", "--max-response-mb", "2",
                 "--max-failure-rate", "1"]) == 6
    assert main(["run", "--dataset", "xquad-en", "--limit", "1", "--workspace", str(ws), *FAST, "--strategies",
                 "chunks", "--llm-base-url", llm_server, "--llm-model", "fault-huge", "--max-response-mb", "2",
                 "--max-failure-rate", "1"]) == 6
    con = _db(ws)
    errs = con.execute("SELECT answer_status, answer_error FROM results").fetchall()
    con.close()
    assert all(st == "error" and "larger than the 2 MB cap" in e for st, e in errs)
    stored = _all_text(ws)
    assert "x" * 100_000 not in stored and "y" * 100_000 not in stored  # neither stored nor cached
    os.environ.pop("RAGWB_MAX_RESPONSE_MB", None)


# --------------------------------------------------------------------------- one line, never a traceback

def test_hostile_inputs_are_one_line_each(service, tmp_path, capsys):
    ws = tmp_path / "ws"

    def one_line(argv, needle, rc=2):
        capsys.readouterr()
        got = main(argv)
        err = capsys.readouterr().err
        assert got == rc and needle in err and "Traceback" not in err, (argv, err)
        return err

    deep = "[" * 100_000 + "]" * 100_000
    (tmp_path / "deep.jsonl").write_text(json.dumps({"question": "q", "answer": "a"})[:-1] + ', "contexts": '
                                         + deep + "}\n")
    one_line(["score", str(tmp_path / "deep.jsonl"), "--workspace", str(ws), "--no-report"], "nested deeper")
    (tmp_path / "claims.jsonl").write_text('{"statement": "s", "passages": ' + deep + "}\n")
    capsys.readouterr()
    rc = main(["score-claims", str(tmp_path / "claims.jsonl"), "--no-e5"])
    err = capsys.readouterr().err
    assert rc in (0, 2) and "Traceback" not in err and ("nested" in err or "line 1" in err)
    big = "w" * 300_000
    (tmp_path / "big.csv").write_text("question,answer,contexts\nWho?,Ann,\"['" + big + "', 'two']\"\n")
    assert main(["score", str(tmp_path / "big.csv"), "--workspace", str(ws), "--no-report", "--run-id",
                 "CSV"]) == 0
    con = _db(ws)
    ctx = con.execute("SELECT blocks FROM results WHERE run_id='CSV'").fetchone()[0]
    con.close()
    assert len(json.loads(ctx)) == 2 and len(json.loads(ctx)[0]["text"]) == 300_000  # a Python-style list, read
    mp = tmp_path / "m.toml"
    mp.write_text("[request]\nquestion = 5\n")
    one_line(["run", "--dataset", "squad2", "--system", f"s={service}/v1", "--system-map", f"s={mp}",
              "--workspace", str(ws), *FAST], "must be a dotted field path")
    mp.write_text('[request]\nquestion = ""\n')
    one_line(["run", "--dataset", "squad2", "--system", f"s={service}/v1", "--system-map", f"s={mp}",
              "--workspace", str(ws), *FAST], "names no field")
    sq = tmp_path / "bad-squad.json"
    sq.write_text(json.dumps({"data": [{"title": 5, "paragraphs": [{"context": "x", "qas": []}]},
                                       {"title": "Fine", "paragraphs": [{"context": "The zorb is green.", "qas": [
                                           {"id": 7, "question": "What?", "answers": []},
                                           {"id": "ok", "question": "What is green?",
                                            "answers": [{"text": "zorb", "answer_start": "x"}]}]}]}]}))
    from rag.ingest.corpora import load_squad

    ds = load_squad(sq)
    reasons = " | ".join(s.reason for s in ds.skipped)
    assert "article 0: skipped" in reasons and "question 0: skipped" in reasons and "question 1: skipped" in reasons
    cache = ws / "cache"
    cache.mkdir(parents=True, exist_ok=True)
    (cache / "llm.sqlite").write_bytes(b"garbage, not a database" * 100)
    err = one_line(["run", "--dataset", "squad2", "--limit", "1", "--workspace", str(ws), *FAST, "--system",
                    f"s={service}/v1", "--strategies", "none"], "moved aside", rc=0)
    assert "llm.sqlite" in err and list(cache.glob("llm.sqlite.damaged-*"))
    db = tmp_path / "trunc.duckdb"
    db.write_bytes((ws / "results.duckdb").read_bytes()[:5000])
    one_line(["show", "latest", "--db", str(db)], "not a readable results database")
    one_line(["run", "--dataset", "squad2", "--system", f"r={service}/redirect", "--strategies", "none",
              "--limit", "1", "--workspace", str(ws), *FAST, "--max-failure-rate", "1"], "", rc=6)
    con = _db(ws)
    err = con.execute("SELECT answer_error FROM results WHERE strategy='r'").fetchone()[0]
    con.close()
    assert "redirected to" in err and "/v1" in err
    one_line(["run", "--dataset", "squad2", "--system", f"d={service}/deep", "--strategies", "none",
              "--limit", "1", "--workspace", str(ws), *FAST, "--max-failure-rate", "1"], "", rc=6)


def test_a_damaged_lance_data_file_is_rebuilt_like_a_missing_one(tmp_path, capsys):
    ws = tmp_path / "ws"
    assert main(["ingest", "xquad-en", "--workspace", str(ws), "--embedder", "hash", "--no-progress"]) == 0
    data = sorted((ws / "lancedb").glob("*__chunks.lance/data/*.lance"))
    assert data
    data[0].write_bytes(data[0].read_bytes()[:100])  # truncated
    capsys.readouterr()
    assert main(["run", "--dataset", "xquad-en", "--limit", "2", "--workspace", str(ws), *FAST,
                 "--strategies", "chunks"]) == 0
    assert "damaged" in capsys.readouterr().err


# --------------------------------------------------------------------------- knobs refused, messages

@pytest.mark.parametrize("argv,needle", [
    (["--temperature", "nan"], "must be a number in 0..2"),
    (["--temperature", "1e400"], "must be a number in 0..2"),
    (["--temperature", "-1"], "must be a number in 0..2"),
    (["--max-failure-rate", "2"], "must be a share in 0..1"),
    (["--llm-model", "m"], "--llm-model needs --llm-base-url"),
    (["--judge-model", "m"], "--judge-model needs --judge-base-url"),
    (["--embed-model", "x"], "--embed-model is for --embedder openai or st"),
    (["--dataset", ""], "--dataset '' names no dataset"),
    (["--run-id", "latest"], "'latest' is reserved"),
])
def test_a_knob_that_would_be_ignored_is_refused(argv, needle, tmp_path, capsys):
    base = ["run", "--workspace", str(tmp_path / "ws"), "--no-progress", "--no-report"]
    if "--embed-model" not in argv:
        base += ["--embedder", "hash"]
    if "--dataset" not in argv:
        base += ["--dataset", "xquad-en", "--limit", "1"]
    with pytest.raises(SystemExit) if argv[0] in ("--temperature", "--max-failure-rate", "--run-id") \
            else _nothing():
        rc = main(base + argv)
        assert rc == 2
    err = capsys.readouterr().err
    assert needle in err
    assert not (tmp_path / "ws" / "results.duckdb").exists()


class _nothing:
    def __enter__(self):
        return self

    def __exit__(self, *a):
        return False


def test_more_refusals_logs_plugins_and_the_gate(tmp_path, capsys):
    ws = tmp_path / "ws"
    for lat in ("NaN", "-5"):
        p = tmp_path / f"lat{lat}.jsonl"
        p.write_text(json.dumps({"question": "q", "answer": "a", "contexts": [], "latency_ms": float(lat)}) + "\n")
        capsys.readouterr()
        assert main(["score", str(p), "--workspace", str(ws), "--no-report"]) == 2
        assert "latency_ms' must be a finite number >= 0" in capsys.readouterr().err
    empty = tmp_path / "empty_plugin.py"
    empty.write_text("from rag.extend import Strategy\n\nclass Forgot(Strategy):\n    name = 'forgot'\n")
    assert main(["run", "--dataset", "xquad-en", "--workspace", str(ws), *FAST, "--plugins", str(empty)]) == 2
    assert "registers no strategy" in capsys.readouterr().err
    assert main(["run", "--dataset", "xquad-en", "--limit", "2", "--workspace", str(ws), *FAST,
                 "--strategies", "chunks", "--run-id", "G1"]) == 0
    assert main(["run", "--dataset", "xquad-en", "--limit", "2", "--workspace", str(ws), *FAST,
                 "--strategies", "chunks", "--run-id", "G2"]) == 0
    capsys.readouterr()
    assert main(["gate", "--baseline", "G1", "--candidate", "G2", "--workspace", str(ws),
                 "--metrics", "no_such_metric"]) == 2
    err = capsys.readouterr().err
    assert "unknown metric(s) no_such_metric" in err and "f1" in err
    assert main(["show", "G", "--workspace", str(ws)]) == 2
    assert "ambiguous" in capsys.readouterr().err
    assert main(["show", "G", "--workspace", str(ws)]) == 2
    assert "G1" in capsys.readouterr().err


def test_show_prompt_renders_each_points_prompt_and_stores_no_run(tmp_path, capsys):
    prompt = tmp_path / "p.toml"
    prompt.write_text('user = "Use these:\\n{context}\\n\\nQ: {question}"\nfallback = "No idea."\n')
    ws = tmp_path / "ws"
    assert main(["run", "--dataset", "xquad-en", "--workspace", str(ws), *FAST, "--prompt", str(prompt),
                 "--strategies", "chunks,full_documents", "--set", "chunks.top_k=2,4", "--show-prompt"]) == 0
    out = capsys.readouterr().out
    assert out.count("=== chunks") == 2 and out.count("=== full_documents") == 1
    assert "Use these:" in out and "prompt tokens" in out and "p.toml" in out
    assert not (ws / "results.duckdb").exists() or not duckdb.connect(str(ws / "results.duckdb")).execute(
        "SELECT count(*) FROM runs").fetchone()[0]


def test_unknown_ids_in_a_log_are_warned_and_unmatched_counts_show(tmp_path, capsys):
    from rag.ingest.corpora import load_bundled

    real = load_bundled("squad2").questions[0].text
    recs = [{"question_id": "Normans", "question": real, "answer": "France",
             "contexts": [{"text": "Normandy, a region in France.", "doc_id": "no-such-doc"}]},
            {"question": "A question the set does not have?", "answer": "x", "contexts": ["x"]}]
    log = tmp_path / "log.jsonl"
    log.write_text("".join(json.dumps(r) + "\n" for r in recs))
    ws = tmp_path / "ws"
    assert main(["score", str(log), "--dataset", "squad2", "--workspace", str(ws), "--embedder", "hash",
                 "--no-progress", "--no-report", "--run-id", "U"]) == 0
    err = capsys.readouterr().err
    assert "question_id that squad2 does not have" in err and "'Normans'" in err and "ids look like" in err
    assert "context doc_id/page_id the corpus does not have" in err
    assert main(["show", "U", "--workspace", str(ws)]) == 0
    assert "1 of 2 logged records matched no gold question" in capsys.readouterr().out


def test_an_embedding_sent_as_a_string_is_named_not_base64_decoded(llm_server):
    from rag.index.embedders import EmbedderConfig, get_embedder
    from rag.errors import EndpointError

    emb = get_embedder(EmbedderConfig("openai", llm_server, "fault-string"))
    with pytest.raises(EndpointError, match="returned embeddings as str, not lists of numbers"):
        emb.embed_passages(["one"])


def test_score_batches_e5_without_changing_a_score_and_samples_or_skips_the_costly_scorer(tmp_path, capsys):
    from evals.bench.logged import logged_rows
    from evals.score.metrics import ScoringInput, score_faithfulness
    from evals.score.support import _e5_cache, _memo
    from rag.models import Question
    from rag.strategies import Block

    recs = logged_rows(12, distinct_contexts=4)
    log = tmp_path / "log.jsonl"
    log.write_text("".join(json.dumps(r) + "\n" for r in recs))
    ws = tmp_path / "ws"
    _e5_cache.clear()
    _memo.clear()
    assert main(["score", str(log), "--workspace", str(ws), "--no-report", "--run-id", "ALL"]) == 0
    # one row at a time, nothing cached: the batched path must give the same numbers, bit for bit
    _e5_cache.clear()
    _memo.clear()
    one_by_one = {}
    for r in recs:
        inp = ScoringInput(Question(r["question_id"], r["question"], [], True),
                           [Block(1, r["contexts"][0], "logged", (), (), (), (), 0, 0.0)], r["answer"])
        one_by_one[r["question_id"]] = score_faithfulness(inp)["faithfulness"].value
    assert main(["score", str(log), "--workspace", str(ws), "--no-report", "--run-id", "S", "--sample", "5"]) == 0
    assert main(["score", str(log), "--workspace", str(ws), "--no-report", "--run-id", "M", "--metrics",
                 "answer,citation_validity"]) == 0
    capsys.readouterr()
    assert main(["score", str(log), "--workspace", str(ws), "--no-report", "--metrics", "f2"]) == 2
    assert "unknown metric(s) f2" in capsys.readouterr().err
    con = _db(ws)
    batched = dict(con.execute("SELECT question_id, value FROM scores WHERE run_id='ALL' AND metric='faithfulness'"
                               ).fetchall())
    sampled = con.execute("SELECT status, count(*), any_value(detail) FROM scores WHERE run_id='S' AND "
                          "metric='faithfulness' GROUP BY 1 ORDER BY 1").fetchall()
    metrics_m = {m for (m,) in con.execute("SELECT DISTINCT metric FROM scores WHERE run_id='M'").fetchall()}
    con.close()
    assert batched == one_by_one
    assert [(s, n) for s, n, _ in sampled] == [("not_applicable", 7), ("ok", 5)]
    assert "seeded sample of 5 of 12" in sampled[0][2]
    assert "faithfulness" not in metrics_m and {"f1", "citation_validity", "prompt_tokens"} <= metrics_m


def test_resuming_a_run_whose_plugin_file_moved_is_one_line(tmp_path, capsys):
    plug = tmp_path / "moving_plugin.py"
    plug.write_text(LIAR.replace('"liar"', '"mover"').replace("200_000", "20"))
    ws = tmp_path / "ws"
    assert main(["run", "--dataset", "xquad-en", "--limit", "2", "--workspace", str(ws), *FAST, "--plugins",
                 str(plug), "--strategies", "mover", "--run-id", "MV"]) == 0
    with duckdb.connect(str(ws / "results.duckdb")) as con:
        con.execute("DELETE FROM scores WHERE run_id='MV'")
        con.execute("DELETE FROM results WHERE run_id='MV'")
    plug.rename(tmp_path / "elsewhere.py")
    capsys.readouterr()
    assert main(["run", "--resume", "MV", "--workspace", str(ws), *FAST]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "are gone" in err and "moving_plugin.py" in err


def test_a_judge_without_the_ragas_extra_and_a_deep_gold_file_are_one_line(tmp_path, capsys, monkeypatch):
    folder = tmp_path / "docs"
    folder.mkdir()
    (folder / "a.md").write_text("# A\n\nThe zorb is green.\n")
    gold = tmp_path / "gold.jsonl"
    gold.write_text("[" * 100_000 + "]" * 100_000 + "\n"
                    + json.dumps({"id": "q", "question": "What is green?", "answers": ["the zorb"]}) + "\n")
    ws = tmp_path / "ws"
    assert main(["run", "--dataset", str(folder), "--questions", str(gold), "--workspace", str(ws), *FAST,
                 "--strategies", "chunks"]) == 0
    cap = capsys.readouterr()
    assert "nested deeper" in cap.out + cap.err and "Traceback" not in cap.err  # the line skipped, named
    monkeypatch.setitem(sys.modules, "ragas", None)  # the extra not installed: its import fails
    assert main(["run", "--dataset", "xquad-en", "--limit", "1", "--workspace", str(ws), *FAST,
                 "--judge-base-url", "http://127.0.0.1:9/v1", "--judge-model", "m", "--judges", "ragas_faithfulness"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "pip install -e '.[ragas]'" in err


def test_ctrl_c_during_a_run_keeps_what_was_committed_and_says_how_to_resume(tmp_path, capsys):
    """A real Ctrl-C (SIGINT to the run's process group, as a terminal sends it) while a slow plugin works: the run
    stops, keeps what it committed and says how to resume (a plugin's own KeyboardInterrupt is only its item's
    error: tests/test_fifth_sweep.py)."""
    import signal
    import subprocess
    import time

    from plugin_files import chunks_plugin

    plug = chunks_plugin(tmp_path / "ctrl_c.py", "CtrlC", "ctrl_c", imports="import time", first="""
        time.sleep(0.5)  # a slow shape: the run is still going when Ctrl-C comes
    """)
    ws = tmp_path / "ws"
    child = subprocess.Popen([sys.executable, "-c", "import sys; from evals.cli import main; sys.exit(main(sys.argv[1:]))",
                              "run", "--dataset", "xquad-en", "--limit", "40", "--workspace", str(ws), *FAST,
                              "--plugins", str(plug), "--strategies", "ctrl_c", "--run-id", "CC"],
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)
    deadline = time.monotonic() + 120
    db = ws / "results.duckdb"
    while time.monotonic() < deadline and child.poll() is None:  # a condition: the run has started its items
        if db.exists() and ws.joinpath("cache").exists():
            try:
                con = duckdb.connect(str(db), read_only=True)
                n = con.execute("SELECT count(*) FROM runs WHERE run_id = 'CC'").fetchone()[0]
                con.close()
            except duckdb.Error:
                n = 0
            if n:
                time.sleep(1.0)
                break
        time.sleep(0.05)
    assert child.poll() is None, child.communicate()
    os.killpg(child.pid, signal.SIGINT)  # the whole group, as a terminal's Ctrl-C (the plugin worker included)
    out, err = child.communicate(timeout=120)
    assert child.returncode == 130 and "Resume with: ragwb run --resume CC" in err and "Traceback" not in err
    capsys.readouterr()
    assert main(["runs", "--workspace", str(ws)]) == 0
    assert "interrupted" in capsys.readouterr().out
