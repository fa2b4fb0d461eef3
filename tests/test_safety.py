"""Crash-safe, concurrency-safe workspace and store; every bad knob a clear error. Real
processes, real kill -9 (SIGKILL at named points of an ingest), real LanceDB and DuckDB files."""
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pyarrow.compute as pc
import pytest

from evals.cli import main
from evals.store import ResultStore
from rag.ingest.readers import ParseCache
from rag.ingest.folders import load_folder
from rag.index.workspace import IndexConfig, Workspace
from rag.index.locks import WorkspaceLock
from rag.index.embedders import EmbedderConfig
from pdfgen import make_pdf

HASH = IndexConfig(embedder=EmbedderConfig("hash"))
REPO = Path(__file__).resolve().parents[1]


def ragwb(*args, env=None, **kw):
    return subprocess.run([sys.executable, "-m", "evals.cli", *args], cwd=REPO, capture_output=True, text=True,
                          env={**os.environ, **(env or {})}, timeout=600, **kw)


def _corpus(root: Path, version: int = 1) -> Path:
    root.mkdir(exist_ok=True)
    for i in range(6):
        body = "\n\n".join(f"Section {j} of report {i} (v{version}) says revenue was {i * 10 + j} million dollars "
                           f"and margins moved by {j} points." for j in range(40))
        (root / f"r{i}.md").write_text(f"# Report {i}\n\n{body}\n")
    return root


def _state(ws: Path):
    w = Workspace(ws)
    idx = next(t for t in w.table_names() if t.endswith("__chunks")).rsplit("__", 1)[0]
    ch = w.table(idx, "chunks").to_arrow()
    docs = w.table(idx, "documents").to_arrow()
    return {"chunk_ids": sorted(ch.column("chunk_id").to_pylist()),
            "texts": sorted(ch.column("text").to_pylist()),
            "docs": sorted(docs.column("doc_id").to_pylist()),
            "pages": w.table(idx, "pages").count_rows()}


def _ingest(corpus: Path, ws: Path):
    return Workspace(ws).ingest(load_folder(corpus), HASH, progress=False)


@pytest.mark.parametrize("point", ["tables_created", "before_chunks", "embedding"])
def test_kill_9_during_ingest_is_repaired_by_the_next_ingest(tmp_path, point):
    corpus = _corpus(tmp_path / "corpus")
    ref = tmp_path / "ref"
    _ingest(corpus, ref)
    ws = tmp_path / "ws"
    # a real ingest process killed (SIGKILL) at `point`, then the next ingest must repair
    p = ragwb("ingest", str(corpus), "--embedder", "hash", "--workspace", str(ws), "--no-progress",
              env={"RAGWB_CRASH_AT": point})
    assert p.returncode == -9, p.stderr[-500:]
    _ingest(corpus, ws)
    assert _state(ws) == _state(ref)
    # a changed corpus killed again: no chunk of the old version may survive as "unchanged"
    _corpus(corpus, version=2)
    p = ragwb("ingest", str(corpus), "--embedder", "hash", "--workspace", str(ws), "--no-progress",
              env={"RAGWB_CRASH_AT": point})
    assert p.returncode == -9
    summ = _ingest(corpus, ws)
    _ingest(corpus, tmp_path / "ref2")
    assert _state(ws) == _state(tmp_path / "ref2")
    assert all("(v2)" in t or t.startswith("# Report") for t in _state(ws)["texts"])
    if point != "embedding":  # killed after writing: this ingest found and redid the half-written documents
        assert summ.replaced + summ.added > 0 or summ.notices


def test_half_created_table_is_rebuilt_with_a_notice(tmp_path):
    ws = tmp_path / "ws"
    w = Workspace(ws)
    ds = load_folder(_corpus(tmp_path / "corpus"))
    first = w.ingest(ds, HASH, progress=False)
    # what a kill during table creation leaves: a table folder with no committed version
    broken = ws / "lancedb" / f"{first.index}__chunks.lance"
    shutil.rmtree(broken / "_versions")
    summ = Workspace(ws).ingest(ds, HASH, progress=False)
    assert any("rebuilt table" in n and "__chunks" in n for n in summ.notices)
    assert "notice: rebuilt table" in summ.render()
    assert summ.chunks == first.chunks
    assert main(["run", "--dataset", str(tmp_path / "corpus"), "--workspace", str(ws), "--embedder", "hash",
                 "--no-progress", "--no-report", "--strategies", "chunks"]) == 2  # no questions: said, not crashed


def test_two_concurrent_ingests_leave_no_duplicates(tmp_path):
    ws = tmp_path / "ws"
    cmd = [sys.executable, "-m", "evals.cli", "ingest", "squad2", "xquad-en", "--embedder", "hash", "--workspace",
           str(ws), "--no-progress"]
    procs = [subprocess.Popen(cmd, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for _ in range(2)]
    outs = [p.communicate(timeout=600) for p in procs]
    assert [p.returncode for p in procs] == [0, 0], [o[1][-400:] for o in outs]
    w = Workspace(ws)
    for t in w.table_names():
        if t.endswith("__chunks") or t.endswith("__documents") or t.endswith("__pages"):
            tab = w.db.open_table(t).to_arrow()
            col = tab.column(tab.schema.names[0])
            assert len(col) == len(pc.unique(col)), t


def test_a_second_writer_waits_or_fails_in_one_line(tmp_path, capsys):
    ws = tmp_path / "ws"
    ws.mkdir()
    with WorkspaceLock(ws, 0):
        assert main(["ingest", "squad2", "--embedder", "hash", "--workspace", str(ws), "--no-progress",
                     "--wait", "0"]) == 2
        err = capsys.readouterr().err
        assert "being written by pid" in err and err.count("\n") == 1
        t0 = time.monotonic()
        assert main(["ingest", "squad2", "--embedder", "hash", "--workspace", str(ws), "--no-progress",
                     "--wait", "0.5"]) == 2
        assert time.monotonic() - t0 >= 0.5 and "after 0s" not in capsys.readouterr().err


def test_readers_see_a_run_in_progress(tmp_path):
    ws = tmp_path / "ws"
    assert ragwb("ingest", "squad2", "--embedder", "hash", "--workspace", str(ws), "--no-progress").returncode == 0
    run = subprocess.Popen([sys.executable, "-m", "evals.cli", "run", "--dataset", "squad2", "--embedder", "hash",
                            "--workspace", str(ws), "--no-progress", "--no-report", "--run-id", "LIVE",
                            "--limit", "600"], cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    seen_running = False
    try:
        deadline = time.monotonic() + 300
        while time.monotonic() < deadline and run.poll() is None:
            r = ragwb("runs", "--workspace", str(ws))
            assert r.returncode == 0 and "Traceback" not in r.stderr, r.stderr[-500:]
            if "LIVE" in r.stdout and "running" in r.stdout:
                s = ragwb("show", "LIVE", "--workspace", str(ws))
                assert s.returncode == 0 and "Traceback" not in s.stderr, s.stderr[-500:]
                assert "status running" in s.stdout
                seen_running = True
                break
            time.sleep(0.2)
    finally:
        out, err = run.communicate(timeout=600)
    assert run.returncode == 0, err[-800:]
    assert seen_running
    with ResultStore(ws / "results.duckdb", read_only=True) as st:
        assert st.run("LIVE")["status"] == "finished" and len(st.results("LIVE")) == 600 * 5


def test_resume_refuses_a_changed_corpus_unless_told(tmp_path, capsys):
    corpus = _corpus(tmp_path / "corpus")
    q = tmp_path / "q.jsonl"
    q.write_text(json.dumps({"id": "a", "question": "What was revenue in report 1?", "answers": ["10 million"],
                             "evidence": [{"doc": "r1.md"}]}) + "\n")
    ws = tmp_path / "ws"
    base = ["--workspace", str(ws), "--embedder", "hash", "--no-progress", "--no-report"]
    assert main(["run", "--dataset", str(corpus), "--questions", str(q), "--run-id", "R",
                 "--strategies", "chunks"] + base) == 0
    assert main(["run", "--dataset", str(corpus), "--run-id", "R", "--strategies", "chunks"] + base) == 2
    assert "already exists" in capsys.readouterr().err
    (corpus / "r3.md").write_text("# Report 3\n\nRewritten.\n")
    assert main(["run", "--resume", "R"] + base) == 2
    err = capsys.readouterr().err
    assert "corpus changed" in err and "r3.md" in err and "--allow-changed-corpus" in err
    assert main(["run", "--resume", "R", "--allow-changed-corpus"] + base) == 0


@pytest.mark.parametrize("argv,needle", [
    (["run", "--concurrency", "0"], "--concurrency: must be >= 1"),
    (["run", "--limit", "-1"], "--limit: must be >= 1"),
    (["run", "--limit", "0"], "--limit: must be >= 1"),
    (["run", "--repeats", "0"], "--repeats: must be >= 1"),
    (["run", "--retries", "-1"], "--retries: must be >= 0"),
    (["run", "--timeout", "0"], "--timeout: must be > 0"),
    (["run", "--timeout", "-3"], "--timeout: must be > 0"),
    (["run", "--run-id", "../evil"], "not a valid run id"),
])
def test_bad_knobs_are_one_clear_line(tmp_path, capsys, argv, needle):
    with pytest.raises(SystemExit) as e:
        main(argv + ["--workspace", str(tmp_path / "ws")])
    assert e.value.code == 2
    err = capsys.readouterr().err
    assert needle in err and "Traceback" not in err
    assert not (tmp_path / "ws").exists()  # nothing written


@pytest.mark.parametrize("toml,needle", [
    ("[strategies.chunk]\ntop_k = 4\n", "unknown strategy [strategies.chunk]"),
    ("[run]\nlimt = 1\n", "unknown key [run] limt"),
    ('[run]\nlimit = "abc"\n', "[run] limit must be an integer"),
    ("[strategies.chunks]\ntop_kk = 4\n", "top_kk"),
    ("[strategis.chunks]\ntop_k = 4\n", "unknown section [strategis]"),
    ("[strategies.hybrid]\nalpha = [0.5, 2.0]\n", "alpha must be within"),
])
def test_sweep_typos_name_file_and_key(tmp_path, capsys, toml, needle):
    f = tmp_path / "sweep.toml"
    f.write_text(toml)
    assert main(["run", "--config", str(f), "--workspace", str(tmp_path / "ws")]) == 2
    err = capsys.readouterr().err
    assert needle in err and str(f) in err
    assert not (tmp_path / "ws" / "results.duckdb").exists()


def test_inputs_questions_dir_export_quote_strict_empty_and_url_keys(tmp_path, capsys):
    corpus = _corpus(tmp_path / "corpus")
    ws = tmp_path / "ws"
    assert main(["ingest", str(corpus), "--questions", str(tmp_path), "--workspace", str(ws), "--embedder", "hash",
                 "--no-progress"]) == 2
    assert "is a folder" in capsys.readouterr().err
    empty = tmp_path / "empty.jsonl"
    empty.write_text("")
    assert main(["ingest", str(corpus), "--questions", str(empty), "--strict", "--workspace", str(ws),
                 "--embedder", "hash", "--no-progress"]) == 3
    q = tmp_path / "q.jsonl"
    q.write_text(json.dumps({"id": "a", "question": "Revenue in report 2?", "answers": ["20 million"]}) + "\n")
    assert main(["run", "--dataset", str(corpus), "--questions", str(q), "--run-id", "E", "--strategies", "chunks",
                 "--workspace", str(ws), "--embedder", "hash", "--no-progress"]) == 0
    out = tmp_path / "it's here"
    assert main(["export", "E", "--format", "csv", "--out", str(out), "--workspace", str(ws)]) == 0
    assert (out / "E_results.csv").exists() and (out / "E_scores.csv").read_text().count("\n") > 5
    from evals.run.runner import RunConfig
    from rag.llm.client import LLMConfig
    cfg = RunConfig(llm=LLMConfig("http://user:SECRETKEY@127.0.0.1:9/v1?api_key=SECRET2", "m"),
                    index=IndexConfig(embedder=EmbedderConfig("openai", "https://u:SECRET3@h/v1", "m")))
    dumped = json.dumps(cfg.to_dict())
    assert "SECRET" not in dumped and "***@127.0.0.1" in dumped


def test_symlinks_loops_and_folders_named_like_files(tmp_path, capsys):
    outside = tmp_path / "secret.txt"
    outside.write_text("root:x:0:0 private text that must not reach a prompt\n")
    corpus = tmp_path / "corpus"
    corpus.mkdir()
    (corpus / "a.md").write_text("# A\n\nAlpha.\n")
    (corpus / "link.txt").symlink_to(outside)
    (corpus / "loop").symlink_to(corpus, target_is_directory=True)
    (corpus / "dir.pdf").mkdir()
    (corpus / "dir.pdf" / "b.md").write_text("# B\n\nBeta.\n")
    ds = load_folder(corpus)
    assert sorted(d.doc_id for d in ds.documents) == ["a.md", "dir.pdf/b.md"]
    reasons = {Path(s.path).name: s.reason for s in ds.skipped}
    assert "symbolic link" in reasons["link.txt"] and "outside" in reasons["link.txt"]
    assert "symbolic link" in reasons["loop"]
    assert "folder named like a document" in reasons["dir.pdf"]
    ds = load_folder(corpus, follow_symlinks=True)
    ids = sorted(d.doc_id for d in ds.documents)
    assert "link.txt" in ids and any("loop" in s.reason for s in ds.skipped)


def test_parsed_pages_are_cached_by_content_hash(tmp_path):
    corpus = tmp_path / "corpus"
    corpus.mkdir()
    for i in range(3):
        make_pdf(corpus / f"f{i}.pdf", [[f"Filing {i} page {j} text about revenue."] for j in range(4)])
    cache = ParseCache(tmp_path / "cache")
    a = load_folder(corpus, parse_cache=cache)
    assert (cache.hits, cache.misses) == (0, 3)
    b = load_folder(corpus, parse_cache=cache)
    assert cache.hits == 3 and [d.text for d in a.documents] == [d.text for d in b.documents]
    make_pdf(corpus / "f1.pdf", [["Changed filing."]])
    c = load_folder(corpus, parse_cache=cache)
    assert cache.misses == 4 and c.doc("f1.pdf").text == "Changed filing."
    summ = Workspace(tmp_path / "ws").ingest(c, HASH, progress=False)
    assert set(summ.file_parse_seconds) == {str(corpus / f"f{i}.pdf") for i in range(3)}
    assert "slowest files" in summ.render()


def test_gate_matches_points_by_parameters_and_fails_on_missing_points(tmp_path, capsys):
    ws = tmp_path / "ws"
    base = ["--dataset", "xquad-en", "--limit", "30", "--embedder", "hash", "--workspace", str(ws), "--no-progress",
            "--no-report", "--strategies", "chunks"]
    assert main(["run", "--run-id", "B"] + base) == 0
    assert main(["run", "--run-id", "C", "--set", "chunks.top_k=8,4"] + base) == 0
    md = tmp_path / "gate.md"
    # a candidate point with no baseline: the runs are not comparable, exit 3 (docs/gate.md, Exit codes)
    assert main(["gate", "--baseline", "B", "--candidate", "C", "--workspace", str(ws), "--markdown", str(md),
                 "--json", str(tmp_path / "g.json")]) == 3
    text = md.read_text()
    assert "compared 1 of 2 candidate points" in text and "top_k=4" in text and "FAILED" in text
    res = json.loads((tmp_path / "g.json").read_text())
    assert {r["point"] for r in res["rows"]} == {"top_k=8"}  # `defaults` matched `top_k=8` by parameters
    assert main(["gate", "--baseline", "B", "--candidate", "C", "--workspace", str(ws), "--allow-missing-points",
                 "--json", ""]) == 0
    capsys.readouterr()


def test_ann_index_on_a_small_table_recalls_exact_search(tmp_path):
    from rag.ingest.corpora import load_bundled
    from rag.index.retrieval import Retriever
    from rag.strategies import default_strategies, retrieve
    ds = load_bundled("squad2")
    exact_ws, ann_ws = Workspace(tmp_path / "exact"), Workspace(tmp_path / "ann")
    e = exact_ws.ingest(ds, HASH, progress=False, vector_index="exact")
    a = ann_ws.ingest(ds, HASH, progress=False, vector_index="ann")  # the threshold, lowered to this table
    assert e.vector_index == "exact" and a.vector_index == "IVF_HNSW_SQ" and "IVF_HNSW_SQ (built in" in a.render()
    re_, ra = Retriever(exact_ws, e.index), Retriever(ann_ws, a.index)
    assert re_.reader.vectors is not None and ra.reader.vectors is None  # ANN: vectors stay in LanceDB
    recall = []
    for q in ds.questions[:40]:
        v = re_.embed_queries([q.text])[0]
        ex, _ = re_.dense(v, 10)
        an, _ = ra.dense(v, 10)
        recall.append(len({re_.reader.chunk_ids[i] for i in ex} & {ra.reader.chunk_ids[i] for i in an}) / 10)
    assert sum(recall) / len(recall) >= 0.9
    for name in default_strategies():  # every strategy runs on the ANN index (two_phase_pages reads page vectors)
        assert retrieve(ra, name, ds.questions[0].text).blocks
    assert main(["ingest", "squad2", "--embedder", "hash", "--workspace", str(tmp_path / "ann"), "--no-progress",
                 "--vector-index", "exact"]) == 0  # the CLI switch drops the ANN index again
    assert Retriever(Workspace(tmp_path / "ann"), a.index).reader.vectors is not None
    # a run still reading through the ANN reader keeps its snapshot: its page vectors were not deleted
    pages = list(ra.reader.page_vector_rows)[:3]
    assert ra.reader.page_vector_table.take([ra.reader.page_vector_rows[p] for p in pages]).num_rows == 3
    assert retrieve(ra, "two_phase_pages", ds.questions[1].text).blocks


def test_report_of_a_run_that_committed_nothing(tmp_path):
    from evals.report.html import write_report
    st = ResultStore(tmp_path / "r.duckdb")
    st.create_run("Z", {"dataset": "squad2", "config": {}, "config_hash": "x", "planned": 10})  # killed at once
    html = write_report("Z", db=tmp_path / "r.duckdb", out_dir=tmp_path / "rep").read_text()
    assert "run Z" in html and "no scored questions" in html
