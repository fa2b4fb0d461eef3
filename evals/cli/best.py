"""``ragwb best``: the best point of a run (or its quality/cost front) with its whole configuration as TOML."""
from __future__ import annotations

import sys
from pathlib import Path

from .common import add_store_args, open_store


def cmd_best(a) -> int:
    from evals.analyze.best import choice_json, choose, render

    if a.max_context_tokens is not None and a.race_cost is not None:
        raise ValueError("give --max-context-tokens or --race-cost, not both")
    if a.json and a.race_cost is not None:
        raise ValueError("--json prints the best point; --race-cost prints a front: give one")
    if not (a.min_effect > 0 and a.min_effect < float("inf")):
        raise ValueError(f"--min-effect must be a difference above 0, got {a.min_effect}")
    with open_store(a) as st:
        rid = st.resolve_run(a.run)
        if not a.trust_judge:  # a judge at chance ranks nothing: it does not pick a point (issue 85)
            from evals.analyze.judge_health import chance_judged

            from evals.analyze.summary import run_scores

            why = chance_judged(st.run(rid), Path(st.path).parent, run_scores(st, rid)).get(a.metric)
            if why:
                raise ValueError(f"--metric {a.metric}: {why}")
        choice = choose(st, rid, a.metric, a.max_context_tokens, a.race_cost, a.min_effect)
    if a.json:
        import json

        print(json.dumps({"run": rid, **choice_json(choice)}), flush=True)
    else:
        print(render(choice), end="", flush=True)
    if a.out:
        out = Path(a.out)
        if len(choice.best) == 1:
            files = [(out, choice.best[0], f"ragwb run --config {out}")]
        else:  # a front: one file per point, numbered cheapest first
            files = [(out.with_name(f"{out.stem}-{i}{out.suffix or '.toml'}"), name, name)
                     for i, name in enumerate(choice.best, 1)]
        # every path checked before any is written: an existing file (or a link, even a dangling one) is never
        # overwritten without --force, and a link is never followed (the file is written beside it, then renamed
        # over the name: the link itself is replaced, never its target)
        taken = [str(p) for p, _, _ in files if p.exists() or p.is_symlink()]
        if taken and not a.force:
            raise ValueError(f"--out would overwrite {', '.join(taken)}: pass --force to replace, or another --out")
        from rag.safeio import write_whole

        for p, name, said in files:
            if not p.parent.is_dir():
                raise ValueError(f"--out {p}: the folder {p.parent} does not exist")
            write_whole(p, choice.configs[name].encode("utf-8"))
            print(f"written: {p} ({said})", file=sys.stderr)
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
    s.add_argument("--json", action="store_true",
                   help="print one JSON object: point, strategy, label, score (in-sample), expected_new (the choice "
                        "cross-fitted: chosen on part of the questions, scored on the rest), confirm, p_best, "
                        "questions_needed (docs/sweeps.md, How far to trust the best point)")
    s.add_argument("--min-effect", type=float, default=0.02, metavar="D",
                   help="the smallest difference that matters: how many questions would separate it (0.02)")
    s.add_argument("--out", default=None, metavar="FILE.toml",
                   help="also write the configuration there (a front: FILE-1.toml, FILE-2.toml, ... cheapest first); "
                        "an existing file is refused without --force")
    s.add_argument("--force", action="store_true", help="--out may replace an existing file (a link is replaced "
                                                        "itself, never followed)")
    s.add_argument("--trust-judge", action="store_true",
                   help="choose on an LLM-judged metric even when its judge's stored agreement with people is at "
                        "chance (refused by default: such values do not rank points)")
    add_store_args(s)
    s.set_defaults(fn=cmd_best)
