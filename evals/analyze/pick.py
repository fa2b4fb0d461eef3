"""How far to trust a picked point (issue 81): the best point of a grid is the best mean of many noisy means, measured
on the questions that chose it, so its printed score is optimistic. From the stored per-question scores alone (no
call is made), with the same choice rule as ``ragwb best`` (the best mean, ties to the cheaper context, after its
filters):

- **expected on new questions**: the whole select-then-score procedure cross-fitted: the questions are cut into K
  folds, the point is chosen on K-1 of them and scored on the fold it never saw, every fold in turn, R times with
  other cuts; each question's held-out score is its mean over the R cuts, and the estimate is their mean. Its 95%
  interval is Wilson's score interval on that mean for a metric in [0, 1] (a plain bootstrap collapses to a point
  near a ceiling of 1.0: every held-out value 1 gives [1.000, 1.000]; Wilson's stays honest there, and it is the
  binomial bound, wide for a 0-1 metric such as F1, which is what a pick made on 40 questions deserves), else a
  normal interval on the held-out scores;
- **P(best)**: the share of paired bootstrap resamples of the questions (every point on the same resample) in which a
  point is the one the rule picks;
- **questions needed**: how many questions a paired comparison needs to separate the pick from the runner-up at
  their observed paired difference and SD, and at a smallest difference that matters (95% two-sided, 80% power).

Every figure uses the questions every candidate point was scored on (a race drops points early: said with the
count)."""
from __future__ import annotations

import dataclasses
import math

import numpy as np
import pandas as pd

Z95, Z80 = 1.959964, 0.841621
FOLDS, CUTS, RESAMPLES, SEED = 5, 20, 1000, 81


@dataclasses.dataclass
class Trust:
    points: int  # candidates the pick was chosen from
    shared: int  # questions every candidate was scored on (what every figure below uses)
    questions: int  # questions any candidate was scored on
    expected: dict  # {mean, low, high, n, method}
    p_best: dict  # point -> share of resamples it wins, top first (only points that ever win)
    needed: dict  # {observed: int | None, min_effect: int | None, effect: float, delta: float, sd: float, n: int}
    note: str = ""


def question_matrix(scores: pd.DataFrame, metric: str, points: list[str]) -> tuple[np.ndarray, int]:
    """(Q x P matrix of per-question means over repeats, on the questions every one of ``points`` has an ok value
    for; how many questions any of them had)."""
    s = scores[(scores.metric == metric) & (scores.status == "ok")]
    s = s.assign(point_name=s["strategy"] + " · " + s["point_label"])
    s = s[s.point_name.isin(points)]
    wide = s.groupby(["question_id", "point_name"])["value"].mean().unstack("point_name").reindex(columns=points)
    return wide.dropna().to_numpy(float), len(wide)


def picks(weights: np.ndarray, m: np.ndarray, cost: np.ndarray, higher: bool = True) -> np.ndarray:
    """The rule's pick for each row of ``weights`` (R x Q question weights): the best weighted mean, ties (to 1e-12)
    to the cheaper mean context, then to the earlier point (the order ``best`` sorts in)."""
    means = (weights @ m) / weights.sum(1, keepdims=True)
    if not higher:
        means = -means
    top = means >= means.max(1, keepdims=True) - 1e-12
    return np.where(top, cost[None, :], np.inf).argmin(1)


def wilson(mean: float, n: int) -> tuple[float, float]:
    """Wilson's 95% score interval for a mean of n values in [0, 1]."""
    if n <= 0:
        return float("nan"), float("nan")
    p = min(max(mean, 0.0), 1.0)
    d = 1 + Z95 ** 2 / n
    c = (p + Z95 ** 2 / (2 * n)) / d
    h = Z95 * math.sqrt(p * (1 - p) / n + Z95 ** 2 / (4 * n * n)) / d
    return c - h, c + h


def expected_new(m: np.ndarray, cost: np.ndarray, higher: bool = True, unit: bool = True, folds: int = FOLDS,
                 cuts: int = CUTS, seed: int = SEED) -> dict:
    """The choice rule's score on questions it did not choose on, cross-fitted (module docstring)."""
    q, p = m.shape
    if p == 1 or q < 2:
        mean = float(m[:, 0].mean()) if q else float("nan")
        lo, hi = wilson(mean, q) if unit else _normal(m[:, 0])
        return {"mean": mean, "low": lo, "high": hi, "n": q, "method": "one point: nothing to choose from, its own "
                "score"}
    k = min(folds, q)
    rng = np.random.default_rng(seed)
    held = np.zeros(q)
    for _ in range(cuts):
        fold = np.empty(q, int)
        fold[rng.permutation(q)] = np.arange(q) % k
        train = (fold[None, :] != np.arange(k)[:, None]).astype(float)  # k x Q: each fold's choosing questions
        chosen = picks(train, m, cost, higher)
        held += m[np.arange(q), chosen[fold]]
    held /= cuts
    mean = float(held.mean())
    lo, hi = wilson(mean, q) if unit else _normal(held)
    return {"mean": mean, "low": lo, "high": hi, "n": q,
            "method": f"{k}-fold cross-fitting x {cuts} cuts: chosen as best chooses, scored on the fold it did not "
                      "see; " + ("Wilson 95% interval" if unit else "normal 95% interval")}


def _normal(v: np.ndarray) -> tuple[float, float]:
    if len(v) < 2:
        return float("nan"), float("nan")
    h = Z95 * float(v.std(ddof=1)) / math.sqrt(len(v))
    return float(v.mean()) - h, float(v.mean()) + h


def p_best(m: np.ndarray, cost: np.ndarray, names: list[str], higher: bool = True, resamples: int = RESAMPLES,
           seed: int = SEED) -> dict:
    """{point: share of paired bootstrap resamples in which the rule picks it}, most often first."""
    q = m.shape[0]
    rng = np.random.default_rng(seed)
    wins = np.zeros(m.shape[1])
    for start in range(0, resamples, 250):  # in blocks: 1,000 x Q weights of a large set stay small
        r = min(250, resamples - start)
        w = np.stack([np.bincount(rng.integers(0, q, q), minlength=q) for _ in range(r)]).astype(float)
        wins += np.bincount(picks(w, m, cost, higher), minlength=m.shape[1])
    share = {names[i]: float(wins[i] / resamples) for i in np.argsort(-wins) if wins[i]}
    return share


def questions_needed(m: np.ndarray, best: int, runner: int, effect: float) -> dict:
    """Questions a paired comparison needs to separate the best from the runner-up (95% two-sided, 80% power): at
    their observed paired difference and SD, and at ``effect``."""
    d = m[:, best] - m[:, runner]
    delta, sd = float(abs(d.mean())), float(d.std(ddof=1)) if len(d) > 1 else 0.0

    def n_for(diff: float) -> int | None:
        if diff <= 0 or sd == 0:
            return None
        return int(math.ceil(((Z95 + Z80) * sd / diff) ** 2))

    return {"observed": n_for(delta), "min_effect": n_for(effect), "effect": effect, "delta": delta, "sd": sd,
            "n": len(d)}


def trust(scores: pd.DataFrame, metric: str, table: pd.DataFrame, higher: bool = True, unit: bool = True,
          min_effect: float = 0.02) -> Trust:
    """The figures above for the candidates of ``table`` (``best``'s table: point_name, context_tokens, best first)."""
    names = list(table["point_name"])
    m, seen = question_matrix(scores, metric, names)
    cost = table["context_tokens"].fillna(0.0).to_numpy(float)
    note = "" if len(m) == seen else (f"on the {len(m):,} questions every point was scored on (of {seen:,}: a race "
                                      "drops points early)")
    if not len(m):
        raise ValueError(f"no question was scored on {metric} by every candidate point: nothing to estimate from")
    exp = expected_new(m, cost, higher, unit)
    share = p_best(m, cost, names, higher) if len(names) > 1 else {names[0]: 1.0}
    runner = 1 if len(names) > 1 else None
    need = questions_needed(m, 0, runner, min_effect) if runner is not None else {
        "observed": None, "min_effect": None, "effect": min_effect, "delta": 0.0, "sd": 0.0, "n": len(m)}
    return Trust(len(names), len(m), seen, exp, share, need, note)


def trust_lines(t: Trust, metric: str, in_sample: float, best: str) -> list[str]:
    """What ``best``, the page and the report print under the best point."""
    e = t.expected
    out = []
    if t.points == 1:
        out.append(f"one point: nothing was chosen, so its score is what to expect on new questions ({e['mean']:.3f})")
        return out
    out.append(f"expected on new questions: {metric} {e['mean']:.3f} [{e['low']:.3f}, {e['high']:.3f}] "
               f"(the choice of 1 of {t.points} points made again on part of the {t.shared:,} questions and scored "
               f"on the rest; {e['method']}); in-sample {in_sample:.3f}, optimism {in_sample - e['mean']:+.3f}"
               + (f"; {t.note}" if t.note else ""))
    top = [(p, s) for p, s in list(t.p_best.items())[:5] if s >= 0.005]
    share = t.p_best.get(best, 0.0)
    out.append(f"P(best): {best} {share:.2f}" + "".join(f"; {p} {s:.2f}" for p, s in top if p != best)
               + (" (uncertain: the pick is the best in under half of the resamples)" if share < 0.5 else ""))
    n = t.needed
    parts = []
    if n["observed"] is not None:
        parts.append(f"about {n['observed']:,} questions would separate the runner-up at the observed paired "
                     f"difference ({n['delta']:.3f}, SD {n['sd']:.3f})")
    if n["min_effect"] is not None:
        parts.append(f"about {n['min_effect']:,} a {n['effect']:g} difference")
    if parts:
        out.append("; ".join(parts) + f"; this set has {n['n']:,}")
    return out


def trust_json(t: Trust) -> dict:
    e = t.expected
    return {"expected_new": {k: e[k] for k in ("mean", "low", "high", "method")},
            "p_best": dict(list(t.p_best.items())[:5]), "questions_needed": t.needed["min_effect"],
            "questions_needed_observed": t.needed["observed"], "candidates": t.points, "shared_questions": t.shared}


def validate(m: np.ndarray, cost: np.ndarray, tune: int = 40, subsets: int = 200, higher: bool = True,
             unit: bool = True, seed: int = SEED) -> dict:
    """The estimate held against the truth on a grid scored on many questions (docs/sweeps.md, How far to trust the
    best point): ``subsets`` seeded tune sets of ``tune`` questions; on each the rule picks a point, its in-sample
    mean and ``expected_new`` are computed from the tune questions alone, and the truth is the pick's mean on every
    other question. Returns the mean optimism of the in-sample score, the estimate's mean error and mean absolute
    error, its interval's coverage of the truth, and how often the pick is the best point on the other questions."""
    rng = np.random.default_rng(seed)
    q = m.shape[0]
    naive, err, cover, best_on_rest = [], [], 0, 0
    for _ in range(subsets):
        idx = rng.choice(q, tune, replace=False)
        rest = np.setdiff1d(np.arange(q), idx)
        sub = m[idx]
        pick = int(picks(np.ones((1, tune)), sub, cost, higher)[0])
        truth = float(m[rest, pick].mean())
        est = expected_new(sub, cost, higher, unit, seed=int(rng.integers(1 << 31)))
        naive.append(float(sub[:, pick].mean()) - truth)
        err.append(est["mean"] - truth)
        cover += est["low"] <= truth <= est["high"]
        rest_means = m[rest].mean(0) if higher else -m[rest].mean(0)
        best_on_rest += bool(rest_means[pick] >= rest_means.max() - 1e-12)
    return {"subsets": subsets, "tune": tune, "questions": q, "points": m.shape[1],
            "optimism": float(np.mean(naive)), "optimism_p90": float(np.percentile(naive, 90)),
            "error": float(np.mean(err)), "abs_error": float(np.mean(np.abs(err))),
            "coverage": cover / subsets, "pick_best_on_rest": best_on_rest / subsets,
            "removed": float(np.mean(naive) - np.mean(err))}
