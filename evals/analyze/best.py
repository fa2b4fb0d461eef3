"""`ragwb best RUN --metric M`: the best point of a run with its whole configuration (index settings and the
strategy's budgets) as TOML that `ragwb run --config` takes, its interval, and the runner-up it beat with the paired
difference; where no point is clearly best, the points tied with it. ``--max-context-tokens N`` keeps the points
whose mean context is within N tokens; ``--race-cost TOL`` prints the quality/cost front instead (a point leaves it
when a cheaper one is at least as good within TOL), each with its TOML."""
from __future__ import annotations

import dataclasses
import json
import re
from pathlib import Path

import pandas as pd

from evals.score.metrics import METRICS

from .explore import paired_points
from .summary import run_scores, summarize_scores

COST = "context_tokens"


@dataclasses.dataclass
class Choice:
    metric: str
    table: pd.DataFrame  # point, strategy, label, mean, low, high, n, context_tokens (candidates, best first)
    best: list[str]  # the point, or the front (race-cost), or the point and those tied with it
    runner_up: dict | None  # the paired comparison of the best with the next point
    tied: list[str]
    configs: dict  # point -> TOML text
    note: str = ""
    front: bool = False  # --race-cost: ``best`` is the quality/cost front, cheapest first
    trust: object = None  # evals.analyze.pick.Trust: expected on new questions, P(best), questions needed
    confirm: object = None  # evals.analyze.confirm.Confirmed: the chosen point on the run's confirm questions


_UNSAFE = re.compile("[\x7f-\x9f\u202a-\u202e\u2066-\u2069]")  # left raw by JSON


def _toml_value(v) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, (int, float)):
        return repr(v)
    if isinstance(v, (list, tuple)):
        return "[" + ", ".join(_toml_value(x) for x in v) + "]"
    # a TOML basic string (JSON's escapes are TOML's); DEL, C1 controls and bidi overrides, which JSON leaves raw,
    # as \uXXXX too: a pasted TOML never carries a terminal escape or text shown out of order (issue 73)
    return _UNSAFE.sub(lambda m: f"\\u{ord(m.group()):04x}", json.dumps(str(v), ensure_ascii=False))



INDEX_KEYS = ("chunker", "chunk_tokens", "overlap", "leaf_min", "leaf_max", "parent_max")


def point_toml(run: dict, strategy: str, params: dict, point: str, stats: str) -> str:
    """The point as a sweep file: [run] (the dataset, the strategy, the run's limit, and the index settings the
    point carried in its params), [index] (every setting of the index the point was evaluated on, defaults too:
    the file reproduces the point while defaults and flags change), [strategies.NAME] (the point's own budgets, so
    the reproduced point has the same parameters and `ragwb gate` pairs it with this one)."""
    from rag.strategies import STRATEGIES, get_strategy

    if strategy not in STRATEGIES:  # a deployed system or a logged file's outputs: no budgets to write (said)
        return (f"# ragwb best: {point} ({stats})\n# {strategy} is not a strategy of this workbench (a deployed "
                "system or logged outputs measured beside the strategies): there is no budget config to run\n")
    cfg = run.get("config") or {}
    idx = dict((cfg.get("index") or {}).get("chunking") or {})
    emb = (cfg.get("index") or {}).get("embedder") or {}
    tags = {k[len("index."):]: v for k, v in params.items() if k.startswith("index.")}
    idx.update(tags)
    index = {k: idx[k] for k in INDEX_KEYS if k in idx}
    index["embedder"] = tags.get("embedder", emb.get("name") or "e5")
    fields = {f.name: f.default for f in dataclasses.fields(get_strategy(strategy).Params)}
    # the point's own budgets (those its label names, and any off the default): the same label and parameters
    named = set(re.findall(r"(?:^|,)([A-Za-z_][\w.]*)=", point.split(" · ", 1)[-1]))
    budgets = {k: v for k, v in params.items() if not k.startswith("index.") and k in fields and v is not None
               and (k in named or v != fields[k])}
    lines = [f"# ragwb best: {point} ({stats})", f"# from run {run.get('run_id', '')}; run it again with "
             "`ragwb run --config THIS_FILE`" + (" plus the same --llm-base-url/--llm-model" if cfg.get("llm") else ""),
             "[run]", f"datasets = [{_toml_value(cfg.get('dataset', run.get('dataset')))}]",
             f"strategies = [{_toml_value(strategy)}]"]
    if cfg.get("questions_file"):  # a folder's questions: the file runs from any folder (issue 83)
        lines.append(f"questions = {_toml_value(str(Path(cfg['questions_file']).absolute()))}")
    if cfg.get("limit"):
        lines.append(f"limit = {int(cfg['limit'])}")
    if cfg.get("answerer") and cfg["answerer"] != "extractive":
        lines.append(f"answerer = {_toml_value(cfg['answerer'])}")
    if tags:  # the point's index settings stay in its params (its label and the gate's pairing)
        lines.append(f"index_in_points = {_toml_value(list(tags))}")
    lines += ["", "[index]"] + [f"{k} = {_toml_value(v)}" for k, v in index.items()]
    lines += ["", f"[strategies.{strategy}]"] + [f"{k} = {_toml_value(v)}" for k, v in sorted(budgets.items())]
    if emb.get("model") or emb.get("base_url"):
        lines.insert(2, f"# embedder {emb.get('name')}: pass --embed-model {emb.get('model') or ''} "
                        f"--embed-base-url {emb.get('base_url') or ''} as the run did")
    return "\n".join(lines) + "\n"


def choose(store, run_id: str, metric: str, max_context_tokens: float | None = None,
           race_cost: float | None = None, min_effect: float = 0.02, trust_figures: bool = True) -> Choice:
    """The best point (or the front) on the run's tune questions (every question, unless it has a confirm part);
    ``trust_figures``: also what to expect on new questions and how sure the pick is (evals/analyze/pick.py), and
    the confirm part's figures where the run has one."""
    scores = run_scores(store, run_id)
    if metric not in set(scores.metric):
        raise ValueError(f"metric {metric!r} not scored in run {run_id}; scored: "
                         f"{', '.join(sorted(set(scores.metric)))}")
    summ = summarize_scores(scores, [metric, COST])
    q = summ[(summ.metric == metric) & (summ.n_ok > 0)].set_index(["strategy", "point"])
    if q.empty:
        raise ValueError(f"no point of run {run_id} has a {metric} value (n/a on every row)")
    c = summ[summ.metric == COST].set_index(["strategy", "point"])["mean"]
    t = q[["mean", "low", "high", "n_ok"]].join(c.rename(COST)).reset_index()
    t["point_name"] = t["strategy"] + " · " + t["point"]
    higher = getattr(METRICS.get(metric), "higher_is_better", True)
    note = ""
    if max_context_tokens is not None:
        within = t[t[COST] <= max_context_tokens]
        if within.empty:
            raise ValueError(f"no point of run {run_id} keeps its mean context within {max_context_tokens:g} tokens; "
                             f"the cheapest has {t[COST].min():.0f}")
        note = f"points whose mean context is within {max_context_tokens:g} tokens: {len(within)} of {len(t)}"
        t = within
    t = t.sort_values(["mean", COST], ascending=[not higher, True]).reset_index(drop=True)
    params = _point_params(store, run_id)
    run = {**store.run(run_id), "run_id": run_id}

    def cfg_of(row) -> str:
        stats = f"{metric} {row['mean']:.3f} [{row['low']:.3f}, {row['high']:.3f}], n={int(row['n_ok'])}, " \
                f"{row[COST]:.0f} context tokens"
        return point_toml(run, row["strategy"], params[(row["strategy"], row["point"])], row["point_name"], stats)

    if race_cost is not None:  # the quality/cost front: a cheaper point at least as good within TOL removes one
        by_cost = t.sort_values([COST, "mean"], ascending=[True, not higher]).reset_index(drop=True)
        front, best_so_far = [], None
        for _, r in by_cost.iterrows():
            if best_so_far is None or (r["mean"] > best_so_far + race_cost if higher
                                       else r["mean"] < best_so_far - race_cost):
                front.append(r)
                best_so_far = r["mean"]
        ch = Choice(metric, t, [r["point_name"] for r in front], None, [],
                    {r["point_name"]: cfg_of(r) for r in front},
                    (note + "; " if note else "") + f"the quality/cost front (tolerance {race_cost:g}), cheapest "
                                                    "first", front=True)
        if trust_figures:
            from .confirm import confirm_figures

            ch.confirm = confirm_figures(store, run_id, metric, t, ch.best, higher)
        return ch
    best = t.iloc[0]
    if not trust_figures:  # the run's own pick of the point to confirm: the paired checks are not needed
        return Choice(metric, t, [best["point_name"]], None, [], {}, note)
    runner, tied = None, []
    for _, r in t.iloc[1:].iterrows():  # paired on the questions both scored: which points the data cannot separate
        p = paired_points(scores, best["point_name"], r["point_name"], [metric], n_resamples=2000)
        if not len(p):
            continue
        row = p.iloc[0].to_dict()
        if runner is None:
            runner = {"point": r["point_name"], **row}
        if row["verdict"] == "tie":
            tied.append(r["point_name"])
    from .pick import trust

    # the pick is optimistic (the best of many noisy means): what to expect on new questions, how sure it is
    # (issue 81), from the same candidates, filters and tie rule, with no call made
    unit = bool(scores.loc[(scores.metric == metric) & (scores.status == "ok"), "value"].between(0, 1).all())
    # a race's raced-out points stopped early: the figures use the questions every surviving point has (said)
    survivors = set((json.loads(run.get("summary") or "{}") if isinstance(run.get("summary"), str) else {})
                    .get("race", {}).get("survivors") or [])
    alive = t[t.point_name.isin(survivors)] if survivors and best["point_name"] in survivors else t
    how = trust(scores, metric, alive.reset_index(drop=True), higher, unit, min_effect)
    if len(alive) < len(t):
        how.note = (f"{len(alive)} of {len(t)} points survived the race; on the {how.shared:,} questions every "
                    "surviving point was scored on")
    from .confirm import confirm_figures

    return Choice(metric, t, [best["point_name"]], runner, tied, {best["point_name"]: cfg_of(best)}, note,
                  trust=how, confirm=confirm_figures(store, run_id, metric, t, [best["point_name"]], higher))


def _point_params(store, run_id: str) -> dict:
    rows = store.con.execute("SELECT DISTINCT strategy, point_label, params FROM results WHERE run_id = ?",
                             [run_id]).fetchall()
    return {(s, lab): (json.loads(p) if p else {}) for s, lab, p in rows}


def render(choice: Choice) -> str:
    prose, tomls = render_parts(choice)
    return "\n".join(prose + [x for t in tomls for x in ("", t.rstrip())]) + "\n"


def render_parts(choice: Choice) -> tuple[list[str], list[str]]:
    """(the prose lines: the best point, the runner-up or the ties; each chosen point's TOML, whole: a block that
    `ragwb run --config` takes as pasted, its comments included)."""
    m, t = choice.metric, choice.table
    out = []
    if choice.note:
        out.append(choice.note)
    from .confirm import confirm_lines

    if choice.front:
        rows = t.set_index("point_name")
        out.append(f"front on {m} vs {COST}: " + "; ".join(
            f"{p} ({rows.loc[p, 'mean']:.3f}, {rows.loc[p, COST]:.0f} tokens)" for p in choice.best))
        out += confirm_lines(choice.confirm)
    else:
        b = t.iloc[0]
        out.append(f"best on {m}: {b['point_name']}: {b['mean']:.3f} [{b['low']:.3f}, {b['high']:.3f}] "
                   f"(n={int(b['n_ok'])}, {b[COST]:.0f} context tokens)")
        r = choice.runner_up
        if r is not None:
            out.append(f"runner-up {r['point']}: paired delta (runner-up - best) {r['delta']:+.3f} "
                       f"[{r['low']:+.3f}, {r['high']:+.3f}] on {int(r['n'])} questions: "
                       + ("the best is clearly better" if r["verdict"] == "worse" else
                          "not separated (a tie)" if r["verdict"] == "tie" else r["verdict"]))
        if choice.tied:
            more = len(choice.tied) - 12
            out.append(f"no point is clearly best: {len(choice.tied)} tied with it (95% paired interval includes 0): "
                       + "; ".join(choice.tied[:12]) + (f"; and {more} more" if more > 0 else ""))
        if choice.trust is not None:
            from .pick import trust_lines

            out += trust_lines(choice.trust, m, float(b["mean"]), b["point_name"])
        out += confirm_lines(choice.confirm)
    return out, [choice.configs[name] for name in choice.best]


def choice_json(choice: Choice) -> dict:
    """``ragwb best --json``: one object (issue 81) for the best point: point, strategy, label, the in-sample score,
    what to expect on new questions, P(best) of the top points, the questions a 0.02 difference needs."""
    from .confirm import confirm_json
    from .pick import trust_json

    b = choice.table.iloc[0]
    out = {"metric": choice.metric, "point": b["point_name"], "strategy": b["strategy"], "label": b["point"],
           "score": {"mean": float(b["mean"]), "low": float(b["low"]), "high": float(b["high"]),
                     "n": int(b["n_ok"])},
           "confirm": confirm_json(choice.confirm, b["point_name"]), "tied": list(choice.tied),
           "context_tokens": float(b[COST])}
    if choice.trust is not None:
        out.update(trust_json(choice.trust))
    return out


def pick_metrics(store, run_id: str, metrics: list[str], run_metric: bool = True) -> list[str]:
    """The metrics a run's pick may be read on, first choice first: the one its confirm part or race picked on
    (``run_metric``), else the quality metrics of ``metrics`` (the headline columns, higher is better) in order."""
    cfg = store.run(run_id).get("config") or {}
    named = (cfg.get("confirm") or {}).get("metric") or (cfg.get("race") or {}).get("metric")
    if named and run_metric:
        return [named]
    return [m for m in metrics if getattr(METRICS.get(m), "higher_is_better", False) is True]


def default_metric(store, run_id: str) -> str:
    """The metric to choose on when none is named: the run's own (raced or confirmed on), else the first headline
    quality metric with an ok value in the run; an error naming the metrics scored when none has."""
    from .summary import headline_metrics

    scores = run_scores(store, run_id)
    ok = set(scores.loc[scores.status == "ok", "metric"])
    for m in pick_metrics(store, run_id, headline_metrics(store, run_id)):
        if m in ok:
            return m
    raise ValueError(f"run {run_id} has no quality metric with a value to choose on; scored: "
                     f"{', '.join(sorted(set(scores.metric))) or 'nothing'}")


def pick_figures(store, run_id: str, metrics: list[str], run_metric: bool = True) -> dict | None:
    """The grid's pick for ``show``'s headline, the report and the page's chart, on the first metric of
    ``pick_metrics`` with values: {"metric", "point", "lines" (the best point in-sample and the K it was picked
    from, what to expect on new questions with its interval, P(best), the confirm part's figures), "hover" (the
    chart's words for the best point)}. None for a run with one point or no such metric."""
    for metric in pick_metrics(store, run_id, metrics, run_metric):
        try:
            ch = choose(store, run_id, metric)
        except ValueError:  # no values on this run (e.g. f1 without reference answers): the next one
            continue
        if len(ch.table) < 2 or ch.trust is None:
            return None
        from .confirm import confirm_json, confirm_lines

        b, e = ch.table.iloc[0], ch.trust.expected
        share = ch.trust.p_best.get(b["point_name"], 0.0)
        head = (f"pick on {metric}: {b['point_name']} {b['mean']:.3f} in-sample (the best of {len(ch.table)} points, "
                f"optimistic); expected on new questions {e['mean']:.3f} [{e['low']:.3f}, {e['high']:.3f}] "
                f"(cross-fitted, optimism {b['mean'] - e['mean']:+.3f}); P(best) {share:.2f}"
                + (" (uncertain)" if share < 0.5 else ""))
        conf = confirm_json(ch.confirm, b["point_name"])
        hover = (f"the pick on {metric} of {len(ch.table)} points: expected on new questions {e['mean']:.3f} "
                 f"[{e['low']:.3f}, {e['high']:.3f}], P(best) {share:.2f}"
                 + (f"; confirm {conf['mean']:.3f} [{conf['low']:.3f}, {conf['high']:.3f}] n={conf['n']}"
                    if conf else ""))
        return {"metric": metric, "point": b["point_name"], "lines": [head] + confirm_lines(ch.confirm),
                "hover": hover, "expected": e, "p_best": share, "in_sample": float(b["mean"]), "confirm": conf,
                "candidates": len(ch.table)}
    return None


def pick_lines(store, run_id: str, metrics: list[str]) -> list[str]:
    """``pick_figures``' lines, with the command that says more ([] where there is no pick)."""
    f = pick_figures(store, run_id, metrics)
    if f is None:
        return []
    return [f["lines"][0] + f"; ragwb best {run_id} --metric {f['metric']}"] + f["lines"][1:]
