"""``ragwb route``: learn a router (or measure escalation) from a stored run."""
from __future__ import annotations

from pathlib import Path

from .common import add_store_args, at_least, non_negative_float, open_store


def cmd_route(a) -> int:
    """Train a router on a stored run (out-of-fold quality and cost against the best fixed point and the
    oracle), save it under WORKSPACE/routers/, chart it; or, with --escalate, the Self-Route composite."""
    import json

    import pandas as pd

    from evals.score.metrics import METRICS

    try:
        import sklearn  # noqa: F401
    except ImportError:
        raise ValueError("ragwb route needs scikit-learn: pip install 'rag-workbench[route]'") from None
    from rag.index.workspace import Workspace

    from evals.analyze.routing import learn_router
    from evals.report.charts import route_figure

    higher = getattr(METRICS.get(a.metric), "higher_is_better", True)
    for c in [a.confidence] + list(a.curve):
        if not 0 < c <= 1:
            raise ValueError(f"a confidence is a probability in (0, 1], got {c:g}")
    if a.escalate:  # the composite trains nothing: router options would be silently ignored
        given = [f for f, v, d in (("--tolerance", a.tolerance, 0.0), ("--folds", a.folds, 5), ("--seed", a.seed, 0),
                                   ("--confidence", a.confidence, 0.5), ("--curve", a.curve, [])) if v != d]
        if given:
            raise ValueError(f"--escalate computes the composite of two stored points and trains no router: "
                             f"{', '.join(given)} would do nothing; leave {'it' if len(given) == 1 else 'them'} out")
    with open_store(a) as st:
        rid = st.resolve_run(a.run)
        if a.escalate:
            from evals.analyze.routing import escalation

            t, info = escalation(st, rid, a.escalate[0], a.escalate[1], a.metric, a.cost)
            print(info["summary"])
            with pd.option_context("display.width", 250, "display.max_columns", 30, "display.precision", 3):
                print(t.to_string(index=False, na_rep="n/a"))
            return 0
        res = learn_router(st, Workspace(a.workspace), rid, a.metric, a.cost, a.tolerance, a.folds, a.seed, higher,
                           progress=True, confidence=a.confidence, curve=tuple(a.curve))
    from rag.strategies.routing import save_router

    info = res.info
    path = save_router(res.router, Path(a.workspace) / "routers")
    print(f"run {rid}: router for {a.metric} (tolerance {a.tolerance:g}) on {info['questions']} questions "
          f"({info['left_out']} without a score at every point left out), {info['folds']}-fold cross-validation "
          f"grouped by {'conversation' if any(g != q for g, q in zip(res.choices.group, res.choices.question_id)) else 'question'}, "
          f"seed {a.seed}; out of fold its point is good enough for {info['good_enough']:.0%} of the questions "
          f"(the oracle's own point {info['accuracy']:.0%})")
    if info["not_routable"]:
        print(f"not routable (routed, escalate or a deployed system): {', '.join(info['not_routable'])}")
    with pd.option_context("display.width", 250, "display.max_columns", 30, "display.precision", 3):
        print(res.table.to_string(index=False, na_rep="n/a"))
        print(res.paired.to_string(index=False, na_rep="n/a"))
    reports = Path(a.workspace) / "reports"
    reports.mkdir(parents=True, exist_ok=True)
    html = reports / f"route-{rid}-{a.metric.replace('@', '_')}.html"
    route_figure(res).write_html(html, include_plotlyjs=True)  # opens with no network
    print(f"router: {path} (sha256 {res.router.sha256[:12]}); use it with --strategies routed --set routed.model={path}")
    print(f"chart: {html}")
    if a.json_out:
        Path(a.json_out).write_text(json.dumps({"run": rid, "router": str(path), "sha256": res.router.sha256,
                                                "info": info, "table": res.table.to_dict("records"),
                                                "paired": res.paired.to_dict("records")}, indent=1, default=str))
    return 0


def add_route(sub) -> None:
    s = sub.add_parser("route", help="learn a router from a stored run: per question the cheapest good-enough point, "
                       "measured out of fold against the best fixed point and the oracle",
                       description="Trains a small seeded random forest (scikit-learn) that picks one of the run's "
                       "points per question from features known before answering (question length and type words, "
                       "language, the candidate pool's shape), cross-validated with folds grouped by question (by "
                       "conversation on multi-turn sets). Saves the router under WORKSPACE/routers/ with its sha256 "
                       "and writes a quality-vs-cost chart. Run it later as a shape: --strategies routed --set "
                       "routed.model=PATH. With --escalate CHEAP RICH: the Self-Route composite instead.")
    s.add_argument("run", help="run id, unique prefix, or 'latest'")
    s.add_argument("--metric", default="f1", help="the quality metric to route on (default f1)")
    s.add_argument("--tolerance", type=non_negative_float, default=0.0,
                   help="a point within this much of the best is good enough (default 0)")
    s.add_argument("--cost", default="prompt_tokens", choices=["prompt_tokens", "context_tokens"],
                   help="what a point costs (default prompt_tokens)")
    s.add_argument("--folds", type=at_least(2), default=5, help="cross-validation folds (default 5)")
    s.add_argument("--seed", type=int, default=0, help="the forest's seed (default 0)")
    s.add_argument("--confidence", type=float, default=0.5,
                   help="take the cheapest point whose predicted chance of being good enough reaches this (0.5); "
                        "higher: fewer misses, more tokens")
    s.add_argument("--curve", type=lambda s: [float(x) for x in s.split(",") if x.strip()], default=[],
                   metavar="C1,C2", help="also measure the router at these confidences (its quality-vs-cost curve, "
                                         "out of fold with the same folds), e.g. 0.3,0.7,0.9")
    s.add_argument("--escalate", nargs=2, default=None, metavar=("CHEAP", "RICH"),
                   help="Self-Route: answer with CHEAP, and again with RICH where CHEAP abstained; the composite "
                        "point's quality, cost of both calls and escalation rate, paired against RICH")
    s.add_argument("--json", dest="json_out", default=None, help="also write the result as JSON to this file")
    add_store_args(s)
    s.set_defaults(fn=cmd_route)
