"""Racing a budget grid (docs/sweeps.md): evaluate the questions batch by batch over the points still in the race,
and after each batch drop every point whose paired difference to the leader is below zero with an anytime-valid
interval, so a sweep with a paid model stops paying for points that are clearly worse.

The interval is the asymptotic confidence sequence of Waudby-Smith, Arnold, Wu, Ramdas and Wang ("Time-uniform
central limit theory and asymptotic confidence sequences", Annals of Statistics 2024): the two-sided
Gaussian-mixture boundary

    mean_t +- sd_t * sqrt( 2 (t rho^2 + 1) / (t^2 rho^2) * log( sqrt(t rho^2 + 1) / alpha ) )

with rho tuned so the boundary is tightest near t* questions. It holds uniformly over every look (looking after
each batch does not inflate the error) in the asymptotic sense of that paper: coverage tends to 1 - alpha as the
number of questions grows, under finite variance; it is not a finite-sample guarantee. Finite-sample sequences
(Hoeffding or empirical-Bernstein with a union over looks, or a betting CS) hold at every n but, measured on the
bundled squad2 grid, eliminate nothing within 1,200 questions (docs/sweeps.md). The error is split over the
rivals of the leader (Bonferroni: alpha / (K - 1)).

``race_step`` is the decision; the runner (evals/run/runner.py) and the bench (``ragwb bench --only race``)
both call it, so what is measured is what runs.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

DEFAULT_BATCH = 50
DEFAULT_ALPHA = 0.05
DEFAULT_T_STAR = 500  # the boundary is tightest near this many questions (the bundled grids' scale)
MIN_PAIRS = 20  # no decision on fewer paired questions: the CLT boundary needs some n


def cs_halfwidth(sd: float, t: int, alpha: float, t_star: int = DEFAULT_T_STAR) -> float:
    """Half-width of the asymptotic confidence sequence for a mean after ``t`` observations with sample standard
    deviation ``sd`` (two-sided, level ``alpha``, Gaussian mixture tuned for ``t_star``)."""
    if t < 1:
        return math.inf
    la = -2 * math.log(alpha)
    rho2 = (la + math.log(la + 1)) / t_star
    return sd * math.sqrt(2 * (t * rho2 + 1) / (t * t * rho2) * math.log(math.sqrt(t * rho2 + 1) / alpha))


@dataclass
class Exit:
    point: str
    at_question: int  # how many questions had been evaluated when it left
    reason: str
    delta: float
    low: float
    high: float
    versus: str


@dataclass
class RaceState:
    metric: str
    higher_is_better: bool = True
    alpha: float = DEFAULT_ALPHA
    cost_tolerance: float | None = None  # --race-cost: leave when a cheaper point is non-inferior within this
    alive: list = field(default_factory=list)
    exits: list = field(default_factory=list)


def _paired(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    ok = ~(np.isnan(a) | np.isnan(b))
    return b[ok] - a[ok]


def race_step(state: RaceState, values: dict[str, np.ndarray], costs: dict[str, float], seen: int,
              labels: dict[str, str] | None = None) -> list[Exit]:
    """One look: ``values[point]`` holds the metric per question evaluated so far, in one question order for
    every point (NaN where not scored ok); ``costs[point]`` its mean context tokens. Points that leave are
    removed from ``state.alive`` and returned with their reason."""
    labels = labels or {}
    alive = [p for p in state.alive if p in values]
    if len(alive) < 2:
        return []
    sign = 1.0 if state.higher_is_better else -1.0
    means = {p: sign * np.nanmean(values[p]) if np.isfinite(values[p]).any() else -math.inf for p in alive}
    leader = max(alive, key=lambda p: (means[p], -costs.get(p, 0.0)))
    a = state.alpha / max(1, len(alive) - 1)
    out = []
    for p in alive:
        if p == leader:
            continue
        d = sign * _paired(values[leader], values[p])  # > 0 would mean p beats the leader
        if d.size < MIN_PAIRS:
            continue
        m, w = float(d.mean()), cs_halfwidth(float(d.std(ddof=1)) if d.size > 1 else 0.0, d.size, a)
        if m + w < 0:
            lo, hi = sorted((sign * (m - w), sign * (m + w)))
            out.append(Exit(p, seen, f"raced out at question {seen}: {state.metric} {sign * m:+.3f} [{lo:+.3f}, "
                                     f"{hi:+.3f}] vs {labels.get(leader, leader)}", sign * m, lo, hi, leader))
    gone = {e.point for e in out}
    if state.cost_tolerance is not None:  # keep the quality/cost Pareto front, not one winner
        rest = [p for p in alive if p not in gone]
        for p in rest:
            for q in rest:
                if q == p or q in gone or costs.get(q, math.inf) >= costs.get(p, math.inf):
                    continue
                d = sign * _paired(values[p], values[q])  # q - p: q at least as good within the tolerance?
                if d.size < MIN_PAIRS:
                    continue
                m, w = float(d.mean()), cs_halfwidth(float(d.std(ddof=1)), d.size, a)
                if m - w > -state.cost_tolerance:
                    lo, hi = sorted((sign * (m - w), sign * (m + w)))
                    out.append(Exit(p, seen, f"raced out at question {seen}: {labels.get(q, q)} is as good on "
                                             f"{state.metric} (delta {sign * m:+.3f} [{lo:+.3f}, {hi:+.3f}], within "
                                             f"{state.cost_tolerance:g}) and cheaper ({costs[q]:.0f} vs "
                                             f"{costs[p]:.0f} context tokens)", sign * m, lo, hi, q))
                    gone.add(p)
                    break
    state.alive = [p for p in state.alive if p not in gone]
    state.exits += out
    return out


def simulate(matrix: np.ndarray, costs: np.ndarray, points: list[str], metric: str, order: np.ndarray,
             batch: int = DEFAULT_BATCH, alpha: float = DEFAULT_ALPHA, higher_is_better: bool = True,
             cost_tolerance: float | None = None) -> dict:
    """The race over a full grid's per-question scores (``matrix[question, point]``, NaN = not ok) in ``order``:
    which points survive and the share of items it evaluated. The same ``race_step`` as a raced run."""
    st = RaceState(metric, higher_is_better, alpha, cost_tolerance, alive=list(points))
    spent, n, prev = 0, len(order), 0
    col = {p: j for j, p in enumerate(points)}
    for end in list(range(batch, n, batch)) + [n]:
        spent += len(st.alive) * (end - prev)  # the points in the race answer this batch
        prev = end
        idx = order[:end]
        race_step(st, {p: matrix[idx, col[p]] for p in st.alive},
                  {p: float(np.nanmean(costs[idx, col[p]])) for p in st.alive}, end)
    return {"survivors": list(st.alive), "items": spent, "share": spent / (n * len(points)), "exits": st.exits}
