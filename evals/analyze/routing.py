"""How much could routing save at most? The oracle bound over a run's stored points (issue 28, part 1).

For a quality metric and a tolerance, the oracle picks, per question, the cheapest point whose score is
within ``tolerance`` of the best score any point reached on that question (ties on cost: the higher
score, then the point name). Its mean quality and mean tokens stand beside every fixed point, on the same
questions: no router can beat it on this run, so it bounds what building one could save.

Only ok scores count: a question where no point has an ok score for the metric (or for the cost) is left
out and counted; a not_applicable score is not a score.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from .explore import pick_point, points_of


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
    qv = q.to_numpy(float)
    cv, bv = c.to_numpy(float), both.to_numpy(bool)
    choice = oracle_choice(qv, cv, tolerance, higher_is_better, bv)
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


# --------------------------------------------------------------------------- the learned router

def sufficient(q: np.ndarray, tolerance: float, higher_is_better: bool = True,
               present: np.ndarray | None = None) -> np.ndarray:
    """Per question and point: is it scored (``present``, default: not NaN) and within ``tolerance`` of the
    best any point reached on that question?"""
    qv = q if higher_is_better else -q
    present = ~np.isnan(qv) if present is None else present
    best = np.where(present, qv, -np.inf).max(axis=1)
    return present & (qv >= best[:, None] - tolerance - 1e-12)


def oracle_choice(q: np.ndarray, c: np.ndarray, tolerance: float, higher_is_better: bool = True,
                  present: np.ndarray | None = None) -> np.ndarray:
    """Per row the oracle's column: the cheapest sufficient point (ties on cost: the higher quality, then
    the first column). Every row needs at least one present point."""
    qv = q if higher_is_better else -q
    cost_key = np.where(sufficient(q, tolerance, higher_is_better, present), c, np.inf)
    out = np.empty(len(q), dtype=int)
    for i in range(len(q)):
        cand = np.flatnonzero(cost_key[i] == cost_key[i].min())
        out[i] = cand[np.argmax(qv[i, cand])] if len(cand) > 1 else cand[0]
    return out


def cv_folds(groups: list, n_splits: int = 5) -> list[tuple[np.ndarray, np.ndarray]]:
    """Grouped K-fold (a question's repeats, or a conversation's turns, never on both sides of a fold):
    scikit-learn's GroupKFold, deterministic."""
    from sklearn.model_selection import GroupKFold

    g = np.asarray(groups)
    k = min(n_splits, len(set(groups)))
    if k < 2:
        raise ValueError(f"the router needs at least 2 groups of questions to cross-validate, got {k}")
    return [(tr, te) for tr, te in GroupKFold(n_splits=k).split(np.zeros(len(g)), groups=g)]


def _classifier(seed: int):
    from sklearn.ensemble import RandomForestClassifier

    # small, seeded, single-threaded: the same run gives the same router
    return RandomForestClassifier(n_estimators=100, min_samples_leaf=3, max_depth=6, random_state=seed, n_jobs=1)


def _fit(X: np.ndarray, good: np.ndarray, cost: np.ndarray, seed: int, confidence: float = 0.5):
    """A SufficiencyModel: per point, P(good enough | features); points tried cheapest first."""
    from rag.strategies.routing import SufficiencyModel

    models, constants = [], []
    for j in range(good.shape[1]):
        y = good[:, j].astype(int)
        if y.min() == y.max():
            models.append(None)
            constants.append(float(y[0]))
        else:
            models.append(_classifier(seed).fit(X, y))
            constants.append(None)
    order = [int(j) for j in np.argsort(cost.mean(axis=0), kind="stable")]
    return SufficiencyModel(models, constants, order, confidence)


@dataclass
class RouteResult:
    table: pd.DataFrame  # fixed points, router (cross-validated), oracle: quality and cost with intervals
    paired: pd.DataFrame  # router minus the best fixed point, router minus the oracle
    info: dict = field(default_factory=dict)
    choices: pd.DataFrame | None = None  # per question: oracle and router choice (out of fold)
    router: object = None  # rag.strategies.routing.Router trained on every question
    folds: list = field(default_factory=list)
    groups: list = field(default_factory=list)


def route_data(store, run_id: str, metric: str, cost: str):
    """(q, c, points, question rows): complete question x point matrices of quality and cost over the
    run's routable points (registered shapes that retrieve as themselves: not routed or escalate, whose
    context depends on a router or an answer; not deployed systems), the points' parameters, and each
    question's text and group (its conversation, else itself)."""
    import json

    from rag.strategies import STRATEGIES

    scores = store.scores(run_id)
    if scores.empty:
        raise ValueError(f"run {run_id} has no scores")
    pts_df = store.con.execute("SELECT DISTINCT strategy, point_label, params FROM results WHERE run_id = ?",
                               [run_id]).df()
    routable = {f"{r.strategy} · {r.point_label}": {"strategy": r.strategy, "label": r.point_label,
                                                     "params": json.loads(r.params) if r.params else {}}
                for r in pts_df.itertuples()
                if r.strategy in STRATEGIES and not getattr(STRATEGIES[r.strategy], "opt_in", False)}
    others = sorted({f"{r.strategy} · {r.point_label}" for r in pts_df.itertuples()} - set(routable))
    ok = scores[(scores.status == "ok") & scores.value.notna()]
    name = ok.strategy + " · " + ok.point_label
    pts = [p for p in points_of(scores) if p in routable]
    if len(pts) < 2:
        raise ValueError(f"routing needs at least 2 points of registered strategies; run {run_id} has "
                         f"{len(pts)}{' (not routable: ' + ', '.join(others) + ')' if others else ''}")

    def wide(m):
        sub = ok[ok.metric == m]
        return (sub.assign(point=name[sub.index]).groupby(["question_id", "point"])["value"].mean()
                .unstack("point").reindex(columns=pts))

    q, c = wide(metric), wide(cost)
    if q.empty or c.empty:
        raise ValueError(f"no ok scores of {metric if q.empty else cost!r} in run {run_id}")
    q, c = q.align(c, join="inner")
    complete = (q.notna() & c.notna()).all(axis=1)
    left_out = int((~complete).sum()) + len(set(scores.question_id) - set(q.index))
    q, c = q[complete], c[complete]
    gold = store.run_questions(run_id).set_index("question_id")
    conv = store.con.execute("SELECT DISTINCT question_id, conversation_id FROM results WHERE run_id = ?",
                             [run_id]).df().drop_duplicates("question_id").set_index("question_id")["conversation_id"]
    rows = pd.DataFrame({"question_id": q.index, "text": [gold.loc[i, "text"] for i in q.index]})
    rows["group"] = [conv.get(i) if isinstance(conv.get(i), str) and conv.get(i) else i for i in q.index]
    return q.to_numpy(float), c.to_numpy(float), [routable[p] | {"name": p} for p in pts], rows, left_out, others


def learn_router(store, ws, run_id: str, metric: str = "f1", cost: str = "prompt_tokens", tolerance: float = 0.0,
                 folds: int = 5, seed: int = 0, higher_is_better: bool = True, progress: bool = False,
                 resamples: int = 2000, confidence: float = 0.5, curve: tuple = ()) -> RouteResult:
    """Train a router on a stored run and measure it out of fold against the best fixed point and the oracle.
    ``curve``: more confidence thresholds, each measured out of fold with the same fold models (the
    router's quality-vs-cost trade-off, rows of kind ``router-curve``)."""
    from rag.index.retrieval import Retriever
    from rag.strategies.routing import FEATURES_VERSION, Router, question_features

    from evals.stats import bootstrap_ci, paired_bootstrap

    if tolerance < 0 or not np.isfinite(tolerance):
        raise ValueError(f"tolerance must be a finite number >= 0, got {tolerance}")
    run = store.run(run_id)
    q, c, points, rows, left_out, others = route_data(store, run_id, metric, cost)
    r = Retriever(ws, run["index_name"])
    texts = rows.text.tolist()
    it = texts
    if progress:
        from tqdm import tqdm

        it = tqdm(texts, desc="router features", unit="question", leave=False)
    X = np.vstack([question_features(r, t) for t in it])
    y = oracle_choice(q, c, tolerance, higher_is_better)
    good = sufficient(q, tolerance, higher_is_better)
    groups = rows.group.tolist()
    folds_ = cv_folds(groups, folds)
    pred = np.empty(len(y), dtype=int)
    fold_models = []
    for tr, te in folds_:
        m_ = _fit(X[tr], good[tr], c[tr], seed, confidence)
        pred[te] = m_.predict(X[te])[0]
        fold_models.append((te, m_))
    idx = np.arange(len(y))
    rq, rc, oq, oc = q[idx, pred], c[idx, pred], q[idx, y], c[idx, y]
    sign = 1 if higher_is_better else -1
    best = max(range(len(points)), key=lambda j: (sign * np.nanmean(q[:, j]), -np.nanmean(c[:, j])))
    out = []
    for j, p in enumerate(points):
        m, lo, hi = bootstrap_ci(q[:, j], resamples)
        out.append({"point": p["name"], "kind": "fixed", metric: m, "low": lo, "high": hi, cost: float(c[:, j].mean()),
                    "router_picks": int((pred == j).sum()), "oracle_picks": int((y == j).sum())})
    for label, qq, cc in (("router (out of fold)", rq, rc), (f"oracle (tolerance {tolerance:g})", oq, oc)):
        m, lo, hi = bootstrap_ci(qq, resamples)
        out.append({"point": label, "kind": label.split()[0], metric: m, "low": lo, "high": hi, cost: float(cc.mean()),
                    "router_picks": None, "oracle_picks": None})
    for conf in curve:  # the same fold models, another threshold: the router's trade-off curve
        pc = np.empty(len(y), dtype=int)
        for te, m_ in fold_models:
            m_.confidence = conf
            pc[te] = m_.predict(X[te])[0]
        m, lo, hi = bootstrap_ci(q[idx, pc], resamples)
        out.append({"point": f"router (confidence {conf:g})", "kind": "router-curve", metric: m, "low": lo,
                    "high": hi, cost: float(c[idx, pc].mean()), "router_picks": None, "oracle_picks": None})
    table = pd.DataFrame(out)
    paired = []
    for against, qq, cc in ((f"best fixed: {points[best]['name']}", q[:, best], c[:, best]), ("oracle", oq, oc)):
        dq, dc = paired_bootstrap(qq, rq, resamples), paired_bootstrap(cc, rc, resamples)
        paired.append({"router vs": against, "n": dq["n"], f"delta {metric}": dq["delta"], "q_low": dq["low"],
                       "q_high": dq["high"], f"delta {cost}": dc["delta"], "c_low": dc["low"], "c_high": dc["high"],
                       "token_ratio": float(rc.mean() / cc.mean()) if cc.mean() else np.nan})
    final = _fit(X, good, c, seed, confidence)
    import dataclasses

    from rag.strategies import get_strategy

    def shape_params(p):  # a conversation point's memory policy and query mode are not the shape's budgets
        names = {f.name for f in dataclasses.fields(get_strategy(p["strategy"]).Params)}
        return {k: v for k, v in p["params"].items() if k in names}

    router = Router(final, [{"strategy": p["strategy"], "params": shape_params(p), "label": p["label"]}
                            for p in points], metric, float(tolerance), run_id, FEATURES_VERSION)
    choices = pd.DataFrame({"question_id": rows.question_id, "group": groups,
                            "oracle": [points[j]["name"] for j in y], "router": [points[j]["name"] for j in pred]})
    info = {"questions": len(y), "left_out": left_out, "not_routable": others, "folds": len(folds_),
            "metric": metric, "cost": cost, "tolerance": tolerance, "seed": seed, "best_fixed": points[best]["name"],
            "accuracy": float((pred == y).mean()), "good_enough": float(good[idx, pred].mean()),
            "confidence": confidence, "features": X.shape[1]}
    return RouteResult(table, pd.DataFrame(paired), info, choices, router, folds_, groups)


# --------------------------------------------------------------------------- escalation on abstention

def escalation(store, run_id: str, cheap: str, rich: str, metric: str = "f1", cost: str = "prompt_tokens",
               resamples: int = 2000) -> tuple[pd.DataFrame, dict]:
    """Self-Route on a stored run: answer with ``cheap``; where it abstained (the fallback sentence), answer
    again with ``rich``. The composite's quality is the rich answer's there, its cost counts both calls,
    and ``escalated`` says which questions went on. Exactly what running the two in sequence gives (the
    same prompts, the same cached answers), without calling anything again. Only questions where both
    points have an ok score for the metric, the cost and the abstention are used; the rest are counted."""
    from evals.stats import bootstrap_ci, paired_bootstrap

    scores = store.scores(run_id)
    pts = points_of(scores)
    a, b = pick_point(pts, cheap, run_id), pick_point(pts, rich, run_id)
    if a == b:
        raise ValueError("--escalate needs two different points")
    ok = scores[(scores.status == "ok") & scores.value.notna()]
    ok = ok.assign(point=ok.strategy + " · " + ok.point_label)
    ok = ok[ok.point.isin([a, b])]

    def col(point, m):
        s = ok[(ok.point == point) & (ok.metric == m)]
        return s.groupby("question_id")["value"].mean()

    fa, ma = col(a, "false_abstention"), col(a, "missed_abstention")
    abstained = pd.concat([fa == 1.0, ma == 0.0])  # answerable: false_abstention 1; unanswerable: missed 0
    frame = pd.DataFrame({"cheap_q": col(a, metric), "rich_q": col(b, metric), "cheap_c": col(a, cost),
                          "rich_c": col(b, cost), "escalated": abstained}).dropna()
    left_out = len(set(scores.question_id)) - len(frame)
    if frame.empty:
        raise ValueError(f"no question has ok {metric}, {cost} and abstention scores at both {a} and {b}")
    esc = frame.escalated.astype(bool).to_numpy()
    cq, rq = frame.cheap_q.to_numpy(float), frame.rich_q.to_numpy(float)
    cc, rc = frame.cheap_c.to_numpy(float), frame.rich_c.to_numpy(float)
    comp_q = np.where(esc, rq, cq)
    comp_c = cc + np.where(esc, rc, 0.0)
    rows = []
    for label, qq, c_, rate in ((a, cq, cc, None), (b, rq, rc, None), (f"escalate: {a} -> {b}", comp_q, comp_c,
                                                                      float(esc.mean()))):
        m, lo, hi = bootstrap_ci(qq, resamples)
        rows.append({"point": label, metric: m, "low": lo, "high": hi, cost: float(c_.mean()),
                     "escalation_rate": rate, "n": len(qq)})
    table = pd.DataFrame(rows)
    vs_rich_q, vs_rich_c = paired_bootstrap(rq, comp_q, resamples), paired_bootstrap(rc, comp_c, resamples)
    info = {"questions": len(frame), "left_out": left_out, "escalation_rate": float(esc.mean()),
            "escalated": int(esc.sum()), "cheap": a, "rich": b, "metric": metric, "cost": cost,
            "vs_rich": {"delta_quality": vs_rich_q, "delta_cost": vs_rich_c},
            "items": frame.assign(composite_q=comp_q, composite_c=comp_c).reset_index().rename(
                columns={"index": "question_id"}).to_dict("records")}
    info["summary"] = (
        f"run {run_id}: escalate from {a} to {b} where it abstains: {esc.sum()} of {len(frame)} questions escalated "
        f"({esc.mean():.1%}); {metric} {comp_q.mean():.3f} vs {rq.mean():.3f} for {b} alone (delta "
        f"{vs_rich_q['delta']:+.3f} [{vs_rich_q['low']:+.3f}, {vs_rich_q['high']:+.3f}]) at {comp_c.mean():,.0f} vs "
        f"{rc.mean():,.0f} {cost.replace('_', ' ')} per question ({comp_c.mean() / rc.mean():.2f}x; both calls "
        f"counted){f'; {left_out} questions without every score left out' if left_out else ''}")
    return table, info
