"""Issue 53, item 4: runs built on different indexes say so. `ragwb gate` (and the run comparison of the report and
the workbench) names the index difference in its first line, still pairs the points by question, and gates the
token costs a chunking moves only where --metrics asks for them."""
import json
import shutil
from pathlib import Path

from evals.analyze.gate import compare_runs, index_difference
from evals.cli import main
from evals.store import ResultStore

DATA = Path(__file__).resolve().parent / "data" / "as_written"


def test_gate_between_runs_on_different_indexes_names_the_difference(tmp_path, capsys):
    docs, ws = tmp_path / "handbook", tmp_path / "ws"
    shutil.copytree(DATA / "handbook", docs)
    run = ["run", "--dataset", str(docs), "--questions", str(DATA / "mixed.jsonl"), "--embedder", "hash",
           "--workspace", str(ws), "--no-progress", "--no-report", "--strategies", "chunks,hybrid"]
    assert main(run + ["--run-id", "SMALL", "--chunk-tokens", "16", "--overlap", "4"]) == 0
    assert main(run + ["--run-id", "BIG"]) == 0
    assert main(run + ["--run-id", "BIG2"]) == 0
    capsys.readouterr()
    # bigger chunks cost more context tokens (the default tolerance is 5%): reported, not a failure here
    out_json = tmp_path / "gate.json"
    assert main(["gate", "--baseline", "SMALL", "--candidate", "BIG", "--workspace", str(ws),
                 "--json", str(out_json)]) == 0
    out = capsys.readouterr().out
    first = out.splitlines()[0]
    assert first.startswith("index differs: chunk_tokens 16 vs 128, overlap 4 vs 16"), first
    res = json.loads(out_json.read_text())
    assert res["coverage"]["points_compared"] == 2 and res["coverage"]["questions_compared"] == 7
    tokens = [r for r in res["rows"] if r["metric"] == "context_tokens"]
    assert tokens and all(r["delta"] > 0 for r in tokens)
    assert any(r["verdict"] == "changed (index differs)" for r in tokens)
    # asked for by name, the costs are gated: the same delta fails
    assert main(["gate", "--baseline", "SMALL", "--candidate", "BIG", "--workspace", str(ws), "--metrics",
                 "f1,context_tokens", "--json", str(out_json)]) == 1
    assert any("context_tokens" in f for f in json.loads(out_json.read_text())["failures"])
    capsys.readouterr()
    # two runs on one index: no such line
    assert main(["gate", "--baseline", "BIG", "--candidate", "BIG2", "--workspace", str(ws),
                 "--json", str(out_json)]) == 0
    assert "index differs" not in capsys.readouterr().out
    with ResultStore(ws / "results.duckdb", read_only=True) as st:
        cmp = compare_runs(st, "SMALL", "BIG")
        assert cmp.attrs["coverage"]["index_difference"].startswith("index differs: chunk_tokens 16 vs 128")
        assert index_difference(st.run("BIG")["config"], st.run("BIG2")["config"]) == ""
    assert main(["report", "BIG", "--compare", "SMALL", "--workspace", str(ws)]) == 0
    html = (ws / "reports" / "report-BIG-vs-SMALL.html").read_text()
    assert "index differs: chunk_tokens 16 vs 128" in html


def test_index_difference_names_the_embedder_and_every_chunking_setting():
    a = {"index": {"chunking": {"chunker": "tokens", "chunk_tokens": 128, "overlap": 16},
                   "embedder": {"name": "e5", "model": None}}}
    b = {"index": {"chunking": {"chunker": "hierarchy", "chunk_tokens": 128, "overlap": 16},
                   "embedder": {"name": "openai", "model": "text-embedding-3-small"}}}
    assert index_difference(a, b) == ("index differs: chunker tokens vs hierarchy, embedder e5 vs openai, "
                                      "embed_model None vs text-embedding-3-small")
    assert index_difference(a, a) == "" and index_difference(None, None) == ""
