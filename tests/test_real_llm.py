"""With an LLM (issue 29): a killed run keeps what it finished, a run whose answers all fail says so in its
exit status, a deterministic refusal is a result (not a call to repeat), and the CLI answers "which shape
gives the most per 1,000 prompt tokens, and is the difference real?". A real OpenAI-compatible server on
127.0.0.1 (tests/openai_server.py) and real processes."""
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import duckdb
import pytest

from evals.cli import main
from openai_server import Handler, start

REPO = Path(__file__).resolve().parents[1]
FAST = ["--embedder", "hash", "--no-progress", "--no-report"]


@pytest.fixture(scope="module")
def server():
    srv, url = start()
    yield url
    srv.shutdown()


def _count(db: Path) -> int:
    from evals.store import ResultStore

    if not db.exists():
        return 0
    try:
        with ResultStore(db, read_only=True, wait=5) as st:
            return int(st.con.execute("SELECT count(*) FROM results").fetchone()[0])
    except Exception:  # noqa: BLE001 - created but not yet a store: nothing committed
        return 0


def test_a_killed_llm_run_keeps_the_items_it_finished(server, tmp_path):
    ws = tmp_path / "ws"
    assert main(["ingest", "squad2", "--embedder", "hash", "--workspace", str(ws), "--no-progress"]) == 0
    p = subprocess.Popen([sys.executable, "-m", "evals.cli", "run", "--dataset", "squad2", "--limit", "60",
                          "--strategies", "chunks", *FAST, "--workspace", str(ws), "--run-id", "K",
                          "--llm-base-url", server, "--llm-model", "slow-extractive", "--concurrency", "1"],
                         cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    db, n, deadline = ws / "results.duckdb", 0, time.time() + 120
    try:
        while time.time() < deadline and p.poll() is None:
            n = _count(db)
            if n:
                break
            time.sleep(0.2)
        os.kill(p.pid, signal.SIGKILL)  # a kill -9 while the shard is still being answered
        p.wait()
    finally:
        if p.poll() is None:
            p.kill()
    n = _count(db)
    assert 0 < n < 60, n  # committed as they finished (before: 0 rows until the 64-question shard was done)
    assert main(["show", "K", "--workspace", str(ws)]) == 0
    assert main(["run", "--resume", "K", *FAST, "--workspace", str(ws)]) == 0
    assert _count(db) == 60


def test_a_run_over_its_failure_cap_exits_non_zero_with_the_statuses(server, tmp_path, capsys):
    ws = tmp_path / "ws"
    # chunks answers; the service at a dead port fails: half the items, at the default cap of 0.5: exit 0
    base = ["run", "--dataset", "squad2", "--limit", "3", *FAST, "--workspace", str(ws), "--strategies", "chunks",
            "--system", "dead=http://127.0.0.1:9/ask", "--retries", "0", "--timeout", "2"]
    assert main(base + ["--run-id", "HALF"]) == 0
    capsys.readouterr()
    assert main(base + ["--run-id", "CAP", "--max-failure-rate", "0.2"]) == 6
    err = capsys.readouterr().err
    assert "run CAP: 50% of answers failed (cap 20%): 3 of 6 items (error=3)" in err


def test_a_deterministic_refusal_is_stored_not_sent_again(server, tmp_path):
    ws = tmp_path / "ws"
    args = ["run", "--dataset", "squad2", "--limit", "3", *FAST, "--workspace", str(ws), "--strategies", "chunks",
            "--llm-base-url", server, "--llm-model", "fault-echo-400"]
    before = Handler.calls
    assert main(args + ["--run-id", "A"]) == 6
    first = Handler.calls - before
    assert first == 3  # one call per item, no retry of a 400
    before = Handler.calls
    assert main(args + ["--run-id", "B"]) == 6
    assert Handler.calls == before  # the same requests were refused before: not sent again
    con = duckdb.connect(str(ws / "results.duckdb"), read_only=True)
    rows = con.execute("SELECT answer_status, answer_error, cached FROM results WHERE run_id='B'").fetchall()
    con.close()
    assert rows and all(s == "error" and "HTTP 400" in e and "stored refusal" in e for s, e, _ in rows)
    before = Handler.calls
    assert main(args + ["--run-id", "C", "--no-cache"]) == 6
    assert Handler.calls == before + 3  # --no-cache asks again


def test_show_per_1k_and_compare_points_answer_which_shape_gives_most(tmp_path, capsys):
    ws = tmp_path / "ws"
    assert main(["run", "--dataset", "squad2", "--limit", "30", *FAST, "--workspace", str(ws), "--run-id", "Q",
                 "--strategies", "chunks,full_documents"]) == 0
    capsys.readouterr()
    assert main(["show", "Q", "--per-1k", "f1", "--workspace", str(ws)]) == 0
    out = capsys.readouterr().out
    lines = [ln for ln in out.splitlines() if " · defaults" in ln]
    assert "f1 per 1,000 prompt tokens" in out and lines[0].split()[0] == "chunks"  # best first
    assert all(len(ln.split()) == 9 for ln in lines)  # point (3 words), n, f1, prompt tokens, ratio, low, high
    assert main(["compare", "Q", "--points", "chunks", "full_documents", "--metrics", "f1", "context_tokens",
                 "--workspace", str(ws)]) == 0
    out = capsys.readouterr().out
    ctx = next(ln for ln in out.splitlines() if ln.strip().startswith("context_tokens"))
    assert ctx.split()[1] == "30" and ctx.split()[-1] == "worse"  # whole documents cost more, and surely so
    assert main(["compare", "Q", "--points", "chunks", "nope", "--workspace", str(ws)]) == 2
    assert "point 'nope' is not in run Q" in capsys.readouterr().err
    from evals.report.html import write_report
    html = write_report("Q", db=ws / "results.duckdb", out_dir=tmp_path / "rep").read_text()
    assert "Quality per 1,000 prompt tokens" in html and "Each point against chunks · defaults" in html
    assert html.count(">evidence_recall</td>") == 2 and html.count(">f1</td>") >= 2  # every quality metric


def test_agreement_with_a_judge_that_never_succeeds_still_prints_every_row(server, tmp_path, capsys):
    rc = main(["agreement", "--limit", "12", "--resamples", "100", "--judge-base-url", server, "--judge-model",
               "fault-badjson", "--judges", "llm_faithfulness", "--workspace", str(tmp_path), "--json",
               str(tmp_path / "a.json")])
    out = capsys.readouterr().out
    assert rc == 0 and "offline support model" in out and "word overlap" in out
    # the cost line first: a bound (a judge may ask more than once), the unknown price said so
    assert out.splitlines()[0] == ("ragwb agreement: 12 labelled claim(s) x llm_faithfulness at fault-badjson: up "
                                   "to 12 call(s); those in the response cache are free; price unknown (--price "
                                   "MODEL=IN,OUT)"), out
    judge = [ln for ln in out.splitlines() if ln.startswith("llm_faithfulness")]
    assert judge and " 0 " in judge[0] and "(12 failed)" in judge[0]
    assert "no usable verdict from llm_faithfulness: {'parse_error': 12}" in out and "--judge-max-tokens" in out
    import json
    rows = json.loads((tmp_path / "a.json").read_text())
    assert rows[-1]["n"] == 0 and rows[-1]["failed"] == 12


def test_a_first_batch_of_timeouts_says_what_to_change(server, tmp_path, capsys):
    rc = main(["run", "--dataset", "squad2", "--limit", "2", *FAST, "--workspace", str(tmp_path / "ws"),
               "--strategies", "chunks", "--llm-base-url", server, "--llm-model", "fault-slow", "--timeout", "0.3",
               "--retries", "0"])
    err = capsys.readouterr().err
    assert rc == 6 and "all timed out after 0.3 s with --concurrency 4" in err and "--concurrency 1" in err


def test_show_keeps_cached_answer_times_apart(server, tmp_path, capsys):
    ws = tmp_path / "ws"
    args = ["run", "--dataset", "squad2", "--limit", "3", *FAST, "--workspace", str(ws), "--strategies", "chunks",
            "--llm-base-url", server, "--llm-model", "local-extractive"]
    assert main(args + ["--run-id", "T1"]) == 0
    assert main(args + ["--run-id", "T2"]) == 0
    capsys.readouterr()
    assert main(["show", "T2", "--workspace", str(ws)]) == 0
    assert "answers: 0 called the endpoint (median 0 ms), 3 came from the response cache (not timed)" in \
        capsys.readouterr().out


def test_llm_faithfulness_sends_its_verdict_schema_when_asked(server, tmp_path):
    import json as _json

    n = len(Handler.bodies)
    assert main(["run", "--dataset", "squad2", "--limit", "2", *FAST, "--workspace", str(tmp_path / "ws"),
                 "--strategies", "chunks", "--judge-base-url", server, "--judge-model", "local-extractive",
                 "--judges", "llm_faithfulness", "--judge-format", "json_schema", "--retries", "0"]) == 0
    sent = [_json.loads(b) for b in Handler.bodies[n:]]
    judged = [b for b in sent if "Statements:" in b["messages"][-1]["content"]]
    assert judged, sent
    fmt = judged[0]["response_format"]
    assert fmt["type"] == "json_schema" and fmt["json_schema"]["schema"]["properties"]["verdicts"]["items"] == \
        {"type": "integer", "enum": [0, 1]}
