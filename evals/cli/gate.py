"""``ragwb gate``: the CI regression gate."""
from __future__ import annotations


def cmd_gate(a) -> int:
    """The gate, then what CI reads: JUnit (--junit), the pull-request comment (--comment), and inside GitHub
    Actions its annotations and step summary (docs/gate.md). Every output path and budget is checked first."""
    from evals.analyze.gate import parse_budgets, run_gate
    from evals.report import ci

    from evals.analyze.judge_repeats import parse_requires

    a.budgets = parse_budgets(a.max, a.min)  # a bad budget: one line, exit 2, before any run is read
    a.requires = parse_requires(a.require)  # a bad K/N rule too
    junit = ci.check_out_path(a.junit, "--junit")
    comment = ci.check_out_path(a.comment, "--comment")
    ci.check_out_path(a.markdown, "--markdown")
    res, bname, cid, crun = run_gate(a)
    if res is None:  # --write-baseline
        return 0
    if junit is not None:
        ci.write_text(junit, ci.junit_xml(res, bname, cid, (crun or {}).get("git_commit")))
    if comment is not None:
        ci.write_text(comment, ci.comment(res, bname, cid, a.report_url))
    ci.github_outputs(res, bname, cid)  # nothing outside GitHub Actions
    return res["exit_code"]


def add_gate(sub) -> None:
    import argparse

    s = sub.add_parser("gate", help="CI regression gate with paired bootstrap intervals",
                       formatter_class=argparse.RawDescriptionHelpFormatter,
                       description="Compare a candidate run against a baseline (run id or committed baseline "
                       "file) per strategy and metric, and check absolute budgets (--max/--min).\n\nexit codes:\n"
                       "  0  passed\n  1  a regression beyond tolerance, a budget exceeded, a --require rule unmet, or a "
                       "point that lost too "
                       "many items\n  2  a usage error (a flag, a file, a run id)\n  3  the runs are not comparable "
                       "(other datasets, other question sets, candidate points without a baseline)\n\n"
                       "CI outputs (docs/gate.md): --junit FILE, --comment FILE, --markdown FILE, --json FILE; inside "
                       "GitHub Actions also ::error/::warning annotations and the step summary ($GITHUB_STEP_SUMMARY).")
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
                   help="widen each tolerance by the A/A noise floor measured between repeats 0 and 1 of the baseline, "
                        "and each LLM-judged metric's by its judge's repeat noise (--judge-repeats, either run)")
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
    p.add_argument("--max", action="append", default=None, metavar="METRIC=VALUE",
                   help="an absolute budget on every candidate point (repeatable), e.g. --max cost_usd=0.002 --max "
                        "context_tokens=6000: a point fails when its whole 95%% interval is above it")
    p.add_argument("--min", action="append", default=None, metavar="METRIC=VALUE",
                   help="a floor, e.g. --min evidence_recall=0.8: a point fails when its whole 95%% interval is below")
    p.add_argument("--require", action="append", default=None, metavar="[METRIC=]K/N[@AT]",
                   help="a question must pass K of N repeated judgments (a judgment passes at AT or more, default 0.5; "
                        "repeatable; no METRIC: every LLM-judged metric), e.g. --require llm_faithfulness=2/3; needs a "
                        "candidate run with --judge-repeats N; fails per question, listed")
    p.add_argument("--junit", default=None, metavar="FILE",
                   help="JUnit XML: a testsuite per strategy x point, a testcase per metric and budget (GitLab, "
                        "Jenkins, Azure DevOps, CircleCI and GitHub test-report actions read it)")
    p.add_argument("--comment", default=None, metavar="FILE",
                   help="a pull-request comment body (at most 65,000 characters): the verdict, the failing rows and "
                        "a line for the report (--report-url)")
    p.add_argument("--report-url", default=None, metavar="URL", help="the report artifact's link for --comment")
    p.add_argument("--trust-judge", action="store_true",
                   help="gate on an LLM-judged metric (--metrics) even when its judge's stored agreement with people "
                        "is at chance (refused by default)")
    p.add_argument("--workspace", default="results", help="workspace folder (default: results)")
    p.add_argument("--db", default=None, help="DuckDB file (default: WORKSPACE/results.duckdb)")
