"""How far to trust the best point (issue 81): the bundled squad2 grid's per-question scores, and the figures of
docs/sweeps.md computed from them.

    python scripts/pick_validation.py grid     # runs the 33-point grid on all of squad2 offline (shipped vectors),
                                               # writes results/pick_grid.parquet (~40 s on 2 cores)
    python scripts/pick_validation.py figures  # the validation (200 seeded 40- and 100-question tune sets) from it

The parquet holds, for each point of the grid, its mean context tokens and its per-question f1, evidence_recall and
page_recall@10 (the questions each metric scores); tests/test_pick.py runs the same grid and validates the estimate on it.
"""
from __future__ import annotations

import json
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "results" / "pick_grid.parquet"  # results/ is not committed
GRID = ["--set", "chunks.top_k=1,2,3,4,5,6,8,10,12,16", "--set", "hybrid.alpha=0.2,0.4,0.6,0.8,1.0",
        "--set", "hybrid.top_k=2,4,8", "--set", "two_phase_pages.top_pages=1,2,3,5",
        "--set", "parent_child.max_parents=1,2,4"]
METRICS = ("f1", "evidence_recall", "page_recall@10")


def grid() -> None:
    import pandas as pd

    from evals.analyze.summary import run_scores
    from evals.store import ResultStore

    with tempfile.TemporaryDirectory() as ws:
        subprocess.run([sys.executable, "-m", "evals.cli", "run", "--dataset", "squad2", *GRID, "--workspace", ws,
                        "--no-report", "--no-progress", "--run-id", "pick-grid", "--yes"], check=True)
        with ResultStore(Path(ws) / "results.duckdb", read_only=True) as st:
            sc = run_scores(st, "pick-grid")
    sc = sc.assign(point_name=sc["strategy"] + " · " + sc["point_label"])
    cost = sc[sc.metric == "context_tokens"].groupby("point_name")["value"].mean()
    keep = sc[sc.metric.isin(METRICS) & (sc.status == "ok")]
    out = keep.groupby(["metric", "point_name", "question_id"], as_index=False)["value"].mean()
    out["context_tokens"] = out["point_name"].map(cost)
    OUT.parent.mkdir(parents=True, exist_ok=True)
    out.to_parquet(OUT, index=False)
    print(f"wrote {OUT}: {len(out):,} rows, {out.point_name.nunique()} points")


def matrix(metric: str):
    """(Q x P matrix on the questions every point scored, the points' mean context tokens) from the parquet."""
    import pandas as pd

    d = pd.read_parquet(OUT)
    d = d[d.metric == metric]
    wide = d.pivot(index="question_id", columns="point_name", values="value").dropna()
    cost = d.groupby("point_name")["context_tokens"].first().reindex(wide.columns)
    return wide.to_numpy(float), cost.to_numpy(float)


def figures() -> None:
    from evals.analyze.pick import validate

    for metric in METRICS:
        m, cost = matrix(metric)
        for tune in (40, 100):
            print(metric, json.dumps({k: round(v, 4) if isinstance(v, float) else v
                                      for k, v in validate(m, cost, tune=tune, subsets=200).items()}))


if __name__ == "__main__":
    {"grid": grid, "figures": figures}[sys.argv[1]]()
