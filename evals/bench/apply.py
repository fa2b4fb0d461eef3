"""`ragwb bench --only apply`: the workbench's Apply for packing-only budget changes, step by step, in fresh sessions."""
from __future__ import annotations

import json
import statistics
import time
from pathlib import Path


APPLY_CHANGES = [  # never-seen packing-only budgets, one strategy each (a slider move), then a shared one
    {"chunks__top_k": 6}, {"chunks__top_k": 12}, {"hybrid__top_k": 5}, {"parent_child__max_parents": 2},
    {"two_phase_pages__top_pages": 3}, {"full_documents__max_total_chars": 20000},
    {"chunks__max_context_tokens": 800}]


APPLY_SHARED = {"max_context_tokens": 2000}  # every strategy changes: 5 x the items


def apply_figure(dataset: str, workspace: Path, embedder: str, n: int) -> dict:
    """The workbench's Apply for packing-only budget changes on ``n`` questions x 5 strategies: from
    Apply to every output the notebook (notebooks/workbench.py) updates after it: the points' items,
    the summary with intervals, the quality-vs-cost chart (with the faded earlier budgets, serialised
    as the plotly widget sends it) and the headline table, the question matrix, the drill-down, the
    paired comparison of the first two points and quality per 1,000 tokens. After a first Apply at
    the shipped budgets, each change is a budget not seen before in the session."""
    import pandas as pd

    from evals.analyze import explore
    from evals.report.charts import quality_cost_figure
    from evals.workbench.calls import (evaluate_points, open_session, points_from_budgets, side_by_side_html,
                              summarize_session)
    from evals.analyze.summary import HEADLINE, headline_table
    from rag.strategies import default_strategies

    STRATEGIES = default_strategies()
    sess = open_session(dataset, str(workspace), embedder)
    history: list = []

    def apply(budgets):
        t = time.perf_counter()
        sc = evaluate_points(sess, points_from_budgets(list(STRATEGIES), budgets), n)
        summary = summarize_session(sess, sc)
        quality_cost_figure(summary, "f1", "context_tokens",
                            pd.concat(history, ignore_index=True) if history else None).to_json()
        headline_table(summary, HEADLINE, numeric=True)
        history.append(summary)
        m = explore.filter_matrix(explore.question_matrix(sc, sess.dataset.questions, "f1"))
        pts = explore.points_of(sc)
        side_by_side_html(sess, m.question_id.iloc[0], pts[0], None)
        explore.paired_points(sc, pts[0], pts[1])
        explore.quality_per_1k_tokens(sc, "f1")
        return time.perf_counter() - t
    first = apply({})
    changes = [{"budget": ", ".join(f"{k}={v}" for k, v in b.items()), "seconds": apply(b)} for b in APPLY_CHANGES]
    shared = apply(APPLY_SHARED)
    back = apply({"chunks__top_k": 6})  # a budget applied before: every item re-used
    secs = sorted(c["seconds"] for c in changes)
    return {"questions": min(n, len(sess.dataset.questions)), "strategies": len(STRATEGIES),
            "first_apply_s": first, "changes": changes, "packing_change_median_s": secs[len(secs) // 2],
            "packing_change_max_s": secs[-1], "shared_budget_s": shared,
            "shared_budget": ", ".join(f"{k}={v}" for k, v in APPLY_SHARED.items()), "revisit_s": back,
            "target": "<= 1 s"}


def apply_sessions(runs: list[dict]) -> dict:
    """Several fresh sessions' ``apply_figure``s in one: each step's median over the sessions (what
    the target is read against: this 2-core VM varies +-30% between identical runs) and its worst."""
    med = statistics.median
    changes = [{"budget": c["budget"], "seconds": med(r["changes"][i]["seconds"] for r in runs),
                "worst_s": max(r["changes"][i]["seconds"] for r in runs)} for i, c in enumerate(runs[0]["changes"])]
    secs = sorted(c["seconds"] for c in changes)
    return {**runs[0], "sessions": len(runs), "changes": changes,
            "first_apply_s": med(r["first_apply_s"] for r in runs), "shared_budget_s": med(r["shared_budget_s"] for r in runs),
            "revisit_s": med(r["revisit_s"] for r in runs), "packing_change_median_s": secs[len(secs) // 2],
            "packing_change_max_s": secs[-1], "worst_single_s": max(c["worst_s"] for c in changes),
            "runs": runs}


def apply_figure_fresh(dataset: str, workspace: Path, embedder: str, n: int) -> dict:
    """``apply_figure`` in a fresh process, as the notebook's kernel is: not one that has just
    ingested and embedded (its heap and caches would slow every allocation after)."""
    code = ("import json, sys; from pathlib import Path; from evals.bench.apply import apply_figure; "
            "print(json.dumps(apply_figure(sys.argv[1], Path(sys.argv[2]), sys.argv[3], int(sys.argv[4]))))")
    from .scale import python_json

    return python_json(["-c", code, dataset, str(workspace), embedder, str(n)], "apply figure failed")
