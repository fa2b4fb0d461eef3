"""Confirm questions (issue 81, docs/sweeps.md "Confirm questions"): a grid or race tunes on part of the questions;
the point it picks (or each point of a race's quality/cost front) is then evaluated on the questions that did not
choose it. The part is set aside by a seeded hash of the question id, so a question added later never moves an
earlier one between the parts (with a share; with a count, the N lowest hashes, kept as the run stored them).

The run stores which questions were which (its options' ``confirm_questions``); every reader of a run sees the tune
part unless it asks for the confirm part (``ResultStore.scores(run, part=...)``)."""
from __future__ import annotations

import hashlib
import math

MIN_PART = 2  # questions in either part: fewer is refused before any work


def parse_confirm(text) -> dict:
    """``--confirm SHARE`` (0 < share < 1) or ``--confirm N`` (an integer >= 2) as the run's confirm config
    ({"share": x} or {"n": k}); anything else is a ValueError in one line that names the value."""
    s = str(text).strip()
    why = ("--confirm takes a share of the questions strictly between 0 and 1 (e.g. 0.3) or a count of questions "
           f">= {MIN_PART} (e.g. 100)")
    try:
        x = float(s)
    except ValueError:
        raise ValueError(f"{why}; got {s!r}") from None
    if not math.isfinite(x) or x <= 0:
        raise ValueError(f"{why}; got {s!r}")
    if x < 1:
        return {"share": x}
    if x == 1:
        raise ValueError(f"{why}; got {s!r} (as a share it leaves no tune questions, as a count one confirm question "
                         "cannot tell anything)")
    if x != int(x) or "." in s or "e" in s.lower():
        raise ValueError(f"{why}; got {s!r} (a count is a whole number)")
    return {"n": int(x)}


def confirm_config(text, seed: int | None, metric: str | None, race: dict) -> dict:
    """The run's ``confirm`` config from the flags ({} without --confirm; a knob without it is refused)."""
    if text is None:
        if seed is not None or metric is not None:
            raise ValueError("--confirm-seed / --confirm-metric without --confirm SHARE|N would do nothing")
        return {}
    cfg = parse_confirm(text)
    chosen_on = race.get("metric") if race else None
    if metric and chosen_on and metric != chosen_on:
        raise ValueError(f"--confirm-metric {metric} differs from --race {chosen_on}: a race chooses on its own "
                         "metric (drop --confirm-metric)")
    m = metric or chosen_on or "f1"
    from evals.score.metrics import METRICS

    if m not in METRICS:
        raise ValueError(f"--confirm-metric: unknown metric {m!r}; valid: {', '.join(sorted(METRICS))}")
    return {**cfg, "seed": int(seed or 0), "metric": m}


def hash_share(qid: str, seed: int) -> float:
    """A question's place in [0, 1): stable across runs, machines and added questions."""
    h = hashlib.sha256(f"ragwb-confirm:{seed}:{qid}".encode()).digest()
    return int.from_bytes(h[:8], "big") / 2.0 ** 64


def split(questions: list, confirm: dict, stored: list | None = None) -> tuple[list, list]:
    """(tune, confirm) questions. ``stored``: the confirm ids a run stored when it started (a resume keeps them)."""
    if stored is not None:
        keep = set(stored)
        return [q for q in questions if q.qid not in keep], [q for q in questions if q.qid in keep]
    seed = int(confirm.get("seed", 0))
    place = {q.qid: hash_share(q.qid, seed) for q in questions}
    if "share" in confirm:
        chosen = {qid for qid, u in place.items() if u < float(confirm["share"])}
    else:
        n = int(confirm["n"])
        chosen = set(sorted(place, key=place.get)[:n]) if n < len(place) else set(place)
    tune, conf = [q for q in questions if q.qid not in chosen], [q for q in questions if q.qid in chosen]
    if len(tune) < MIN_PART or len(conf) < MIN_PART:
        asked = f"a share of {confirm['share']:g}" if "share" in confirm else f"{confirm['n']} questions"
        raise ValueError(f"--confirm {asked} of {len(questions)} questions leaves {len(tune)} to tune on and "
                         f"{len(conf)} to confirm on; each part needs at least {MIN_PART}")
    return tune, conf


def chosen_points(store, run_id: str, cfg) -> list[str]:
    """The point the run picked on its tune questions, as ``ragwb best`` picks (the best mean on the confirm metric,
    ties to the cheaper context), or each point of a race's quality/cost front. A metric nothing has a value for is
    an error naming the metrics that have values."""
    from evals.analyze.best import choose

    metric = cfg.confirm["metric"]
    tol = (cfg.race or {}).get("cost_tolerance")
    try:
        return list(choose(store, run_id, metric, race_cost=tol, trust_figures=False).best)
    except ValueError as e:
        raise ValueError(f"--confirm: cannot pick a point to confirm: {e}") from None


def confirm_items(cfg, ws, plan, done: set, engine, store, run_id: str, shard_questions: int, log: dict):
    """The items of the confirm part: the picked point(s) on the confirm questions (a resume evaluates only what is
    missing: the pick is made again from the same stored tune scores, so it is the same point). ``log`` receives
    the metric, the points, the counts and the lines the run's summary prints."""
    import dataclasses
    import sys

    from .items import RunJob, make_shards, point_label

    chosen = chosen_points(store, run_id, cfg)
    n_points = len({(n, tuple(sorted(kw.items()))) for n, kw in plan.points})
    print(f"confirm: {', '.join(chosen)} (picked on {cfg.confirm['metric']} from {n_points} point(s) on "
          f"{len(plan.questions):,} tune questions) on {len(plan.confirm):,} confirm questions", file=sys.stderr)
    log.update({"metric": cfg.confirm["metric"], "points": chosen, "tune_questions": len(plan.questions),
                "confirm_questions": len(plan.confirm), "planned": len(chosen) * len(plan.confirm) * cfg.repeats})
    want = set(chosen)
    shards = make_shards(plan.confirm, False, shard_questions)
    for index, pts in plan.by_index:
        mine = [(n, kw) for n, kw in pts if f"{n} · {point_label(kw)}" in want]
        if mine:  # the services measured beside the grid are not picked: they stay on the tune part
            yield from engine.evaluate(RunJob(dataclasses.replace(cfg, systems=()), str(ws.root), index, plan.confirm,
                                              mine, [], done, shards))


def summary_lines(store, run_id: str, metric: str) -> list[str]:
    """What the run's summary prints when its confirm part is stored: each confirmed point's figures."""
    from evals.analyze.best import choose

    from evals.analyze.confirm import confirm_lines

    from evals.analyze.confirm import confirm_figures
    from evals.score.metrics import METRICS

    ch = choose(store, run_id, metric, trust_figures=False)
    higher = getattr(METRICS.get(metric), "higher_is_better", True)
    return confirm_lines(confirm_figures(store, run_id, metric, ch.table, None, higher))
