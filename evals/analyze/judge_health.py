"""How the LLM judges of a run fared, said out loud: each judge's failed share with its commonest reply shape (a judge
that parses nothing must never pass quietly), and the items whose judged input addressed the grader (a planted
"rate this 3"), counted per point. ``ragwb run`` warns and exits 7 past ``--max-judge-failures``; ``ragwb show``,
the report and the page print the same lines (docs/metrics.md, "LLM judges: fences and strict replies")."""
from __future__ import annotations

from collections import Counter
from dataclasses import dataclass

import pandas as pd

# the metrics the chat judges write; context_sufficiency is the autorater's only where no gold evidence decides
JUDGE_METRICS = {"llm_faithfulness": "llm_faithfulness", "answer_relevance": "llm_answer_relevance",
                 "context_sufficiency": "llm_context_sufficiency"}
NOT_ASKED = ("not_applicable", "undetermined")
FLAG = "input addresses the grader"


@dataclass
class JudgeHealth:
    judge: str
    asked: int  # items the judge was asked about (a call made, or failed)
    failed: int
    statuses: dict
    commonest: str  # the commonest shape of the failed replies

    @property
    def share(self) -> float:
        return self.failed / self.asked if self.asked else 0.0

    def line(self) -> str:
        parts = ", ".join(f"{s} {n}" for s, n in sorted(self.statuses.items()))
        return (f"judge {self.judge} failed on {self.failed:,} of {self.asked:,} item(s) ({self.share:.0%}: {parts}); "
                f"commonest reply: {self.commonest}")


def _asked(rows: pd.DataFrame, metric: str) -> pd.DataFrame:
    rows = rows[~rows["status"].isin(NOT_ASKED)]
    if metric == "context_sufficiency":  # the offline gold-evidence decisions are not the autorater's
        detail = rows["detail"].fillna("")
        rows = rows[(rows["status"] != "ok") | detail.str.contains("autorater", regex=False)]
    return rows


def judge_health(scores: pd.DataFrame) -> list[JudgeHealth]:
    """Each chat judge that was asked anything in ``scores`` (a long frame: metric, status, detail). Read once per
    Apply on the page (tens of thousands of rows): one split by metric, statuses counted by pandas, and only the
    parse errors' replies read one by one."""
    from evals.score.judge_io import reply_shape

    out = []
    if scores is None or not len(scores):
        return out
    judged = scores[scores["metric"].isin(list(JUDGE_METRICS))]
    by_metric = {m: g for m, g in judged.groupby("metric", sort=False)} if len(judged) else {}
    for metric, judge in JUDGE_METRICS.items():
        if metric not in by_metric:
            continue
        rows = _asked(by_metric[metric], metric)
        if not len(rows):
            continue
        bad = rows[rows["status"] != "ok"]
        if metric == "context_sufficiency" and not (rows["status"] == "ok").any() and not len(bad):
            continue
        statuses = {str(k): int(v) for k, v in bad["status"].value_counts(sort=False).items() if v}
        # the commonest shape of a failure: a parse error's reply shape, else its status
        shapes = Counter(reply_shape(_reply_of(d)) for d in
                         bad.loc[bad["status"] == "parse_error", "detail"].fillna("").tolist())
        shapes.update({k: v for k, v in statuses.items() if k != "parse_error"})
        out.append(JudgeHealth(judge, len(rows), len(bad), statuses,
                               shapes.most_common(1)[0][0] if shapes else "none failed"))
    return out


def _reply_of(detail: str) -> str:
    """The reply a parse_error's detail kept (after "not usable...: "), without the flag that may follow it."""
    reply = detail.split(": ", 1)[1] if ": " in detail else detail
    return reply.split(f"; {FLAG}", 1)[0]


def flagged_items(scores: pd.DataFrame) -> dict[str, int]:
    """Point name -> items whose judged input addressed the grader (each item once, whatever judge flagged it)."""
    if scores is None or not len(scores) or "detail" not in scores:
        return {}
    hit = scores[scores["detail"].fillna("").str.contains(FLAG, regex=False)]
    if not len(hit):
        return {}
    from evals.analyze.explore import point_name

    label = "point_label" if "point_label" in hit else "point_id"
    items = hit.drop_duplicates(["strategy", label, "question_id"])
    return {point_name(s, p): n for (s, p), n in items.groupby(["strategy", label]).size().items()}


def flagged_moves(scores: pd.DataFrame) -> tuple[int, int]:
    """(flagged judgments read more than once, those whose values moved between the readings): the same input judged
    by each repeat (--judge-repeats) or each juror (--jury). A judge steered by the text gives the same verdict each
    time; values that moved show at least one reading did not follow it (issue 85: say whether the value moved)."""
    if scores is None or not len(scores) or "detail" not in scores:
        return 0, 0
    from evals.score.jury import _JUROR

    from .judge_repeats import repeat_values

    hit = scores[scores["detail"].fillna("").str.contains(FLAG, regex=False) & (scores["status"] == "ok")]
    seen = moved = 0
    for d in hit["detail"].tolist():
        vals = [v for v in (repeat_values(d) or []) if v is not None]
        if len(vals) < 2 and d.startswith("jury "):
            vals = [float(v) for _, v in _JUROR.findall(d.split(": ", 1)[-1])]
        if len(vals) >= 2:
            seen += 1
            moved += len({round(v, 9) for v in vals}) > 1
    return seen, moved


FLIP_AT_CHANCE = 0.30  # a judge whose sampled repeats disagree on more items than this ranks nothing (issue 85)


def flip_rates(scores: pd.DataFrame) -> dict[str, tuple[float, int]]:
    """{metric: (share of items whose sampled repeats disagree, items)} of the run's repeated judges."""
    from evals.score.judges import FLIPPED

    out = {}
    if scores is None or not len(scores) or "detail" not in scores:
        return out
    for metric in JUDGE_METRICS:
        rows = scores[(scores["metric"] == metric) & (scores["status"] == "ok")]
        rows = rows[rows["detail"].fillna("").str.match(r"^\d+ of \d+ repeats")]
        if len(rows):
            out[metric] = (float(rows["detail"].str.contains(f"; {FLIPPED}", regex=False).mean()), len(rows))
    return out


def flip_lines(scores: pd.DataFrame) -> list[str]:
    """--judge-repeats: each judge's flip rate (items whose sampled repeats disagree) and the points it flips most."""
    from evals.score.judges import FLIPPED

    out = []
    if scores is None or not len(scores) or "detail" not in scores:
        return out
    label = "point_label" if "point_label" in scores else "point_id"
    for metric, judge in JUDGE_METRICS.items():
        rows = scores[(scores["metric"] == metric) & (scores["status"] == "ok")]
        detail = rows["detail"].fillna("")
        reps = detail.str.extract(r"^(\d+) of (\d+) repeats", expand=True)
        rows = rows[reps[0].notna().to_numpy()]
        if not len(rows):
            continue
        flipped = rows["detail"].str.contains(f"; {FLIPPED}", regex=False)
        n_reps = int(reps[1].dropna().astype(int).max())
        by_point = flipped.groupby([rows["strategy"], rows[label]]).mean()
        worst = by_point.sort_values(ascending=False).head(3)
        out.append(f"judge {judge} flip rate {flipped.mean():.0%}: {int(flipped.sum()):,} of {len(rows):,} item(s) "
                   f"whose {n_reps} sampled repeats disagree; most at " + ", ".join(
                       f"{s} · {p} {v:.0%}" for (s, p), v in worst.items()) + "; each value is the repeats' mean, "
                   "so the intervals carry the judge's noise"
                   + (f"; over {FLIP_AT_CHANCE:.0%}: this judge's values do not rank points" if flipped.mean() >
                      FLIP_AT_CHANCE else ""))
    return out


def health_lines(scores: pd.DataFrame, warn_share: float = 0.2) -> list[str]:
    """What show, the report and the page print: a line per judge failing on more than ``warn_share`` of its
    items, and the flagged items per point."""
    from evals.score.jury import jury_lines

    # the judges' rows picked once for the two readers of them (a jury's rows are picked by jury_lines)
    judged = scores[scores["metric"].isin(list(JUDGE_METRICS))] if scores is not None and len(scores) else scores
    lines = ([h.line() for h in judge_health(judged) if h.failed and h.share >= warn_share - 1e-12] + flip_lines(judged)
             + jury_lines(scores))
    flagged = flagged_items(scores)
    if flagged:
        # what is known, never "not obeyed": the text was fenced as data, and a judge may still follow it
        lines.append(f"{sum(flagged.values()):,} item(s) contain text addressed to the grader (an instruction to rate, "
                     "ignore the rubric or mark supported); it was fenced as data, but their values may be steered: "
                     + ", ".join(f"{p} {n}" for p, n in sorted(flagged.items())))
        seen, moved = flagged_moves(scores)
        if seen:  # judged more than once: whether the readings agreed is known, and said
            lines.append(f"of the flagged judgments read more than once (repeats or jurors), {moved:,} of {seen:,} "
                         "moved between readings (at least one reading did not follow the text); "
                         f"{seen - moved:,} gave the same value each time (steered, or simply agreed)")
    return lines


def over_threshold(scores: pd.DataFrame, cap: float) -> list[JudgeHealth]:
    """The judges that failed on more than ``cap`` of their items (every item, whatever the cap, counts)."""
    return [h for h in judge_health(scores) if h.asked and (h.share > cap or h.failed == h.asked)]


def with_judged_n(table: pd.DataFrame, summary: pd.DataFrame) -> pd.DataFrame:
    """Each judged cell with the items its mean stands on ("0.000 [0.000, 0.000] n=1"): a judge that failed on most
    items shows how little is behind its figure (``ragwb show`` and the report; the page gives every cell its n)."""
    if not len(table) or summary is None or not len(summary) or "point" not in table or "n_ok" not in summary:
        return table
    n = summary.set_index(["strategy", "point", "metric"])["n_ok"].to_dict()
    out = table.copy()
    for c in out.columns:
        if c not in JUDGE_METRICS or out[c].dtype.kind != "O":
            continue
        out[c] = [v if not isinstance(v, str) or v.startswith("n/a") or " n=" in v
                  else f"{v} n={int(n.get((s, p, c), 0))}" for v, s, p in zip(out[c], out["strategy"], out["point"])]
    return out


def chance_judged(run: dict, workspace, scores: pd.DataFrame | None = None) -> dict[str, str]:
    """{metric: why} for each LLM-judged metric of a run whose judge (or any juror) agrees with people at chance by
    its stored figure, or (``scores``: the run's) whose sampled repeats disagree on more than 30% of its items: a
    metric that must not decide a pick or a gate without --trust-judge (issue 85)."""
    flips = {m: (share, n) for m, (share, n) in flip_rates(scores).items() if share > FLIP_AT_CHANCE}
    from evals.score.agreement import AT_CHANCE, at_chance, judge_settings
    from evals.score.judges import judge_metric

    cfg = run.get("config") or {}
    judge = cfg.get("judge")
    out = {m: (f"{m}'s judge flips on {share:.0%} of {n:,} items (its sampled repeats disagree; over "
               f"{FLIP_AT_CHANCE:.0%}): its values do not rank points; pass --trust-judge to decide on it anyway")
           for m, (share, n) in flips.items()}
    if not judge:
        return out
    settings = judge_settings(judge, cfg.get("judge_repeats", 1))
    models = list(cfg.get("jury") or ()) or [judge.get("model", "")]
    for n in tuple(cfg.get("judges") or ()) or ("ragas_faithfulness",):
        at = [m for m in models if at_chance(workspace, n, m, judge.get("base_url"), settings)]
        if at:
            out[judge_metric(n)] = (f"{judge_metric(n)} is judged by {', '.join(at)}: {AT_CHANCE} (its stored "
                                    "agreement, `ragwb agreement`); pass --trust-judge to decide on it anyway")
    return out
