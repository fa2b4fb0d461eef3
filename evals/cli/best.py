"""``ragwb best``: the best point of a run (or its quality/cost front) with its whole configuration as TOML."""
from __future__ import annotations

import sys
from pathlib import Path

from .common import add_store_args, open_store


def cmd_best(a) -> int:
    from evals.analyze.best import choose, render

    if a.max_context_tokens is not None and a.race_cost is not None:
        raise ValueError("give --max-context-tokens or --race-cost, not both")
    with open_store(a) as st:
        rid = st.resolve_run(a.run)
        choice = choose(st, rid, a.metric, a.max_context_tokens, a.race_cost)
    text = render(choice)
    print(text, end="", flush=True)
    if a.out:
        out = Path(a.out)
        if len(choice.best) == 1:
            out.write_text(choice.configs[choice.best[0]], encoding="utf-8")
            print(f"written: {out} (ragwb run --config {out})", file=sys.stderr)
        else:  # a front: one file per point, numbered cheapest first
            for i, name in enumerate(choice.best, 1):
                p = out.with_name(f"{out.stem}-{i}{out.suffix or '.toml'}")
                p.write_text(choice.configs[name], encoding="utf-8")
                print(f"written: {p} ({name})", file=sys.stderr)
    return 0


def add_best(sub) -> None:
    s = sub.add_parser("best", help="the best point of a run with its whole configuration (index and budgets) as "
                                    "TOML that `ragwb run --config` takes, its interval and the runner-up it beat")
    s.add_argument("run", help="run id, unique prefix, or 'latest'")
    s.add_argument("--metric", required=True, help="the quality metric to choose on (e.g. f1, evidence_recall)")
    s.add_argument("--max-context-tokens", type=float, default=None, metavar="N",
                   help="only points whose mean context is within N tokens")
    s.add_argument("--race-cost", type=float, default=None, metavar="TOL",
                   help="print the quality/cost front instead: a point leaves it when a cheaper one is at least as "
                        "good within TOL")
    s.add_argument("--out", default=None, metavar="FILE.toml",
                   help="also write the configuration there (a front: FILE-1.toml, FILE-2.toml, ... cheapest first)")
    add_store_args(s)
    s.set_defaults(fn=cmd_best)
