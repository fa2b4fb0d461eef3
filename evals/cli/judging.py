"""The run's judge checks, beside ``ragwb run``: a jury's models read before any work, and after a run each judge
said out loud (failures past a share, flip rates, a jury's kappa), with the exit status they set."""
from __future__ import annotations

import sys
from pathlib import Path


def jury_models(a, judge) -> tuple:
    """--jury M1,M2: the juror models (2..8, each named once), checked before any work: ``--jury ,`` or
    ``--jury a,,b`` names an empty juror (refused, never a run without its jury), ``a,a`` one juror twice."""
    from evals.run.config import check_jury

    raw = a.jury or ""
    if not raw:
        return ()
    try:
        models = check_jury(tuple(m.strip() for m in raw.split(",")))
    except ValueError as e:
        raise ValueError(f"--jury {raw!r}: {e}") from None
    if judge is None:
        raise ValueError("--jury needs a judge endpoint: an LLM answerer (--llm-base-url) or --judge-base-url")
    return models


WARN_SHARE = 0.2  # a judge failing on this share of its items or more is warned (show, the report, the run)


def failed_judges(a, run_id: str) -> bool:
    """Say each judge that failed on a fifth or more of its items (its share and commonest reply shape); True when
    one failed on more than --max-judge-failures of them, or on every item (the run then exits 7)."""
    from evals.analyze.judge_health import judge_health, over_threshold
    from evals.store import ResultStore

    with ResultStore(a.db or Path(a.workspace) / "results.duckdb", read_only=True) as st:
        scores = st.scores(run_id)
    for h in judge_health(scores):
        if h.failed and h.share >= WARN_SHARE - 1e-12:  # "a fifth or more" (--help): 1 of 5 is warned (issue 85)
            print(f"ragwb run: warning: run {run_id}: {h.line()}; its metric shows n beside each value", file=sys.stderr)
    from evals.analyze.judge_health import flip_lines

    from evals.score.jury import jury_lines

    for line in flip_lines(scores) + jury_lines(scores):  # repeats: flip rates; a jury: its jurors' kappa
        print(f"ragwb run: run {run_id}: {line}", file=sys.stderr)
    bad = over_threshold(scores, a.max_judge_failures)
    for h in bad:
        print(f"ragwb run: error: run {run_id}: judge {h.judge} failed on {h.share:.0%} of its items (cap "
              f"{a.max_judge_failures:.0%}, --max-judge-failures); see docs/llm.md on reply formats", file=sys.stderr)
    return bool(bad)
