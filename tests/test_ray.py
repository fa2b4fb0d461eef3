"""--engine ray against a real local Ray runtime (ray.init(num_cpus=2)), no mocks: ingest equals a
local ingest, a run equals a local run row for row, a killed worker loses and doubles nothing, and
LLM concurrency is bounded across the whole cluster (checked at a real HTTP server)."""
import shutil

import duckdb
import lancedb
import numpy as np
import pytest

from evals.cli import main
from evals.run.engines import get_run_engine
from evals.run.runner import RunConfig, run_evaluation
from openai_server import Handler, start
from tests.pdfgen import make_pdf

ray = pytest.importorskip("ray", reason="the [ray] extra is part of the test extras")

LATENCY = {"retrieve_ms", "pack_ms", "answer_ms", "score_ms", "run_id"}


@pytest.fixture(scope="module", autouse=True)
def ray_runtime():
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    yield
    ray.shutdown()


def tables(ws):
    db = lancedb.connect(str(ws / "lancedb"))
    out = {}
    for name in db.table_names():
        kind = name.rsplit("__", 1)[-1]
        if kind in ("documents", "pages", "parents", "chunks"):
            df = db.open_table(name).to_pandas()
            out[name] = df.sort_values(df.columns[0]).reset_index(drop=True)
    return out


def assert_same_index(a, b):
    ta, tb = tables(a), tables(b)
    assert sorted(ta) == sorted(tb) and ta
    for name in ta:
        x, y = ta[name], tb[name]
        cols = [c for c in x.columns if c != "vector"]
        assert list(x.columns) == list(y.columns), name
        assert x[cols].astype(str).equals(y[cols].astype(str)), name
        if "vector" in x.columns:
            np.testing.assert_allclose(np.vstack(x.vector), np.vstack(y.vector), atol=1e-5)
    return ta


def test_ray_ingest_of_a_bundled_set_equals_the_local_ingest(tmp_path, capsys):
    assert main(["ingest", "xquad-en", "--workspace", str(tmp_path / "local"), "--no-progress"]) == 0
    assert main(["ingest", "xquad-en", "--workspace", str(tmp_path / "ray"), "--no-progress",
                 "--engine", "ray"]) == 0
    out = capsys.readouterr().out
    assert "engine ray: ray (2 embedding actor(s)" in out
    t = assert_same_index(tmp_path / "local", tmp_path / "ray")
    assert any(n.endswith("__chunks") and len(df) > 50 for n, df in t.items())


def test_ray_ingest_parses_files_in_tasks_embeds_in_actors_and_resyncs(tmp_path, capsys):
    corpus = tmp_path / "corpus"
    corpus.mkdir()
    (corpus / "guide.md").write_text("# Guide\n\n## Install\n\nRun the installer, then restart the ma-\nchine.\n\n"
                                     "## Usage\n\nThe workbench measures context shape against token cost.\n")
    (corpus / "notes.txt").write_text("Harbour seals rest on rocks at low tide.\n\nThey dive for up to 30 minutes.")
    make_pdf(corpus / "report.pdf", [["Revenue grew 12 percent in 2023."], [], ["The final page mentions Lisbon."]])
    (corpus / "broken.pdf").write_bytes(b"%PDF-1.7 this is not really a pdf")
    (corpus / "empty.txt").write_text("")
    args = ["--embedder", "e5", "--chunk-tokens", "40", "--overlap", "4", "--no-progress"]
    assert main(["ingest", str(corpus), "--workspace", str(tmp_path / "local"), *args]) == 0
    local_out = capsys.readouterr().out
    assert main(["ingest", str(corpus), "--workspace", str(tmp_path / "ray"), "--engine", "ray", *args]) == 0
    ray_out = capsys.readouterr().out
    # the same files skipped for the same reasons, whichever engine parsed them
    skipped = lambda out: sorted(x.strip() for x in out.splitlines() if x.strip().startswith("- "))  # noqa: E731
    assert skipped(ray_out) == skipped(local_out) and len(skipped(ray_out)) == 2
    assert "embedded 0 chunks" not in ray_out  # the actors really embedded (fresh cache, unshipped set)
    assert_same_index(tmp_path / "local", tmp_path / "ray")
    # change one file: both engines replace exactly that document's rows
    (corpus / "notes.txt").write_text("Harbour seals rest on rocks at low tide.\n\nThey can dive for 40 minutes.")
    for eng in ("local", "ray"):
        assert main(["ingest", str(corpus), "--workspace", str(tmp_path / eng), "--engine", eng, *args]) == 0
        assert "replaced 1, unchanged 2" in capsys.readouterr().out
    t = assert_same_index(tmp_path / "local", tmp_path / "ray")
    chunks = next(df for n, df in t.items() if n.endswith("__chunks"))
    assert chunks.text.str.contains("40 minutes").any() and not chunks.text.str.contains("30 minutes").any()


@pytest.fixture(scope="module")
def ingested(tmp_path_factory):
    ws = tmp_path_factory.mktemp("ws")
    assert main(["ingest", "xquad-en", "--workspace", str(ws), "--no-progress"]) == 0
    return ws


def rows(db, run_id):
    con = duckdb.connect(str(db), read_only=True)
    cols = [r[0] for r in con.execute("DESCRIBE results").fetchall() if r[0] not in LATENCY]
    res = sorted(con.execute(f"SELECT {', '.join(cols)} FROM results WHERE run_id = ?", [run_id]).fetchall(), key=str)
    sc = sorted(con.execute("SELECT strategy, point_id, question_id, repeat, metric, value, status, detail "
                            "FROM scores WHERE run_id = ?", [run_id]).fetchall(), key=str)
    con.close()
    return res, sc


CFG = RunConfig(dataset="xquad-en", limit=12)


def test_ray_run_equals_the_local_run_row_for_row(ingested, capsys):
    run_evaluation(CFG, ingested, run_id="L", progress=False)
    assert main(["run", "--dataset", "xquad-en", "--limit", "12", "--workspace", str(ingested), "--run-id", "R",
                 "--engine", "ray", "--no-report", "--no-progress"]) == 0
    out = capsys.readouterr().out
    assert "60 items" in out and "on ray (2 worker(s)" in out
    local, remote = rows(ingested / "results.duckdb", "L"), rows(ingested / "results.duckdb", "R")
    assert len(local[0]) == 60 and len(local[1]) > 60 * 10
    assert remote == local


def test_address_without_the_ray_engine_is_an_error_not_ignored(tmp_path, capsys):
    for cmd in (["ingest", "xquad-en"], ["run", "--dataset", "xquad-en", "--limit", "2"]):
        assert main([*cmd, "--workspace", str(tmp_path), "--address", "auto", "--no-progress"]) == 2
        assert "--address auto needs --engine ray" in capsys.readouterr().err
    assert not (tmp_path / "results.duckdb").exists()  # nothing ran


def test_a_killed_worker_leaves_no_missing_and_no_duplicated_rows(ingested):
    engine = get_run_engine("ray")
    killed = []

    def kill_one(n_committed):  # after the first commit, while shards are still in flight
        if not killed:
            killed.append(engine.actors[0])
            ray.kill(engine.actors[0], no_restart=False)

    s = run_evaluation(CFG, ingested, run_id="K", progress=False, engine=engine, shard_questions=1,
                       flush_every=3, on_flush=kill_one)
    assert killed and engine.retried >= 1 and "sent again after a worker died" in s.engine
    assert s.items == 60
    con = duckdb.connect(str(ingested / "results.duckdb"), read_only=True)
    dup = con.execute("SELECT count(*) FROM (SELECT strategy, point_id, question_id, repeat, count(*) n "
                      "FROM results WHERE run_id='K' GROUP BY ALL HAVING n > 1)").fetchone()[0]
    con.close()
    assert dup == 0
    if not rows(ingested / "results.duckdb", "L")[0]:
        run_evaluation(CFG, ingested, run_id="L", progress=False)
    assert rows(ingested / "results.duckdb", "K") == rows(ingested / "results.duckdb", "L")


def test_llm_concurrency_is_bounded_across_the_cluster(ingested, tmp_path):
    srv, url = start()
    try:
        from rag.llm.client import LLMConfig

        ws = tmp_path / "ws"
        shutil.copytree(ingested / "lancedb", ws / "lancedb")
        shutil.copytree(ingested / "cache", ws / "cache")
        cfg = RunConfig(dataset="xquad-en", limit=8, answerer="openai", grid={"chunks": {}, "parent_child": {}},
                        llm=LLMConfig(url, "slow-extractive", max_concurrency=2))
        Handler.peak = 0
        engine = get_run_engine("ray")
        s = run_evaluation(cfg, ws, run_id="C", progress=False, engine=engine, shard_questions=2)
        # 2 workers x 2 threads each could send 4 at once; the cluster-wide limiter allows 2
        assert s.items == 16 and s.llm["calls"] == 16
        assert Handler.peak == 2 and engine.peak_llm == 2
        con = duckdb.connect(str(ws / "results.duckdb"), read_only=True)
        assert con.execute("SELECT DISTINCT answer_status FROM results").fetchall() == [("ok",)]
        con.close()
    finally:
        srv.shutdown()
