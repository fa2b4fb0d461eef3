"""What the workbench page says about itself: a run with nobody there to press a button (a script, an export) ends
with one line; which quality metrics have values here (the chart's default is one that has); how long an embed
will take at the rate this machine measured; per-metric n in the headline."""
from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path

import pandas as pd

from rag.index.rates import keep_rate
from rag.safeio import html_text, md_code, md_text as esc  # noqa: F401 (the page's one escaping rule: issue 82)

# the quality metrics the chart and the matrix offer, in the order a default is picked from
QUALITY_CHOICES = ["f1", "llm_faithfulness", "answer_relevance", "context_sufficiency", "em", "faithfulness",
                   "citation_precision", "citation_recall", "evidence_recall",
                   "abstention_accuracy", "doc_ndcg@10", "evidence_mrr@10", "symbol_recall@10", "symbol_mrr@10",
                   "citation_validity", "statement_coverage", "question_answer_similarity"]
NA_MARK = " (n/a here)"
# metrics that stand in for a quality metric offline, never validated against people: charted only when picked
STANDINS = ("question_answer_similarity",)
STANDIN_MARK = " (stand-in, not validated)"


class PageCannotGoOn(RuntimeError):
    """Raised under ``marimo export`` where a live page would wait (the export then fails, with this line)."""


def _exporting() -> bool:
    """``marimo export`` runs the cells in a kernel process it spawned: its parent's command line says export."""
    try:
        cmd = Path(f"/proc/{os.getppid()}/cmdline").read_bytes().split(b"\0")
    except OSError:
        return False
    return any(b"marimo" in c for c in cmd) and b"export" in cmd


def headless_mode() -> str:
    """"script" (``python workbench.py``), "export" (``marimo export html``) or "" (a live page, or a library
    call): where nobody can answer the page."""
    try:
        import marimo as mo

        mode = mo.app_meta().mode
    except Exception:  # noqa: BLE001 - no marimo context: a library call, not a page
        return ""
    if mode == "script":
        return "script"
    return "export" if mode == "edit" and _exporting() else ""


def exit_headless(message: str, code: int = 2) -> None:
    """Where nobody can answer the page, a page that cannot go on (an unknown dataset, a bad flag, a folder with
    no questions) ends with one line: a script exits with ``code`` (2, as ``ragwb``), an export fails with the
    line on stderr (marimo's export then exits 1: its kernel cannot set the exit code). In a live page it returns
    and the cell shows the message instead."""
    mode = headless_mode()
    if not mode:
        return
    sys.stdout.flush()
    sys.stderr.write(message.rstrip() + "\n")
    sys.stderr.flush()
    if mode == "script":
        os._exit(code)  # noqa: SLF001 - marimo's script runner turns SystemExit into a traceback
    raise PageCannotGoOn(message)


NO_QUESTIONS = ("{name} has no questions yet: its documents are indexed and searchable (the search box at the end of "
                "this page). To measure answers, give it questions: write a JSONL file (one {{\"question\": ...}} "
                "a line; docs/datasets.md) and reopen with `--questions FILE`; or let an LLM write them (the "
                "page's *Generate gold questions* section, or {generate}; docs/generate.md); "
                "or run `ragwb judge` on a pool to grade passages (docs/judgments.md).")


def md_fence(text: str, lang: str = "") -> str:
    """``text`` as a fenced Markdown code block that ends where it does: the fence is longer than any run of
    backticks in it (a folder name holding ``` once closed the best point's TOML early and the rest rendered as
    Markdown). Inside a code block Markdown escapes HTML itself."""
    import re

    fence = "`" * max(3, 1 + max((len(m) for m in re.findall(r"`+", text)), default=0))
    return f"{fence}{lang}\n{text}\n{fence}"


def no_questions_message(sess, markdown: bool = True) -> str:
    """What a set with no questions says: as the page's Markdown (the set's name and path escaped, issue 82), or as
    a terminal line (``markdown=False``: a script's or the library's error)."""
    spec = sess.spec or sess.dataset.name
    if not markdown:
        from rag.safeio import printable

        return NO_QUESTIONS.format(name=printable(sess.dataset.name),
                                   generate=f"`ragwb generate {printable(spec)} --out FILE`")
    return NO_QUESTIONS.format(name=esc(sess.dataset.name), generate=md_code(f"ragwb generate {spec} --out FILE"))


def arrow(frame: pd.DataFrame):
    """A frame as the Arrow table marimo's table styles fastest (its per-cell style and hover callbacks select
    cells one by one: 1 ms a cell from pandas)."""
    import pyarrow as pa

    # a column of mixed Python types (answerable: True, False or "unknown") is shown as its text
    mixed = [c for c in frame.columns if frame[c].dtype == object
             and len({type(v) for v in frame[c] if v is not None and v == v}) > 1]
    if mixed:
        frame = frame.assign(**{c: frame[c].map(lambda v: "" if v is None or v != v else str(v)) for c in mixed})
    return pa.Table.from_pandas(frame, preserve_index=False)


def paired_metrics(scores: pd.DataFrame) -> list[str]:
    """The metrics the page's paired table compares: those with an ok value on some item (the rest pair nothing;
    ``paired_points`` names a metric with no pair in one line)."""
    return sorted(set(scores.loc[scores["status"] == "ok", "metric"])) if len(scores) else []


ROWS_SHOWN = 200  # rows of the per-question frame the page's table holds (the CSV button writes every row)


def needs_questions(sess) -> str:
    """What Save as run, Sweep and Race say on a dataset with no questions (in place of buttons that would do
    nothing): how to give it some."""
    return (f"{esc(sess.dataset.name)} has none yet. Reopen the page with `--questions FILE.jsonl` (one "
            "{\"question\": ...} a line), or let an LLM write them in *Generate gold questions* below: the page "
            "evaluates them as soon as they are written.")


def metrics_with_values(summary: pd.DataFrame) -> set[str]:
    if summary is None or not len(summary) or "n_ok" not in summary:
        return set()
    return set(summary[summary.n_ok > 0].metric)


# metric families that cannot apply to a corpus: code retrieval on prose, memory on single questions (hidden from
# the dropdowns there; a metric that has values is never hidden)
CODE_METRICS = frozenset({"symbol_recall@10", "symbol_mrr@10"})
MEMORY_METRICS = frozenset({"bypass_correct", "history_tokens"})


def applicable_metrics(sess, metrics) -> list[str]:
    """``metrics`` less the families this corpus cannot have: symbol metrics without source files, memory metrics
    without conversations (issue 72: 16 of 17 options were n/a on a Markdown folder)."""
    code = any(getattr(d, "code_language", "") for d in sess.dataset.documents)
    talks = any(getattr(q, "conversation_id", None) for q in sess.dataset.questions)
    drop = (set() if code else CODE_METRICS) | (set() if talks else MEMORY_METRICS)
    return [m for m in metrics if m not in drop]


CHANCE_MARK = " (judge at chance)"


def chance_metrics(sess, workspace: str) -> set[str]:
    """The metrics of the session's LLM judges whose stored agreement with people is at chance (issue 85): marked in
    the quality list and never the metric the chart falls back to."""
    from evals.score.agreement import at_chance, judge_settings
    from evals.score.judges import judge_metric

    out = set()
    for j in session_judges(sess):
        for c in [x.client for x in getattr(j, "jurors", ())] or [j.client]:
            if at_chance(workspace, j.name, c.cfg.model, c.cfg.base_url,
                         judge_settings(c.cfg, getattr(j, "repeats", 1))):
                out.add(judge_metric(j.name))
    return out


def metric_choices(summary: pd.DataFrame, wanted: str | None, choices: list[str] = QUALITY_CHOICES,
                   also: set | frozenset = frozenset(), chance: set | frozenset = frozenset()
                   ) -> tuple[dict[str, str], str, str]:
    """The quality dropdown: label -> metric (a metric with no value on these questions is marked n/a here, one
    whose judge agrees with people at chance is marked so), the label to show (the user's pick while it has values,
    else the first metric that has and whose judge is not at chance) and a note saying why the default moved ("" when
    it did not)."""
    have = metrics_with_values(summary) | set(also)  # also: metrics with values beside the summary (judged)
    # metrics with values first (in their order), the n/a ones after: the list starts with what can be charted
    choices = [m for m in choices if m in have] + [m for m in choices if m not in have]
    # a stand-in is named as one whether or not it has values here (issue 83, item 13: the mark went once it had
    # values); it is never also marked n/a, so its label is no longer than before (the longest label sets the
    # dropdown's width, and a wider one pushed the plan line to a row of its own, the chart's points off the screen)
    options = {m + (STANDIN_MARK if m in STANDINS else "" if m in have else NA_MARK)
               + (CHANCE_MARK if m in chance else ""): m for m in choices}
    label_of = {m: lab for lab, m in options.items()}
    if wanted in have or summary is None or not len(summary):
        return options, label_of.get(wanted, label_of[choices[0]]), ""
    # never fallen back to a stand-in: it is charted only when picked, under its stand-in name (issue 72)
    first = next((m for m in choices if m in have and m not in STANDINS and m not in chance), None)
    if first is None:  # e.g. plain questions answered by the offline answerer: no quality metric applies
        standin = [m for m in STANDINS if m in have]
        return options, label_of.get(wanted, label_of[choices[0]]), (
            "**No quality metric is measured** on these questions with this answerer: plain questions have no "
            "reference answers (f1, em, abstention n/a) and extractive answers copy the context (faithfulness "
            "n/a). An LLM answerer (`--llm-base-url`, `--llm-model`) is scored on faithfulness and citations; "
            "answers or evidence in the questions file, or grades below, add the rest (docs/datasets.md)."
            + (f" A stand-in can be picked in the list ({', '.join(standin)}: not validated against people)."
               if standin else ""))
    note = (f"Showing **{first}**: {esc(wanted)} has no value on these questions (no reference answers to score it "
            f"against); metrics marked n/a here have none." if wanted else "")
    return options, label_of[first], note


def with_metric_n(table: pd.DataFrame, summary: pd.DataFrame) -> pd.DataFrame:
    """Each headline cell with the questions its own mean stands on ("0.612 [0.500, 0.700] n=6"): f1 on the six
    questions with answers, evidence recall on the one with evidence, never one n for the whole row."""
    if not len(table) or summary is None or not len(summary):
        return table
    n = summary.set_index(["strategy", "point", "metric"])["n_ok"].to_dict()
    out = table.copy()
    for c in out.columns:
        if c in ("strategy", "point") or out[c].dtype.kind != "O" or c.endswith("tokens"):
            continue
        out[c] = [v if not isinstance(v, str) or v.startswith("n/a") else f"{v} n={int(n.get((s, p, c), 0))}"
                  for v, s, p in zip(out[c], out["strategy"], out["point"])]
    return out


def matrix_cells(frame: pd.DataFrame, columns: list[str]) -> pd.DataFrame:
    """The matrix as the page shows it: n/a cells empty text, never ``nan``; numbers at 3 decimals."""
    out = frame.copy()
    for c in columns:
        if c in out:
            out[c] = ["" if v is None or (isinstance(v, float) and v != v) else f"{v:.3f}"
                      if isinstance(v, (int, float)) else str(v) for v in out[c]]
    return out


# ---- how long an embed takes here (the estimate before it: rag/index/rates.py measured_rate)
class EmbedRate:
    """Counts embedded chunks as they come and says the rate in chunks/s with the time left; at the end it keeps
    the measured rate for the next estimate (``measured_rate``)."""

    def __init__(self, workspace: str, embedder: str):
        self.workspace, self.embedder = workspace, embedder
        self.t0, self.done, self.total = time.perf_counter(), 0, 0

    def add(self, n: int, total: int) -> str:
        self.done += n
        self.total = total
        return self.line()

    def line(self) -> str:
        """The rate so far in chunks/s and the time left at it."""
        dt = time.perf_counter() - self.t0
        rate = self.done / dt if dt > 0 else 0.0
        if self.done >= self.total:  # finished: a rate, never "about 0 s left"
            return f"{rate:,.1f} chunks/s"
        left = (self.total - self.done) / rate if rate > 0 else 0.0
        return f"{rate:,.1f} chunks/s · about {left:,.0f} s left"

    def keep(self) -> None:
        keep_rate(self.workspace, self.embedder, self.done, time.perf_counter() - self.t0)


# ---- the judge from the page: how far to trust it (its agreement with people), measured behind its cost line
AGREEMENT_CLAIMS = 200  # the page measures on the first 200 labelled claims (`ragwb agreement` on all of them)


def session_judges(sess) -> list:
    return list(getattr(sess.evaluator, "judges", []) or [])


def judge_lines(sess, workspace: str, scores: pd.DataFrame | None = None) -> list[str]:
    """The agreement line of each judge of the session (the page's judge: the answering model by default), as
    ``ragwb show`` prints it; only for metrics with values when ``scores`` is given."""
    from evals.score.agreement import agreement_line

    from evals.analyze.judge_health import health_lines

    have = set(scores.loc[scores.status == "ok", "metric"]) if scores is not None and len(scores) else None
    from evals.score.agreement import judge_settings

    return [agreement_line(workspace, j.name, j.client.cfg.model, j.client.cfg.base_url, judge_settings(j.client.cfg))
            for j in session_judges(sess)
            if have is None or getattr(j, "score_name", j.name) in have] + (
        health_lines(scores) if scores is not None and session_judges(sess) else [])


def judge_alignment_table(sess, workspace: str):
    """The alignment table of the page's judges (as the report's), or None offline."""
    from evals.score.agreement import alignment_table, judge_settings

    judges = session_judges(sess)
    if not judges:
        return None
    return alignment_table(workspace, [(j.name, j.client.cfg.model, j.client.cfg.base_url,
                                        judge_settings(j.client.cfg)) for j in judges])


def agreement_plan(sess, workspace: str, limit: int = AGREEMENT_CLAIMS) -> dict:
    """What measuring the session's faithfulness judge against the human labels would send: {"calls", "cached",
    "line"}, counted exactly against the response cache before anything is sent."""
    from rag.llm.client import dollars_text, price_known
    from rag.llm.spend import plan_calls

    from evals.score.agreement import agreement_set
    from evals.score.metrics import Score

    judge = next((j for j in session_judges(sess) if j.name == "llm_faithfulness"), None)
    if judge is None:
        return {"calls": 0, "cached": 0, "line": (
            "No LLM judge on this page: open it with `-- --llm-base-url URL --llm-model M` (that model also judges, "
            "unless `--judge-base-url` names another or `--judge none`) and pick the LLM answerer. Offline nothing is "
            "judged or sent.")}
    rows = agreement_set()[:limit]
    reqs = [req for r in rows if not isinstance(req := judge.request("", r["claim"], r["evidence"]), Score)]
    # the page's judge sends no schema: one set of request parameters, so the run's own counting applies
    plan = plan_calls(judge.client, [m for m, _, _ in reqs], reqs[0][1] if reqs else None)
    new, cached, tokens, dollars = plan.new_calls, plan.cached_calls, plan.prompt_tokens, plan.dollars
    cfg = judge.client.cfg
    return {"calls": new, "cached": cached, "line": (
        f"**Measure the judge {esc(cfg.model)}** against {len(rows):,} human-labelled claims (ExpertQA support labels): "
        f"{new:,} judge call(s) ({tokens:,} prompt tokens, "
        f"{dollars_text(dollars, price_known(cfg.model, judge.client.prices), 'up to ')}), {cached:,} already in the "
        "response cache (free). The figure is kept with the judge's identity and printed beside its metrics here, "
        "in `ragwb show` and in the report (`ragwb agreement` measures on every claim).")}


def measure_agreement(sess, workspace: str, limit: int = AGREEMENT_CLAIMS, progress=None) -> str:
    """Measure the session's faithfulness judge (after the page's Send) and keep the figure: its agreement line.
    ``progress``: a tqdm class for its bar (the Workbench's ``tqdm.auto``: one widget in a notebook)."""
    from evals.score.agreement import agreement_line, remember_agreement, run_agreement

    judge = next(j for j in session_judges(sess) if j.name == "llm_faithfulness")
    rows = run_agreement(limit, judge.client, ("llm_faithfulness",), 1000, offline=False, progress=progress)
    row = next(r for r in rows if r["judge"] == "llm_faithfulness")
    # kept either way: a failed measurement is stored as failed, so every judge line says it was tried
    from evals.score.agreement import judge_settings

    settings = judge_settings(judge.client.cfg)
    remember_agreement(workspace, "llm_faithfulness", judge.client.cfg.model, judge.client.cfg.base_url, row, settings)
    if not row["n"]:
        raise ValueError(row.get("note") or "no usable verdict from the judge")
    return agreement_line(workspace, "llm_faithfulness", judge.client.cfg.model, judge.client.cfg.base_url, settings)


def matched_text(text: str, query: str, chars: int = 320) -> str:
    """The part of a block a search result shows: from the first line holding a word of the query (header lines
    like "## Treatments" only when nothing else matches), whitespace folded, cut at ``chars``."""
    import re

    words = {w for w in re.findall(r"\w+", query.lower()) if len(w) > 2}
    lines = [x.strip() for x in text.splitlines() if x.strip()]
    body = [x for x in lines if not x.startswith("#")] or lines
    start = next((i for i, x in enumerate(body) if words & set(re.findall(r"\w+", x.lower()))), 0)
    out = " ".join(" ".join(body[start:]).split())
    return out if len(out) <= chars else out[:chars - 1] + "…"


def full_question(matrix: pd.DataFrame, row_id) -> str | None:
    """The matrix's question column is cut to fit 1440 px; hovering a cell shows the whole text (``row_id``: the
    row's position in the frame given to the table, as marimo passes it)."""
    try:
        return str(matrix["question"].iloc[int(row_id)])
    except (KeyError, IndexError, ValueError, TypeError):
        return None


def headline(summary: pd.DataFrame, headline_table, metrics: list[str]) -> tuple[pd.DataFrame, dict]:
    """The page's headline table, as the CLI and the report show it: "mean [95% interval] n=K" per metric (each
    metric's own n), "n/a (why)" where a metric cannot apply; the columns n/a on every row are returned apart
    ({metric: why}), named in one line under the table rather than shown."""
    from evals.analyze.summary import drop_na_columns

    table, dropped = drop_na_columns(headline_table(summary, metrics))
    return with_metric_n(table, summary), dropped


def headline_order(summary: pd.DataFrame, base: list[str]) -> list[str]:
    """The page's headline columns as ``ragwb show`` orders them: judged metrics first, then the headline (the
    answer-side citation metrics an LLM answer is scored on after its first four), then the reference-free ones;
    the metrics with values on these questions before those with none."""
    from evals.analyze.summary import JUDGED_FIRST, REFERENCE_FREE

    wanted = JUDGED_FIRST + base[:4] + ["citation_validity", "citation_support", "statement_coverage"] + base[4:]
    wanted += [m for m in REFERENCE_FREE if m not in wanted]
    wanted = list(dict.fromkeys(wanted))
    have = metrics_with_values(summary)
    return [m for m in wanted if m in have] + [m for m in wanted if m not in have]


HEADLINE_SHOWN = 4  # metric columns the headline shows at first (judged first): 1440 px without scrolling


def headline_first(order: list[str], shown: int = HEADLINE_SHOWN) -> tuple[list[str], list[str]]:
    """(the headline's first columns: the first ``shown`` metrics of ``order`` and the token cost, the rest behind
    the page's *all columns* toggle). With an LLM the headline had 12 columns and context_tokens scrolled off."""
    cost = [m for m in order if m in ("context_tokens",)]
    metrics = [m for m in order if m not in cost]
    return metrics[:shown] + cost, metrics[shown:]


def questions_key(sess) -> tuple:
    """What a result drawn on the page belongs to: the dataset, the answerer and its questions (their ids and text).
    A sweep or race drawn on 12 questions is not shown once Generate loaded others (issue 83, item 16)."""
    import hashlib

    h = hashlib.sha256()
    for q in sess.dataset.questions:
        h.update(f"{q.qid}\x00{q.text}\x01".encode("utf-8", "replace"))
    return sess.dataset.name, sess.answerer_label, h.hexdigest()


def kept_output(kept, sess):
    """A kept (questions_key, output) pair's output while it belongs to ``sess``'s questions, else None."""
    return kept[1] if kept and kept[0] == questions_key(sess) else None


def headline_columns(summary: pd.DataFrame, headline_table, order: list[str], all_columns: bool
                     ) -> tuple[pd.DataFrame, dict, list[str]]:
    """(the headline table, the columns n/a on every row {metric: why}, the columns *all columns* would add).
    Only a column with a value is offered behind the toggle (issue 83, item 13: offline on plain questions it
    offered 14 more and added none, every one n/a); the n/a ones are named in the line under the table."""
    first, rest = headline_first(order)
    full, dropped = headline(summary, headline_table, first + rest)
    more = [m for m in rest if m in full.columns]  # not n/a on every row, and scored at all
    if all_columns or not more:
        return full, dropped, []
    return full.drop(columns=more), dropped, more  # each cell is its own metric's: the same as computed alone


def csv_bytes(df: pd.DataFrame) -> bytes:
    """``df`` as the project's one CSV writer writes it (evals/csvout.py: a cell that starts like a formula gets a
    leading quote, a CR stays inside its quoted cell): the page's tables download through this, never marimo's own
    CSV export (which wrote ``+cmd|' /C calc'!A0`` as is)."""
    import io

    from evals.csvout import safe_frame

    buf = io.StringIO()
    safe_frame(df).to_csv(buf, index=False, lineterminator="\r\n")
    return buf.getvalue().encode("utf-8")


def csv_download(df: pd.DataFrame, filename: str, label: str):
    import marimo as mo

    return mo.download(data=lambda: csv_bytes(df), filename=filename, mimetype="text/csv", label=label)


def not_shown_line(dropped: dict) -> str:
    from evals.analyze.summary import not_shown_line as _line

    return _line(dropped)


def labelled(table: pd.DataFrame) -> pd.DataFrame:
    from evals.analyze.summary import labelled as _labelled

    return _labelled(table)


def plotly(fig):
    """``mo.ui.plotly`` with its config given: without one, marimo looks up plotly's default renderer, whose first
    import (nbformat, jsonschema and a grammar compiled by lark) took 1.4 s before the page's first chart."""
    import marimo as mo

    return mo.ui.plotly(fig, config={})


def has_sufficiency(scores: pd.DataFrame | None) -> bool:
    """Whether the session's scores give the sufficiency bar anything to draw (its heading is drawn at once, the bar
    when scrolled to)."""
    from evals.analyze.sufficiency import has_sufficiency as _has

    return scores is not None and bool(len(scores)) and _has(scores)


def sufficiency_bar(scores: pd.DataFrame):
    """The decomposition's stacked bar for the session's scores, or None when no item has a sufficiency value."""
    from evals.analyze.sufficiency import decomposition, has_sufficiency
    from evals.report.charts import sufficiency_figure

    if scores is None or not len(scores) or not has_sufficiency(scores):
        return None
    return sufficiency_figure(decomposition(scores))


def chart_captions(with_history: bool, summary: pd.DataFrame | None = None, quality: str = "") -> list[str]:
    """The small print under the quality-vs-cost chart: a word of warning where the intervals rest on few
    questions, what the front is, the history's marks, the offline faithfulness scorer's agreement with people."""
    from evals.analyze.explore import SMALL_N
    from evals.report.charts import HISTORY_CAPTION, PARETO_CAPTION
    from evals.score.support import support_caption

    few = []
    ok = summary[summary["n_ok"] > 0] if summary is not None and len(summary) and "n_ok" in summary else None
    if ok is not None and len(ok) and int(ok["n_ok"].max()) < SMALL_N:
        few = [f"**Few questions:** every interval here rests on at most {int(ok['n_ok'].max())} question(s) (under "
               f"{SMALL_N}); the 95% intervals are rough and wide, so read the points as a first look and add "
               "questions (or generate them) before trusting a difference."]
    # the lexical scorer's agreement only where its figure is on screen (the chart's metric or a headline column)
    shown = quality == "faithfulness" or (summary is not None and len(summary) and "metric" in summary
                                          and bool((summary[summary.metric == "faithfulness"]["n_ok"] > 0).any()))
    return few + [PARETO_CAPTION + (f" {HISTORY_CAPTION}" if with_history else "")] + (
        [f"lexical support (offline faithfulness): {support_caption()}"] if shown else [])


def matrix_view(scores: pd.DataFrame, judged: pd.DataFrame, questions, metric: str, filters: dict
                ) -> tuple[pd.DataFrame, pd.DataFrame, list[str], int]:
    """The question matrix as the page shows it: (the filtered matrix, the frame to display: points first after
    the id and a question cut to 48 characters (whole on hover and in the drill-down), n/a cells as empty text,
    the point columns, the questions before filtering). ``filters``: explore.filter_matrix's arguments by name."""
    from evals.analyze import explore

    sc = pd.concat([scores, judged], ignore_index=True) if len(judged) else scores
    whole = explore.question_matrix(sc, questions, metric or "f1")
    matrix = explore.filter_matrix(whole, **filters)
    pts = whole.attrs.get("points", [])
    first = ["question_id", "question"] + pts + ["spread", "failures"]
    shown = matrix[first + [c for c in matrix.columns if c not in first]] if len(matrix) else matrix
    if len(shown):
        shown = matrix_cells(shown.assign(question=[q if len(q) <= 48 else q[:47] + "…" for q in shown["question"]]),
                             pts + ["spread"])
    return matrix, shown, pts, len(whole)


# ---- cost at scale: what a point would cost on N questions (issue 83)
def cost_projection(summary: pd.DataFrame, n: int, llm: bool) -> pd.DataFrame:
    """Per point, its mean tokens and dollars a question (as measured on these questions) times ``n``: context
    tokens, prompt and completion tokens (an LLM answerer's), and dollars, "unknown" where the model has no price
    (never $0), "0 (offline)" for the offline answerer. A projection of means: the questions at scale must be like
    these."""
    if not isinstance(n, int) or isinstance(n, bool) or n < 1:
        raise ValueError(f"project to a number of questions >= 1, got {n!r}")
    if summary is None or not len(summary):
        return pd.DataFrame(columns=["strategy", "point"])
    s = summary.set_index(["strategy", "point", "metric"])
    rows = []
    for (strategy, point), _ in summary.groupby(["strategy", "point"], sort=False):
        def mean(m):
            key = (strategy, point, m)
            if key not in s.index or not s.loc[key, "n_ok"]:
                return None
            return float(s.loc[key, "mean"])
        row = {"strategy": strategy, "point": point}
        for m in ("context_tokens", "prompt_tokens", "completion_tokens"):
            v = mean(m)
            if v is not None:
                row[f"{m} / question"] = round(v, 1)
                row[f"{m} x {n:,}"] = int(round(v * n))
        usd = mean("cost_usd")
        if not llm:
            row["dollars / question"], row[f"dollars x {n:,}"] = "0 (offline)", "0 (offline)"
        elif usd is None:
            row["dollars / question"], row[f"dollars x {n:,}"] = "unknown (no price)", "unknown (no price)"
        else:
            row["dollars / question"], row[f"dollars x {n:,}"] = f"${usd:.6f}", f"${usd * n:,.2f}"
        rows.append(row)
    return pd.DataFrame(rows)
