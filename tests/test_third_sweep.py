"""Outside input, third sweep (issue 44): each case fails without its fix. A real 127.0.0.1 server, real files."""
import json
import os
import sys
import threading
import time
import tracemalloc

import duckdb
import httpx
import pytest

from evals.cli import main
from openai_server import Handler, start


@pytest.fixture(scope="module")
def server():
    srv, url = start()
    yield url
    srv.shutdown()


def _chat(url: str, model: str, timeout: float = 30.0, cap_mb: float = 8.0):
    from rag.llm.guard import guarded_http_client

    c = guarded_http_client(timeout, int(cap_mb * 1_000_000))
    try:
        return c.post(url + "/chat/completions", json={"model": model, "messages": [{"role": "user", "content": "x"}]})
    finally:
        c.close()


def test_gzip_reply_is_capped_on_decoded_bytes_while_decoding(server, monkeypatch):
    """Item 1: 40 MB of JSON gzipped to ~40 KB stops at the 8 MB cap, counted decoded, never held whole."""
    from rag.llm.guard import ResponseTooLarge

    monkeypatch.setattr(Handler, "huge_mb", 40)
    with pytest.raises(ResponseTooLarge):  # the server builds its body once; the client is traced below
        _chat(server, "fault-gzip-bomb")
    tracemalloc.start()
    try:
        with pytest.raises(ResponseTooLarge, match="counted decoded"):
            _chat(server, "fault-gzip-bomb")
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 30_000_000, peak  # the cap (8 MB) and a chunk, not the 40 MB body
    # under the cap a gzipped reply is decoded once and read as JSON (no second decoding by httpx)
    monkeypatch.setattr(Handler, "huge_mb", 1)
    r = _chat(server, "fault-gzip-bomb")
    assert len(r.json()["choices"][0]["message"]["content"]) == 1_000_000
    assert "content-encoding" not in r.headers


def test_header_trickle_is_cut_at_the_deadline(server, monkeypatch):
    """Item 3: headers sent a byte at a time never trip a per-read timeout; the deadline covers them too."""
    monkeypatch.setattr(Handler, "trickle", 0.05)  # 450 header bytes: ~22 s if nothing cuts it
    t0 = time.monotonic()
    with pytest.raises(httpx.TimeoutException):
        _chat(server, "fault-header-trickle", timeout=1.5)
    assert time.monotonic() - t0 < 15  # a hang detector, not a speed target: the deadline was 1.5 s


def test_deep_reply_is_a_parse_error_naming_the_endpoint(server):
    """Item 8 (part): a reply nested 100,000 deep is that call's parse_error, never the run's end."""
    from rag.llm.client import LLMClient, LLMConfig

    res = LLMClient(LLMConfig(server, "fault-deep", retries=0)).chat([{"role": "user", "content": "x"}])
    assert res.status == "parse_error" and "127.0.0.1" in res.error


def test_gitignore_stars_match_in_bounded_time_and_a_lone_backslash_is_skipped(tmp_path):
    """Item 2: 200 stars then x, and a line that is just a backslash: both said with file and line; the other
    lines still apply; the ingest does not stall."""
    from rag.ingest.folders import _collapse_stars, load_folder

    assert _collapse_stars("*" * 200 + "x") == "*x" and _collapse_stars("a/***/b") == "a/**/b"
    folder = tmp_path / "docs"
    (folder / "sub").mkdir(parents=True)
    (folder / "keep.md").write_text("# Keep\n\nkept text here.\n")
    (folder / "drop.log").write_text("dropped\n")
    (folder / "sub" / "a.md").write_text("# A\n\nsub text.\n")
    (folder / ".gitignore").write_text("*" * 200 + "x\n" + "\\\n" + "*.log\n" + "a*" * 40 + "\n")
    out = {}
    t = threading.Thread(target=lambda: out.setdefault("ds", load_folder(folder, None)), daemon=True)
    t.start()
    t.join(120)  # a hang detector: the old matcher took minutes on this file
    assert "ds" in out, "ingest stalled on the .gitignore"
    ds = out["ds"]
    assert sorted(d.doc_id for d in ds.documents) == ["keep.md", "sub/a.md"]  # *.log still applies
    warns = [s for s in ds.skipped if s.kind == "warning" and s.path.endswith(".gitignore")]
    assert any(s.line == 2 and "not a pattern git reads" in s.reason for s in warns), warns
    # 40 stars: matched by RE2 in linear time (issue 54, 1), so the line applies instead of being skipped
    assert not any(s.line == 4 for s in warns), warns


def test_bad_include_pattern_is_an_error_naming_it(tmp_path):
    from rag.ingest.folders import load_folder

    (tmp_path / "a.md").write_text("# a\n\ntext\n")
    with pytest.raises(ValueError, match=r"--exclude .*longer than 1,000 characters"):
        load_folder(tmp_path, None, exclude=("*a" * 600,))
    assert [d.doc_id for d in load_folder(tmp_path, None, exclude=("*a" * 30,)).documents] == ["a.md"]  # RE2


def test_plugin_sleeping_an_hour_fails_its_item_at_the_limit_and_imports_its_helper(tmp_path):
    """Items 5 and 14: time.sleep(3600) under --plugin-timeout 2 costs the item, not the run; a helper module
    beside the plugin imports without PYTHONPATH."""
    (tmp_path / "sleepy_helper.py").write_text("TOP_K = 2\n")
    plugin = tmp_path / "sleepy_plugin.py"
    plugin.write_text("import time\nfrom dataclasses import dataclass\n"
                      "from rag.extend import BaseParams, Strategy, register_strategy, get_strategy\n"
                      "from sleepy_helper import TOP_K\n\n"
                      "@dataclass(frozen=True)\nclass P(BaseParams):\n    top_k: int = TOP_K\n\n"
                      "@register_strategy\nclass Sleepy(Strategy):\n    name = 'sleepy'\n    Params = P\n\n"
                      "    def pack(self, r, pool, p):\n        time.sleep(3600)\n")
    ws = tmp_path / "ws"
    code = ("import sys; from evals.cli import main; sys.exit(main(sys.argv[1:]))")
    import subprocess
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    p = subprocess.run([sys.executable, "-c", code, "run", "--dataset", "squad2", "--limit", "2", "--embedder", "hash",
                        "--workspace", str(ws), "--strategies", "sleepy", "--plugins", str(plugin), "--plugin-timeout",
                        "2", "--no-progress", "--no-report", "--run-id", "P", "--max-failure-rate", "1"],
                       capture_output=True, text=True, timeout=300, env=env, cwd=tmp_path)
    assert "ModuleNotFoundError" not in p.stderr, p.stderr[-2000:]
    con = duckdb.connect(str(ws / "results.duckdb"), read_only=True)
    rows = con.execute("SELECT answer_status, answer_error FROM results WHERE run_id = 'P'").fetchall()
    con.close()
    assert len(rows) == 2 and all(s == "error" and "time limit of 2 s" in e for s, e in rows), rows


def test_lock_note_holds_no_secret_and_is_removed(tmp_path):
    """Item 9: the run's lock note redacts argv and is gone when the run ends."""
    from rag.llm.urls import redact_argv

    assert redact_argv(["--system", "bad=http://bob:PWSECRET42@h/ask", "http://h/v1?pwd=hunter2pwd"]) == \
        ["--system", "bad=http://bob:***@h/ask", "http://h/v1?pwd=***"]
    from evals.store import run_lock_path, run_writer

    db = tmp_path / "results.duckdb"
    old = sys.argv
    sys.argv = ["ragwb", "run", "--system", "bad=http://bob:PWSECRET42@127.0.0.1:9/ask"]
    try:
        with run_writer(db, "L"):
            note = run_lock_path(db, "L").with_suffix(".json")
            text = note.read_text()
            assert "PWSECRET42" not in text and "bob:***@" in text
    finally:
        sys.argv = old
    assert not note.exists()
    leftovers = [p for p in (tmp_path / "locks").iterdir() if p.stat().st_size]
    assert leftovers == []  # what stays is the empty OS lock file


@pytest.mark.parametrize("echo", ["hex", "pct-lower", "json-slash"])
def test_secret_spellings_are_scrubbed(echo):
    """Item 10: a key echoed as hex, as lower-case %xx, JSON-escaped with \\/ is hidden."""
    from rag.llm.urls import redact_url, register_secret, scrub

    secret = "k3y+With/Slash=Z9"
    register_secret(secret)
    form = {"hex": secret.encode().hex(), "pct-lower": "k3y%2bWith%2fSlash%3dZ9",
            "json-slash": "k3y+With\\/Slash=Z9"}[echo]
    assert "***" in scrub(f"echo {form} end") and form not in scrub(f"echo {form} end")
    for name in ("pwd", "pass", "code", "jwt", "token", "secret", "sig"):
        assert redact_url(f"http://h/v1?{name}=hunter2{name}&q=ok") == f"http://h/v1?{name}=***&q=ok"


def test_url_password_with_a_key_is_refused_not_half_sent(monkeypatch):
    """Item 11: Basic from the URL would replace the Bearer key in the one Authorization header."""
    from rag.llm.client import LLMClient, LLMConfig

    monkeypatch.setenv("RAGWB_TEST_KEY", "sk-test-abcdefghijklmnop")
    with pytest.raises(ValueError, match="one Authorization header cannot carry both"):
        LLMClient(LLMConfig("http://u:pw12345@127.0.0.1:9/v1", "m", "RAGWB_TEST_KEY"))
    LLMClient(LLMConfig("http://127.0.0.1:9/v1", "m", "RAGWB_TEST_KEY"))  # either alone is fine


def test_generate_and_judge_exit_nonzero_when_every_call_fails(server, tmp_path, capsys):
    """Items 6 and 8: nothing written over --out (it keeps what it held), exit 6; a judge whose every pair
    failed exits 6 too. Item 4: a 1 MB question is dropped by length before any costly check."""
    keep = tmp_path / "keep.jsonl"
    keep.write_text('{"question": "kept from before?"}\n')
    ws = tmp_path / "ws"
    base = ["generate", "squad2", "--n", "3", "--llm-base-url", server, "--embedder", "hash", "--workspace", str(ws),
            "--retries", "0", "--out", str(keep)]
    assert main(base + ["--llm-model", "fault-500"]) == 6
    assert keep.read_text() == '{"question": "kept from before?"}\n'
    assert "no question survived" in capsys.readouterr().err
    assert main(base + ["--llm-model", "questioner-huge"]) == 6
    assert "question longer than 1,000 characters 3" in capsys.readouterr().err
    run = ["run", "--dataset", "squad2", "--limit", "2", "--embedder", "hash", "--workspace", str(ws),
           "--strategies", "chunks", "--no-progress", "--no-report", "--run-id", "J"]
    assert main(run) == 0
    assert main(["judge", "J", "--workspace", str(ws), "--judge-base-url", server, "--judge-model", "fault-deep",
                 "--retries", "0"]) == 6
    err = capsys.readouterr().err
    assert "every one of the" in err and "127.0.0.1" in err


def test_flags_that_would_do_nothing_are_refused(tmp_path, capsys):
    """Item 15: --threshold is a share; --sample without the support scorer; gate --metrics takes commas."""
    with pytest.raises(SystemExit):
        main(["run", "--threshold", "5"])
    assert "share in 0..1" in capsys.readouterr().err
    log = tmp_path / "log.jsonl"
    log.write_text(json.dumps({"question": "q?", "answer": "a", "contexts": ["a b"]}) + "\n")
    capsys.readouterr()
    assert main(["score", str(log), "--metrics", "cost", "--sample", "3", "--workspace", str(tmp_path / "ws"),
                 "--embedder", "hash", "--no-report"]) == 2
    assert "--sample 3 samples the costly support scorer" in capsys.readouterr().err
