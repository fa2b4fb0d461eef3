"""Static HTML report of a stored run (or two runs compared), readable with no Python.

Plotly's JavaScript is embedded, so the file opens offline. Every piece of corpus text
and every answer is HTML-escaped: a document holding <script> is shown, never run.
"""
from __future__ import annotations

import json
from pathlib import Path

import pandas as pd

from evals.store import ResultStore
from rag.models import gold_text, known_answerability
from rag.safeio import html_text, printable, write_whole


def _esc(text) -> str:
    """The report's one escaping rule for every string it shows (rag.safeio.html_text: HTML escaped, quotes
    included, terminal escapes and bidi overrides made visible, issue 82), line breaks kept in bodies of text."""
    return html_text(text, keep_lines=True)
from rag.strategies import Block
from rag.strategies.packing import cut_marker
from evals.analyze.summary import LABELS, headline_table, labelled, summarize_scores
from evals.score.support import support_caption
from .charts import PARETO_CAPTION, quality_cost_figure

QUALITY = ["f1", "faithfulness", "citation_precision", "evidence_recall", "abstention_accuracy",
           "citation_validity", "statement_coverage", "question_answer_similarity"]



JUDGE_METRICS = ["llm_faithfulness", "ragas_faithfulness", "answer_relevance", "context_sufficiency",
                 "ragas_context_recall", "ragas_answer_accuracy"]


# plotly's mode bar without what sends a chart out of the page ("Edit in Chart Studio", "Share chart"): the report
# is meant to stay offline; download-as-PNG, zoom and pan stay
PLOTLY_CONFIG = {"displaylogo": False, "showSendToCloud": False,
                 "modeBarButtonsToRemove": ["sendDataToCloud", "editInChartStudio"]}
TEXT_CELL = 120  # characters of a text cell shown; the whole text is its tooltip
_TABLES = iter(range(10**9))


def _prose(text: str) -> str:
    """Escaped prose with `code` spans rendered as code (never literal backticks)."""
    import re

    return re.sub(r"`([^`]+)`", r"<code>\1</code>", _esc(text))


def _cell(v) -> tuple[str, str]:
    """(text shown, sort key) of one cell: numbers as elsewhere in the report (3 decimals; large ones whole,
    with thousands separators), long text cut with the whole of it on hover."""
    if v is None or (isinstance(v, float) and v != v):
        return "", ""
    if isinstance(v, bool):
        return str(v), str(v)
    if isinstance(v, (int,)) or (hasattr(v, "dtype") and getattr(v.dtype, "kind", "") in "iu"):
        return f"{int(v):,}", str(int(v))
    if isinstance(v, float) or (hasattr(v, "dtype") and getattr(v.dtype, "kind", "") == "f"):
        f = float(v)
        return (f"{f:,.1f}" if abs(f) >= 1000 else f"{f:.3f}"), repr(f)
    text = str(v)
    return text, text


def _table(df: pd.DataFrame, sortable: bool = True) -> str:
    """A table that sorts on a header click (a marker shows the direction), numbers rounded as everywhere in the
    report, long text cut with a tooltip; a wide table scrolls inside the page, never past the window.
    `sortable=False` is the same table with its look inline and no click: the marimo report's page has neither
    this report's stylesheet nor its script (marimo strips both), and a table there must not promise a sort."""
    tid = f"t{next(_TABLES)}"
    cols = list(df.columns)
    th = " style='padding:3px 8px;border-bottom:1px solid #bbb;text-align:left;white-space:nowrap'"
    td = " style='padding:3px 8px;border-bottom:1px solid #ddd;vertical-align:top;white-space:nowrap'"
    td_long = (" style='padding:3px 8px;border-bottom:1px solid #ddd;vertical-align:top;white-space:normal;"
               "min-width:16em;max-width:28em;overflow-wrap:anywhere'")
    if sortable:
        th = td = td_long = ""
    head = "".join((f"<th onclick=\"rwbSort('{tid}',{i})\" title='click to sort'>" if sortable else f"<th{th}>")
                   + _esc(str(c)) + "</th>" for i, c in enumerate(cols))
    body = []
    for row in df.itertuples(index=False):
        cells = []
        for v in row:
            shown, key = _cell(v)
            if len(shown) > TEXT_CELL:
                cells.append(f"<td class='long'{td_long} data-v='{_esc(key)}' "
                             f"title='{_esc(shown)}'>{_esc(shown[:TEXT_CELL])}…</td>")
            else:
                cells.append(f"<td{td} data-v='{_esc(key)}'>{_esc(shown)}</td>")
        body.append("<tr>" + "".join(cells) + "</tr>")
    if not sortable:
        return ("<div style='overflow-x:auto;max-width:100%'><table style='border-collapse:collapse;font-size:13px'>"
                f"<thead><tr>{head}</tr></thead><tbody>" + "".join(body) + "</tbody></table></div>")
    return (f"<div class='scroll'><table class='tbl sortable' id='{tid}'><thead><tr>{head}</tr></thead><tbody>"
            + "".join(body) + "</tbody></table></div>")


def plain_table_html(df: pd.DataFrame) -> str:
    """The report's table for a page without its stylesheet and script (the marimo report): rounded the same,
    long text cut with a tooltip, scrolls sideways, no sort promised."""
    return _table(df, sortable=False)


def worst_questions(store: ResultStore, run_id: str, metric: str = "f1", n: int = 5) -> pd.DataFrame:
    return store.con.execute(
        "SELECT r.strategy, r.point_label, r.question_id, q.text AS question, q.answers AS gold, q.answerable, q.evidence, "
        "r.answer, s.value AS score, r.blocks "
        "FROM scores s JOIN results r USING (run_id, strategy, point_id, question_id, repeat) "
        "JOIN run_gold q ON q.run_id = r.run_id AND q.question_id = r.question_id "
        f"WHERE s.run_id = ? AND s.metric = ? AND s.status = 'ok' AND {store._part(store.con, run_id, 'tune', 's.question_id')} "
        # one row per question (its worst strategy/point), not the same question five times
        "QUALIFY row_number() OVER (PARTITION BY r.question_id ORDER BY s.value, r.strategy, r.point_label) = 1 "
        "ORDER BY s.value ASC, r.question_id LIMIT ?",
        [run_id, metric, n]).df()


def breakdown_tables(store: ResultStore, run_id: str, dataset: str, max_groups: int = 30) -> dict[str, pd.DataFrame]:
    """Quality means per strategy x point x group, for the language, the gold document and every
    question metadata field with 2..max_groups values (company, document type, ...)."""
    from evals.analyze.summary import question_groups

    q = store.run_questions(run_id)
    fields = ["language", "document"]
    for m in q.get("metadata", []):
        for k in (json.loads(m) if isinstance(m, str) and m else {}):
            if k not in fields:
                fields.append(k)
    sc = store.scores(run_id)
    sc = sc[(sc.status == "ok") & sc.metric.isin(QUALITY + ["context_tokens"])]
    out = {}
    for f in fields:
        try:
            g = question_groups(store, run_id, f)
        except ValueError:
            continue
        if not 2 <= g.nunique() <= max_groups:
            continue
        t = sc.assign(**{f: sc.question_id.map(g)}).pivot_table(
            index=[f, "strategy", "point_label"], columns="metric", values="value", aggfunc="mean").round(3)
        n = sc.assign(**{f: sc.question_id.map(g)}).groupby([f, "strategy", "point_label"]).question_id.nunique()
        t.insert(0, "questions", n)
        t.columns.name = None
        out[f] = t.reset_index().rename(columns={"point_label": "point"})
    return out


def _statuses(store: ResultStore, run_id: str) -> pd.DataFrame:
    """Failures by metric and status with the strategies they hit; not_applicable (a metric that does not apply to
    an item: said per metric in the summary's "Not shown" line) is one line (``attrs``), never a row per strategy
    and metric."""
    statuses = store.con.execute(
        "SELECT metric, status, count(*) AS n, string_agg(DISTINCT strategy, ', ' ORDER BY strategy) AS strategies "
        "FROM scores WHERE run_id=? AND status NOT IN ('ok', 'not_applicable') GROUP BY ALL ORDER BY n DESC, metric",
        [run_id]).df()
    statuses.attrs["not_applicable"] = store.con.execute(
        "SELECT metric, count(*) FROM scores WHERE run_id=? AND status = 'not_applicable' GROUP BY ALL "
        "ORDER BY 2 DESC, 1", [run_id]).fetchall()
    return statuses


def _paired_with_first(scores: pd.DataFrame, pts: list[str]) -> pd.DataFrame:
    """Every point against the first on f1 and prompt tokens; the metrics no question pairs in ``attrs``."""
    from evals.analyze.explore import paired_points

    parts, unpaired = [], set()
    for p in pts[1:]:
        t = paired_points(scores, pts[0], p, ["f1", "prompt_tokens"], n_resamples=1000)
        unpaired.update(t.attrs["unpaired"])
        parts.append(t.assign(point=p)[["point", "metric", "n", "a", "b", "delta", "low", "high", "verdict"]])
    paired = pd.concat(parts, ignore_index=True).rename(columns={"a": pts[0][:40], "b": "point's"})
    paired.attrs["unpaired"] = sorted(unpaired)
    return paired


def report_sections(store: ResultStore, run_id: str, compare: str | None = None) -> dict:
    """Everything a report shows, as data (tables, plotly figures, escaped HTML): shared by the
    static HTML writer and notebooks/report.py."""
    run = store.run(run_id)
    from evals.analyze.summary import run_scores

    scores = run_scores(store, run_id)  # read once (judged metrics included): the summary, the charts, the matrix
    summ = summarize_scores(scores)
    present = set(scores.metric) if len(scores) else set()
    ok_metrics = set(scores[scores.status == "ok"].metric) if len(scores) else set()
    # F1 leads where answers were written; plain questions (no answers) lead with the first metric that has values
    judged = [m for m in JUDGE_METRICS + ["judged_ndcg@10", "judged_recall@10"] if m in present]  # LLM judges, relevance judgments
    # ... and a judge's metric before the offline lexical scorer: it never heads the charts when a judge scored
    lead = next((m for m in ["f1"] + judged + QUALITY if m in ok_metrics), "f1")
    fallback_note = judge_fallback_note(judged, ok_metrics, lead)
    # conversations: the cost that differs between memory policies is the prompt (history included)
    cost = "prompt_tokens" if store.con.execute("SELECT count(*) FROM results WHERE run_id = ? AND turn IS NOT NULL",
                                                [run_id]).fetchone()[0] else "context_tokens"
    # a metric with no ok score (e.g. not_applicable for this answerer) gets no chart
    pick, figs = _pick_and_charts(store, run_id, summ, lead, judged, cost)
    from evals.analyze.sufficiency import decomposition

    sufficiency = decomposition(scores) if "context_sufficiency" in ok_metrics else pd.DataFrame()
    breakdown = store.con.execute(
        "SELECT r.strategy, r.point_label AS point, q.qtype AS question_type, q.language, avg(s.value) AS f1, "
        "count(*) AS n FROM scores s JOIN results r USING (run_id, strategy, point_id, question_id, repeat) "
        "JOIN run_gold q ON q.run_id = r.run_id AND q.question_id = r.question_id "
        f"WHERE s.run_id = ? AND s.metric = 'f1' AND s.status = 'ok' AND {store._part(store.con, run_id, 'tune', 's.question_id')} "
        "GROUP BY ALL ORDER BY 1, 2, 3, 4", [run_id]).df()
    if len(breakdown):  # budget points in numeric order (top_k=2 before top_k=16); 3 decimals
        from evals.analyze.summary import natural_key

        breakdown = breakdown.iloc[sorted(range(len(breakdown)), key=lambda i: (
            breakdown.strategy.iloc[i], natural_key(str(breakdown.point.iloc[i])),
            str(breakdown.question_type.iloc[i]), str(breakdown.language.iloc[i])))].reset_index(drop=True)
        breakdown["f1"] = breakdown["f1"].round(3)
    breakdowns = breakdown_tables(store, run_id, run["dataset"])
    conv_figs = []
    if store.con.execute("SELECT count(*) FROM results WHERE run_id = ? AND turn IS NOT NULL", [run_id]).fetchone()[0]:
        from .charts import conversation_figures
        conv_figs = conversation_figures(store.results(run_id), scores)
    statuses = _statuses(store, run_id)
    comparison = None
    if compare:
        from evals.analyze.gate import compare_runs
        comparison = compare_runs(store, compare, run_id)
    worst = []
    for _, r in worst_questions(store, run_id, lead).iterrows():
        blocks = json.loads(r["blocks"])
        items = "".join(f"<li><b>[{b['n']}]</b> <span class='src'>{_esc(', '.join(b['page_ids'][:1] or b['doc_ids']))}"
                        f"</span><pre>{_esc(b['text'][:1500])}"
                        f"{_esc(cut_marker(Block.from_dict(b))) if b.get('truncated') else ''}</pre></li>"
                        for b in blocks[:5])
        gold = json.loads(r["gold"] or "[]")
        gold_pages = sorted({e.get("page_id") or e.get("doc_id") for e in json.loads(r["evidence"] or "[]")} - {None})
        on = (f"; gold evidence on <code>{_esc(', '.join(gold_pages[:5]))}</code>" if gold_pages else "")
        worst.append(f"<div class='q'><p><b>{_esc(r['strategy'])}</b> ({_esc(r['point_label'])}) "
                     f"<code>{_esc(r['question_id'])}</code>: {_esc(r['question'])}</p>"
                     f"<p>gold: <i>{_esc(gold_text(gold, r['answerable']))}</i>{on}</p>"
                     f"<p>answer: <i>{_esc(r['answer'] or '')}</i> ({_esc(lead)} "
                     f"{r['score']:.2f})</p><ol>{items}</ol></div>")
    from types import SimpleNamespace

    from evals.analyze.explore import matrix_html, question_matrix, quality_per_1k_tokens

    qdf = store.run_questions(run_id)
    qs = [SimpleNamespace(qid=r.question_id, text=r.text, answerable=known_answerability(r.answerable),
                          metadata=json.loads(r.metadata) if isinstance(r.metadata, str) and r.metadata else {})
          for r in qdf.itertuples()]
    matrix = question_matrix(scores, qs, lead) if len(scores) else pd.DataFrame()
    per_1k = pd.DataFrame()
    if len(scores):  # every quality metric the run scored (not only F1), per 1,000 prompt tokens
        parts = [quality_per_1k_tokens(scores, m, cost="prompt_tokens").rename(columns={m: "mean"}).assign(metric=m)
                 for m in QUALITY + judged if m in ok_metrics]
        if parts:
            per_1k = pd.concat(parts, ignore_index=True)[["metric", "point", "n", "mean", "prompt_tokens",
                                                          "per_1k_tokens", "low", "high"]]
    from evals.analyze.explore import paired_points, points_of

    pts = points_of(scores) if len(scores) else []
    paired = pd.DataFrame()
    if len(pts) > 1:  # every point against the first, paired on the questions both scored
        paired = _paired_with_first(scores, pts)
    from evals.analyze.judgments import judged_notes
    from evals.analyze.summary import run_notes

    header = (f"dataset <b>{_esc(printable(str(run['dataset'])))}</b>, commit {_esc(str(run['git_commit']))}, "
              f"created {_esc(str(run['created_at'])[:19])}, status {_esc(str(run['status']))}"
              + "".join(f"<br><b>Note:</b> {_esc(n)}" for n in run_notes(run, store.path)
                        + judged_notes(store, run_id, scores)))
    from evals.analyze.summary import headline_metrics, item_losses, shared_questions, with_losses

    heads = headline_metrics(store, run_id)  # code sets: function-level ranking; escalate: the escalation rate
    losses = item_losses(store, run_id) if len(scores) else pd.DataFrame()
    shared_summary = None
    if len(losses) > 1 and losses["lost"].any():  # points that lost items are also compared on shared ones
        keep = shared_questions(store, run_id)
        shared_summary = (len(keep), len(set(scores.question_id)),
                          headline_table(summarize_scores(scores[scores.question_id.isin(keep)]), heads))
    oracle = None
    if len(pts) > 1 and "f1" in ok_metrics and "prompt_tokens" in ok_metrics:
        from evals.analyze.routing import oracle_bound

        oracle = oracle_bound(scores, "f1", "prompt_tokens", 0.0)
    table, dropped = _summary_table(summ, scores, heads, judged)
    from evals.analyze.judge_health import health_lines
    from evals.analyze.summary import judge_alignment, judge_lines

    return {"run_id": run_id, "compare": compare, "header_md": header, "judged": judged, "oracle": oracle,
            "summary": with_losses(table, losses), "not_shown": dropped, "sufficiency": sufficiency,
            "alignment": judge_alignment(run, Path(store.path).parent, present),
            "judge_lines": ([fallback_note] if fallback_note else []) + judge_lines(run, Path(store.path).parent,
                                                                                     present) + health_lines(scores),
            "shared_summary": shared_summary, "pick": pick,
            "figures": figs, "conversation_figures": conv_figs, "breakdown": breakdown, "breakdowns": breakdowns,
            "statuses": statuses,
            "comparison": comparison, "matrix": matrix, "lead": lead, "matrix_html": matrix_html(matrix), "per_1k": per_1k,
            "paired": paired, "paired_against": pts[0] if pts else "",
            "worst_html": "".join(worst) or "<p>no scored questions</p>"}


def _pick_and_charts(store: ResultStore, run_id: str, summ: pd.DataFrame, lead: str, judged: list, cost: str):
    """The pick (how far to trust the best point, issue 81: its own section and its chart's hover) and the quality
    vs cost charts, one per metric with an ok score (a metric n/a for this answerer gets none)."""
    from evals.analyze.best import pick_figures

    pick = pick_figures(store, run_id, [lead] + [m for m in QUALITY if m != lead]) if len(summ) else None
    figs = [quality_cost_figure(summ, q, cost, picked=pick if pick and pick["metric"] == q else None)
            for q in ["f1"] + judged + QUALITY[1:] if not summ.empty and q in set(summ[summ.n_ok > 0].metric)]
    return pick, figs


def judge_fallback_note(judged: list[str], ok_metrics: set, lead: str) -> str:
    """A judge that scored nothing: the charts fall back to a metric with values, and the report says so (never the
    lexical scorer under the judge's name)."""
    silent = [m for m in judged if m not in ok_metrics]
    if not silent:
        return ""
    return (f"The LLM judge gave no usable value for {', '.join(silent)} (see the judge lines below); the charts lead "
            f"with {lead}" + (" (the offline lexical support scorer, not the judge)" if lead == "faithfulness" else "")
            + " instead.")


def _summary_table(summ: pd.DataFrame, scores: pd.DataFrame, heads: list[str], judged: list[str]):
    """The summary's table, its metrics in the order that fits the data, less the columns n/a on every row
    ({metric: why}, said in one line under it)."""
    from evals.analyze.summary import drop_na_columns, fits_the_data

    from evals.analyze.judge_health import with_judged_n

    heads = fits_the_data(heads + [m for m in judged if m not in heads], scores)
    table, dropped = drop_na_columns(headline_table(summ, heads))
    return with_judged_n(table, summ), dropped


def sufficiency_html(dec: pd.DataFrame, include_js: bool) -> list[str]:
    """The decomposition: a stacked bar per point (shares of the items placed) and its table."""
    import plotly.io as pio

    from evals.analyze.sufficiency import decomposition_table

    from .charts import sufficiency_figure

    return ["<h2>Why points lose: context sufficiency x answer outcome</h2>",
            "<p class='src'>Per point, each item placed by whether its packed context was sufficient (gold evidence "
            "offline, else the LLM autorater) and what the answer did: sufficient and correct or supported; "
            "sufficient but wrong (the model ignored the context); insufficient and abstained (the right call); "
            "insufficient and answered anyway (a hallucination risk). After Joren et al., ICLR 2025; "
            "docs/metrics.md.</p>",
            pio.to_html(sufficiency_figure(dec), full_html=False, include_plotlyjs=include_js,
                        div_id="sufficiency", config=PLOTLY_CONFIG),
            _table(decomposition_table(dec))]


def build_report_html(store: ResultStore, run_id: str, compare: str | None = None) -> str:
    import plotly.io as pio

    sec = report_sections(store, run_id, compare)
    parts = [f"<h1>RAG Workbench report: run {_esc(printable(run_id))}</h1>", f"<p>{sec['header_md']}</p>",
             "<h2>Summary (means with 95% bootstrap intervals over questions)</h2>",
             _table(labelled(sec["summary"]))]
    if sec["not_shown"]:  # the n/a metrics in one line, each reason once
        from evals.analyze.summary import not_shown_line

        parts.append("<p class='src'><b>Not shown</b> (no value on this set): "
                     + _esc(not_shown_line(sec["not_shown"])) + "</p>")
    parts += [f"<p class='src'>judge: {_esc(line)}</p>" for line in sec["judge_lines"]]
    if sec.get("alignment") is not None and len(sec["alignment"]):  # how far to trust each judge, as a table
        parts += ["<h3>How far to trust the judges (ragwb agreement: each on labels of what it judges)</h3>",
                  _table(sec["alignment"])]
    if "faithfulness" in sec["summary"].columns or "faithfulness" in sec["not_shown"]:
        parts.append(f"<p class='src'>{_esc(LABELS['faithfulness'])}: {_prose(support_caption())}</p>")

    if sec["shared_summary"] is not None:
        n, total, t = sec["shared_summary"]
        parts += [f"<p>Some points lost items (column <i>lost</i>: answers that failed, left out of their means), so "
                  f"the rows above average over different questions. On the {n} of {total} questions every point "
                  "answered:</p>", _table(t)]
    if sec.get("pick"):
        parts += ["<h2>The pick: how far to trust the best point</h2>"] + [
            f"<p class='pick'>{_esc(line)}</p>" for line in sec["pick"]["lines"]] + [
            "<p class='src'>In-sample: its mean on the questions that chose it (the best of many noisy means, so "
            "optimistic). Expected on new questions: the same choice made on part of the questions and scored on "
            "the rest. Confirm: the point scored on questions set aside before the grid ran (ragwb run --confirm). "
            "docs/sweeps.md, How far to trust the best point.</p>"]
    parts += ["<h2>Quality vs token cost (black ring: Pareto front; grey ring: tied with it)</h2>",
              f"<p class='src'>{_esc(PARETO_CAPTION)}</p>"]
    for i, fig in enumerate(sec["figures"]):
        parts.append(pio.to_html(fig, full_html=False, include_plotlyjs=(i == 0), div_id=f"chart{i}",
                                 config=PLOTLY_CONFIG))
        if "faithfulness" in (fig.layout.title.text or ""):
            parts.append(f"<p class='src'>{_prose(support_caption())}</p>")
    if len(sec["sufficiency"]):  # beside the quality charts: why each point loses
        parts += sufficiency_html(sec["sufficiency"], include_js=not sec["figures"])
    if sec["conversation_figures"]:
        parts.append("<h2>Conversations: prompt growth and retrieval by turn</h2>")
        for i, fig in enumerate(sec["conversation_figures"]):
            parts.append(pio.to_html(fig, full_html=False, include_plotlyjs=not sec["figures"] and i == 0
                                     and not len(sec["sufficiency"]),
                                     config=PLOTLY_CONFIG,
                                     div_id=f"conv{i}"))
    if len(sec["breakdown"]):
        parts += ["<h2>F1 by strategy, question type and language</h2>", _table(sec["breakdown"])]
    else:  # plain questions: no reference answers, so no F1 to break down; one line, never an empty table
        parts.append("<p class='src'>F1 by strategy, question type and language: none (no question of this run has "
                     "a reference answer).</p>")
    for field, t in sec["breakdowns"].items():
        parts += [f"<h2>Quality by {_esc(field)}</h2>", _table(t)]
    na = sec["statuses"].attrs.get("not_applicable") or []
    parts += ["<h2>Scores that are not ok</h2>",
              _table(sec["statuses"]) if len(sec["statuses"]) else "<p>No score failed.</p>"]
    if na:
        parts.append(f"<p class='src'>not_applicable (the metric does not apply to the item; why: the summary's "
                     f"\"Not shown\" line and each score's detail): {sum(n for _, n in na):,} score(s): "
                     + _esc(", ".join(f"{m} {n:,}" for m, n in na)) + "</p>")
    if sec["comparison"] is not None:
        cov = sec["comparison"].attrs.get("coverage", {})
        note = ((f"<p><b>{_esc(cov['index_difference'])}</b></p>" if cov.get("index_difference") else "")
                + f"<p>compared {cov.get('points_compared')} of {cov.get('candidate_points')} points (matched by "
                f"parameters) on {cov.get('questions_compared')} shared questions"
                + (f"; not compared: {_esc(', '.join(cov['candidate_only'] + cov['baseline_only']))}"
                   if cov.get("candidate_only") or cov.get("baseline_only") else "") + "</p>")
        parts += [f"<h2>Compared with run {_esc(compare)} (paired deltas)</h2>", note,
                  _table(sec["comparison"])]
    parts += ["<h2>Quality per 1,000 prompt tokens (each quality metric; 95% bootstrap interval of the ratio; "
              "n = questions)</h2>",
              _table(sec["per_1k"])]
    if sec.get("oracle") is not None:
        t, info = sec["oracle"]
        parts += ["<h2>How much could routing save at most? (the oracle bound, F1)</h2>",
                  f"<p>Per question, the cheapest point whose F1 equals the best any point reached "
                  f"({info['questions']} questions; {info['left_out']} with no ok score left out): "
                  f"{_esc(info['summary'])}. No router can beat it on this run.</p>", _table(t.round(3))]
    if len(sec["paired"]) or sec["paired"].attrs.get("unpaired"):
        from evals.analyze.explore import paired_notes

        parts += [f"<h2>Each point against {_esc(sec['paired_against'])} (paired on the questions both "
                  "scored; better / worse when the 95% interval of the delta excludes 0)</h2>",
                  _table(sec["paired"]) if len(sec["paired"]) else ""]
        parts += [f"<p class='src'>{_esc(n)}</p>" for n in paired_notes(sec["paired"])]
    parts += [
              f"<h2>Question x point matrix: {_esc(sec['lead'])} (click a header to sort)</h2>",
              "<div class='scroll'>" + sec["matrix_html"] + "</div>",
              f"<h2>Worst questions (lowest {_esc(sec['lead'])}) with their contexts</h2>", sec["worst_html"]]
    from evals.analyze.explore import SORT_JS

    # the page uses the window's width (a wide matrix scrolls inside its own box); prose stays readable
    css = ("body{font-family:system-ui,sans-serif;margin:2em}p,h1,h2{max-width:75em}.tbl{border-collapse:collapse;"
           "font-size:13px}.tbl td,.tbl th{padding:3px 8px;border-bottom:1px solid #ddd;vertical-align:top}"
           "pre{white-space:pre-wrap;background:#f6f6f6;padding:6px}.src{color:#666}"
           ".tbl th{cursor:pointer;position:sticky;top:0;background:#fff;white-space:nowrap}"
           ".tbl th[aria-sort=ascending]::after{content:' \\25B2'}.tbl th[aria-sort=descending]::after{content:' \\25BC'}"
           ".tbl td{white-space:nowrap}.tbl td.long,.matrix td.qtext{white-space:normal;min-width:16em;max-width:28em;"
           "overflow-wrap:anywhere}.scroll{overflow-x:auto;max-width:100%}")
    return (f"<!doctype html><html><head><meta charset='utf-8'><title>RAG Workbench {_esc(run_id)}</title>"
            f"<style>{css}</style></head><body>{''.join(parts)}{SORT_JS}</body></html>")


def write_report(run_id: str, db: str | Path, out_dir: str | Path = "results/reports", compare: str | None = None) -> Path:
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    with ResultStore(db, read_only=True) as st:
        text = build_report_html(st, run_id, compare)
    path = out / report_name(run_id, compare)
    write_whole(path, text.encode("utf-8"))  # whole, and never through a link planted at its name
    return path


def report_name(run_id: str, compare: str | None = None) -> str:
    """The report's file name: the run ids as written when they are plain (letters, digits, ``._-``), else their
    plain characters and a short hash of the whole id (a run id is the user's: ``../x`` or ``<img ...>`` never
    names a path elsewhere or an odd file, and two ids that differ only in odd characters never share a file)."""
    import hashlib
    import re

    def part(rid: str) -> str:
        plain = re.sub(r"[^A-Za-z0-9._-]+", "_", rid).strip("._")[:80]
        return rid if plain == rid else f"{plain or 'run'}-{hashlib.sha256(rid.encode()).hexdigest()[:10]}"

    return f"report-{part(run_id)}" + (f"-vs-{part(compare)}" if compare else "") + ".html"
