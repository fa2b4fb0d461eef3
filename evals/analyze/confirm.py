"""The confirm part of a run (evals/run/confirm.py; docs/sweeps.md "Confirm questions"): the point the grid picked on
its tune questions, scored on questions that did not choose it. Its tune score is the best of K noisy means, so it
is optimistic; the confirm score is not (the point was fixed before these questions were seen), and the gap between
them is the optimism measured. ``show``, ``best``, the report and the page print these lines."""
from __future__ import annotations

import dataclasses
import pandas as pd

from .pick import _normal, wilson  # the pick's own intervals: one implementation

SMALL_CONFIRM = 20  # a confirm part this small tells no two close points apart: said beside its figure


@dataclasses.dataclass
class Confirmed:
    metric: str  # the metric these figures are on
    picked_on: str  # the metric the run picked its confirmed point(s) on
    candidates: int  # K: the points the pick was made from (after the filters of the choice)
    tune_questions: int
    confirm_questions: int  # the run's confirm part
    rows: list  # per point asked for: {point, tune, confirm {mean, low, high, n} | None, gap, small}
    confirmed: list  # the points the run evaluated on its confirm part


def confirm_figures(store, run_id: str, metric: str, table: pd.DataFrame, points: list | None,
                    higher: bool = True) -> Confirmed | None:
    """``points`` (default: every point the run confirmed) with their tune score from ``table`` (``best``'s candidates)
    and their score on the run's confirm questions; None for a run without confirm questions."""
    ids = store.confirm_questions(run_id)
    if ids is None:
        return None
    sc = store.scores(run_id, part="confirm")
    run = store.run(run_id)
    picked_on = ((run.get("config") or {}).get("confirm") or {}).get("metric", "")
    sc = sc.assign(point_name=sc["strategy"] + " · " + sc["point_label"])
    confirmed = sorted(set(sc.point_name))
    s = sc[(sc.metric == metric) & (sc.status == "ok")]
    tq = int(table["n_ok"].max()) if len(table) else 0
    rows = []
    by = table.set_index("point_name")
    for p in (points if points is not None else [x for x in table.point_name if x in confirmed]):
        vals = s[s.point_name == p].groupby("question_id")["value"].mean().to_numpy(float)
        tune = float(by.loc[p, "mean"]) if p in by.index else float("nan")
        conf = None
        if len(vals):
            mean = float(vals.mean())
            unit = bool(((vals >= 0) & (vals <= 1)).all())
            lo, hi = wilson(mean, len(vals)) if unit else _normal(vals)
            conf = {"mean": mean, "low": lo, "high": hi, "n": int(len(vals))}
        gap = (tune - conf["mean"]) * (1 if higher else -1) if conf else None
        rows.append({"point": p, "tune": tune, "tune_n": int(by.loc[p, "n_ok"]) if p in by.index else 0,
                     "confirm": conf, "gap": gap, "small": bool(conf and conf["n"] < SMALL_CONFIRM)})
    return Confirmed(metric, picked_on, len(table), tq, len(ids), rows, confirmed)


def confirm_lines(c: Confirmed | None) -> list[str]:
    """One line per point: its tune score (picked from K points), its confirm score with its 95% interval and n, and
    the gap, labelled as optimism; a small confirm part is said as such; a point the run did not confirm says so."""
    if c is None:
        return []
    out = []
    for r in c.rows:
        cf = r["confirm"]
        if cf is None:
            out.append(f"confirm: {r['point']} was not evaluated on the run's {c.confirm_questions:,} confirm "
                       f"questions (the run confirmed {', '.join(c.confirmed) or 'no point yet'}, picked on "
                       f"{c.picked_on}); its {c.metric} there is unknown")
            continue
        line = (f"confirm: {r['point']}: tune {c.metric} {r['tune']:.3f} (the best of {c.candidates} point(s) on "
                f"{r['tune_n']:,} tune questions), confirm {cf['mean']:.3f} [{cf['low']:.3f}, {cf['high']:.3f}] "
                f"(n={cf['n']:,} questions that did not choose it), gap {r['gap']:+.3f} (optimism: tune minus "
                "confirm)")
        if c.metric != c.picked_on and c.picked_on:
            line += f"; the run picked it on {c.picked_on}"
        if r["small"]:
            line += (f"; under {SMALL_CONFIRM} confirm questions: too few to tell close points apart, read the "
                     "interval, not the mean")
        out.append(line)
    return out


def confirm_json(c: Confirmed | None, point: str) -> dict | None:
    """``best --json``'s ``confirm``: {mean, low, high, n, tune, gap, candidates} of ``point``, or None."""
    if c is None:
        return None
    for r in c.rows:
        if r["point"] == point and r["confirm"] is not None:
            return {**r["confirm"], "tune": r["tune"], "gap": r["gap"], "candidates": c.candidates,
                    "small": r["small"]}
    return None
