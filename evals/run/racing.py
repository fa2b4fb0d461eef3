"""A raced grid inside a run (docs/sweeps.md, "Racing the grid"): the questions in a seeded order, batch by batch over
the points still in the race, each look read back from the store (evals/analyze/race.py decides who leaves)."""
from __future__ import annotations

import dataclasses
import sys

from evals.store import ResultStore

from rag.llm.client import dollars_text

from .config import RunConfig
from .items import make_shards, point_id, point_label


def race_lines(race: dict, llm: dict | None = None) -> str:
    """What a race decided and saved (counted): items against the full grid, the calls made, the survivors."""
    full, spent = race["full_grid_items"], race["planned"]
    lines = [f"  race on {race['metric']} (batches of {race['batch']}, alpha {race['alpha']:g}): {spent:,} of "
             f"{full:,} items of the full grid ({spent / max(full, 1):.0%}); {full - spent:,} items and their answer "
             f"calls not made" + (f"; {llm.get('calls', 0):,} calls made, {llm.get('tokens_used', 0):,} tokens, "
                                  + dollars_text(llm.get('dollars_spent', 0), llm.get("price_known", True))
                                  if llm else "")]
    lines += [f"  - {e['point']}: {e['reason']}" for e in race["exits"]]
    lines.append(f"  survivors: {', '.join(race['survivors'])}")
    if race.get("index_configs", 1) > 1:  # what a race cannot save
        lines.append(f"  its {race['index_configs']} index configs were built before the race: a race saves answer "
                     "calls, never embedding")
    return "\n".join(lines)


def race_order(questions: list, seed: int) -> list:
    """The questions in the race's seeded order (the same on a resume)."""
    import random

    order = list(questions)
    random.Random(seed).shuffle(order)
    return order


def raced_items(cfg: RunConfig, engine, jobs: list, store: ResultStore, run_id: str, shard_questions: int, flush,
                log: dict, on_look=None):
    """A raced sweep (evals/analyze/race.py): the questions in a seeded order, batch by batch over the points
    still in the race; after each batch is committed, every point the confidence sequence rules out leaves.
    A resume replays the looks from the stored scores (the same decisions) and evaluates only what is missing.
    ``log`` receives the exits, the survivors and what the race saved against the full grid."""
    import numpy as np

    from evals.analyze.race import RaceState, race_step
    from evals.score.metrics import METRICS

    r = cfg.race
    metric = r["metric"]
    job = jobs[0]  # (index axes: one job per index config, the same questions; points race across all of them)
    order = race_order(job.questions, int(r.get("seed", 0)))
    pos = {q.qid: i for i, q in enumerate(order)}
    all_points = [p for j in jobs for p in j.points]
    # a point is named "strategy · label" in the race (as in show and the workbench), keyed in the store
    name_of = {(name, point_id(kw)): f"{name} · {point_label(kw)}" for name, kw in all_points}
    by_name = {v: k for k, v in name_of.items()}
    state = RaceState(metric, getattr(METRICS.get(metric), "higher_is_better", True), float(r.get("alpha", 0.05)),
                      r.get("cost_tolerance"), alive=list(by_name))
    batch = int(r.get("batch", 50))
    ends = list(range(batch, len(order), batch)) + [len(order)]
    prev, spent = 0, 0
    for end in ends:
        qs = order[prev:end]
        for j in jobs:  # a raced-out index config stops costing answer calls (its index was built before)
            pts = [(n, kw) for n, kw in j.points if name_of[(n, point_id(kw))] in state.alive]
            if not pts:
                continue
            spent += len(pts) * len(qs) * cfg.repeats
            bj = dataclasses.replace(j, questions=qs, points=pts, shards=make_shards(qs, False, shard_questions))
            yield from engine.evaluate(bj)
        flush()  # every item of the batch is committed before the look (a kill after it replays the same look)
        prev = end
        vals, cost = _race_values(store, run_id, metric, [by_name[p] for p in state.alive], pos, end)
        if end == ends[0] and not any(len(v) and not np.isnan(np.asarray(v, float)).all() for v in vals.values()):
            # a race on a metric nothing has a value for rules nothing out and says nothing (issue 73): refused at
            # the first look, naming the metrics that have values here
            with store.session() as con:
                got = con.execute("SELECT DISTINCT metric FROM scores WHERE run_id = ? AND status = 'ok' ORDER BY 1",
                                  [run_id]).fetchall()
            have = [m for (m,) in got if m not in ("context_tokens", "context_tokens_est", "prompt_tokens", "completion_tokens",
                                      "cost_usd", "history_tokens", "token_estimate_error")]
            raise ValueError(f"--race {metric}: no point has a {metric} value on the first {end} question(s) (n/a "
                             f"here: e.g. no reference answers for f1); race on one that has values: "
                             f"{', '.join(have) or 'none'}")
        for ex in race_step(state, {name_of[k]: v for k, v in vals.items()},
                            {name_of[k]: c for k, c in cost.items()}, end):
            print(f"race: {ex.point} {ex.reason}", file=sys.stderr)
        if on_look is not None:
            on_look(end, list(state.alive), list(state.exits))
    full = len(all_points) * len(order) * cfg.repeats
    log.update({"index_configs": len(jobs), "metric": metric, "alpha": state.alpha, "batch": batch, "questions": len(order),
                "survivors": list(state.alive), "planned": spent, "full_grid_items": full,
                "exits": [{"point": e.point, "at_question": e.at_question, "reason": e.reason, "delta": e.delta,
                           "low": e.low, "high": e.high, "versus": e.versus} for e in state.exits]})


def _race_values(store: ResultStore, run_id: str, metric: str, points: list, pos: dict, end: int):
    """Per point, the metric over the first ``end`` questions of the race order (NaN where not scored ok) and the
    mean context tokens: read back from the store, so a resumed race looks at exactly what was stored."""
    import numpy as np

    with store.session() as con:
        df = con.execute("SELECT strategy, point_id, question_id, metric, avg(value) AS v FROM scores "
                         "WHERE run_id = ? AND metric IN (?, 'context_tokens') AND status = 'ok' GROUP BY ALL",
                         [run_id, metric]).df()
    vals, cost = {}, {}
    for key in points:
        g = df[(df.strategy == key[0]) & (df.point_id == key[1])]
        v = np.full(end, np.nan)
        m = g[g.metric == metric]
        idx = m.question_id.map(pos)
        keep = idx.notna() & (idx < end)
        v[idx[keep].astype(int).to_numpy()] = m.v[keep].to_numpy()
        vals[key] = v
        c = g[(g.metric == "context_tokens") & g.question_id.map(pos).lt(end)]
        cost[key] = float(c.v.mean()) if len(c) else 0.0
    return vals, cost
