"""The user's own RAG system on the same scale (issue 26): strategy plugins, a deployed service over
HTTP, logged outputs. Real files, a real HTTP service on 127.0.0.1, the real CLI and store."""
import json
from pathlib import Path

import duckdb
import pytest

from evals.cli import main

REPO = Path(__file__).resolve().parents[1]


# (the strategy registry is restored after every test: tests/conftest.py)
FAST = ["--embedder", "hash", "--no-progress", "--no-report"]

PLUGIN = '''
from dataclasses import dataclass

from rag.extend import BaseParams, Context, Strategy, chunk_raw, counters, pack_blocks, params_dict, register_strategy


@dataclass(frozen=True)
class FirstLinesParams(BaseParams):
    top_k: int = 3
    max_chars: int = 200


@register_strategy
class FirstLines(Strategy):
    name = "{name}"
    description = "top-k chunks cut to their first characters (a test plugin)"
    Params = FirstLinesParams

    def pack(self, r, pool, p):
        if "{boom}" and "{boom}" in pool.question:
            raise RuntimeError("this plugin cannot handle questions about {boom}")
        raw = [chunk_raw(r, int(i), s, p.max_chars) for i, s in zip(pool.dense_idx[:p.top_k], pool.dense_scores[:p.top_k])]
        return Context(self.name, params_dict(p), pack_blocks(raw, p, r.reader.config.chunking.encoding),
                       counters(len(raw)))
'''


def write_plugin(path: Path, boom: str = "", name: str = "first_lines") -> Path:
    """A plugin file; each test registers its own strategy name (one process, one registry)."""
    path.write_text(PLUGIN.replace("{boom}", boom).replace("{name}", name))
    return path


def test_a_plugin_strategy_is_listed_swept_recorded_and_gated_like_a_builtin(tmp_path, capsys):
    plug = write_plugin(tmp_path / "my_strategies.py")
    assert main(["strategies", "--plugins", str(plug)]) == 0
    out = capsys.readouterr().out
    assert f"first_lines: top-k chunks cut to their first characters (a test plugin) [plugin {plug}]" in out
    assert "top_k=3, max_chars=200" in out
    ws = tmp_path / "ws"
    run = ["run", "--dataset", "xquad-en", "--limit", "6", "--workspace", str(ws), *FAST, "--plugins", str(plug),
           "--strategies", "chunks,first_lines"]
    assert main(run + ["--set", "first_lines.top_k=2,4", "--set", "first_lines.max_chars=120", "--run-id",
                       "P1"]) == 0
    con = duckdb.connect(str(ws / "results.duckdb"), read_only=True)
    pts = sorted(con.execute("SELECT DISTINCT strategy, point_label FROM results WHERE run_id='P1'").fetchall())
    cfg = json.loads(con.execute("SELECT config FROM runs WHERE run_id='P1'").fetchone()[0])
    blocks = con.execute("SELECT blocks FROM results WHERE strategy='first_lines'").fetchall()
    con.close()
    assert pts == [("chunks", "defaults"), ("first_lines", "max_chars=120,top_k=2"),
                   ("first_lines", "max_chars=120,top_k=4")]
    import hashlib
    assert cfg["plugins"] == {str(plug.resolve()): hashlib.sha256(plug.read_bytes()).hexdigest()}
    assert all(len(b["text"]) <= 120 for (js,) in blocks for b in json.loads(js))
    capsys.readouterr()
    assert main(["runs", "--workspace", str(ws)]) == 0
    assert f"my_strategies.py@{cfg['plugins'][str(plug.resolve())][:12]}" in capsys.readouterr().out
    # the same config with a changed plugin is another run, and a resume of the old one refuses it
    plug.write_text(plug.read_text() + "\n# changed\n")
    with duckdb.connect(str(ws / "results.duckdb")) as con:
        con.execute("DELETE FROM scores WHERE run_id='P1' AND strategy='chunks'")
        con.execute("DELETE FROM results WHERE run_id='P1' AND strategy='chunks'")
    capsys.readouterr()
    assert main(["run", "--resume", "P1", "--workspace", str(ws), *FAST]) == 2
    assert "plugin(s) changed since the run recorded them" in capsys.readouterr().err
    # the gate guards a plugin point like any other
    assert main(run + ["--set", "first_lines.top_k=2", "--set", "first_lines.max_chars=120", "--run-id", "P2"]) == 0
    assert main(["gate", "--baseline", "P2", "--candidate", "P2", "--workspace", str(ws),
                 "--json", str(tmp_path / "g.json")]) == 0
    rows = json.loads((tmp_path / "g.json").read_text())["rows"]
    assert any(r["strategy"] == "first_lines" for r in rows)


def test_a_plugin_that_raises_on_one_question_costs_that_item_only(tmp_path, capsys):
    plug = write_plugin(tmp_path / "boom_plugin.py", boom="religion", name="boom_lines")
    ws = tmp_path / "ws"
    assert main(["run", "--dataset", "squad2", "--limit", "40", "--workspace", str(ws), *FAST, "--plugins", str(plug),
                 "--strategies", "boom_lines", "--run-id", "B"]) == 0
    con = duckdb.connect(str(ws / "results.duckdb"), read_only=True)
    st = dict(con.execute("SELECT answer_status, count(*) FROM results GROUP BY 1").fetchall())
    err = con.execute("SELECT answer_error FROM results WHERE answer_status='error' LIMIT 1").fetchone()[0]
    status = con.execute("SELECT status FROM runs").fetchone()[0]
    f1 = con.execute("SELECT DISTINCT s.status FROM scores s JOIN results r USING (run_id, strategy, point_id, "
                     "question_id, repeat) WHERE r.answer_status='error' AND s.metric='f1'").fetchall()
    con.close()
    assert st.get("error", 0) >= 1 and st.get("ok", 0) >= 1 and status == "finished"
    assert "RuntimeError: this plugin cannot handle questions about religion" in err and "boom_plugin.py:" in err
    assert f1 == [("error",)]


@pytest.mark.parametrize("body,needle", [
    ("def broken(:\n    pass\n", "bad.py:1: SyntaxError"),
    ("import os\nraise RuntimeError('no config')\n", "bad.py:2: RuntimeError: no config"),
    (PLUGIN.replace('"{name}"', '"chunks"'), "registers strategy 'chunks', which already exists"),
])
def test_a_plugin_that_cannot_load_is_one_line_naming_file_and_line_before_any_work(tmp_path, capsys, body, needle):
    bad = tmp_path / "bad.py"
    bad.write_text(body)
    ws = tmp_path / "ws"
    rc = main(["run", "--dataset", "squad2", "--limit", "2", "--workspace", str(ws), *FAST, "--plugins", str(bad)])
    err = capsys.readouterr().err
    assert rc == 2 and needle in err and "Traceback" not in err, err
    assert not ws.exists() or not (ws / "results.duckdb").exists()
    from rag.strategies import STRATEGIES, ChunksStrategy
    assert type(STRATEGIES["chunks"]) is ChunksStrategy  # the built-in was never replaced


def test_plugins_in_a_sweep_file(tmp_path):
    plug = write_plugin(tmp_path / "sweep_plugin.py", name="sweep_lines")
    cfg = tmp_path / "s.toml"
    cfg.write_text('[run]\nplugins = ["sweep_plugin.py"]\ndatasets = ["xquad-en"]\nlimit = 3\n'
                   'strategies = ["sweep_lines"]\n[strategies.sweep_lines]\ntop_k = [1, 2]\n')
    ws = tmp_path / "ws"
    assert main(["run", "--config", str(cfg), "--workspace", str(ws), *FAST, "--run-id", "S"]) == 0
    con = duckdb.connect(str(ws / "results.duckdb"), read_only=True)
    n = con.execute("SELECT count(DISTINCT point_label) FROM results WHERE strategy='sweep_lines'").fetchone()[0]
    cfg_json = json.loads(con.execute("SELECT config FROM runs").fetchone()[0])
    con.close()
    assert n == 2 and str(plug.resolve()) in cfg_json["plugins"]


# ------------------------------------------------------------------ a deployed service over HTTP

@pytest.fixture(scope="module")
def service():
    from rag_service import start

    srv, url = start()
    yield url
    srv.shutdown()


def _db(ws):
    return duckdb.connect(str(ws / "results.duckdb"), read_only=True)


def test_two_versions_of_a_service_side_by_side_and_the_gate_catches_the_regression(service, tmp_path, capsys):
    ws = tmp_path / "ws"
    base = ["run", "--dataset", "squad2", "--limit", "40", "--workspace", str(ws), *FAST]
    assert main(base + ["--system", f"v1={service}/v1", "--system", f"v2={service}/v2", "--system",
                        f"v1ids={service}/v1ids", "--strategies", "chunks", "--run-id", "BOTH"]) == 0
    con = _db(ws)
    per = dict(con.execute("SELECT r.strategy, avg(s.value) FROM scores s JOIN results r USING (run_id, strategy, "
                           "point_id, question_id, repeat) WHERE s.metric='evidence_recall' AND s.status='ok' "
                           "GROUP BY 1").fetchall())
    rows = con.execute("SELECT strategy, usage_source, prompt_tokens, answer_ms, blocks, counters FROM results "
                       "WHERE strategy LIKE 'v1%' AND question_id = (SELECT min(question_id) FROM results)").fetchall()
    cfg = json.loads(con.execute("SELECT config FROM runs").fetchone()[0])
    con.close()
    assert set(per) == {"chunks", "v1", "v2", "v1ids"}  # the services stand beside the reference shape
    assert per["v1"] == per["v1ids"] > per["v2"]  # located by text or by id: the same evidence
    for strategy, src, pt, ms, blocks, counters in rows:
        b = json.loads(blocks)
        assert src == "endpoint" and pt > 100 and ms > 0 and len(b) == 3
        assert all(x["doc_ids"] and x["page_ids"] and x["chunk_ids"] and x["spans"] for x in b)
        assert json.loads(counters)["located"] == ({"by_id": 3, "by_text": 0, "unmatched": 0} if strategy == "v1ids"
                                                   else {"by_id": 0, "by_text": 3, "unmatched": 0})
    assert [x["name"] for x in cfg["systems"]] == ["v1", "v2", "v1ids"]
    # CI: main's service is the baseline, the pull request's the candidate, under one system name
    assert main(base + ["--system", f"svc={service}/v1", "--strategies", "none", "--run-id", "MAIN"]) == 0
    assert main(base + ["--system", f"svc={service}/v2", "--strategies", "none", "--run-id", "PR"]) == 0
    capsys.readouterr()
    rc = main(["gate", "--baseline", "MAIN", "--candidate", "PR", "--workspace", str(ws),
               "--json", str(tmp_path / "g.json")])
    out = capsys.readouterr().out
    assert rc == 1 and "svc [defaults] evidence_recall" in out
    # a re-run is served from the response cache: the service is not called again
    from rag_service import Service
    n = len(Service.requests)
    assert main(base + ["--system", f"svc={service}/v1", "--strategies", "none", "--run-id", "MAIN2"]) == 0
    assert len(Service.requests) == n


def test_a_mapping_file_adapts_another_shape_with_a_key_from_the_environment(service, tmp_path, monkeypatch):
    monkeypatch.setenv("SVC_KEY", "svc-secret-key")
    mp = tmp_path / "map.toml"
    mp.write_text('[request]\nquestion = "query"\nhistory = "conv"\nquestion_id = ""\n'
                  '[request.headers]\nX-Key = "env:SVC_KEY"\n'
                  '[response]\nanswer = "data.reply"\ncontexts = "data.sources"\ncontext_text = "content"\n')
    ws = tmp_path / "ws"
    assert main(["run", "--dataset", "squad2", "--limit", "5", "--workspace", str(ws), *FAST, "--strategies", "none",
                 "--system", f"mapped={service}/custom", "--system-map", f"mapped={mp}", "--run-id", "M"]) == 0
    con = _db(ws)
    st = con.execute("SELECT DISTINCT answer_status, usage_source FROM results").fetchall()
    dump = " ".join(map(str, con.execute("SELECT * FROM runs").fetchall()))
    con.close()
    assert st == [("ok", "tokenizer")]  # no usage in this shape: counted here
    assert "svc-secret-key" not in dump and "env:SVC_KEY" in dump  # only the variable's name is stored


@pytest.mark.parametrize("path,status,needle", [
    ("500", "error", "HTTP 500"),
    ("badjson", "parse_error", "response is not JSON"),
    ("nocontexts", "parse_error", "response has no 'contexts'"),
    ("stall", "timeout", "no answer within 1 s"),
])
def test_a_failing_service_gives_each_item_a_status_and_the_run_goes_on(service, tmp_path, path, status, needle):
    ws = tmp_path / "ws"
    assert main(["run", "--dataset", "squad2", "--limit", "2", "--workspace", str(ws), *FAST, "--strategies", "chunks",
                 "--system", f"bad={service}/{path}", "--timeout", "1", "--retries", "0", "--run-id", "F"]) == 0
    con = _db(ws)
    rows = con.execute("SELECT answer_status, answer_error FROM results WHERE strategy='bad'").fetchall()
    ok = con.execute("SELECT count(*) FROM results WHERE strategy='chunks' AND answer_status='ok'").fetchone()[0]
    con.close()
    assert len(rows) == 2 and all(s == status and needle in e for s, e in rows) and ok == 2


@pytest.mark.parametrize("argv,needle", [
    (["--system", "v1"], "--system expects NAME=URL"),
    (["--system", "chunks=http://127.0.0.1:9/x"], "is a strategy's"),
    (["--system", "a=http://127.0.0.1:9/x", "--system-map", "b=m.toml"], "no --system b=URL given"),
])
def test_bad_system_arguments_are_one_line(tmp_path, capsys, argv, needle):
    rc = main(["run", "--dataset", "squad2", "--limit", "1", "--workspace", str(tmp_path / "ws"), *FAST, *argv])
    assert rc == 2 and needle in capsys.readouterr().err


def test_a_mapping_file_with_a_wrong_key_names_it(tmp_path):
    from rag.answer.systems import load_mapping

    mp = tmp_path / "m.toml"
    mp.write_text('[response]\nanswr = "x"\n')
    with pytest.raises(ValueError, match=r"m.toml: unknown key\(s\) \[response\] \['answr'\]"):
        load_mapping(mp)


# ------------------------------------------------------------------ logged outputs

def _ragas_records(n: int = 6):
    """ragas-format records of a pretend system: the gold paragraph plus a distractor as contexts."""
    from rag.ingest.corpora import load_bundled

    ds = load_bundled("squad2")
    page = {pg.page_id: pg.text for d in ds.documents for pg in d.pages}
    out = []
    for q in [q for q in ds.questions if q.answerable][:n]:
        gold = page[q.evidence[0].page_id]
        out.append({"user_input": q.text, "retrieved_contexts": [gold, next(iter(page.values()))],
                    "response": f"{q.answers[0]} [1]", "reference": q.answers[0]})
    return out


def test_logged_outputs_scored_with_and_without_a_gold_set(tmp_path, capsys):
    recs = _ragas_records() + [{"user_input": "What colour is the moon's far side?", "retrieved_contexts": ["Grey."],
                                "response": "Grey [1]."}]
    f = tmp_path / "prod_log.jsonl"
    f.write_text("\n".join(json.dumps(r) for r in recs) + "\n")
    ws = tmp_path / "ws"
    assert main(["score", str(f), "--dataset", "squad2", "--workspace", str(ws), "--embedder", "hash",
                 "--no-progress", "--no-report", "--run-id", "LOG"]) == 0
    io = capsys.readouterr()
    assert "1 of 7 records match no question of squad2" in io.err and "row 7" in io.err
    assert "6 matched the gold set, 1 did not" in io.out
    assert main(["score", str(f), "--workspace", str(ws), "--no-progress", "--no-report", "--run-id", "NOGOLD"]) == 0
    con = _db(ws)

    def st(run, metric):
        return dict(con.execute("SELECT question_id LIKE 'row-%', string_agg(DISTINCT status ORDER BY status) FROM scores WHERE "
                                "run_id=? AND metric=? GROUP BY 1", [run, metric]).fetchall())
    assert st("LOG", "evidence_recall") == {False: "ok", True: "not_applicable"}
    assert "ok" in st("LOG", "faithfulness")[False]  # reference-free: scored for every record
    rec = con.execute("SELECT avg(value) FROM scores WHERE run_id='LOG' AND metric='evidence_recall' AND status='ok'"
                      ).fetchone()[0]
    assert rec == 1.0  # the gold paragraph was located in the corpus by its text
    assert st("NOGOLD", "evidence_recall") == {True: "not_applicable"}
    # a logged reference answer makes answer correctness scorable; the record without one is not_applicable
    assert st("NOGOLD", "f1") == {True: "not_applicable,ok"}
    assert st("NOGOLD", "citation_validity")[True] == "ok" and st("NOGOLD", "context_tokens")[True] == "ok"
    why = con.execute("SELECT detail FROM scores WHERE run_id='NOGOLD' AND metric='evidence_recall' LIMIT 1").fetchone()
    strategies = con.execute("SELECT DISTINCT strategy FROM results").fetchall()
    con.close()
    assert "no gold set given" in why[0] and strategies == [("logged",)]
    assert main(["show", "LOG", "--workspace", str(ws)]) == 0


def test_logged_csv_in_the_workbench_vocabulary(tmp_path):
    import csv

    f = tmp_path / "log.csv"
    recs = _ragas_records(3)
    with open(f, "w", newline="") as fh:
        w = csv.DictWriter(fh, ["question", "contexts", "answer", "prompt_tokens", "latency_ms"])
        w.writeheader()
        for r in recs:
            w.writerow({"question": r["user_input"], "contexts": json.dumps(r["retrieved_contexts"]),
                        "answer": r["response"], "prompt_tokens": 321, "latency_ms": 850.5})
    ws = tmp_path / "ws"
    assert main(["score", str(f), "--dataset", "squad2", "--workspace", str(ws), "--embedder", "hash",
                 "--no-progress", "--no-report", "--name", "prod"]) == 0
    con = _db(ws)
    rows = con.execute("SELECT strategy, prompt_tokens, usage_source, answer_ms FROM results").fetchall()
    con.close()
    assert rows == [("prod", 321, "endpoint", 850.5)] * 3


@pytest.mark.parametrize("content,needle", [
    ('{"user_input": "q?", "response": "a"}\n', "missing column(s) retrieved_contexts"),
    ('{"question": "q?", "contexts": "x"}\n', "missing column(s) answer"),
    ('{"user_input": "q?", "retrieved_contexts": 5, "response": "a"}\n', "row 1: column 'retrieved_contexts' must be"),
    ('{"user_input": "q?", "retrieved_contexts": [], "response": "a"}\nnot json\n', "log.jsonl:2: not valid JSON"),
])
def test_a_bad_logged_file_is_one_line_and_stores_nothing(tmp_path, capsys, content, needle):
    f = tmp_path / "log.jsonl"
    f.write_text(content)
    ws = tmp_path / "ws"
    rc = main(["score", str(f), "--workspace", str(ws), "--no-progress", "--no-report"])
    assert rc == 2 and needle in capsys.readouterr().err
    assert not (ws / "results.duckdb").exists()


# ------------------------------------------------------------------ prompt templates

@pytest.fixture(scope="module")
def llm():
    from openai_server import start

    srv, url = start()
    yield url
    srv.shutdown()


def test_a_prompt_template_is_sent_stored_by_hash_and_its_fallback_scores_abstention(llm, tmp_path, capsys):
    from openai_server import Handler

    tpl = tmp_path / "prompt.toml"
    tpl.write_text('fallback = "NO ANSWER IN THE PASSAGES."\n'
                   'system = "Use the passages only. If they do not answer, reply with exactly: {fallback}"\n'
                   'user = "Passages:\\n\\n{context}\\n\\nQuestion: {question}\\nAnswer:"\n')
    ws = tmp_path / "ws"
    n = len(Handler.bodies)
    assert main(["run", "--dataset", "squad2", "--limit", "6", "--workspace", str(ws), *FAST, "--strategies", "chunks",
                 "--llm-base-url", llm, "--llm-model", "abstain", "--prompt", str(tpl), "--run-id", "T"]) == 0
    sent = [json.loads(b) for b in Handler.bodies[n:]]
    assert len(sent) == 6 and all(b["messages"][1]["content"].startswith("Passages:\n\n[1] (source: ")
                                  for b in sent)
    con = _db(ws)
    cfg = json.loads(con.execute("SELECT config FROM runs").fetchone()[0])
    ab = con.execute("SELECT r.question_id, s.value FROM scores s JOIN results r USING (run_id, strategy, point_id, "
                     "question_id, repeat) WHERE s.metric='abstention_accuracy' AND s.status='ok'").fetchall()
    ans = {a for (a,) in con.execute("SELECT DISTINCT answer FROM results").fetchall()}
    tokens = con.execute("SELECT min(prompt_tokens) FROM results").fetchone()[0]
    con.close()
    import hashlib
    assert cfg["prompt"]["sha256"] == hashlib.sha256(json.dumps(
        [cfg["prompt"]["system"], cfg["prompt"]["user"], cfg["prompt"]["fallback"]]).encode()).hexdigest()
    assert ans == {"NO ANSWER IN THE PASSAGES."} and tokens > 0
    from rag.ingest.corpora import load_bundled
    answerable = {q.qid: q.answerable for q in load_bundled("squad2").questions}
    # the run's own abstention sentence counts as abstaining: right on unanswerable, wrong on answerable
    assert ab and all(v == (0.0 if answerable[qid] else 1.0) for qid, v in ab)


@pytest.mark.parametrize("body,suffix,needle", [
    ("Context: {context}\nQ: {question} {lang}", ".txt", "unknown placeholder(s) {lang} in user"),
    ("Q: {question}", ".txt", "the user template needs {context}"),
    ('user = "{question} {context}"\nsytem = "x"\n', ".toml", "unknown key(s) ['sytem']"),
])
def test_a_bad_prompt_template_is_one_line(tmp_path, capsys, body, suffix, needle):
    tpl = tmp_path / f"p{suffix}"
    tpl.write_text(body)
    rc = main(["run", "--dataset", "squad2", "--limit", "1", "--workspace", str(tmp_path / "ws"), *FAST,
               "--llm-base-url", "http://127.0.0.1:9/v1", "--llm-model", "m", "--prompt", str(tpl)])
    assert rc == 2 and needle in capsys.readouterr().err


def test_a_prompt_with_the_offline_answerer_is_refused_not_ignored(tmp_path, capsys):
    tpl = tmp_path / "p.txt"
    tpl.write_text("{context}\n{question}")
    rc = main(["run", "--dataset", "squad2", "--limit", "1", "--workspace", str(tmp_path / "ws"), *FAST,
               "--prompt", str(tpl)])
    assert rc == 2 and "the offline extractive answerer writes no prompt" in capsys.readouterr().err


def test_a_service_gets_the_conversation_so_far_on_a_multi_turn_set(service, tmp_path):
    from rag_service import Service

    ws = tmp_path / "ws"
    n = len(Service.requests)
    assert main(["run", "--dataset", "mtrag-govt", "--limit", "4", "--workspace", str(ws), *FAST,
                 "--strategies", "none", "--system", f"svc={service}/v1", "--run-id", "C"]) == 0
    sent = sorted((body for _, body in Service.requests[n:]), key=lambda b: len(b["history"]))  # sent concurrently
    assert len(sent) == 4 and sent[0]["history"] == []
    assert [len(b["history"]) for b in sent] == [0, 2, 4, 6]  # each earlier turn: the user's and the gold answer
    assert sent[1]["history"][0] == {"role": "user", "content": sent[0]["question"]}
    con = _db(ws)
    turns = con.execute("SELECT turn FROM results ORDER BY turn").fetchall()
    con.close()
    assert turns == [(1,), (2,), (3,), (4,)]


def test_a_mapping_path_the_response_lacks_is_a_parse_error_naming_it(service, tmp_path):
    mp = tmp_path / "m.toml"
    mp.write_text('[response]\nanswer = "data.reply"\n')
    ws = tmp_path / "ws"
    assert main(["run", "--dataset", "squad2", "--limit", "2", "--workspace", str(ws), *FAST, "--strategies", "none",
                 "--system", f"s={service}/v1", "--system-map", f"s={mp}", "--retries", "0"]) == 6  # all failed
    con = _db(ws)
    rows = con.execute("SELECT answer_status, answer_error FROM results").fetchall()
    con.close()
    assert rows and all(s == "parse_error" and "response has no 'data.reply'" in e for s, e in rows)
