"""Per-run summaries with bootstrap intervals, computed from per-question scores."""
from __future__ import annotations

import pandas as pd

from .metrics import METRICS
from .stats import bootstrap_ci
from .store import ResultStore

HEADLINE = ["f1", "em", "faithfulness", "citation_precision", "citation_recall", "abstention_accuracy",
            "evidence_recall", "doc_ndcg@10", "context_tokens", "cost_usd"]


def summarize(store: ResultStore, run_id: str, metrics: list[str] | None = None, seed: int = 0,
              n_resamples: int = 1000) -> pd.DataFrame:
    """strategy, point, metric, n, n_ok, mean, low, high (95% bootstrap over questions)."""
    return summarize_scores(store.scores(run_id), metrics, seed, n_resamples)


def summarize_scores(df: pd.DataFrame, metrics: list[str] | None = None, seed: int = 0,
                     n_resamples: int = 1000) -> pd.DataFrame:
    """The same summary from a long frame of scores (strategy, point_label, metric, question_id, value, status)."""
    if metrics:
        df = df[df.metric.isin(metrics)]
    rows = []
    for (strategy, label, metric), g in df.groupby(["strategy", "point_label", "metric"], sort=True):
        ok = g[g.status == "ok"]
        # average repeats per question first, so the interval is over questions
        per_q = ok.groupby("question_id")["value"].mean()
        mean, lo, hi = bootstrap_ci(per_q.to_numpy(), n_resamples=n_resamples, seed=seed or 20261122)
        rows.append({"strategy": strategy, "point": label, "metric": metric, "n": len(g), "n_ok": len(ok),
                     "mean": mean, "low": lo, "high": hi,
                     "higher_is_better": METRICS[metric].higher_is_better if metric in METRICS else True})
    return pd.DataFrame(rows)


def headline_table(summary: pd.DataFrame, metrics: list[str] = HEADLINE) -> pd.DataFrame:
    """Wide table: one row per strategy x point, 'mean [low, high]' per headline metric."""
    s = summary[summary.metric.isin(metrics)].copy()
    fmt = lambda r: (f"{r['mean']:.1f}" if r["metric"].endswith("tokens") else  # noqa: E731
                     f"{r['mean']:.3f} [{r['low']:.3f}, {r['high']:.3f}]")
    s["cell"] = s.apply(fmt, axis=1)
    wide = s.pivot_table(index=["strategy", "point"], columns="metric", values="cell", aggfunc="first")
    wide = wide[[m for m in metrics if m in wide.columns]].reset_index()
    wide.columns.name = None
    return wide
