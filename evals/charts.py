"""plotly figures shared by the CLI report and the notebooks."""
from __future__ import annotations

import pandas as pd


def pareto_front(points: list[tuple[float, float]]) -> list[bool]:
    """Mask of points not dominated (lower cost and higher quality is better)."""
    mask = []
    for i, (c, q) in enumerate(points):
        dominated = any((c2 <= c and q2 >= q) and (c2 < c or q2 > q) for j, (c2, q2) in enumerate(points) if j != i)
        mask.append(not dominated)
    return mask


def quality_cost_frame(summary: pd.DataFrame, quality: str, cost: str = "context_tokens") -> pd.DataFrame:
    q = summary[(summary.metric == quality) & (summary.n_ok > 0)].set_index(["strategy", "point"])
    c = summary[summary.metric == cost].set_index(["strategy", "point"])
    df = q[["mean", "low", "high"]].join(c[["mean"]].rename(columns={"mean": "cost"}), how="inner").reset_index()
    df["pareto"] = pareto_front(list(zip(df["cost"], df["mean"])))
    return df


def quality_cost_figure(summary: pd.DataFrame, quality: str, cost: str = "context_tokens"):
    import plotly.graph_objects as go

    df = quality_cost_frame(summary, quality, cost)
    fig = go.Figure()
    for strat, g in df.groupby("strategy"):
        fig.add_trace(go.Scatter(
            x=g["cost"], y=g["mean"], mode="markers", name=strat, text=g["point"],
            error_y={"type": "data", "symmetric": False, "array": g["high"] - g["mean"],
                     "arrayminus": g["mean"] - g["low"]},
            marker={"size": 11, "symbol": ["star" if p else "circle" for p in g["pareto"]]},
            hovertemplate="%{text}<br>cost %{x:.0f}<br>" + quality + " %{y:.3f}<extra>" + strat + "</extra>"))
    front = df[df.pareto].sort_values("cost")
    if len(front) > 1:
        fig.add_trace(go.Scatter(x=front["cost"], y=front["mean"], mode="lines", name="Pareto front",
                                 line={"dash": "dot", "color": "grey"}))
    fig.update_layout(title=f"{quality} vs {cost}", xaxis_title=f"{cost} per question (mean)",
                      yaxis_title=quality, template="plotly_white", height=420)
    return fig
