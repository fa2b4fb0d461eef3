"""How far pooled judgments rank points like full judgments (docs/judgments.md, "Validated on the bundled sets").

On a bundled set with gold evidence, the gold is treated as a person's labels: a passage that shows gold
evidence is graded 3, any other 0. "Full" judgments label every block every point retrieved; "pooled at depth
d" label only the union of each point's top d blocks (TREC pooling), everything else counting as not relevant.
For each depth the script reports Kendall's tau between the points' means of a judged metric under pooled and
full labels, and the share of point pairs whose paired difference keeps its sign.

    python scripts/validate_judgments.py --dataset squad2 --limit 200
    python scripts/validate_judgments.py --dataset docugami --limit 200 --llm-base-url URL --llm-model M

With --llm-base-url an LLM relevance judge (evals/score/relevance.py) grades a seeded sample of pooled pairs
and its agreement with the gold labels is reported (Cohen's kappa, quadratic-weighted, and the confusion table).
"""
from __future__ import annotations

import argparse
import itertools
import json
import random
import sys
import tempfile
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from evals.analyze.judgments import agreement_table, build_pool, judged_item_scores, question_key  # noqa: E402
from evals.cli import main as ragwb  # noqa: E402
from evals.score.metrics import block_holds  # noqa: E402
from evals.store import ResultStore  # noqa: E402
from rag.models import Evidence  # noqa: E402
from rag.strategies import Block  # noqa: E402

GRID = ["--set", "chunks.top_k=2,5,10", "--set", "hybrid.alpha=0.2,0.8", "--set", "parent_child.top_k=3,6",
        "--strategies", "chunks,hybrid,parent_child,two_phase_pages,full_documents"]
METRICS = ("judged_ndcg@10", "judged_recall@10", "judged_precision@5")


def kendall_tau_b(x, y) -> float:
    n, conc, disc, tx, ty = len(x), 0, 0, 0, 0
    for i, j in itertools.combinations(range(n), 2):
        dx, dy = np.sign(x[i] - x[j]), np.sign(y[i] - y[j])
        if dx == 0 and dy == 0:
            continue
        if dx == 0:
            tx += 1
        elif dy == 0:
            ty += 1
        elif dx == dy:
            conc += 1
        else:
            disc += 1
    den = ((conc + disc + tx) * (conc + disc + ty)) ** 0.5
    return (conc - disc) / den if den else float("nan")


def point_means(items, grades: dict) -> dict:
    """(strategy, label) -> {metric: mean over questions with an ok value}."""
    per_q_grades: dict[str, list[int]] = {}
    for (qk, _), g in grades.items():
        per_q_grades.setdefault(qk, []).append(g)
    sums: dict = {}
    for point, qk, blocks in items:
        gs = per_q_grades.get(qk, [])
        sc = judged_item_scores(blocks, grades, qk, sum(g >= 2 for g in gs), sorted(gs, reverse=True), bool(gs))
        for m in METRICS:
            v, st, _ = sc[m]
            if st == "ok":
                sums.setdefault(point, {}).setdefault(m, []).append(v)
    return {p: {m: float(np.mean(v)) for m, v in d.items()} for p, d in sums.items()}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--dataset", default="squad2")
    ap.add_argument("--limit", type=int, default=200)
    ap.add_argument("--depths", default="5,10,20")
    ap.add_argument("--workspace", default=None, help="default: a temporary folder")
    ap.add_argument("--llm-base-url", default=None)
    ap.add_argument("--llm-model", default=None)
    ap.add_argument("--llm-sample", type=int, default=200, help="pooled pairs the LLM judge grades (200)")
    ap.add_argument("--llm-format", default="", choices=["", "json_schema", "json_object"],
                    help="as ragwb judge --judge-format")
    ap.add_argument("--seed", type=int, default=0)
    a = ap.parse_args()
    ws = Path(a.workspace or tempfile.mkdtemp(prefix="ragwb-validate-"))
    rid = f"validate-{a.dataset}"
    with ResultStore(ws / "results.duckdb", read_only=True) if (ws / "results.duckdb").exists() else _nothing() as st:
        have = st is not None and rid in set(st.runs().run_id)
    if not have:
        assert ragwb(["run", "--dataset", a.dataset, "--limit", str(a.limit), "--workspace", str(ws), "--run-id", rid,
                      "--no-report", "--no-progress", *GRID]) == 0
    with ResultStore(ws / "results.duckdb", read_only=True) as st:
        gold = st.con.execute("SELECT question_id, text, evidence FROM run_gold WHERE run_id = ? AND answerable",
                              [rid]).fetchall()
        res = st.con.execute("SELECT strategy, point_label, question_id, blocks FROM results WHERE run_id = ? AND "
                             "repeat = 0", [rid]).fetchall()
        full_pool = build_pool(st, rid, 10_000)
    evid = {q: [Evidence(**e) for e in json.loads(ev or "[]")] for q, _, ev in gold}
    qkeys = {q: question_key(t) for q, t, _ in gold}
    items = [(f"{s} · {lab}", qkeys[q], json.loads(b)) for s, lab, q, b in res if q in qkeys and evid.get(q)]
    label = {(qkeys[r["question_id"]], r["passage_key"]): 3 if any(block_holds(Block.from_dict(r["block"]), e)
                                                                   for e in evid[r["question_id"]]) else 0
             for r in full_pool.rows.to_dict("records") if evid.get(r["question_id"])}
    full = point_means(items, label)
    points = sorted(full)
    print(f"{a.dataset}: {len(points)} points, {len({q for _, q, _ in items})} questions with gold evidence, "
          f"{len(label):,} distinct (question, passage) pairs retrieved, {sum(g == 3 for g in label.values()):,} "
          "showing gold evidence")
    print("depth | pairs judged | " + " | ".join(f"tau {m}" for m in METRICS) + " | sign agreement (all metrics)")
    with ResultStore(ws / "results.duckdb", read_only=True) as st:
        for d in [int(x) for x in a.depths.split(",")]:
            pool = build_pool(st, rid, d)
            keys = {(qk, pk) for qk, pk in zip(pool.rows.question_key, pool.rows.passage_key)}
            pooled = {k: g for k, g in label.items() if k in keys}
            pm = point_means(items, pooled)
            taus, agree, total = [], 0, 0
            for m in METRICS:
                x = [full[p].get(m, 0.0) for p in points]
                y = [pm.get(p, {}).get(m, 0.0) for p in points]
                taus.append(kendall_tau_b(x, y))
                for i, j in itertools.combinations(range(len(points)), 2):
                    if x[i] != x[j]:
                        total += 1
                        agree += np.sign(x[i] - x[j]) == np.sign(y[i] - y[j])
            print(f"{d} | {len(pooled):,} | " + " | ".join(f"{t:.3f}" for t in taus) + f" | {agree / total:.3f} "
                  f"({agree}/{total})")
    if a.llm_base_url:
        from evals.score.relevance import judge_pairs
        from rag.llm.client import LLMClient, LLMConfig

        with ResultStore(ws / "results.duckdb", read_only=True) as st:
            pool = build_pool(st, rid, 10)
        rows = [r for r in pool.rows.to_dict("records") if (r["question_key"], r["passage_key"]) in label]
        random.Random(a.seed).shuffle(rows)
        # half the sample from passages showing gold evidence, where there are enough: a judge is tested on both
        pos = [r for r in rows if label[(r["question_key"], r["passage_key"])] == 3][: a.llm_sample // 2]
        sample = pos + [r for r in rows if label[(r["question_key"], r["passage_key"])] == 0][: a.llm_sample - len(pos)]
        client = LLMClient(LLMConfig(a.llm_base_url, a.llm_model, max_tokens=64, max_concurrency=2,
                                     response_format=a.llm_format),
                           ws / "cache" / "llm.sqlite")
        got = judge_pairs(client, sample)
        import pandas as pd

        df = pd.DataFrame([{**g, "judge": g["judge"]} for g in got]
                          + [{"question_key": r["question_key"], "passage_key": r["passage_key"], "judge": "gold:evidence",
                              "grade": label[(r["question_key"], r["passage_key"])], "status": "ok"} for r in sample])
        t, conf = agreement_table(df)
        ok = sum(g["status"] == "ok" for g in got)
        print(f"\nLLM judge llm:{a.llm_model} on {len(sample)} pooled pairs ({len(pos)} showing gold evidence): "
              f"{ok} graded, {len(sample) - ok} without a grade")
        print(t.to_string(index=False))
        from collections import Counter

        print("statuses:", dict(Counter(g["status"] for g in got)), "first reply without a grade:",
              next((g["detail"][:160] for g in got if g["status"] != "ok"), "none"))
        for cm in conf.values():
            print(cm.to_string())
    return 0


class _nothing:
    def __enter__(self):
        return None

    def __exit__(self, *a):
        return False


if __name__ == "__main__":
    sys.exit(main())
