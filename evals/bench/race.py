"""``ragwb bench --only race`` (docs/sweeps.md): how often a raced sweep keeps the full grid's best point and what
share of the items it spends, over seeds, on the bundled sets with the offline answerer; the Pareto front under
``--race-cost``; an A/A grid (one shape under five names) for false eliminations; and the answer calls a raced run
makes against a 127.0.0.1 OpenAI-compatible server, counted, beside the full grid's.

Each set's full grid is run once; the races are the runner's own decision (``evals.analyze.race.race_step``)
replayed over those per-question scores in each seed's order: an item's score does not depend on which other
items were evaluated, so this is what a raced run of that seed would store."""
from __future__ import annotations

import time
from pathlib import Path

import numpy as np

GRID = {"chunks": {"top_k": [1, 2, 4, 8, 16]}, "hybrid": {"alpha": [0.2, 0.5, 0.8]},
        "full_documents": {}, "two_phase_pages": {}, "parent_child": {}}  # the 11-point grid of issue 45
METRIC = {"squad2": "f1", "docugami": "evidence_recall", "code-boltons": "evidence_recall",
          "mtrag-govt": "passage_recall@5"}


def grid_matrix(db: Path, run_id: str, metric: str) -> tuple[list, np.ndarray, np.ndarray]:
    """(points, metric[question, point], context tokens[question, point]) of a stored run; NaN where not ok."""
    import duckdb

    con = duckdb.connect(str(db), read_only=True)
    try:
        df = con.execute("SELECT r.strategy || ' · ' || r.point_label AS p, s.question_id, s.metric, s.value FROM "
                         "scores s JOIN results r USING (run_id, strategy, point_id, question_id, repeat) WHERE "
                         "s.run_id = ? AND s.metric IN (?, 'context_tokens') AND s.status = 'ok'",
                         [run_id, metric]).df()
    finally:
        con.close()
    pts, qs = sorted(df.p.unique()), sorted(df.question_id.unique())

    def mat(m):
        return df[df.metric == m].pivot_table(index="question_id", columns="p", values="value").reindex(
            index=qs, columns=pts).to_numpy(dtype=float)
    return pts, mat(metric), mat("context_tokens")


def pareto(means: np.ndarray, costs: np.ndarray, tol: float) -> set[int]:
    """Points no other point beats on quality (within ``tol``) at a lower cost: the front the race must keep."""
    return {i for i in range(len(means)) if not any(
        costs[j] < costs[i] and means[j] >= means[i] - tol for j in range(len(means)) if j != i)}


def race_seeds(pts, F, C, metric, sizes, seeds=20, cost_tolerance=None) -> list[dict]:
    from evals.analyze.race import simulate

    out = []
    for n in sorted({min(n, F.shape[0]) for n in sizes}):
        kept, share, front_kept = 0, [], 0
        for seed in range(seeds):
            order = np.random.default_rng(seed).permutation(F.shape[0])[:n]
            means = np.nanmean(F[order], axis=0)
            best = pts[int(np.nanargmax(means))]
            r = simulate(F, C, pts, metric, order, cost_tolerance=cost_tolerance)
            kept += best in r["survivors"]
            share.append(r["share"])
            if cost_tolerance is not None:
                cmeans = np.nanmean(C[order], axis=0)
                front = pareto(means, cmeans, cost_tolerance)
                alive = {pts.index(p) for p in r["survivors"]}
                # every front point survives, or a survivor is as good (within tol) and no dearer
                front_kept += all(i in alive or any(means[j] >= means[i] - cost_tolerance and cmeans[j] <= cmeans[i]
                                                    for j in alive) for i in front)
        row = {"questions": n, "seeds": seeds, "best_kept": kept / seeds, "items_share": float(np.mean(share))}
        if cost_tolerance is not None:
            row["front_kept"] = front_kept / seeds
        out.append(row)
    return out


def race_figure(root: Path, sets=("squad2", "docugami", "code-boltons", "mtrag-govt"), seeds: int = 20) -> dict:
    from evals.run.runner import RunConfig, run_evaluation

    root.mkdir(parents=True, exist_ok=True)
    out = {"target": "best kept >= 95% of seeds; items <= 50% by 800 questions and <= 40% by 1,200 (squad2 grid)",
           "sets": {}}
    for ds in sets:
        t = time.perf_counter()
        rid = f"grid-{ds}"
        run_evaluation(RunConfig(dataset=ds, grid=GRID), workspace=root, run_id=rid, progress=False)
        pts, F, C = grid_matrix(root / "results.duckdb", rid, METRIC[ds])
        fig = {"metric": METRIC[ds], "points": len(pts), "questions": F.shape[0],
               "grid_s": time.perf_counter() - t,
               "race": race_seeds(pts, F, C, METRIC[ds], (800, 1200), seeds)}
        if ds == "squad2":
            fig["race_cost"] = race_seeds(pts, F, C, METRIC[ds], (800,), seeds, cost_tolerance=0.02)
            # A/A: one shape's scores under five names (identical answers): nothing may leave
            aa = np.repeat(F[:, [pts.index("chunks · top_k=4")]], 5, axis=1)
            aac = np.repeat(C[:, [pts.index("chunks · top_k=4")]], 5, axis=1)
            fig["aa_no_loss"] = float(np.mean([_aa_survivors(aa, aac, s) == 5 for s in range(seeds)]))
        out["sets"][ds] = fig
    out["llm_calls"] = llm_calls(root / "llm")
    return out


def _aa_survivors(aa, aac, seed) -> int:
    from evals.analyze.race import simulate

    r = simulate(aa, aac, [f"aa{i}" for i in range(5)], "f1", np.random.default_rng(seed).permutation(aa.shape[0])[:800])
    return len(r["survivors"])


def llm_calls(root: Path, n: int = 400) -> dict:
    """A raced run and the full grid against the test suite's 127.0.0.1 server (a checkout): calls counted."""
    import sys

    from rag.llm.client import LLMConfig

    from evals.run.runner import RunConfig, run_evaluation

    from rag.ingest.bundled import need_checkout

    tests = need_checkout("ragwb bench --only race (tests/openai_server.py)") / "tests"
    if not (tests / "openai_server.py").is_file():
        return {"skipped": "needs a checkout (tests/openai_server.py)"}
    sys.path.insert(0, str(tests))
    from openai_server import Handler, start

    srv, url = start()
    try:
        calls = {}
        for name, race in (("full", {}), ("raced", {"metric": "f1", "batch": 50, "alpha": 0.05, "seed": 0})):
            c0 = Handler.calls
            run_evaluation(RunConfig(dataset="squad2", limit=n, grid=GRID, answerer="openai", use_cache=False,
                                     llm=LLMConfig(url, "local-extractive", max_concurrency=4), race=race),
                           workspace=root, progress=False)
            calls[name] = Handler.calls - c0
        return {"questions": n, "full_grid_calls": calls["full"], "raced_calls": calls["raced"],
                "share": calls["raced"] / max(1, calls["full"])}
    finally:
        srv.shutdown()


def render(f: dict) -> list[str]:
    lines = []
    for ds, fig in f["sets"].items():
        for r in fig["race"]:
            lines.append(f"race on {ds} ({fig['metric']}, {fig['points']} points, {r['questions']} questions, "
                         f"{r['seeds']} seeds): best kept {r['best_kept']:.0%}, items {r['items_share']:.0%} of the "
                         "full grid")
        for r in fig.get("race_cost", []):
            lines.append(f"race --race-cost 0.02 on {ds} ({r['questions']} questions): Pareto front kept "
                         f"{r['front_kept']:.0%} of seeds, items {r['items_share']:.0%}")
        if "aa_no_loss" in fig:
            lines.append(f"race A/A (five identical points, {ds}): no point lost in {fig['aa_no_loss']:.0%} of seeds")
    lc = f.get("llm_calls") or {}
    if "raced_calls" in lc:
        lines.append(f"race against the 127.0.0.1 LLM server ({lc['questions']} questions): {lc['raced_calls']:,} calls "
                     f"vs {lc['full_grid_calls']:,} for the full grid ({lc['share']:.0%})")
    return lines
