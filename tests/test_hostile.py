"""The third hostile sweep (issue 24): data that must never be lost, rewritten or leaked, and bad input
that must be one clear line. Real LanceDB and DuckDB files, a real OpenAI-compatible HTTP server on
127.0.0.1 (tests/openai_server.py), real processes where a kill -9 or a lock is involved."""
import base64
import json
import os
import random
import shutil
import sqlite3
import subprocess
import sys
from pathlib import Path

import duckdb
import numpy as np
import pytest

from evals.cli import main
from rag.index.workspace import Workspace
from openai_server import Handler, start

REPO = Path(__file__).resolve().parents[1]
FAST = ["--embedder", "hash", "--no-progress"]


@pytest.fixture(scope="module")
def server():
    srv, url = start()
    yield url
    srv.shutdown()


def _folder(root: Path, tag: str, n: int = 3) -> tuple[Path, Path]:
    """A folder of n Markdown files and a JSONL gold set whose answers name ``tag``."""
    root.mkdir(parents=True)
    lines = []
    for i in range(n):
        (root / f"f{i}.md").write_text(f"# File {i}\n\nThe {tag} depot {i} stores {i + 7} crates of apples.\n")
        lines.append(json.dumps({"id": f"q{i}", "question": f"How many crates does depot {i} store?",
                                 "answers": [f"{i + 7} crates {tag}"], "evidence": [{"doc": f"f{i}.md"}]}))
    q = root.parent / f"{root.parent.name}-q.jsonl"
    q.write_text("\n".join(lines) + "\n")
    return root, q


def _con(ws: Path):
    return duckdb.connect(str(ws / "results.duckdb"), read_only=True)


def _run(ws, *args):
    return main(["run", *args, *FAST, "--no-report", "--workspace", str(ws)])


# ------------------------------------------------------------------ data loss, rewrites, leaks

def test_two_folders_with_one_name_never_share_a_dataset_and_a_run_keeps_its_gold(tmp_path, capsys):
    ws = tmp_path / "ws"
    d1, q1 = _folder(tmp_path / "x1" / "docs", "north")
    d2, q2 = _folder(tmp_path / "x2" / "docs", "south")
    assert _run(ws, "--dataset", str(d1), "--questions", str(q1), "--strategies", "chunks", "--run-id", "X1") == 0
    capsys.readouterr()
    assert main(["ingest", str(d2), "--questions", str(q2), *FAST, "--workspace", str(ws)]) == 0
    out = capsys.readouterr().out
    assert "removed 0" in out and "replaced 0" in out  # x2 is a new dataset, not a new version of x1
    names = json.loads((ws / "dataset_names.json").read_text())
    assert names[str(d1.resolve())] == "docs" and names[str(d2.resolve())].startswith("docs-")
    w = Workspace(ws)
    assert {i["dataset"] for i in w.indexes()} == {"docs", names[str(d2.resolve())]}
    # a later version of x1's own gold set never rewrites the gold stored with run X1
    q1.write_text(q1.read_text().replace("north", "CHANGED"))
    assert _run(ws, "--dataset", str(d1), "--questions", str(q1), "--strategies", "chunks", "--run-id", "X2") == 0
    con = _con(ws)
    gold = dict(con.execute("SELECT run_id, string_agg(answers, '|' ORDER BY question_id) FROM run_gold "
                            "GROUP BY 1").fetchall())
    con.close()
    assert "north" in gold["X1"] and "CHANGED" not in gold["X1"] and "CHANGED" in gold["X2"]
    assert main(["show", "X1", "--by", "answerable", "--workspace", str(ws)]) == 0


def test_duplicate_conversation_and_turn_ids_are_named_with_file_and_line(tmp_path):
    from rag.ingest.conversations import load_conversations_jsonl
    from rag.ingest.folders import load_folder

    docs, _ = _folder(tmp_path / "c" / "docs", "east")
    conv = tmp_path / "conv.jsonl"
    turn = lambda n, q, **kw: {"turn": n, "question": q, "answer": "7 crates", "passages": ["f0.md#p0"], **kw}  # noqa: E731
    conv.write_text("\n".join(json.dumps(x) for x in [
        {"conversation_id": "c1", "turns": [turn(1, "How many crates?")]},
        {"conversation_id": "c1", "turns": [turn(1, "And the apples?")]},          # same conversation id
        {"conversation_id": "c2", "turns": [turn(1, "Hi", task_id="t1"), turn(2, "Yo", task_id="t1")]},
        {"conversation_id": "c3", "turns": [turn(1, "Crates?", answer=42)]},         # answer must be a string
        {"conversation_id": "c4", "turns": [turn(True, "Crates?")]},                 # turn must be a number
        {"conversation_id": "c5", "turns": [turn(1, "Crates?", rewrite=5)]},
    ]) + "\n")
    ds = load_folder(docs)
    qs, skipped = load_conversations_jsonl(conv, ds.documents)
    assert [q.conversation_id for q in qs] == ["c1"]
    why = {s.line: s.reason for s in skipped}
    assert "duplicate conversation_id 'c1' (first on line 1)" in why[2]
    assert "duplicate turn id 't1'" in why[3]
    assert "'answer' must be a string" in why[4] and "out-of-order" in why[5] and "'rewrite' must be a string" in why[6]
    assert all(s.path == str(conv) for s in skipped)


def test_a_run_that_stores_fewer_items_than_planned_is_never_finished(tmp_path, capsys):
    ws = tmp_path / "ws"
    d, q = _folder(tmp_path / "a" / "docs", "west", n=4)
    assert _run(ws, "--dataset", str(d), "--questions", str(q), "--strategies", "chunks", "--run-id", "R") == 0
    with duckdb.connect(str(ws / "results.duckdb")) as con:  # what a kill -9 after two commits leaves
        con.execute("DELETE FROM scores WHERE run_id='R' AND question_id IN ('q2', 'q3')")
        con.execute("DELETE FROM results WHERE run_id='R' AND question_id IN ('q2', 'q3')")
        con.execute("UPDATE runs SET status='running' WHERE run_id='R'")
    (d / "f3.md").unlink()  # q3's only evidence is gone: the resumed run cannot score it
    capsys.readouterr()
    rc = main(["run", "--resume", "R", "--allow-changed-corpus", *FAST, "--no-report", "--workspace", str(ws)])
    err = capsys.readouterr().err
    assert rc == 5 and "3 of 4 planned items stored" in err and "q3" in err and "incomplete" in err
    con = _con(ws)
    assert con.execute("SELECT status FROM runs WHERE run_id='R'").fetchone()[0] == "incomplete"
    con.close()


@pytest.mark.parametrize("damage", ["bad_byte", "empty", "binary"])
def test_an_unreadable_new_version_keeps_the_last_good_one(tmp_path, capsys, damage):
    ws = tmp_path / "ws"
    d, q = _folder(tmp_path / "k" / "docs", "kept")
    assert main(["ingest", str(d), "--questions", str(q), *FAST, "--workspace", str(ws)]) == 0
    f = d / "f1.md"
    if damage == "bad_byte":
        f.write_bytes(f.read_bytes() + b"\xe9")
    elif damage == "empty":
        f.write_bytes(b"")
    else:
        f.write_bytes(f.read_bytes() + b"\x00" * 3 + b"x" * 9000)
    capsys.readouterr()
    assert main(["ingest", str(d), *FAST, "--workspace", str(ws)]) == 0
    out = capsys.readouterr().out
    assert "removed 0" in out and "unchanged 3" in out and "questions 3" in out
    assert f"{f}: warning:" in out and "kept the last good version" in out
    w = Workspace(ws)
    idx = w.indexes()[0]["index"]
    assert "depot 1" in " ".join(w.table(idx, "chunks").to_arrow().column("text").to_pylist())


def test_nul_bytes_after_the_first_8kb_are_not_text(tmp_path):
    from rag.ingest.folders import load_folder

    root = tmp_path / "n"
    root.mkdir()
    (root / "a.txt").write_bytes(b"plain words here. " * 600 + b"\x00binary tail")
    ds = load_folder(root)
    assert not ds.documents and "NUL byte at offset" in str(ds.skipped[0])


def test_absurd_usage_counts_are_rejected_and_the_run_finishes_and_resumes(server, tmp_path, capsys):
    ws = tmp_path / "ws"
    for model, rid in (("fault-usage-huge", "U1"), ("fault-usage-negative", "U2")):
        assert _run(ws, "--dataset", "squad2", "--limit", "2", "--strategies", "chunks", "--run-id", rid,
                    "--llm-base-url", server, "--llm-model", model) == 0
        assert main(["run", "--resume", rid, *FAST, "--no-report", "--workspace", str(ws)]) == 0
    con = _con(ws)
    rows = con.execute("SELECT run_id, answer_status, usage_source, completion_tokens, answer_error FROM results "
                       "ORDER BY 1").fetchall()
    statuses = con.execute("SELECT DISTINCT status FROM runs").fetchall()
    con.close()
    assert len(rows) == 4 and statuses == [("finished",)]
    for rid, st, src, ct, err in rows:
        assert st == "ok" and src == "tokenizer" and 0 <= ct < 1000 and "rejected" in err
        assert ("completion_tokens=1000000000000" if rid == "U1" else "prompt_tokens=-5") in err


def test_store_counters_are_wide_enough_and_old_stores_are_widened(tmp_path):
    from evals.schema import SCHEMA
    from evals.store import ResultStore

    db = tmp_path / "old.duckdb"
    with duckdb.connect(str(db)) as con:  # a store made by an older version: INTEGER counters
        con.execute(SCHEMA.replace("BIGINT", "INTEGER"))
        con.execute("INSERT INTO results (run_id, strategy, point_id, question_id, repeat, prompt_tokens, "
                    "completion_tokens) VALUES ('r', 's', 'p', 'q', 0, 5, 6)")
    ResultStore(db).close()
    with duckdb.connect(str(db)) as con:
        types = dict(con.execute("SELECT column_name, data_type FROM information_schema.columns "
                                 "WHERE table_name='results'").fetchall())
        con.execute("UPDATE results SET completion_tokens = 10000000000")
        assert con.execute("SELECT prompt_tokens, completion_tokens FROM results").fetchone() == (5, 10 ** 10)
    assert types["prompt_tokens"] == types["completion_tokens"] == "BIGINT"


def test_resume_sends_the_real_password_never_the_redacted_one(server, tmp_path, capsys, monkeypatch):
    ws = tmp_path / "ws"
    url = server.replace("http://", "http://bob:s3cret-pw@")
    assert _run(ws, "--dataset", "squad2", "--limit", "3", "--strategies", "chunks", "--run-id", "P",
                "--llm-base-url", url, "--llm-model", "local-extractive", "--no-cache") == 0
    with duckdb.connect(str(ws / "results.duckdb")) as con:
        stored = " ".join(map(str, con.execute("SELECT * FROM runs").fetchall()))
        con.execute("DELETE FROM scores WHERE run_id='P' AND question_id IN "
                    "(SELECT question_id FROM results WHERE run_id='P' LIMIT 1)")
        con.execute("DELETE FROM results WHERE run_id='P' AND question_id NOT IN "
                    "(SELECT question_id FROM scores WHERE run_id='P')")
    assert "s3cret-pw" not in stored and "bob:***@" in stored
    capsys.readouterr()
    before = len(Handler.requests)
    assert main(["run", "--resume", "P", *FAST, "--no-report", "--workspace", str(ws), "--no-cache"]) == 2
    err = capsys.readouterr().err
    assert "had credentials" in err and "--llm-base-url" in err and "RAGWB_LLM_BASE_URL" in err
    assert len(Handler.requests) == before  # refused before any call
    monkeypatch.setenv("RAGWB_LLM_BASE_URL", url)
    assert main(["run", "--resume", "P", *FAST, "--no-report", "--workspace", str(ws), "--no-cache"]) == 0
    sent = Handler.requests[before:]
    assert sent and all(base64.b64decode(a.split()[1]).decode() == "bob:s3cret-pw" for _, a in sent)


def test_secrets_never_reach_stored_error_text_and_query_strings_stay_queries(server, tmp_path, monkeypatch):
    ws = tmp_path / "ws"
    monkeypatch.setenv("RAGWB_T_KEY", "sk-live-abcdef123456")
    url = server + "?api_key=QUERYKEY987"
    before = len(Handler.requests)
    assert _run(ws, "--dataset", "squad2", "--limit", "2", "--strategies", "chunks", "--run-id", "E",
                "--llm-base-url", url, "--llm-model", "fault-echo-400", "--llm-key-env", "RAGWB_T_KEY") == 6
    assert Handler.requests[before][0] == "/v1/chat/completions?api_key=QUERYKEY987"  # sent as a query
    assert main(["export", "E", "--format", "csv", "--out", str(tmp_path / "x"), "--workspace", str(ws)]) == 0
    con = _con(ws)
    errs = [r[0] for r in con.execute("SELECT answer_error FROM results").fetchall()]
    dump = " ".join(map(str, con.execute("SELECT * FROM runs").fetchall()))
    con.close()
    assert errs and all("HTTP 400" in e and "***" in e for e in errs)  # the echo arrived, scrubbed
    text = " ".join(errs) + dump + "".join(p.read_text() for p in (tmp_path / "x").glob("*.csv"))
    assert "sk-live-abcdef123456" not in text and "QUERYKEY987" not in text


def test_content_as_a_list_is_a_parse_error_not_a_crash(server, tmp_path):
    ws = tmp_path / "ws"
    assert _run(ws, "--dataset", "squad2", "--limit", "2", "--strategies", "chunks", "--run-id", "C",
                "--llm-base-url", server, "--llm-model", "fault-content-list") == 6  # every answer failed
    con = _con(ws)
    rows = con.execute("SELECT answer_status, answer_error FROM results").fetchall()
    con.close()
    assert rows and all(s == "parse_error" and "content of type list" in e for s, e in rows)


@pytest.mark.parametrize("model,needle", [("fault-nan", "2 of 2 vectors with NaN"),
                                         ("fault-short", "returned 1 vectors for 2 texts"),
                                         ("fault-500", "failed with HTTP 500")])
def test_bad_embedding_responses_are_one_line_and_never_cached(server, tmp_path, capsys, model, needle):
    ws = tmp_path / "ws"
    d = tmp_path / "e"
    d.mkdir()
    (d / "a.md").write_text("# A\n\nAlpha text.\n")
    (d / "b.md").write_text("# B\n\nBeta text.\n")
    rc = main(["ingest", str(d), "--embedder", "openai", "--embed-model", model, "--embed-base-url", server,
               "--no-progress", "--workspace", str(ws)])
    err = capsys.readouterr().err
    assert rc == 2 and needle in err and "embeddings endpoint http://127.0.0.1" in err
    assert "Traceback" not in err and len(err.strip().splitlines()) == 1
    cache = ws / "cache" / "embeddings.sqlite"
    assert not cache.exists() or sqlite3.connect(cache).execute("SELECT count(*) FROM emb").fetchone()[0] == 0


def test_nan_vectors_an_older_version_cached_are_embedded_again(tmp_path):
    from rag.index.embedders import EmbeddingCache, get_embedder

    emb = get_embedder("hash")
    cache = EmbeddingCache(tmp_path / "e.sqlite")
    good = cache.embed(emb, "k", ["one", "two"])
    cache.db.execute("UPDATE emb SET v = ?", [np.full(good.shape[1], np.nan, np.float32).tobytes()])
    cache.db.commit()
    again = cache.embed(emb, "k", ["one", "two"])
    assert np.isfinite(again).all() and np.allclose(again, good)


def test_a_missing_lance_data_file_is_repaired_with_a_notice(tmp_path, capsys):
    ws = tmp_path / "ws"
    d, q = _folder(tmp_path / "m" / "docs", "lost")
    assert main(["ingest", str(d), "--questions", str(q), *FAST, "--workspace", str(ws)]) == 0
    lost = next((ws / "lancedb").glob("*__chunks.lance/data/*"))
    lost.unlink()
    capsys.readouterr()
    assert main(["ingest", str(d), "--questions", str(q), *FAST, "--workspace", str(ws)]) == 0
    out = capsys.readouterr().out
    assert "notice: rebuilt index" in out and "missing 1 data file" in out and "added 3" in out
    assert _run(ws, "--dataset", str(d), "--questions", str(q), "--strategies", "chunks") == 0


# ------------------------------------------------------------------ one line, never a traceback

def _rc_err(capsys, argv):
    try:
        rc = main(argv)
    except SystemExit as e:  # argparse's own one line (exit 2)
        rc = e.code
    err = capsys.readouterr().err
    return rc, err


@pytest.mark.parametrize("damage", ["garbage", "truncated", "folder"])
def test_a_damaged_results_file_is_one_line_from_every_command(tmp_path, capsys, damage):
    ws = tmp_path / "ws"
    ws.mkdir()
    db = ws / "results.duckdb"
    if damage == "folder":
        db.mkdir()
    elif damage == "garbage":
        db.write_bytes(os.urandom(40_000))
    else:
        src = tmp_path / "good.duckdb"
        with duckdb.connect(str(src)) as con:
            con.execute("CREATE TABLE runs AS SELECT range AS x FROM range(100000)")
        db.write_bytes(src.read_bytes()[:20_000])
    for argv in (["show", "latest"], ["runs"], ["export", "latest"],
                 ["run", "--dataset", "squad2", "--limit", "1", "--strategies", "chunks", *FAST, "--no-report"]):
        rc, err = _rc_err(capsys, argv + ["--workspace", str(ws)])
        assert rc == 2 and str(db) in err and "Traceback" not in err, (argv, err)
        assert len(err.strip().splitlines()) == 1, err


def test_paths_that_are_files_and_env_vars_that_are_not_numbers(tmp_path, capsys, monkeypatch):
    f = tmp_path / "afile"
    f.write_text("x")
    rc, err = _rc_err(capsys, ["ingest", "squad2", *FAST, "--workspace", str(f)])
    assert rc == 2 and "a file stands where the workspace folder should be" in err
    ws = tmp_path / "ws"
    assert main(["run", "--dataset", "squad2", "--limit", "1", "--strategies", "chunks", *FAST, "--no-report",
                 "--workspace", str(ws)]) == 0
    rc, err = _rc_err(capsys, ["export", "latest", "--out", str(f), "--workspace", str(ws)])
    assert rc == 2 and str(f) in err and "export folder" in err
    monkeypatch.setenv("RAGWB_DB_WAIT", "abc")
    rc, err = _rc_err(capsys, ["show", "latest", "--workspace", str(ws)])
    assert rc == 2 and "RAGWB_DB_WAIT='abc'" in err
    monkeypatch.delenv("RAGWB_DB_WAIT")
    monkeypatch.setenv("RAGWB_LOCK_WAIT", "soon")
    rc, err = _rc_err(capsys, ["ingest", "squad2", *FAST, "--workspace", str(ws)])
    assert rc == 2 and "RAGWB_LOCK_WAIT='soon'" in err


@pytest.mark.parametrize("argv,needle", [
    (["--set", "chunks.top_k=1e400"], "must be a finite number"),
    (["--set", "chunks.top_k=4.5"], "must be a whole number"),
    (["--threshold", "nan"], "must be a finite number"),
    (["--wait", "nan"], "must be a finite number"),
    (["--price", "m=nan,1"], "finite numbers >= 0"),
    (["--judges", "bogus"], "unknown judge(s) bogus"),
    (["--judges", "llm_faithfulness"], "needs a judge endpoint"),
    (["--questions", "q.jsonl"], "is for folder datasets"),
    (["--answerer", "openai"], "needs --llm-base-url"),
    (["--set", "chunks.query_template={question} {lang}"], "unknown placeholder(s) {lang}"),
    (["--context-window", "100"], "pass --llm-base-url"),
])
def test_bad_settings_fail_before_any_work(tmp_path, capsys, argv, needle):
    ws = tmp_path / "ws"
    rc, err = _rc_err(capsys, ["run", "--dataset", "squad2", "--limit", "1", *FAST, "--no-report",
                               "--workspace", str(ws), *argv])
    assert rc == 2 and needle in err and "Traceback" not in err, err
    assert not (ws / "lancedb").exists() or not any((ws / "lancedb").iterdir())  # nothing ingested
    if (ws / "results.duckdb").exists():
        con = _con(ws)
        assert con.execute("SELECT count(*) FROM runs").fetchone()[0] == 0  # and no run row
        con.close()


@pytest.mark.parametrize("toml,needle", [
    ("[strategies.chunks]\ntop_k = []\n", "top_k is an empty list"),
    ("[strategies.chunks]\ntop_k = [4.5]\n", "must be a whole number"),
    ("[prices]\nm = [nan, 1.0]\n", "prices m must be"),
])
def test_sweep_values_that_would_be_dropped_or_truncated_are_errors(tmp_path, capsys, toml, needle):
    cfg = tmp_path / "s.toml"
    cfg.write_text(toml)
    rc, err = _rc_err(capsys, ["run", "--config", str(cfg), "--dataset", "squad2", *FAST, "--no-report",
                               "--workspace", str(tmp_path / "ws")])
    assert rc == 2 and str(cfg) in err and needle in err, err


def test_a_toml_file_that_is_not_utf8_is_named(tmp_path, capsys):
    cfg = tmp_path / "s.toml"
    cfg.write_bytes(b"[run]\nlimit = 2 # caf\xe9\n")
    rc, err = _rc_err(capsys, ["run", "--config", str(cfg), *FAST, "--workspace", str(tmp_path / "ws")])
    assert rc == 2 and f"{cfg}: not UTF-8" in err


def test_bad_bytes_and_utf16_in_a_gold_jsonl_cost_only_their_line(tmp_path):
    from rag.ingest.folders import load_folder

    d, _ = _folder(tmp_path / "u" / "docs", "enc")
    good = json.dumps({"id": "a", "question": "How many crates does depot 0 store?", "answers": ["7 crates"]})
    q = tmp_path / "q.jsonl"
    q.write_bytes(good.encode() + b"\n" + b'{"id": "b", "question": "caf\xe9?"}\n'
                  + good.replace('"a"', '"c"').encode() + b"\n")
    ds = load_folder(d, q)
    assert [x.qid for x in ds.questions] == ["a", "c"]
    assert any(s.line == 2 and s.path == str(q) and "not valid UTF-8" in s.reason for s in ds.skipped)
    q16 = tmp_path / "q16.jsonl"
    q16.write_bytes((good + "\n").encode("utf-16"))
    assert [x.qid for x in load_folder(d, q16).questions] == ["a"]


def test_pypdf_warnings_name_the_file(tmp_path):
    """pypdf (RAGWB_PDF_PARSER=pypdf, or where pdfium cannot open a file) prints its warnings with the file's path."""
    from pdfgen import make_pdf

    good = tmp_path / "g.pdf"
    make_pdf(good, ["Page one says hello."])
    bad = tmp_path / "docs" / "t.pdf"
    bad.parent.mkdir()
    bad.write_bytes(good.read_bytes().replace(b"%%EOF", b""))
    code = ("import sys\nfrom pathlib import Path\nfrom rag.ingest.readers import ImportError_, read_pdf_pages\ntry:\n"
            "    read_pdf_pages(Path(sys.argv[1]))\nexcept ImportError_:\n    pass\n")
    p = subprocess.run([sys.executable, "-c", code, str(bad)], cwd=REPO, capture_output=True, text=True,
                       timeout=120, env={**os.environ, "RAGWB_PDF_PARSER": "pypdf"})
    lines = [x for x in p.stderr.splitlines() if x.strip()]
    assert lines and all(x.startswith(f"{bad}: pypdf:") for x in lines), p.stderr


# ------------------------------------------------------------------ prompts that do not fit the model

def test_prompts_over_the_window_are_context_overflow_before_any_call(server, tmp_path, capsys):
    ws = tmp_path / "ws"
    common = ["--dataset", "squad2", "--limit", "4", "--strategies", "chunks,full_documents",
              "--llm-base-url", server, "--llm-model", "local-extractive", "--max-tokens", "64", "--no-cache",
              "--judge", "none"]  # answer calls counted alone
    before = len(Handler.requests)
    assert _run(ws, *common, "--context-window", "1500", "--run-id", "W") == 0
    calls = len(Handler.requests) - before
    con = _con(ws)
    by = dict(con.execute("SELECT strategy, string_agg(DISTINCT answer_status ORDER BY answer_status) FROM results WHERE run_id='W' "
                          "GROUP BY 1").fetchall())
    over = con.execute("SELECT max(prompt_tokens) FROM results WHERE run_id='W' AND "
                       "answer_status='context_overflow'").fetchone()[0]
    faith = con.execute("SELECT DISTINCT status FROM scores s JOIN results r USING (run_id, strategy, point_id, "
                        "question_id, repeat) WHERE r.run_id='W' AND r.answer_status='context_overflow' "
                        "AND s.metric='f1'").fetchall()
    con.close()
    assert by == {"chunks": "ok", "full_documents": "context_overflow"} and over > 1500 - 64
    assert calls == 4 and faith == [("context_overflow",)]  # only the chunks items were sent
    capsys.readouterr()
    assert main(["show", "W", "--workspace", str(ws)]) == 0
    out = capsys.readouterr().out
    assert "4 (context_overflow)" in out and "On the 0 of 4 questions every point answered" in out
    from evals.report.html import write_report
    html = write_report("W", db=ws / "results.duckdb", out_dir=tmp_path / "rep").read_text()
    assert "4 (context_overflow)" in html and "questions every point answered" in html
    # the window reported by the endpoint's /models is used the same way; --fit-context fits instead
    Handler.context_window = 1500
    from rag.llm import client as _client

    _client._WINDOWS.clear()  # the window is asked once a process per endpoint and model: this is a "new process"
    try:
        assert _run(ws, *common, "--fit-context", "--run-id", "F") == 0
    finally:
        Handler.context_window = 0
    con = _con(ws)
    rows = con.execute("SELECT answer_status, prompt_tokens, counters FROM results WHERE run_id='F' AND "
                       "strategy='full_documents'").fetchall()
    con.close()
    assert rows and all(s == "ok" and pt <= 1500 - 64 and "fitted_to_tokens" in c for s, pt, c in rows)


def test_a_runaway_answer_is_scored_on_its_head_and_says_so(tmp_path):
    from evals.score.metrics import get_scorers
    from evals.run.runner import MAX_SCORED_ANSWER_CHARS, ItemEvaluator
    from rag.answer.answerers import Answer
    from rag.ingest.corpora import load_bundled
    from rag.index.workspace import IndexConfig
    from rag.index.embedders import EmbedderConfig
    from rag.index.retrieval import Retriever
    from rag.strategies import make_params

    class Runaway:  # an answerer (the registry's protocol) whose model never stops
        by_construction: dict = {}

        def answer(self, question, blocks, **_):
            return Answer("crates " * 400_000, "ok", 10, 400_000)

    ws = Workspace(tmp_path / "ws")
    ds = load_bundled("squad2")
    summ = ws.ingest(ds, IndexConfig(embedder=EmbedderConfig("hash")), progress=False)
    ev = ItemEvaluator(Retriever(ws, summ.index), Runaway(), get_scorers())
    row, scores = ev.evaluate(ds.questions[0], "chunks", make_params("chunks"), "default", "defaults")
    assert f"scored on its first {MAX_SCORED_ANSWER_CHARS:,}" in row["answer_error"]
    assert len(row["answer"]) == 2_800_000 and scores["f1"].status == "ok"


# ------------------------------------------------------------------ the seeded kill -9 sweep

def test_seeded_kill_9_sweep_during_ingest_then_a_clean_ingest_matches(tmp_path):
    from test_safety import _corpus, _ingest, _state

    corpus = _corpus(tmp_path / "corpus")
    _ingest(corpus, tmp_path / "ref")
    rng = random.Random(20261123)
    for k in sorted(rng.sample(range(1, 8), 3)):
        ws = tmp_path / f"ws{k}"
        p = subprocess.run([sys.executable, "-m", "evals.cli", "ingest", str(corpus), *FAST, "--workspace", str(ws)],
                           cwd=REPO, capture_output=True, text=True, timeout=600,
                           env={**os.environ, "RAGWB_CRASH_AFTER": str(k)})
        assert p.returncode in (-9, 0), p.stderr[-400:]
        _ingest(corpus, ws)
        assert _state(ws) == _state(tmp_path / "ref"), k
        shutil.rmtree(ws)


def test_a_busy_store_names_the_process_that_holds_it(tmp_path):
    from evals.store import ResultStore, StoreBusy

    db = tmp_path / "r.duckdb"
    ResultStore(db).close()
    holder = subprocess.Popen([sys.executable, "-c", "import duckdb, sys, time\n"
                               "c = duckdb.connect(sys.argv[1], read_only=True)\nprint('held', flush=True)\n"
                               "time.sleep(60)", str(db), "reader-holding-the-store"],
                              stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "held"
        with pytest.raises(StoreBusy) as e:
            ResultStore(db, wait=0)
        assert f"process {holder.pid}" in str(e.value) and "reader-holding-the-store" in str(e.value)
    finally:
        holder.kill()
        holder.wait()


@pytest.mark.parametrize("argv,needle", [
    (["--dataset", "mtrag-govt", "--limit", "2", "--fit-context"], "--fit-context is not available on conversational"),
    (["--dataset", "squad2", "--limit", "1", "--judge-base-url", "http://127.0.0.1:9/v1", "--judge-model", "j",
      "--judges", "ragas_faithfulness", "--judge-format", "json_schema"], "--judge-format applies to the llm_faithfulness judge"),
])
def test_options_that_would_do_nothing_are_refused(server, tmp_path, capsys, argv, needle):
    rc, err = _rc_err(capsys, ["run", *argv, *FAST, "--no-report", "--workspace", str(tmp_path / "ws"),
                               "--llm-base-url", server, "--llm-model", "local-extractive"])
    assert rc == 2 and needle in err, err
