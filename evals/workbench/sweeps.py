"""The workbench's budget curves: a Sweep of one budget from the applied budgets (re-packed from cached candidates),
and the same grid raced as a stored run (docs/sweeps.md)."""
from __future__ import annotations

import json

import pandas as pd

from rag.strategies import get_strategy

from .evaluate import evaluate_points, points_from_budgets
from .session import Session


def parse_budget_value(v: str):
    v = v.strip()
    for conv in (int, float):
        try:
            return conv(v)
        except ValueError:
            pass
    return v


def budget_curve(sess: Session, strategy: str, param: str, values: list, limit: int = 100,
                 base: dict | None = None) -> pd.DataFrame:
    """Sweep one budget of one strategy (other budgets at ``base`` or the shipped defaults): the
    long scores frame of every value, re-packed from cached candidates where the search allows."""

    return evaluate_points(sess, [(strategy, {**(base or {}), param: v}) for v in values], limit)


def sweep_points(strategies: list[str], param: str, values: str, budgets: dict) -> list[tuple[str, dict]]:
    """The points of the workbench's Sweep: ``param`` over ``values`` ("2,4,8") for each strategy, every other
    budget at what the user applied (not the shipped defaults). A budget a strategy does not have, or no value,
    is an error naming the valid ones. The page prices these points (``answer_plan``) before it sends them."""

    import dataclasses

    from evals.run.plan import check_points

    param = param.strip()
    vals = [parse_budget_value(x) for x in str(values).split(",") if x.strip()]
    if not vals:
        raise ValueError("give at least one value to sweep, e.g. 2,4,8,16")
    if not strategies:
        raise ValueError("pick at least one strategy to sweep")
    # the run's one cap, counted before a point is made (the page's Sweep and Race and Workbench.sweep come here)
    check_points(len(vals) * len(strategies), f"{len(strategies)} strateg{'y' if len(strategies) == 1 else 'ies'} x "
                                              f"{len(vals):,} value(s) of {param}")
    points = []
    for name, applied in points_from_budgets(list(strategies), budgets):
        fields = [f.name for f in dataclasses.fields(get_strategy(name).Params)]
        if param not in fields:
            raise ValueError(f"strategy {name!r} has no budget {param!r}; valid: {', '.join(fields)}")
        points += [(name, {**applied, param: v}) for v in vals]
    return points


def sweep_from_applied(sess: Session, strategies: list[str], param: str, values: str, budgets: dict,
                       limit: int = 100) -> pd.DataFrame:
    """The workbench's Sweep evaluated: the long scores frame of every point of ``sweep_points``."""

    return evaluate_points(sess, sweep_points(strategies, param, values, budgets), limit)


def _grid(strategies: list[str], param: str, values: str, budgets: dict) -> dict:
    """The sweep of ``param`` over ``values`` for each strategy (its other budgets as applied) as a run's grid."""
    import dataclasses

    param = param.strip()
    vals = [parse_budget_value(x) for x in str(values).split(",") if x.strip()]
    grid = {}
    for name, applied in points_from_budgets(list(strategies), budgets):
        fields = [f.name for f in dataclasses.fields(get_strategy(name).Params)]
        if param not in fields:
            raise ValueError(f"strategy {name!r} has no budget {param!r}; valid: {', '.join(fields)}")
        grid[name] = {**{k: [v] for k, v in applied.items() if k != param}, param: vals}
    return grid


def confirm_part(confirm, metric: str) -> dict:
    """A page's or a Workbench's confirm setting (a share, a count, or 0/None: off) as a run's confirm config."""
    if confirm in (None, 0, 0.0, "", "0"):
        return {}
    from ..run.confirm import parse_confirm

    return {**parse_confirm(confirm), "seed": 0, "metric": metric}


def race_budgets(sess: Session, db: str, workspace: str, strategies: list[str], param: str, values: str,
                 budgets: dict, limit: int, metric: str, batch: int = 50, on_look=None, prices: dict | None = None,
                 confirm=None) -> str:
    """The workbench's "Race these budgets": the sweep of ``param`` over ``values`` for each strategy (its other
    budgets as applied) as a raced, stored run on the first ``limit`` questions (docs/sweeps.md), answered by the
    session's answerer (the LLM's response cache included). ``on_look(seen, alive, exits)`` after each batch.
    ``confirm`` (a share or a count of the questions): set aside, the race's winner evaluated on them afterwards
    (docs/sweeps.md, Confirm questions). Returns the run id."""
    from ..run.runner import run_evaluation
    from ..score.metrics import METRICS

    if metric not in METRICS:
        raise ValueError(f"unknown metric {metric!r}; valid: {', '.join(sorted(METRICS))}")
    grid = _grid(strategies, param, values, budgets)
    if sum(len(g[param.strip()]) for g in grid.values()) < 2:
        raise ValueError("a race needs at least two points: give two or more values (e.g. 2,4,8,16)")
    from .session import session_run_config

    # judged as Apply judges (the session's judges): a race on llm_faithfulness holds llm_faithfulness
    cfg = session_run_config(sess, grid=grid, limit=limit, prices=dict(prices or {}),
                             race={"metric": metric, "batch": batch, "alpha": 0.05, "cost_tolerance": None, "seed": 0},
                             confirm=confirm_part(confirm, metric))
    return run_evaluation(cfg, workspace, db, progress=False, on_look=on_look).run_id


def sweep_stored(sess: Session, db: str, workspace: str, strategies: list[str], param: str, values: str,
                 budgets: dict, limit: int, metric: str, confirm, prices: dict | None = None) -> str:
    """A Sweep with confirm questions: a stored run (the confirm part and the pick are kept with it), the grid on
    the tune part of the first ``limit`` questions, the point picked on ``metric`` then evaluated on the confirm
    part. Returns the run id."""
    from ..run.runner import run_evaluation
    from .session import session_run_config

    part = confirm_part(confirm, metric)
    if not part:
        raise ValueError("a stored sweep here is one with confirm questions: give a confirm share (e.g. 0.3)")
    cfg = session_run_config(sess, grid=_grid(strategies, param, values, budgets), limit=limit,
                             prices=dict(prices or {}), confirm=part)
    return run_evaluation(cfg, workspace, db, progress=False).run_id


def pick_of(db: str, run_id: str, metric: str) -> dict | None:
    """A stored run's pick on ``metric`` (evals/analyze/best.pick_figures): the lines the page prints under a Race,
    a stored Sweep or Best config, and the chart's hover for the best point; None where there is no pick."""
    from ..analyze.best import pick_figures
    from ..store import ResultStore

    with ResultStore(db, read_only=True) as st:
        return pick_figures(st, run_id, [metric], run_metric=False)


def race_leaderboard(seen: int, alive: list[str], exits: list) -> pd.DataFrame:
    """The live leaderboard of a race: every point, in the race or when and why it left."""
    rows = [{"point": p, "status": "in the race", "after question": seen, "why": ""} for p in alive]
    rows += [{"point": e.point, "status": "left", "after question": e.at_question, "why": e.reason} for e in exits]
    return pd.DataFrame(rows, columns=["point", "status", "after question", "why"])


def race_result(db: str, run_id: str) -> tuple[str, pd.DataFrame]:
    """A stored race in one line (items against the full grid, survivors) and its final leaderboard."""
    from types import SimpleNamespace

    from ..store import ResultStore

    with ResultStore(db, read_only=True) as st:
        race = json.loads(st.run(run_id).get("summary") or "{}").get("race", {})
    from rag.safeio import md_code, md_text as esc  # a run id and point names as text, never Markdown (issue 82)

    line = (f"Raced and stored as **{esc(run_id)}** ({md_code(f'ragwb show {run_id}')}): "
            f"{race.get('planned', 0):,} of {race.get('full_grid_items', 0):,} items of the full grid; survivors: "
            f"{esc(', '.join(race.get('survivors', [])))}")
    pick = pick_of(db, run_id, race["metric"]) if race.get("metric") else None
    if pick:  # how far to trust the winner: expected on new questions, P(best), its confirm part (issue 81)
        line += "".join(f"  \n{esc(x)}" for x in pick["lines"])
    return line, race_leaderboard(race.get("questions", 0), race.get("survivors", []),
                                  [SimpleNamespace(**e) for e in race.get("exits", [])])
