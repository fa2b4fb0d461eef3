"""``ragwb gate``: the CI regression gate."""
from __future__ import annotations


def cmd_gate(a) -> int:
    from evals.analyze.gate import main_gate

    return main_gate(a)


def add_gate(sub) -> None:
    s = sub.add_parser("gate", help="CI regression gate with paired bootstrap intervals",
                       description="Compare a candidate run against a baseline (run id or committed baseline "
                       "file) per strategy and metric; exit 1 on a regression beyond tolerance, too many non-ok "
                       "statuses, or different question sets.")
    add_gate_args(s)
    s.set_defaults(fn=cmd_gate)


def add_gate_args(p) -> None:
    """The gate's flags, here and not beside the gate: building the CLI's parser must not import pandas and
    DuckDB (~0.6 s of every `ragwb` command, `ragwb search` included)."""
    from evals.stats import DEFAULT_SEED, JUDGED_GAP

    p.add_argument("--baseline", required=False, help="baseline run id, 'latest', or a baseline file (.json/.json.gz)")
    p.add_argument("--candidate", required=True, help="candidate run id, prefix or 'latest'")
    p.add_argument("--tolerances", default=None, help="TOML file with a [tolerances] table (metric = value or 'rel:x')")
    p.add_argument("--metrics", nargs="*", default=None, help="metrics to gate (default: the headline set)")
    p.add_argument("--max-error-rate", type=float, default=0.02,
                   help="cap on the share of a point's items that failed, per point (0.02)")
    p.add_argument("--aa-noise", action="store_true",
                   help="widen each tolerance by the A/A noise floor measured between repeats 0 and 1 of the baseline")
    p.add_argument("--resamples", type=int, default=2000, help="bootstrap resamples (2000)")
    p.add_argument("--seed", type=int, default=DEFAULT_SEED, help="bootstrap seed (fixed: reproducible verdicts)")
    p.add_argument("--markdown", default=None, help="also write the Markdown summary to this file")
    p.add_argument("--json", dest="json_out", default=None, help="JSON verdict file (default: WORKSPACE/gate.json)")
    p.add_argument("--write-baseline", default=None, metavar="FILE",
                   help="write the candidate's per-question scores to FILE (a committed baseline) and exit")
    p.add_argument("--allow-missing-points", action="store_true",
                   help="gate only the points both runs have (default: fail when a candidate point has no baseline)")
    p.add_argument("--judged-gap", type=float, default=JUDGED_GAP, metavar="SHARE",
                   help="judged metrics of a point are compared only when its judged@10 differs by at most this "
                        "between the runs (default 0.10); past it they are left out and the gate says so")
    p.add_argument("--questions", choices=("tune", "confirm", "all"), default="tune",
                   help="a run with confirm questions (ragwb run --confirm): gate on its tune part (default, as every "
                        "reader), on its confirm part (the questions no tuning saw: the candidate's, else the "
                        "baseline's), or on all")
    p.add_argument("--workspace", default="results", help="workspace folder (default: results)")
    p.add_argument("--db", default=None, help="DuckDB file (default: WORKSPACE/results.duckdb)")
