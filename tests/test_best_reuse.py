"""`ragwb best`'s TOML runs from any working folder and on the grid's own index (issues 72 item 6, 74 item 6):
a real folder given by a relative path, a real index grid, the TOML run from elsewhere, the LanceDB tables counted."""
from __future__ import annotations

import json
import subprocess
import sys
import tomllib
from pathlib import Path

import duckdb

REPO = Path(__file__).resolve().parents[1]


def ragwb(cwd: Path, *args: str) -> subprocess.CompletedProcess:
    quiet = ["--no-progress"] if args[0] == "run" else []
    p = subprocess.run([sys.executable, "-m", "evals.cli", *args, *quiet], cwd=cwd, capture_output=True,
                       text=True, timeout=600)
    assert p.returncode == 0, p.stderr[-3000:]
    return p


def tables(ws: Path) -> list[str]:
    return sorted(p.name for p in (ws / "lancedb").glob("*__meta.lance"))


def f1_of(ws: Path, run_id: str) -> dict:
    con = duckdb.connect(str(ws / "results.duckdb"), read_only=True)
    try:
        return dict(con.execute("select question_id, value from scores where run_id = ? and metric = 'f1'",
                                [run_id]).fetchall())
    finally:
        con.close()


def test_best_toml_runs_from_another_folder_on_the_grids_index(tmp_path):
    proj = tmp_path / "project"
    (proj / "docs").mkdir(parents=True)
    for i in range(5):
        body = " ".join(f"Depot {i}-{j} stores {7 * j + i} crates of tea and rope." for j in range(40))
        (proj / "docs" / f"d{i}.txt").write_text(body + "\n")
    (proj / "q.jsonl").write_text("".join(json.dumps({"id": f"q{i}", "question": f"How many crates does depot "
                                                            f"{i}-3 store?", "answers": [f"{21 + i} crates"]}) + "\n"
                                          for i in range(5)))
    ws = tmp_path / "ws"
    ragwb(proj, "run", "--dataset", "docs", "--questions", "q.jsonl", "--workspace", str(ws), "--embedder", "hash",
          "--strategies", "chunks", "--set", "index.chunk_tokens=32,64", "--set", "index.chunker=tokens",
          "--no-report")
    built = tables(ws)
    assert len(built) == 2
    ragwb(proj, "best", "latest", "--metric", "f1", "--out", "best.toml", "--workspace", str(ws))
    toml = tomllib.loads((proj / "best.toml").read_text())
    assert toml["run"]["datasets"] == [str((proj / "docs").resolve())]  # not "docs": that ran only from proj
    grid_run = duckdb.connect(str(ws / "results.duckdb"), read_only=True).execute(
        "select run_id from runs order by created_at").fetchall()[-1][0]
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    p = ragwb(elsewhere, "run", "--config", str(proj / "best.toml"), "--workspace", str(ws), "--embedder", "hash",
              "--no-report")
    assert tables(ws) == built, p.stderr  # the grid's index, not a twin
    again = duckdb.connect(str(ws / "results.duckdb"), read_only=True).execute(
        "select run_id from runs order by created_at").fetchall()[-1][0]
    point = toml["index"]["chunk_tokens"]
    con = duckdb.connect(str(ws / "results.duckdb"), read_only=True)
    grid_point = dict(con.execute(
        "select s.question_id, s.value from scores s join results r using (run_id, strategy, point_id, question_id, "
        "repeat) where s.run_id = ? and s.metric = 'f1' and r.point_label like ?",
        [grid_run, f"%chunk_tokens={point}%"]).fetchall())
    con.close()
    assert grid_point and f1_of(ws, again) == grid_point


def test_a_setting_no_chunker_reads_runs_on_the_index_already_built(tmp_path):
    docs = tmp_path / "docs"
    docs.mkdir()
    for i in range(3):
        (docs / f"d{i}.txt").write_text(" ".join(f"Shelf {i}-{j} holds {j} jars." for j in range(60)) + "\n")
    q = tmp_path / "q.jsonl"
    q.write_text(json.dumps({"id": "a", "question": "What does shelf 1-4 hold?", "answers": ["4 jars"]}) + "\n")
    ws = tmp_path / "ws"
    common = ["--dataset", str(docs), "--questions", str(q), "--workspace", str(ws), "--embedder", "hash",
              "--strategies", "chunks", "--chunker", "tokens", "--no-report"]
    ragwb(tmp_path, "run", *common)
    built = tables(ws)
    p = ragwb(tmp_path, "run", *common, "--leaf-min", "50")  # the tokens chunker never reads leaf_min
    assert tables(ws) == built
    assert "already holds these chunks (the settings that differ, leaf_min," in p.stderr
    p = ragwb(tmp_path, "run", *common, "--chunk-tokens", "64")  # one it reads: a new index
    assert len(tables(ws)) == len(built) + 1 and "already holds" not in p.stderr
