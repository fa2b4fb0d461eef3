"""`ragwb bench --only score-stream`: ``ragwb score`` on logs of a million rows (issue 54, item 8): a 1M-row CSV
with ``--metrics answer,citation,cost`` grew past 9 GB and stored nothing. Each size is scored in a fresh process
(its own peak resident memory, as a user's `ragwb score` has), and the time per row compared to the smallest."""
from __future__ import annotations

import csv
import json
import subprocess
import sys
import time
from pathlib import Path

_CHILD = r"""
import json, resource, sys, time
from evals.run.logged import score_logged
t = time.perf_counter()
res = score_logged(sys.argv[1], sys.argv[2], progress=False, metrics=["answer", "citation", "cost"])
print(json.dumps({"seconds": time.perf_counter() - t, "items": res["items"],
                  "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}))
"""


def write_log(path: Path, rows: int) -> Path:
    """A workbench-vocabulary CSV of ``rows`` records, ~190 bytes each as in the report (distinct questions, one
    short context, an answer citing it)."""
    from .logged import logged_rows

    base = logged_rows(1000, 300)
    with open(path, "w", newline="") as fh:
        w = csv.DictWriter(fh, ["question_id", "question", "answer", "contexts", "latency_ms"])
        w.writeheader()
        for i in range(rows):
            r = base[i % 1000]
            sentence = r["answer"][:-4][:120]
            w.writerow({"question_id": f"q{i}", "question": f"What does log line {i} say?",
                        "answer": sentence + " [1]", "contexts": json.dumps([sentence]),
                        "latency_ms": r["latency_ms"]})
    return path


def score_stream_figure(root: Path, sizes=(100_000, 1_000_000)) -> dict:
    root.mkdir(parents=True, exist_ok=True)
    out = []
    for n in sizes:
        log = write_log(root / f"log{n}.csv", n)
        t = time.perf_counter()
        proc = subprocess.run([sys.executable, "-c", _CHILD, str(log), str(root / f"ws{n}")], capture_output=True,
                              text=True, cwd=Path(__file__).resolve().parents[2])
        if proc.returncode:
            out.append({"rows": n, "error": proc.stderr.strip().splitlines()[-1:]})
            continue
        got = json.loads(proc.stdout.strip().splitlines()[-1])
        out.append({"rows": n, "file_mb": round(log.stat().st_size / 1e6, 1), "seconds": round(got["seconds"], 1),
                    "process_s": round(time.perf_counter() - t, 1), "us_per_row": round(got["seconds"] / n * 1e6, 1),
                    "peak_rss_mb": round(got["peak_rss_mb"]), "items": got["items"]})
        log.unlink()
    ok = [r for r in out if "us_per_row" in r]
    if len(ok) > 1:
        for r in ok[1:]:
            r["per_row_vs_smallest"] = round(r["us_per_row"] / ok[0]["us_per_row"], 2)
    return {"sizes": out, "target": "1M rows under 2 GB peak; time per row within 2x of the smallest size",
            "dataset_resume": dataset_resume_figure(root, max(sizes)), "unlocated": unlocated_figure(root)}


def unlocated_figure(root: Path, rows: int = 20_000) -> dict:
    """``ragwb score LOG --dataset squad2`` where no context is in the corpus (a service's own index, another
    version of the documents): every context goes through the normalised and fuzzy search of the documents sharing
    most of its words (rag/ingest/textmatch.py). 1,500 such records took 25 s of scoring, the region split into
    words again for every context; the split is kept per region now and the windows counted with numpy."""
    root.mkdir(parents=True, exist_ok=True)
    log = root / f"logu{rows}.csv"
    with open(log, "w", newline="") as fh:
        w = csv.DictWriter(fh, ["question_id", "question", "answer", "contexts"])
        w.writeheader()
        for i in range(rows):
            ctx = f"Record {i} says the river {i % 7} floods in spring, as the survey of {i % 13} towns found."
            w.writerow({"question_id": f"q{i}", "question": f"What does record {i} say?",
                        "answer": f"The river {i % 7} floods in spring [1].", "contexts": json.dumps([ctx])})
    args = ["score", str(log), "--dataset", "squad2", "--workspace", str(root / f"wsu{rows}"), "--no-progress",
            "--no-report", "--metrics", "answer,citation,cost", "--run-id", "UNLOCATED"]
    proc = subprocess.run([sys.executable, "-c", _CLI, *args], capture_output=True, text=True,
                          cwd=Path(__file__).resolve().parents[2])
    log.unlink()
    if proc.returncode:
        return {"rows": rows, "error": proc.stderr.strip().splitlines()[-1:]}
    got = json.loads(proc.stdout.strip().splitlines()[-1])
    return {"rows": rows, "seconds": round(got["seconds"], 1), "us_per_row": round(got["seconds"] / rows * 1e6, 1),
            "peak_rss_mb": round(got["peak_rss_mb"])}


_CLI = r"""
import json, resource, sys, time
from evals.cli import main
t = time.perf_counter()
rc = main(sys.argv[1:])
print(json.dumps({"rc": rc, "seconds": time.perf_counter() - t,
                  "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}))
"""


def _count(db: Path, run_id: str) -> int:
    import duckdb

    try:
        con = duckdb.connect(str(db), read_only=True)
    except duckdb.Error:
        return -1  # the writer holds it: a batch is being committed
    try:
        return con.execute("SELECT count(*) FROM results WHERE run_id = ?", [run_id]).fetchone()[0]
    except duckdb.Error:
        return -1
    finally:
        con.close()


def dataset_resume_figure(root: Path, rows: int = 1_000_000) -> dict:
    """``ragwb score LOG --dataset squad2`` on ``rows`` records (each matched against the gold set, its context
    located in the corpus): time and peak RSS in a fresh process; then the same file killed (SIGKILL) at half and
    ``--resume``d, with the counts checked: every record stored once (issue 64, item 1: a killed score against a
    gold set could never be resumed)."""
    import os
    import signal

    import duckdb

    root.mkdir(parents=True, exist_ok=True)
    log = write_log(root / f"logd{rows}.csv", rows)
    ws = root / f"wsd{rows}"
    db = ws / "results.duckdb"
    args = ["score", str(log), "--dataset", "squad2", "--workspace", str(ws), "--no-progress", "--no-report",
            "--metrics", "answer,citation,cost"]
    repo = Path(__file__).resolve().parents[2]
    whole = subprocess.run([sys.executable, "-c", _CLI, *args, "--run-id", "WHOLE"], capture_output=True, text=True,
                           cwd=repo)
    if whole.returncode:
        return {"rows": rows, "error": whole.stderr.strip().splitlines()[-1:]}
    got = json.loads(whole.stdout.strip().splitlines()[-1])
    out = {"rows": rows, "file_mb": round(log.stat().st_size / 1e6, 1), "seconds": round(got["seconds"], 1),
           "us_per_row": round(got["seconds"] / rows * 1e6, 1), "peak_rss_mb": round(got["peak_rss_mb"])}
    child = subprocess.Popen([sys.executable, "-c", _CLI, *args, "--run-id", "KILLED"], cwd=repo,
                             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    while child.poll() is None and _count(db, "KILLED") < rows // 2:
        time.sleep(0.2)
    os.kill(child.pid, signal.SIGKILL)
    child.wait()
    out["killed_at"] = max(_count(db, "KILLED"), 0)
    resumed = subprocess.run([sys.executable, "-c", _CLI, *args[:2], "--workspace", str(ws), "--no-progress",
                              "--resume", "KILLED"], capture_output=True, text=True, cwd=repo)
    if resumed.returncode:
        out["resume_error"] = resumed.stderr.strip().splitlines()[-1:]
        return out
    out["resume_seconds"] = round(json.loads(resumed.stdout.strip().splitlines()[-1])["seconds"], 1)
    con = duckdb.connect(str(db), read_only=True)
    n, distinct = con.execute("SELECT count(*), count(DISTINCT question_id) FROM results WHERE run_id = 'KILLED'"
                              ).fetchone()
    con.close()
    out["after_resume"] = {"stored": n, "distinct": distinct, "exact": n == distinct == rows}
    log.unlink()
    return out


def render(f: dict) -> list[str]:
    lines = []
    for r in f.get("sizes", []):
        if "error" in r:
            lines.append(f"ragwb score, {r['rows']:,} rows: failed: {r['error']}")
            continue
        lines.append(f"ragwb score, {r['rows']:,} rows ({r['file_mb']} MB CSV, answer+citation+cost): "
                     f"{r['seconds']} s ({r['us_per_row']} us/row"
                     + (f", {r['per_row_vs_smallest']}x the smallest" if "per_row_vs_smallest" in r else "")
                     + f"), peak {r['peak_rss_mb']:,} MB")
    lines.append(f"  target: {f.get('target')}")
    d = f.get("dataset_resume")
    if d:
        if "error" in d:
            lines.append(f"ragwb score --dataset squad2, {d['rows']:,} rows: failed: {d['error']}")
        else:
            ar = d.get("after_resume", {})
            lines.append(f"ragwb score --dataset squad2, {d['rows']:,} rows: {d['seconds']} s ({d['us_per_row']} us/row),"
                         f" peak {d['peak_rss_mb']:,} MB; killed at {d['killed_at']:,}, --resume "
                         + (f"{d['resume_seconds']} s, stored {ar.get('stored', 0):,} ({ar.get('distinct', 0):,} "
                            f"distinct): {'exact' if ar.get('exact') else 'NOT exact'}" if "resume_seconds" in d
                            else f"failed: {d.get('resume_error')}"))
    u = f.get("unlocated")
    if u:
        done = (f"failed: {u['error']}" if "error" in u else
                f"{u['seconds']} s ({u['us_per_row']} us/row, the ingest included), peak {u['peak_rss_mb']:,} MB")
        lines.append(f"ragwb score --dataset squad2, {u['rows']:,} rows whose contexts are not in the corpus: {done}")
    return lines
