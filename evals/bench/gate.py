"""`ragwb bench --only gate`: `ragwb gate` and the run comparison on two stored runs of 50,000 items each (judged metrics in)."""
from __future__ import annotations

import json
import time
from pathlib import Path


GATE_METRICS = ["em", "f1", "abstention_accuracy", "citation_validity", "citation_precision", "citation_recall",
                "statement_coverage", "faithfulness", "evidence_recall", "doc_ndcg@10", "context_tokens",
                "prompt_tokens"]


def gate_figure(root: Path, items: int = 50_000, points: int = 5) -> dict:
    """``ragwb gate`` and the run comparison on two stored runs of ``items`` items each (``points`` points x
    items/points questions, 12 metrics an item: 600,000 score rows a run), the shape of two squad2 runs
    and larger: every path that joins or compares runs must stay linear in the rows. Each item shows 10
    passages and half of the pooled (question, passage) pairs are judged, so the read includes the judged
    metrics' join of every item's passages with the judgments (docs/judgments.md), and the pool is timed too."""
    import numpy as np
    import pandas as pd

    from evals.analyze.gate import compare_runs, gate, per_question
    from evals.analyze.judgments import build_pool, judged_scores, question_key, ranked_passage_keys
    from evals.store import ResultStore
    from rag.models import Question

    root.mkdir(parents=True, exist_ok=True)
    db = root / "gate.duckdb"
    nq = items // points
    rng = np.random.default_rng(7)
    qids = [f"{i:024x}" for i in range(nq)]
    questions = [Question(q, f"bench question {q}?", ["x"], True) for q in qids]
    texts = [f"passage {i} " + "lorem ipsum " * 8 for i in range(5_000)]  # ~110 characters each

    keys = [ranked_passage_keys([t]) for t in texts]

    def blocks(p: int) -> tuple[list[str], list[str]]:  # per question, 10 passages; points share the first 5
        picks = rng.integers(0, len(texts), (nq, 10))
        picks[:, :5] = (np.arange(nq)[:, None] * 7 + np.arange(5)) % len(texts)
        # the blocks and, as a run writes them with each item, their ranked passage keys
        return ([json.dumps([{"n": k + 1, "text": texts[t], "doc_ids": ["d"], "page_ids": ["d#p0"]}
                             for k, t in enumerate(row)]) for row in picks],
                [",".join(dict.fromkeys(keys[t] for t in row)) for row in picks])

    with ResultStore(db) as st:
        for run in ("A", "B"):
            st.create_run(run, {"dataset": "bench", "config": {}, "config_hash": run, "planned": nq * points},
                          questions)
            res, sc = [], []
            for p in range(points):
                bl, pk = blocks(p)
                res.append(pd.DataFrame({"run_id": run, "strategy": f"s{p}", "point_id": "default",
                                         "point_label": "defaults", "params": json.dumps({"top_k": 8}),
                                         "question_id": qids, "repeat": 0, "answer_status": "ok",
                                         "blocks": bl, "passage_keys": pk}))
                for m in GATE_METRICS:
                    v = rng.random(nq) if not m.endswith("tokens") else rng.integers(100, 2000, nq).astype(float)
                    sc.append(pd.DataFrame({"run_id": run, "strategy": f"s{p}", "point_id": "default",
                                            "question_id": qids, "repeat": 0, "metric": m, "value": v,
                                            "status": "ok", "detail": ""}))
            r, s_ = pd.concat(res, ignore_index=True), pd.concat(sc, ignore_index=True)
            with st.transaction() as con:
                con.register("_r", r)
                con.execute(f"INSERT INTO results ({', '.join(r.columns)}) SELECT * FROM _r")
                con.register("_s", s_)
                con.execute(f"INSERT INTO scores ({', '.join(s_.columns)}) SELECT * FROM _s")
        qk = {q.qid: question_key(q.text) for q in questions}
        pool = build_pool(st, "A", 10).rows
        half = pool.iloc[::2]
        st.add_judgments([{"question_key": qk[q], "passage_key": pk, "judge": "human:bench", "grade": int(g),
                           "question_id": q, "question": "", "text": "", "status": "ok", "detail": ""}
                          for q, pk, g in zip(half.question_id, half.passage_key, rng.integers(0, 4, len(half)))],
                         source="bench")
    out = {"items_per_run": nq * points, "score_rows_per_run": nq * points * len(GATE_METRICS),
           "judgments": len(half), "target": "< 10 s on 2 cores"}
    with ResultStore(db, read_only=True) as st:
        t = time.perf_counter()
        out["pool_rows"] = len(build_pool(st, "A", 10).rows)
        out["pool_s"] = time.perf_counter() - t
        t = time.perf_counter()
        out["judged_rows"] = len(judged_scores(st, "A"))
        out["judged_s"] = time.perf_counter() - t
        t = time.perf_counter()
        base, cand = per_question(st, "A"), per_question(st, "B")
        out["read_s"] = time.perf_counter() - t
        t = time.perf_counter()
        res = gate(base, cand)
        out["gate_s"] = time.perf_counter() - t
        out["rows_gated"] = len(res["rows"])
        t = time.perf_counter()
        compare_runs(st, "A", "B")
        out["compare_s"] = time.perf_counter() - t
    out["total_gate_s"] = out["read_s"] + out["gate_s"]
    return out
