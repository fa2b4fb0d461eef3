"""A jury of judge models (``ragwb run --jury M1,M2``; docs/llm.md "Juries"): each default judge asked of every
juror, their verdicts combined by mean or majority, every juror's verdict kept in the item's detail, and the
jurors' agreement with one another (Cohen's kappa per pair) said after the run."""
from __future__ import annotations

import re
from itertools import combinations

import numpy as np
import pandas as pd

from .metrics import Score

RULES = ("mean", "majority")


class Jury:
    """One judge (by name) asked of several juror clients; scores like a judge, keeps each juror's verdict."""

    def __init__(self, name: str, clients: list, rule: str = "mean"):
        from .judges import get_judge

        if rule not in RULES:
            raise ValueError(f"unknown jury rule {rule!r}; valid: {', '.join(RULES)}")
        if len(clients) < 2:
            raise ValueError("a jury needs at least two jurors (--jury M1,M2)")
        self.jurors = [get_judge(name, c) for c in clients]
        first = self.jurors[0]
        self.name, self.score_name = first.name, getattr(first, "score_name", first.name)
        self.only_without_evidence = getattr(first, "only_without_evidence", False)
        self.rule = rule
        self.client = first.client  # the first juror's client (its cache and limiter; counts ask each juror)

    @property
    def repeats(self) -> int:
        return getattr(self.jurors[0], "repeats", 1)

    @repeats.setter
    def repeats(self, n: int) -> None:
        for j in self.jurors:
            j.repeats = n

    def score(self, question: str, answer: str, contexts: list[str], repeat: int = 0, reference=None) -> Score:
        from .judges import judge_repeated

        got = [(j.client.cfg.model, judge_repeated(j, question, answer, contexts, repeat, reference))
               for j in self.jurors]
        ok = [(m, s.value) for m, s in got if s.status == "ok" and s.value is not None]
        said = "; ".join(f"juror {m} " + (f"{s.value:g}" if s.status == "ok" and s.value is not None else s.status)
                         for m, s in got)
        # a juror's flag (its input addresses the grader) stays with the jury's verdict (issue 85: it was dropped)
        from .judge_io import FLAG_NOTE

        flag = next((s.detail[s.detail.index(FLAG_NOTE):] for _, s in got if FLAG_NOTE in (s.detail or "")), "")
        said += f"; {flag}" if flag else ""
        if not ok:
            return Score(None, got[0][1].status, f"jury of {len(got)}: no usable verdict ({said})")
        values = [v for _, v in ok]
        if self.rule == "mean":
            value = float(np.mean(values))
        else:  # majority of the jurors' verdicts at 0.5; a tie is the mean's side
            ups = sum(v >= 0.5 for v in values)
            value = 1.0 if ups * 2 > len(values) else 0.0 if ups * 2 < len(values) else float(np.mean(values) >= 0.5)
        return Score(value, "ok", f"jury {self.rule} of {len(ok)} of {len(got)}: {said}")


_JUROR = re.compile(r"juror (\S+) ([0-9.]+)(?=;|$)")


def juror_verdicts(scores: pd.DataFrame, metric: str) -> pd.DataFrame:
    """Item x juror values of a jury metric, read back from the details (a column per juror model)."""
    rows = scores[(scores["metric"] == metric) & scores["detail"].fillna("").str.startswith("jury ")]
    recs = []
    for i, d in zip(rows.index, rows["detail"]):
        recs.append({"item": i, **{m: float(v) for m, v in _JUROR.findall(d.split(": ", 1)[-1])}})
    return pd.DataFrame(recs).set_index("item") if recs else pd.DataFrame()


def jury_lines(scores: pd.DataFrame) -> list[str]:
    """Per jury metric: each pair of jurors' Cohen's kappa on their verdicts at 0.5 (and their raw agreement)."""
    from .agreement_sets import cohen_kappa

    out = []
    if scores is None or not len(scores) or "detail" not in scores:
        return out
    scores = scores[scores["detail"].fillna("").str.startswith("jury ")]  # a jury's rows only, picked once
    for metric in sorted(set(scores["metric"])):
        v = juror_verdicts(scores, metric)
        if v.shape[1] < 2:
            continue
        parts = []
        for a, b in combinations(v.columns, 2):
            both = v[[a, b]].dropna()
            if not len(both):
                continue
            ya, yb = (both[a] >= 0.5).astype(int).to_numpy(), (both[b] >= 0.5).astype(int).to_numpy()
            parts.append(f"{a} vs {b}: kappa {cohen_kappa(ya, yb):.2f}, agree {float((ya == yb).mean()):.0%} "
                         f"on {len(both)}")
        if parts:
            out.append(f"jury on {metric}: " + "; ".join(parts))
    return out
