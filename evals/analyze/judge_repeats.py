"""Judged metrics as the gate reads them when each judgment is repeated (``ragwb run --judge-repeats N``): an item's
value is the mean of its usable repeats (``evals/score/judges.judge_repeated``), and its detail keeps every repeat
("2 of 3 repeats [1, 0, 1]; flipped"). From those the gate measures the judge's own noise, which ``--aa-noise``
widens a judged metric's tolerance by, and checks ``--require K/N``: a question must pass K of N judgments
(issue 84, item 4)."""
from __future__ import annotations

import re

import numpy as np
import pandas as pd

from evals.stats import DEFAULT_SEED

# "2 of 3 repeats [1, 0.5, -]": anchored, one bracketed list, no nested quantifier (a detail is read from a store)
REPEATS = re.compile(r"^\d+ of (\d+) repeats \[([^\]]{0,2000})\]")
PASS_AT = 0.5  # a judgment passes at a value of at least this (0-1 metrics: a binary verdict's 1, a share's half)


def repeat_values(detail) -> list | None:
    """Each repeat's value from a repeated judgment's detail (None for a repeat that gave none); None when the
    detail is not a repeated judgment's."""
    if not isinstance(detail, str):
        return None
    m = REPEATS.match(detail)
    if not m:
        return None
    out = []
    for x in m.group(2).split(","):
        x = x.strip()
        try:
            out.append(None if x in ("", "-") else float(x))
        except ValueError:
            return None
    return out if len(out) == int(m.group(1)) else None


def judged_metric_names() -> set[str]:
    """The metrics an LLM judge scores (the ones whose judgments can be repeated)."""
    from evals.score.judges import DEFAULT_LLM_JUDGES, judge_metric

    return {judge_metric(n) for n in DEFAULT_LLM_JUDGES}


def parse_requires(given: list[str] | None) -> list[tuple]:
    """``--require [METRIC=]K/N[@AT]`` as [(metric or None for every judged metric, K, N, AT)]: a question passes when
    at least K of its N judgments are at least AT (default 0.5). A bad rule is a ValueError in one line."""
    out = []
    judged = judged_metric_names()
    for text in given or []:
        metric, sep, rule = str(text).rpartition("=")
        metric = metric.strip() or None
        m = re.fullmatch(r"\s*(\d{1,3})\s*/\s*(\d{1,3})\s*(?:@\s*([0-9]*\.?[0-9]+))?\s*", rule)
        if not m:
            raise ValueError(f"--require takes [METRIC=]K/N[@AT] (e.g. --require llm_faithfulness=2/3), got {text!r}")
        k, n = int(m.group(1)), int(m.group(2))
        at = float(m.group(3)) if m.group(3) else PASS_AT
        if not 1 <= k <= n:
            raise ValueError(f"--require {text}: K of N needs 1 <= K <= N (a question cannot pass {k} of {n} "
                             "judgments)")
        if not 0.0 <= at <= 1.0:
            raise ValueError(f"--require {text}: the pass mark @{at:g} must lie in 0..1 (judged metrics are 0-1)")
        if metric is not None and metric not in judged:
            raise ValueError(f"--require {text}: {metric!r} is not an LLM-judged metric; valid: "
                             f"{', '.join(sorted(judged))}")
        out.append((metric, k, n, at))
    return out


def _repeat_rows(df: pd.DataFrame, metrics) -> pd.DataFrame:
    """One row per judged item with its repeats: strategy, point_label, point_key, metric, question_id, values."""
    if "detail" not in df.columns or not len(df):
        return pd.DataFrame(columns=["strategy", "point_label", "point_key", "metric", "question_id", "values"])
    sub = df[df.metric.isin(set(metrics)) & (df.status == "ok") & df.detail.notna()]
    vals = [repeat_values(d) for d in sub.detail.tolist()]
    sub = sub.assign(values=vals)
    return sub[sub["values"].notna()]


def check_requires(c: pd.DataFrame, rules: list[tuple]) -> list[dict]:
    """Each rule on each candidate point's judged items: the questions with fewer than K of N passing judgments,
    listed. A run whose judgments were repeated fewer than N times cannot be checked: "too few judgments", a
    failure (a rule never passes by having nothing to read)."""
    out = []
    judged = sorted(judged_metric_names() & set(c.metric.unique()))
    points = c.drop_duplicates("point_key")[["point_key", "strategy", "point_label"]]
    for metric, k, n, at in rules:
        for m in ([metric] if metric else judged):
            rows = _repeat_rows(c[c.metric == m], [m])
            for _, p in points.iterrows():
                items = rows[rows.point_key == p.point_key]
                base = {"strategy": p.strategy, "point": p.point_label, "metric": m, "rule": f"{k}/{n}@{at:g}",
                        "k": k, "n_required": n}
                if not len(items):
                    have = int(((c.metric == m) & (c.point_key == p.point_key) & (c.status == "ok")).sum())
                    out.append({**base, "items": have, "failing": [], "verdict": "too few judgments",
                                "why": (f"{have:,} item(s) judged once (no repeats stored): run with "
                                        f"--judge-repeats {n}") if have else "no judged item"})
                    continue
                few = [len(v) for v in items["values"] if len(v) < n]
                if few:
                    out.append({**base, "items": len(items), "failing": [], "verdict": "too few judgments",
                                "why": f"judged {min(few)} time(s) an item, the rule reads {n}: run with "
                                       f"--judge-repeats {n}"})
                    continue
                passed = [sum(1 for x in v[:n] if x is not None and x >= at - 1e-12) for v in items["values"]]
                failing = sorted({q for q, s in zip(items.question_id.tolist(), passed) if s < k})
                out.append({**base, "items": len(items), "failing": failing,
                            "verdict": "FAILED" if failing else "met", "why": ""})
    return out


def require_line(r: dict) -> str:
    head = f"{r['strategy']} [{r['point']}] {r['metric']}: --require {r['rule']} (a question passes {r['k']} of " \
           f"{r['n_required']} judgments at {r['rule'].split('@')[1]} or more)"
    if r["verdict"] == "too few judgments":
        return f"{head}: cannot be checked: {r['why']}"
    if r["verdict"] == "FAILED":
        shown = ", ".join(str(q) for q in r["failing"][:20]) + (" ..." if len(r["failing"]) > 20 else "")
        return f"{head}: {len(r['failing'])} of {r['items']} item(s) below it: {shown}"
    return f"{head}: met on all {r['items']} item(s)"


def judge_noise(b: pd.DataFrame, resamples: int = 2000, seed: int = DEFAULT_SEED) -> dict[tuple, float]:
    """(strategy, point, metric) -> the judge's own noise on a point's mean: the 95% bound of the paired bootstrap of
    repeat 0 against repeat 1 over its questions (what judging the same answers again moves the mean by), divided by
    the square root of the repeats a value averages (a mean of k repeats moves sqrt(k) times less than one)."""
    from evals.stats import paired_bootstrap

    out: dict[tuple, float] = {}
    rows = _repeat_rows(b, judged_metric_names())
    if not len(rows):  # no repeated judgment: no judge noise to read
        return out
    rows = rows[np.array([len(v) >= 2 and v[0] is not None and v[1] is not None for v in rows["values"]], bool)]
    for key, g in rows.groupby(["strategy", "point_label", "metric"], sort=False):
        r0 = np.array([v[0] for v in g["values"]], float)
        r1 = np.array([v[1] for v in g["values"]], float)
        k = min(len(v) for v in g["values"])
        pb = paired_bootstrap(r0, r1, resamples, seed=seed)
        out[key] = max(abs(pb["low"]), abs(pb["high"])) / np.sqrt(k)
    return out
