"""What the Workbench object's calls return: the cost line said before anything is sent (``CostLine``), an Apply's
or Sweep's result with the page's views of it (``Applied``), and ``ragwb best`` of a stored run (``Best``)."""
from __future__ import annotations

from dataclasses import dataclass, field

import pandas as pd


@dataclass
class CostLine:
    """What a call would send, said before it is sent (the page's line above its Send button). ``sent``: whether
    the call went ahead; when it did not, ``how`` says the call that sends."""
    text: str
    calls: int = 0
    sent: bool = False
    how: str = ""

    def __str__(self) -> str:
        tail = "" if self.sent or not self.calls else f"\nNothing sent: {self.how}"
        return self.text + tail

    def __repr__(self) -> str:
        return str(self)

    def _repr_markdown_(self) -> str:
        from rag.safeio import md_code, md_text

        # the line names models, services and folders from outside: shown as text, never as Markdown (issue 82)
        tail = "" if self.sent or not self.calls else f"<br>**Nothing sent:** {md_code(self.how)}"
        return f"**Cost:** {md_text(self.text)}{tail}"


@dataclass
class Applied:
    """The result of an Apply, Sweep or any evaluation of points: its cost line, and (once evaluated) the long
    scores frame and its summary. ``rows``, ``figure`` and friends are the page's views of it."""
    cost: CostLine
    points: list
    scores: pd.DataFrame | None = None  # long: one row per question x point x metric, with status and detail
    summary: pd.DataFrame | None = None  # per point and metric: mean, 95% interval, n_ok
    limit: int = 0  # the questions it was applied to (Save as run stores these)
    notes: list = field(default_factory=list)

    @property
    def evaluated(self) -> bool:
        return self.scores is not None

    # the cost line's fields on the result too: ``cost = wb.apply(); cost.calls`` as docs/jupyter.md writes it
    calls = property(lambda self: self.cost.calls)
    text = property(lambda self: self.cost.text)
    sent = property(lambda self: self.cost.sent)

    def _need(self) -> None:
        if not self.evaluated:
            raise RuntimeError(f"nothing evaluated yet: {self.cost.text}; {self.cost.how}")

    def rows(self) -> pd.DataFrame:
        self._need()
        return wide_rows(self.scores)

    def figure(self, metric: str | None = None, cost: str = "context_tokens"):
        self._need()
        return quality_figure(self.summary, metric, cost)[0]

    def __repr__(self) -> str:
        if not self.evaluated:
            return str(self.cost)
        pts = len(self.points)
        return f"{self.cost.text}\nevaluated {pts} point(s): .rows(), .summary, .figure()"

    def _repr_markdown_(self) -> str:
        if not self.evaluated:
            return self.cost._repr_markdown_()
        return (self.cost._repr_markdown_() + f"<br>Evaluated {len(self.points)} point(s): `.rows()`, `.summary`, "
                "`.figure()`")


def wide_rows(scores: pd.DataFrame) -> pd.DataFrame:
    """The long scores frame as one row per question and point (strategy, point_label, question_id), a column per
    metric holding its value (NaN where the metric has none: its status says why in the long frame)."""
    keys = ["strategy", "point_label", "question_id"]
    if scores is None or not len(scores):
        return pd.DataFrame(columns=keys)
    first = scores[scores["repeat"] == scores["repeat"].min()] if "repeat" in scores else scores
    # one value per (question, point, metric) at the first repeat; a metric with no value is NaN (never a dropped row)
    wide = first.groupby(keys + ["metric"], sort=False)["value"].first().unstack("metric")
    wide = wide.reindex(columns=sorted(first["metric"].unique()))
    wide.columns.name = None
    return wide.reset_index()


def chosen_metric(summary: pd.DataFrame, metric: str | None) -> tuple[str, str]:
    """(the metric the chart shows for ``metric``, the note when the wanted one has no value here): the page's
    default moves to a metric with values and says so, as the page's dropdown does; an unknown name is an error."""
    from evals.workbench import page

    options, shown, note = page.metric_choices(summary, metric or "f1")
    if metric and metric not in set(options.values()):
        from evals.score.metrics import METRICS

        if metric not in METRICS:
            raise ValueError(f"unknown metric {metric!r}; valid: {', '.join(sorted(METRICS))}")
        return metric, note
    return options[shown], note


def quality_figure(summary: pd.DataFrame, metric: str | None, cost: str = "context_tokens", history=None):
    """(the page's quality-vs-cost Figure, the metric shown, the note when the wanted one has no value here)."""
    from evals.report.charts import quality_cost_figure

    chosen, note = chosen_metric(summary, metric)
    return quality_cost_figure(summary, chosen, cost, history), chosen, note



@dataclass
class Best:
    """``ragwb best`` of a stored run: its prose and each chosen point's TOML; ``figures``: ``ragwb best --json``'s
    object (the in-sample score, expected_new, confirm, p_best, questions_needed; None for a front)."""
    prose: list
    tomls: list
    figures: dict | None = None
    # what to expect of the pick on new questions, how sure it is, its confirm part (docs/sweeps.md)
    expected_new = property(lambda self: (self.figures or {}).get("expected_new"))
    p_best = property(lambda self: (self.figures or {}).get("p_best") or {})
    confirm = property(lambda self: (self.figures or {}).get("confirm"))

    @property
    def toml(self) -> str:
        return self.tomls[0] if self.tomls else ""

    def __repr__(self) -> str:
        return "\n".join(self.prose) + ("\n\n" + "\n\n".join(self.tomls) if self.tomls else "")

    def _repr_markdown_(self) -> str:
        from rag.safeio import md_text

        # point names come from a user's strategies and folders: shown as text, never as Markdown
        return "\n\n".join(md_text(x) for x in self.prose) + "".join(f"\n\n```toml\n{t}\n```" for t in self.tomls)
