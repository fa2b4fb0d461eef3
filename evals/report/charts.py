"""plotly figures shared by the CLI report and the notebooks."""
from __future__ import annotations

import html

import pandas as pd


PALETTE = ["#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#17becf", "#8c564b", "#e377c2", "#bcbd22",
           "#7f7f7f"]


# colours and symbols no registered strategy takes: plugins and `--system` points get these, so a deployed
# service is never drawn in a shape's colour
OTHER_COLOURS = ["#000000", "#b8860b", "#006d5b", "#8b008b", "#4682b4", "#a0522d", "#556b2f", "#dc143c"]
SYMBOLS = ["circle", "square", "diamond", "triangle-up", "cross", "x", "triangle-down", "pentagon", "hexagon",
           "star-triangle-up"]
OTHER_SYMBOLS = ["star", "hourglass", "bowtie", "star-square", "hexagram", "star-diamond"]


def _pick(strategy: str, own: list[str], other: list[str]) -> str:
    """Registered strategies by registry order from ``own``; any other name (a plugin, a system) from ``other``
    by a stable hash of the name."""
    import hashlib

    from rag.strategies import STRATEGIES

    names = list(STRATEGIES)
    if strategy in names and names.index(strategy) < len(own):
        return own[names.index(strategy)]
    return other[int(hashlib.sha256(strategy.encode()).hexdigest(), 16) % len(other)]


def strategy_colour(strategy: str) -> str:
    """One colour per strategy in every chart of the workbench and the report, whatever else is drawn
    (a faded history trace, a missing strategy)."""
    return _pick(strategy, PALETTE, OTHER_COLOURS)


def strategy_symbol(strategy: str) -> str:
    """One marker symbol per strategy (the caption promises it): the colour's twin for readers who cannot
    tell the colours apart."""
    return _pick(strategy, SYMBOLS, OTHER_SYMBOLS)


# quality metrics read as a share (0-1): their axis is pinned to 0-1, so a run where every point scores 1.0 is
# not drawn on an axis to 2
def is_unit_interval(metric: str) -> bool:
    return not any(metric.endswith(s) for s in ("tokens", "_usd", "_ms", "_count", "calls", "_chars"))


def quality_cost_frame(summary: pd.DataFrame, quality: str, cost: str = "context_tokens") -> pd.DataFrame:
    """One row a point: quality (mean, 95% interval) and cost, with its place on the front (``pareto``: the cost
    buys measurable quality; ``tie``: within noise of such a point). One rule whatever the data (issue 83, item 14):
    see ``measured_front``."""
    cols = ["strategy", "point", "mean", "low", "high", "cost", "pareto", "tie"]
    if summary is None or not len(summary) or "metric" not in summary:
        return pd.DataFrame(columns=cols)  # nothing summarised yet (no questions, or nothing scored)
    q = summary[(summary.metric == quality) & (summary.n_ok > 0)].set_index(["strategy", "point"])
    c = summary[summary.metric == cost].set_index(["strategy", "point"])
    df = q[["mean", "low", "high"]].join(c[["mean"]].rename(columns={"mean": "cost"}), how="inner").reset_index()
    if not len(df):
        return pd.DataFrame(columns=cols)
    df["pareto"], df["tie"] = measured_front(df)
    return df


def measured_front(df: pd.DataFrame) -> tuple[list[bool], list[bool]]:
    """The Pareto front as the data can claim it, by one rule (issue 83, item 14: the old outline followed two, so
    at 300 questions nothing was outlined though full_documents spent 40 times chunks' tokens for the same f1).

    A point is on the front when no point as cheap or cheaper is within noise of it or better: every such point's
    95% interval lies wholly below this point's (so its extra cost buys quality the data can see). The cheapest
    point is always on it. A point off the front is *tied* with it when its interval reaches a front point's.
    A point without an interval (one question) counts its mean as its interval. Equal costs are broken by the
    higher mean, then by the order of the rows."""
    import numpy as np

    cost, mean = df["cost"].to_numpy(float), df["mean"].to_numpy(float)
    low = np.where(np.isnan(df["low"].to_numpy(float)), mean, df["low"].to_numpy(float))
    high = np.where(np.isnan(df["high"].to_numpy(float)), mean, df["high"].to_numpy(float))
    n = len(df)
    front = []
    for i in range(n):
        before = (cost < cost[i]) | ((cost == cost[i]) & ((mean > mean[i]) | ((mean == mean[i])
                                                                              & (np.arange(n) < i))))
        front.append(not bool((before & (high >= low[i])).any()))
    on = np.array(front, bool)
    tie = [bool(not on[i] and ((high[i] >= low[on]) & (high[on] >= low[i])).any()) for i in range(n)]
    return front, tie


def no_point_differs(df: pd.DataFrame) -> bool:
    """Every point's 95% interval overlaps every other's (the highest low under the lowest high): the data cannot
    tell any two points apart on quality, so only the cheapest is on the front (said under the chart's title).
    Two points or more, with intervals."""
    if len(df) < 2:
        return False
    low, high = df["low"].astype(float), df["high"].astype(float)
    if low.isna().any() or high.isna().any() or bool((high - low).max() <= 0):
        return False  # no interval (one question, or every value equal): nothing to say either way here
    return float(low.max()) <= float(high.min())


def coincident_sizes(xs: list, ys: list, xspan: float, yspan: float, size: int = 12) -> list[int]:
    """Marker sizes in drawing order: a point whose marker would cover one drawn before it is drawn smaller on top,
    so both stay visible (hybrid's marker hid chunks' at 751.3 vs 751.2 tokens: issue 72; two_phase_pages' hid
    hybrid's at 236.5 vs 238.7 tokens and 0.02 apart: issue 83). A 12-pixel marker on the default plot spans about
    2.5% of the x axis and 4% of the y axis, so closer than that is under."""
    out = []
    for i, (x, y) in enumerate(zip(xs, ys)):
        under = sum(abs(x - xs[j]) <= 0.025 * (xspan or 1) and abs(y - ys[j]) <= 0.04 * (yspan or 1)
                    for j in range(i))
        out.append(max(size - 4 * under, 5))
    return out


# the front's status is a ring around the marker, a trace of its own: an outline on the marker itself turned
# parent_child's cross black, in the legend too (issue 83, item 14)
FRONT_RING = {"color": "#111", "name": "Pareto front"}
TIE_RING = {"color": "#999", "name": "tied with the front"}
PARETO_CAPTION = ("Each strategy has one colour and one symbol. Black ring: on the Pareto front (the cheapest point, "
                  "and each point whose 95% interval lies above every cheaper point's: its extra tokens buy quality "
                  "the data can see); grey ring: tied with the front (its interval reaches a front point's).")
HISTORY_CAPTION = "Small open circles: earlier budgets of this dataset and question set."


# a metric whose plain name would claim more than it measures: the offline faithfulness is a lexical support scorer,
# never to be read as the LLM judge's faithfulness (a chart that falls back to it says which it is)
DISPLAY_NAMES = {"faithfulness": "lexical support (offline faithfulness stand-in)",
                 "question_answer_similarity": "question-answer similarity (stand-in, not validated)"}


def plot_text(text) -> str:
    """A name from outside (a strategy, point, run, metric or folder) as plotly text: plotly draws titles, legends,
    labels and hovers from a small HTML (``<b>``, ``<a href>``, ``<br>``), so ``& < >`` are escaped and the name shows
    as written (issue 82); plotly turns the escapes back into the characters."""
    return html.escape(str(text), quote=False)


def display_name(metric: str) -> str:
    return DISPLAY_NAMES.get(metric, metric)


# a budget's key as a point label says it: the few every sweep varies get a short name (the rest their last part)
SHORT_KEYS = {"top_k": "k", "chunk_tokens": "chunk", "overlap_tokens": "overlap", "max_context_tokens": "max",
              "parent_tokens": "parent", "child_tokens": "child", "alpha": "α"}


def short_labels(points: list[str]) -> list[str]:
    """Labels for one strategy's points that say what varies among them: ``index.chunk_tokens=48,top_k=2`` and
    ``index.chunk_tokens=96,top_k=2`` are ``chunk=48`` and ``chunk=96``; a lone point keeps its name when short.
    A name that is no ``key=value`` list is kept whole."""
    def said(d: dict, keys) -> str:
        return " ".join(f"{SHORT_KEYS.get(k.rsplit('.', 1)[-1], k.rsplit('.', 1)[-1])}={d[k]}" for k in keys if k in d)

    parsed = []
    for p in points:
        parts = [x.split("=", 1) for x in str(p).split(",")]
        parsed.append(dict(parts) if all(len(x) == 2 for x in parts) else None)
    if any(d is None for d in parsed) or len(points) < 2:
        return [str(p) if len(str(p)) <= 16 or d is None else said(d, d) for p, d in zip(points, parsed)]
    keys = [k for k in dict.fromkeys(k for d in parsed for k in d) if len({d.get(k) for d in parsed}) > 1]
    keys = keys or list(dict.fromkeys(k for d in parsed for k in d))
    return [said(d, keys) for d in parsed]


def quality_cost_figure(summary: pd.DataFrame, quality: str, cost: str = "context_tokens",
                        history: pd.DataFrame | None = None, title: str | None = None, picked: dict | None = None):
    """Quality against cost per point: lines join a strategy's budget points, each strategy with one fixed symbol
    (its legend entry never changes); the Pareto status is a ring around the marker (black: front, grey: tied),
    said in ``PARETO_CAPTION``; ``history`` (earlier summaries) shows previously applied budgets as small open
    circles. Each point says its budget in a short label (``short_labels``), never clipped at the plot's edges. ``picked`` ({"point": "strategy · label", "hover"}):
    the best point's hover also says what to expect of it on new questions (evals/analyze/best.pick_figures)."""
    import plotly.graph_objects as go

    df = quality_cost_frame(summary, quality, cost)
    fig = go.Figure()
    h = quality_cost_frame(history, quality, cost) if history is not None and len(history) else pd.DataFrame()
    if len(h):  # each earlier budget once (an Apply that left a point unchanged adds it again), and never one
        key = ["strategy", "point", "mean", "cost"]  # drawn now at the same place
        h = h.assign(mean=h["mean"].round(9), cost=h["cost"].round(9)).drop_duplicates(key, keep="last")
        now = df.assign(mean=df["mean"].round(9), cost=df["cost"].round(9)).set_index(key).index
        h = h[~h.set_index(key).index.isin(now)]
    if len(h):
        fig.add_trace(go.Scatter(x=h["cost"], y=h["mean"], mode="markers", name="earlier budgets",
                                 text=(h["strategy"] + " · " + h["point"]).map(plot_text), opacity=0.35,
                                 marker={"size": 7, "symbol": "circle-open",
                                         "color": [strategy_colour(x) for x in h["strategy"]]},
                                 hovertemplate="%{text}<br>cost %{x:.0f}<br>" + plot_text(quality)
                                 + " %{y:.3f}<extra></extra>"))
    # every point says its budget on the plot (issue 83, item 14: a sweep's top_k or chunk size showed on hover
    # only): a short label of what varies within its strategy; past five points a strategy, its cheapest and its
    # dearest are labelled (the direction of the sweep), the rest on hover
    order = [g.sort_values("cost") for _, g in df.groupby("strategy", sort=False)]  # points in cost order
    drawn = pd.concat(order) if order else df
    xspan = float(drawn["cost"].max() - drawn["cost"].min()) if len(drawn) else 1.0
    yspan = 1.0 if is_unit_interval(quality) else (float(drawn["mean"].max() - drawn["mean"].min()) if len(drawn)
                                                    else 1.0)
    sizes = iter(coincident_sizes(list(drawn["cost"]), list(drawn["mean"]), xspan, yspan))
    rings = {"front": [], "tie": []}
    for g in order:
        strat = g["strategy"].iloc[0]  # a strategy's budget points joined in cost order
        short = short_labels(list(g["point"]))
        if len(g) > 5:
            short = [t if i in (0, len(g) - 1) else "" for i, t in enumerate(short)]
        size = [next(sizes) for _ in range(len(g))]
        for (_, r), sz in zip(g.iterrows(), size):
            if r["pareto"] or r["tie"]:
                rings["front" if r["pareto"] else "tie"].append((r["cost"], r["mean"], sz))
        fig.add_trace(go.Scatter(
            x=g["cost"], y=g["mean"], mode="lines+markers+text" if len(g) > 1 else "markers+text",
            name=plot_text(strat), text=[plot_text(t) for t in short], hovertext=g["point"].map(plot_text),
            cliponaxis=False, textfont={"size": 11},
            # labels alternate above and below the points, so two close points (two chunk sizes) stay readable
            textposition=["top center" if i % 2 == 0 else "bottom center" for i in range(len(g))],
            error_y={"type": "data", "symmetric": False, "array": g["high"] - g["mean"],
                     "arrayminus": g["mean"] - g["low"], "color": strategy_colour(strat)},
            line={"color": strategy_colour(strat)},
            marker={"size": size, "color": strategy_colour(strat), "symbol": strategy_symbol(strat),
                    "line": {"width": 0}},
            customdata=[("Pareto front" if p else "tied with the front" if t else "dominated")
                        + (f"; {plot_text(picked['hover'])}" if picked and f"{strat} · {pt}" == picked["point"]
                           else "")
                        for p, t, pt in zip(g["pareto"], g["tie"], g["point"])],
            hovertemplate="%{hovertext} (%{customdata})<br>cost %{x:.0f}<br>" + plot_text(quality)
                          + " %{y:.3f}<extra>" + plot_text(strat) + "</extra>"))
    for kind, ring in (("front", FRONT_RING), ("tie", TIE_RING)):
        pts = sorted(rings[kind])
        if pts:  # an open ring a little wider than the marker it circles, drawn over it: never a filled shape
            fig.add_trace(go.Scatter(
                x=[p[0] for p in pts], y=[p[1] for p in pts], name=ring["name"], hoverinfo="skip",
                mode="lines+markers" if kind == "front" and len(pts) > 1 else "markers",
                line={"dash": "dot", "color": "grey", "width": 1},
                marker={"symbol": "circle-open", "size": [p[2] + 9 for p in pts], "color": ring["color"],
                        "line": {"width": 2, "color": ring["color"]}}))
    notes = []
    if not len(df) and summary is not None and len(summary):
        notes.append(f"no point has a {quality} value on these questions (n/a: see the table's reasons); "
                     "pick a metric that has values")
    # a point with no value is named, never silently absent from the chart and its legend (issue 83, item 13)
    missing = []
    if len(df) and summary is not None and "strategy" in summary:
        drawn_keys = set(zip(df["strategy"], df["point"]))
        missing = [f"{a} · {b}" for a, b in dict.fromkeys(zip(summary["strategy"], summary["point"]))
                   if (a, b) not in drawn_keys]
    if missing:
        notes.append(f"not drawn, no {quality} value: " + ", ".join(missing[:4])
                     + (f" and {len(missing) - 4} more" if len(missing) > 4 else ""))
    if len(df) > 1 and df["mean"].nunique() <= 1:
        notes.append(f"{'every drawn point' if missing else 'every point'} scores {df['mean'].iloc[0]:.3f}: "
                     f"{quality} does not separate these points")
    elif no_point_differs(df):
        notes.append(f"no point differs: every 95% interval of {display_name(quality)} overlaps every other, so the "
                     "cheapest point alone is on the front (more questions may separate them)")
    if len(df) and cost == "cost_usd" and (df["cost"] == 0).all():
        notes.append("cost is 0 everywhere: no prices set (--price MODEL=IN,OUT) or a local answerer")
    # notes sit under the title, above the plot area: never over a marker
    shown = display_name(quality)
    head = plot_text(title or f"{shown} vs {cost}") + "".join(
        f"<br><span style='font-size:11px;color:#a33'>{html.escape(n)}</span>" for n in notes)
    fig.add_annotation(text="black ring: Pareto front · grey ring: tied with it (95% CIs overlap)",
                       xref="paper", yref="paper", x=1, y=-0.22, showarrow=False, xanchor="right",
                       font={"size": 10, "color": "#555"})
    fig.update_layout(title=head, xaxis_title=f"{cost.replace('_', ' ')} per question (mean)",
                      # two short lines: a long metric name and its stand-in mark fit the axis (issue 83: clipped)
                      yaxis_title=f"{shown}<br>mean over questions, 95% CI", template="plotly_white",
                      height=440 + 18 * len(notes), margin={"l": 70, "r": 70, "t": 60 + 18 * len(notes), "b": 80})
    # room beyond the outermost points, so their labels are never cut at either edge
    fig.update_xaxes(automargin=True)
    fig.update_yaxes(automargin=True)
    if is_unit_interval(quality) and (not len(df) or (df["low"].min() >= 0 and df["high"].max() <= 1)):
        fig.update_yaxes(range=[-0.03, 1.08])
    if len(df):
        costs = pd.concat([df["cost"], h["cost"]]) if len(h) else df["cost"]
        lo, hi = float(costs.min()), float(costs.max())
        pad = (hi - lo) * 0.08 or max(hi * 0.1, 1.0)
        fig.update_xaxes(range=[lo - pad, hi + pad])
    return fig


def conversation_figures(results: pd.DataFrame, scores: pd.DataFrame) -> list:
    """The bloat curve (prompt tokens by turn, a line per memory policy) and passage recall@5 by turn,
    a line per query mode. Empty when the run has no conversations."""
    import plotly.graph_objects as go

    from evals.analyze.summary import conversation_frame

    df = conversation_frame(results, scores)
    if df.empty:
        return []
    figs = []
    bloat = df.groupby(["memory", "turn"]).prompt_tokens.mean().reset_index()
    fig = go.Figure()
    for mem, g in bloat.groupby("memory"):
        fig.add_trace(go.Scatter(x=g.turn, y=g.prompt_tokens, mode="lines+markers", name=plot_text(mem),
                                 hovertemplate="turn %{x}<br>%{y:.0f} prompt tokens<extra>" + plot_text(mem)
                                 + "</extra>"))
    fig.update_layout(title="Prompt tokens by turn (the bloat curve), per memory policy", xaxis_title="turn",
                      yaxis_title="prompt tokens per turn (mean)", template="plotly_white", height=420)
    figs.append(fig)
    rec = df.dropna(subset=["passage_recall@5"]).groupby(["query_mode", "turn"])["passage_recall@5"].mean()
    if len(rec):
        fig = go.Figure()
        for mode, g in rec.reset_index().groupby("query_mode"):
            fig.add_trace(go.Scatter(x=g.turn, y=g["passage_recall@5"], mode="lines+markers", name=plot_text(mode),
                                     hovertemplate="turn %{x}<br>recall@5 %{y:.3f}<extra>" + plot_text(mode)
                                     + "</extra>"))
        fig.update_layout(title="Passage recall@5 by turn, per retrieval query mode", xaxis_title="turn",
                          yaxis_title="passage recall@5 (mean over turns)", yaxis_range=[0, 1],
                          template="plotly_white", height=420)
        figs.append(fig)
    return figs


def route_figure(res, title: str = ""):
    """Quality vs cost: every fixed point (strategy colours), the router and the oracle, with 95% intervals."""
    import plotly.graph_objects as go

    t = res.table
    metric, cost = res.info["metric"], res.info["cost"]
    fig = go.Figure()
    for row in t.itertuples(index=False):
        d = row._asdict()
        kind = d["kind"]
        colour = strategy_colour(d["point"].split(" · ")[0]) if kind == "fixed" else (
            "#111111" if kind.startswith("router") else "#888888")
        fig.add_trace(go.Scatter(
            x=[d[cost]], y=[d[metric]], mode="markers+text", name=plot_text(d["point"]), text=[plot_text(d["point"])],
            textposition="top center", marker=dict(size=14 if kind in ("router", "oracle") else 10, color=colour,
                                                   symbol={"fixed": "circle", "router": "star",
                                                           "router-curve": "star-open"}.get(kind, "diamond")),
            error_y=dict(type="data", symmetric=False, array=[d["high"] - d[metric]],
                         arrayminus=[d[metric] - d["low"]])))
    fig.update_layout(title=title or f"Routing on {metric}: router (out of fold) and oracle beside every fixed point",
                      xaxis_title=f"mean {cost.replace('_', ' ')} per question", yaxis_title=f"mean {metric} (95% CI)",
                      showlegend=False, template="plotly_white", height=520)
    return fig


SUFFICIENCY_COLOURS = ("#2e7d32", "#ef6c00", "#1565c0", "#c62828")  # correct, ignored, right abstention, risk


def sufficiency_figure(dec: pd.DataFrame):
    """One horizontal stacked bar per point: the shares of its placed items in each sufficiency outcome
    (evals/analyze/sufficiency.py); the hover gives counts, the unplaced items and who decided correctness."""
    import plotly.graph_objects as go

    from evals.analyze.sufficiency import OUTCOMES, UNPLACED

    labels = [plot_text(f"{s} · {p}" if p != "defaults" else s) for s, p in zip(dec["strategy"], dec["point"])]
    fig = go.Figure()
    for o, colour in zip(OUTCOMES, SUFFICIENCY_COLOURS):
        fig.add_trace(go.Bar(
            y=labels, x=dec[o + " share"].fillna(0.0), name=o, orientation="h", marker_color=colour,
            customdata=list(zip(dec[o], dec["placed"], dec[UNPLACED], dec["correct decided by"])),
            hovertemplate=("%{y}<br>" + o + ": %{x:.0%} (%{customdata[0]} of %{customdata[1]} placed)<br>"
                           "unplaced: %{customdata[2]}<br>correct decided by: %{customdata[3]}<extra></extra>")))
    # what decided "correct" is on the figure, not only on hover (issue 83): the metrics that decided it here
    deciders = sorted({m.split(" (")[0].strip() for x in dec["correct decided by"].fillna("")
                       for m in str(x).split(",") if m.strip() and m.strip() != "-"}) if "correct decided by" in dec else []
    fig.update_layout(barmode="stack", height=160 + 28 * len(dec), margin=dict(l=10, r=10, t=58, b=10),
                      title="Context sufficiency x answer outcome (share of items placed)<br><sup>correct = "
                            + (plot_text(", ".join(deciders)) if deciders else "no metric here") + " at 0.5 or more (f1 where "
                            "answers exist, else the judge's faithfulness); abstentions on a sufficient context count as "
                            "context ignored</sup>",
                      xaxis=dict(tickformat=".0%", range=[0, 1]), yaxis=dict(autorange="reversed", automargin=True),
                      legend=dict(orientation="h", y=-0.15, x=0, traceorder="normal"), template="plotly_white")
    return fig
