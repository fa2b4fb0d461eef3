"""How much could routing save at most? The oracle bound over a run's stored points (issue 28, part 1).

For a quality metric and a tolerance, the oracle picks, per question, the cheapest point whose score is
within ``tolerance`` of the best score any point reached on that question (ties on cost: the higher
score, then the point name). Its mean quality and mean tokens stand beside every fixed point, on the same
questions: no router can beat it on this run, so it bounds what building one could save.

Only ok scores count: a question where no point has an ok score for the metric (or for the cost) is left
out and counted; a not_applicable score is not a score.
"""
from __future__ import annotations

import numpy as np
import pandas as pd

from .explore import points_of


def oracle_bound(scores: pd.DataFrame, metric: str = "f1", cost: str = "prompt_tokens",
                 tolerance: float = 0.0, higher_is_better: bool = True) -> tuple[pd.DataFrame, dict]:
    """(table, info). Table: one row per fixed point and one for the oracle: n, mean quality, mean cost,
    and for the oracle how often each point was its choice. Info: questions used and left out."""
    if tolerance < 0 or not np.isfinite(tolerance):
        raise ValueError(f"tolerance must be a finite number >= 0, got {tolerance}")
    pts = points_of(scores)
    ok = scores[(scores.status == "ok") & scores.value.notna()]
    name = ok.strategy + " · " + ok.point_label

    def wide(m):
        sub = ok[ok.metric == m]
        return (sub.assign(point=name[sub.index]).groupby(["question_id", "point"])["value"].mean()
                .unstack("point").reindex(columns=pts))

    q, c = wide(metric), wide(cost)
    if q.empty:
        raise ValueError(f"no ok scores of {metric!r} in this run")
    if c.empty:
        raise ValueError(f"no ok scores of {cost!r} in this run")
    q, c = q.align(c, join="inner")
    both = q.notna() & c.notna()
    keep = both.any(axis=1)
    q, c, both = q[keep], c[keep], both[keep]
    left_out = len(set(scores.question_id) - set(q.index))  # no point has an ok score and cost for them
    qv = q.to_numpy(float) if higher_is_better else -q.to_numpy(float)
    cv, bv = c.to_numpy(float), both.to_numpy(bool)
    best = np.where(bv, qv, -np.inf).max(axis=1)
    eligible = bv & (qv >= best[:, None] - tolerance - 1e-12)
    # cheapest eligible; ties on cost -> higher quality -> first point (points_of order)
    cost_key = np.where(eligible, cv, np.inf)
    choice = []
    for i in range(len(qv)):
        cand = np.flatnonzero(cost_key[i] == cost_key[i].min())
        choice.append(cand[np.argmax(qv[i, cand])] if len(cand) > 1 else cand[0])
    choice = np.array(choice, dtype=int)
    rows_ = np.arange(len(qv))
    oq, oc = q.to_numpy(float)[rows_, choice], cv[rows_, choice]
    rows = []
    for j, p in enumerate(pts):
        m = bv[:, j]
        rows.append({"point": p, "n": int(m.sum()), "quality": float(q.to_numpy(float)[m, j].mean()) if m.any()
                     else np.nan, "cost": float(cv[m, j].mean()) if m.any() else np.nan, "chosen": int((choice == j).sum())})
    rows.append({"point": f"oracle (tolerance {tolerance:g})", "n": len(qv), "quality": float(oq.mean()),
                 "cost": float(oc.mean()), "chosen": len(qv)})
    table = pd.DataFrame(rows).rename(columns={"quality": metric, "cost": cost})
    fixed = table.iloc[:-1].dropna(subset=[metric])
    best_fixed = fixed.sort_values([metric, cost], ascending=[not higher_is_better, True]).iloc[0] if len(fixed) else None
    info = {"questions": len(qv), "left_out": left_out, "metric": metric, "cost": cost, "tolerance": tolerance,
            "best_fixed": best_fixed["point"] if best_fixed is not None else None,
            "saving_vs_best_fixed": (1 - float(oc.mean()) / float(best_fixed[cost]))
            if best_fixed is not None and best_fixed[cost] else np.nan,
            "summary": (f"oracle: {metric} {oq.mean():.3f} at {oc.mean():,.0f} {cost.replace('_', ' ')} per question; "
                        f"best fixed point {best_fixed['point']}: {best_fixed[metric]:.3f} at {best_fixed[cost]:,.0f} "
                        f"(the oracle spends {oc.mean() / best_fixed[cost]:.2f}x its tokens)")
            if best_fixed is not None and best_fixed[cost] else ""}
    return table, info
