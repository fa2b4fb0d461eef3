"""Why a point loses: context sufficiency crossed with the answer's outcome (after Joren et al., "Sufficient
Context", ICLR 2025). docs/metrics.md, "Context sufficiency and the decomposition".

Per item: was the packed context sufficient (``context_sufficiency``: gold evidence offline, else an LLM
autorater), and was the answer correct or supported, wrong or unsupported, or an abstention? Per point the items
fall into four outcomes, plus those that cannot be placed (a sufficiency or an outcome with no value), counted
and never dropped:

- sufficient, correct or supported: the context held it and the answer used it;
- sufficient, wrong or unsupported: the context held it and the model ignored it (a wrong or unsupported answer, or an abstention);
- insufficient, abstained: the right call;
- insufficient, answered: a hallucination risk.

The outcome reads, in order: f1 >= 0.5 where a reference answer exists; else judged faithfulness (llm, then ragas)
>= 0.5; else the offline lexical support score >= 0.5 (labelled, not validated). A bigger context is more often
sufficient, and it may be ignored more: this table says which.
"""
from __future__ import annotations

import numpy as np
import pandas as pd

# "correct or supported": on plain questions "correct" is only the judge's faithfulness >= 0.5 (issue 72), so the
# label says both
# the second names abstentions too: a sufficient context the model declined is filed there (issue 83: the legend
# said "wrong or unsupported" and held abstentions without saying so)
OUTCOMES = ("sufficient, correct or supported", "sufficient, wrong, unsupported or abstained (context ignored)",
            "insufficient, abstained (right call)", "insufficient, answered (hallucination risk)")
UNPLACED = "undetermined"
CORRECT_AT = 0.5
# the metric that decides "correct or supported", first with a value wins
OUTCOME_METRICS = ("f1", "llm_faithfulness", "ragas_faithfulness", "faithfulness")
NEEDED = ("context_sufficiency", "abstained") + OUTCOME_METRICS


def item_outcomes(scores: pd.DataFrame) -> pd.DataFrame:
    """strategy, point_label, question_id, repeat, outcome (one of OUTCOMES or UNPLACED), decided_by (the metric
    that said correct or not; '' for an abstention or an unplaced item)."""
    keys = ["strategy", "point_label", "question_id"] + (["repeat"] if "repeat" in scores else [])
    df = scores[scores.metric.isin(NEEDED)]
    if df.empty:
        return pd.DataFrame(columns=keys + ["outcome", "decided_by"])
    ok = df[df.status == "ok"]
    wide = ok.pivot_table(index=keys, columns="metric", values="value", aggfunc="first")
    everyone = df[keys].drop_duplicates().set_index(keys)
    wide = everyone.join(wide, how="left")
    for m in NEEDED:
        if m not in wide:
            wide[m] = np.nan
    suff = wide["context_sufficiency"].to_numpy(float)
    abst = wide["abstained"].to_numpy(float)
    decided_by = np.full(len(wide), "", dtype=object)
    correct = np.full(len(wide), np.nan)
    for m in OUTCOME_METRICS:  # the first metric with a value decides
        v = wide[m].to_numpy(float)
        take = np.isnan(correct) & ~np.isnan(v)
        correct[take] = v[take] >= CORRECT_AT
        decided_by[take] = m
    out = np.full(len(wide), UNPLACED, dtype=object)
    s_ok, a_ok = ~np.isnan(suff), ~np.isnan(abst)
    sufficient, insufficient = s_ok & (suff >= 0.5), s_ok & (suff < 0.5)
    abstained = a_ok & (abst >= 0.5)
    answered = a_ok & (abst < 0.5)
    out[sufficient & abstained] = OUTCOMES[1]  # the context held it; the model said it did not
    out[sufficient & answered & (correct == 1)] = OUTCOMES[0]
    out[sufficient & answered & (correct == 0)] = OUTCOMES[1]
    out[insufficient & abstained] = OUTCOMES[2]
    out[insufficient & answered] = OUTCOMES[3]
    decided_by[abstained | (out == UNPLACED) | insufficient] = ""
    res = wide.reset_index()[keys]
    res["outcome"], res["decided_by"] = out, decided_by
    return res


def decomposition(scores: pd.DataFrame) -> pd.DataFrame:
    """Per point: n (items), each outcome's count and share of the placed items, the unplaced count, and which
    metrics decided correctness. Empty when the run has no sufficiency scores."""
    items = item_outcomes(scores)
    rows = []
    for (strategy, label), g in items.groupby(["strategy", "point_label"], sort=True):
        counts = g["outcome"].value_counts()
        placed = int(len(g) - counts.get(UNPLACED, 0))
        row = {"strategy": strategy, "point": label, "n": len(g), "placed": placed}
        for o in OUTCOMES:
            c = int(counts.get(o, 0))
            row[o] = c
            row[o + " share"] = c / placed if placed else np.nan
        row[UNPLACED] = int(counts.get(UNPLACED, 0))
        used = g.loc[g.decided_by != "", "decided_by"].value_counts()
        row["correct decided by"] = ", ".join(f"{m} {int(n)}" for m, n in used.items())
        rows.append(row)
    return pd.DataFrame(rows)


def decomposition_table(dec: pd.DataFrame) -> pd.DataFrame:
    """The decomposition as text cells ("7 (58%)"), one row a point: ``ragwb show --sufficiency`` and the report."""
    if dec.empty:
        return dec
    out = dec[["strategy", "point", "n"]].copy()
    for o in OUTCOMES:
        out[o] = [f"{c} ({s:.0%})" if s == s else f"{c}" for c, s in zip(dec[o], dec[o + " share"])]
    out[UNPLACED] = dec[UNPLACED]
    out["correct decided by"] = dec["correct decided by"]
    return out


def has_sufficiency(scores: pd.DataFrame) -> bool:
    s = scores[scores.metric == "context_sufficiency"]
    return bool(len(s) and (s.status == "ok").any())
