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
    return {"sizes": out, "target": "1M rows under 2 GB peak; time per row within 2x of the smallest size"}


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
    return lines
