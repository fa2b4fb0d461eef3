"""Per-question views of one run (live in the workbench, stored in the report): the question x point
matrix with its filters, paired comparisons of two points inside the run, and quality per 1,000
context tokens with intervals. Input: the long per-question scores frame (strategy, point_label,
question_id, repeat, metric, value, status) that `ResultStore.scores` and
`interactive.evaluate_points` both return."""
from __future__ import annotations

import weakref
from typing import NamedTuple

import numpy as np
import pandas as pd

from evals.score.metrics import METRICS, NOT_FAILURES
from evals.stats import DEFAULT_SEED, bootstrap_means, paired_bootstrap
from rag.safeio import html_body  # one escaping rule for what pages show (issue 82)

MATRIX_METRICS = ("f1", "faithfulness", "citation_precision", "doc_ndcg@10")  # cell contents, where scored
DISAGREE_GAP = 0.5  # "strategies disagree": the best and worst point differ by at least this on the metric


def point_name(strategy: str, label: str) -> str:
    return f"{strategy} · {label}"


class _Codes(NamedTuple):
    """A long scores frame's columns as integer codes (found once per frame, see ``_frame_codes``)."""
    metric: np.ndarray  # metric code per row
    metrics: dict  # metric -> its code
    question: np.ndarray  # question code per row, codes in sorted question_id order
    qids: np.ndarray  # question_id per code
    point: np.ndarray  # point code per row, codes in point-name order
    names: np.ndarray  # point name per code
    value: np.ndarray
    ok: np.ndarray  # status ok and a value


_CODES: dict[int, tuple] = {}  # id(frame) -> (weak reference to it, its length, _Codes)


def _frame_codes(scores: pd.DataFrame) -> _Codes:
    """The frame's codes, kept while the frame lives: the matrix, the paired comparison and the
    per-1k view all read the same ~100,000-row frame after an Apply, and factorizing its string
    columns costs ~3.5 ms a column each time."""
    got = _CODES.get(id(scores))
    if got is not None and got[0]() is scores and got[1] == len(scores):
        return got[2]
    mc, mu = pd.factorize(scores.metric)
    qc, qids = pd.factorize(scores.question_id, sort=True)
    sc, su = pd.factorize(scores.strategy)
    lc, lu = pd.factorize(scores.point_label)
    nl = max(1, len(lu))
    pairs, pc = np.unique(sc.astype(np.int64) * nl + lc, return_inverse=True)
    names = np.asarray([point_name(su[i // nl], lu[i % nl]) for i in pairs], dtype=object)
    by_name = np.argsort(names, kind="stable")
    rank = np.empty(len(names), dtype=np.int64)
    rank[by_name] = np.arange(len(names))
    v = scores.value.to_numpy(np.float64, na_value=np.nan)
    codes = _Codes(mc, {m: i for i, m in enumerate(mu)}, qc, np.asarray(qids, dtype=object),
                   rank[pc.ravel()], names[by_name], v, (scores.status.to_numpy(object) == "ok") & ~np.isnan(v))
    key = id(scores)
    _CODES[key] = (weakref.ref(scores, lambda _r: _CODES.pop(key, None)), len(scores), codes)
    return codes


def pick_point(pts: list[str], x: str, run_id: str = "") -> str:
    """A point by its full name ('strategy · label') or by a strategy with one point in the run."""
    if x in pts:
        return x
    hits = [p for p in pts if p.startswith(x + " · ") or p.split(" · ")[0] == x]
    if len(hits) == 1:
        return hits[0]
    raise ValueError(f"point {x!r} is {'ambiguous' if hits else 'not in run ' + run_id}; points: {'; '.join(pts)}")


def points_of(scores: pd.DataFrame) -> list[str]:
    from .summary import natural_key

    return sorted(_frame_codes(scores).names, key=natural_key) if len(scores) else []


def _wide(scores: pd.DataFrame, metric: str) -> pd.DataFrame:
    """question_id x point -> mean over repeats of ok values (NaN where not ok)."""
    return _wides(scores, [metric])[metric]


def _wides(scores: pd.DataFrame, metrics: list[str], points: set[str] | None = None) -> dict[str, pd.DataFrame]:
    """``_wide`` of each metric (of only ``points``, when given), from the frame's codes. Index: the
    questions with a row of the metric (sorted); columns: the points with one (sorted by name)."""
    out = {m: pd.DataFrame() for m in metrics}
    if scores.empty:
        return out
    c = _frame_codes(scores)
    mine = None if points is None else np.isin(c.point, [i for i, n in enumerate(c.names) if n in points])
    # sums in numpy: pivot_table / groupby over string columns cost 20-30 ms per call here
    for m in metrics:
        if m not in c.metrics:
            continue
        rows = c.metric == c.metrics[m]
        if mine is not None:
            rows &= mine
        if not rows.any():
            continue
        qs, qi = np.unique(c.question[rows], return_inverse=True)
        ps, pi = np.unique(c.point[rows], return_inverse=True)
        keep = c.ok[rows]
        qi, pi = qi.ravel()[keep], pi.ravel()[keep]
        total = np.zeros((len(qs), len(ps)))
        count = np.zeros((len(qs), len(ps)))
        np.add.at(total, (qi, pi), c.value[rows][keep])
        np.add.at(count, (qi, pi), 1.0)
        with np.errstate(invalid="ignore", divide="ignore"):
            mean = np.where(count > 0, total / count, np.nan)
        out[m] = pd.DataFrame(mean, index=pd.Index(c.qids[qs], name="question_id"),
                              columns=pd.Index(c.names[ps], name="point"))
    return out


def question_matrix(scores: pd.DataFrame, questions: list, metric: str = "f1") -> pd.DataFrame:
    """One row per question, one numeric column per point (``metric``, mean over repeats), plus
    question, answerable, any metadata fields, ``spread`` (best - worst point), ``disagree`` and
    ``failures`` (items of the question whose status is a failure: error, timeout, parse_error, ...)."""
    if scores.empty:
        return pd.DataFrame()
    wide = _wide(scores, metric)
    pts = points_of(scores)
    wide = wide.reindex(columns=pts) if not wide.empty else pd.DataFrame(columns=pts)
    by_id = {q.qid: q for q in questions}
    scored = set(scores.question_id.unique())
    qids = list(dict.fromkeys([q.qid for q in questions if q.qid in scored] + sorted(scored - set(by_id))))
    wide = wide.reindex(qids)
    fails = scores[~scores.status.isin(("ok",) + tuple(NOT_FAILURES))].groupby("question_id").size()
    out = pd.DataFrame({"question_id": qids,
                        "question": [by_id[q].text if q in by_id else "" for q in qids],
                        # unknown answerability (no 'answers' in the gold line) is "unknown", never False
                        "answerable": [_answerable_cell(by_id[q].answerable) if q in by_id else True for q in qids]})
    meta_keys = sorted({k for q in by_id.values() if q.qid in scored for k in (q.metadata or {})})
    for k in meta_keys:
        out[k] = [str((by_id[q].metadata or {}).get(k, "")) if q in by_id else "" for q in qids]
    vals = wide.to_numpy(dtype=float) if len(pts) else np.zeros((len(qids), 0))
    # a spread needs two scored points: a row with fewer has none (NaN, shown blank), never a spread of 0.000
    spread = np.full(len(qids), np.nan)
    some = (~np.isnan(vals)).sum(axis=1) >= 2 if vals.shape[1] else np.zeros(len(qids), bool)
    if some.any():
        spread[some] = np.nanmax(vals[some], axis=1) - np.nanmin(vals[some], axis=1)
    out["spread"] = spread.round(3)
    out["disagree"] = np.nan_to_num(spread, nan=0.0) >= DISAGREE_GAP
    out["failures"] = fails.reindex(qids, fill_value=0).to_numpy(np.int64) if len(fails) else 0
    for p in pts:
        out[p] = wide[p].to_numpy(dtype=float).round(3)
    out.attrs.update(metric=metric, points=pts, meta_fields=meta_keys)
    return out


def _answerable_cell(v):
    from rag.models import known_answerability

    known = known_answerability(v)  # None, NaN and pandas' NA are unknown alike
    return "unknown" if known is None else known


def filter_matrix(m: pd.DataFrame, disagree: bool = False, failures: bool = False, unanswerable: bool = False,
                  field: str | None = None, value: str | None = None, search: str = "",
                  worse: tuple[str, str] | None = None) -> pd.DataFrame:
    """The rows of a question matrix that pass every filter asked for. ``worse=(A, B)``: the questions
    where point B scored below point A (both scored)."""
    if m.empty:
        return m
    keep = pd.Series(True, index=m.index)
    if worse and all(worse) and worse[0] != worse[1]:
        a, b = worse
        if a not in m.columns or b not in m.columns:
            raise ValueError(f"'B worse than A' needs two points of the matrix; got {a!r} and {b!r}")
        keep &= m[b] < m[a]  # NaN (not scored) compares False: only questions both scored
    if disagree:
        keep &= m["disagree"]
    if failures:
        keep &= m["failures"] > 0
    if unanswerable:
        keep &= m["answerable"].map(lambda v: v is False or v is np.False_).astype(bool)
    if field and value not in (None, ""):
        if field not in m.columns:
            raise ValueError(f"unknown field {field!r}; valid: {', '.join(m.attrs.get('meta_fields', []))}")
        keep &= m[field].astype(str) == str(value)
    if search:
        keep &= m["question"].str.contains(search, case=False, regex=False) | m["question_id"].str.contains(
            search, case=False, regex=False)
    out = m[keep].reset_index(drop=True)  # row i is the i-th row shown: a table's row ids are positions
    out.attrs.update(m.attrs)
    return out


def drilldown_choice(matrix: pd.DataFrame, points: list[str], cell=None, previous: dict | None = None) -> dict:
    """What the drill-down shows: {"q": question id, "a": point, "b": point or "(none)"}. A clicked cell
    wins; else the question and points shown before an Apply stay, each side moved to its own strategy's
    new point (an Apply changes labels, never the strategy a side shows); else the first row and point."""
    prev = previous or {}
    qids = list(matrix["question_id"]) if len(matrix) else []
    q = clicked_question(matrix, cell) if cell is not None else None
    if q not in qids:
        q = prev.get("q") if prev.get("q") in qids else (qids[0] if qids else None)

    def same_strategy(p):
        if p in points or not p:
            return p if p in points else None
        strat = str(p).split(" · ", 1)[0]
        return next((x for x in points if x.split(" · ", 1)[0] == strat), None)

    col = getattr(cell, "column", None)
    a = col if col in points else (same_strategy(prev.get("a")) or (points[0] if points else None))
    b = same_strategy(prev.get("b")) if prev.get("b") not in (None, "(none)") else None
    return {"q": q, "a": a, "b": b if b and b != a else "(none)"}


def clicked_question(matrix: pd.DataFrame, cell) -> str | None:
    """The question id of a clicked matrix cell (marimo's TableCell: ``row`` is the position of the row in
    the frame given to the table, whatever the table's own sorting or paging), or None."""
    row = getattr(cell, "row", None)
    try:
        return str(matrix["question_id"].iloc[int(row)]) if row is not None and len(matrix) else None
    except (IndexError, ValueError, TypeError):
        return None


def paired_points(scores: pd.DataFrame, a: str, b: str, metrics: list[str] | None = None,
                  seed: int = DEFAULT_SEED, n_resamples: int = 2000, first: str | None = None) -> pd.DataFrame:
    """Point ``b`` against point ``a`` (names from ``points_of``) over the questions both scored ok,
    per metric: n, mean of each, the paired bootstrap delta (b - a) with its 95% interval, and a
    verdict: better / worse when the interval excludes 0 (in the metric's direction), else tie."""
    rows, unpaired = [], []
    names = sorted(_frame_codes(scores).metrics) if metrics is None and len(scores) else (metrics or [])
    wides = _wides(scores, names, {a, b})
    for metric in names:
        w = wides[metric]
        if w.empty or a not in w.columns or b not in w.columns:
            continue
        va = w[a].to_numpy(np.float64)
        vb = w[b].to_numpy(np.float64)
        both = ~(np.isnan(va) | np.isnan(vb))  # the questions both scored ok (arrays: ~25 metrics per call)
        if not both.any():  # one line under the table names them all (never a row of n=0 per metric)
            unpaired.append(metric)
            continue
        r = paired_bootstrap(va[both], vb[both], n_resamples, seed=seed)
        higher = getattr(METRICS.get(metric), "higher_is_better", True)
        if r["low"] > 0 or r["high"] < 0:
            up = r["low"] > 0
            verdict = "better" if up == higher else "worse"
        else:
            verdict = "tie"
        rows.append({"metric": metric, "n": r["n"], "a": round(r["baseline"], 3), "b": round(r["candidate"], 3),
                     "delta": round(r["delta"], 3), "low": round(r["low"], 3), "high": round(r["high"], 3),
                     "verdict": verdict})
    if first:  # the chosen quality metric first, then the headline metrics, then the rest (not alphabetical)
        from .summary import HEADLINE

        rank = {m: i for i, m in enumerate([first] + [h for h in HEADLINE if h != first])}
        rows.sort(key=lambda r: (rank.get(r["metric"], len(rank)), r["metric"]))
    out = pd.DataFrame(rows, columns=["metric", "n", "a", "b", "delta", "low", "high", "verdict"])
    out.attrs.update(a=a, b=b, unpaired=unpaired)
    return out


SMALL_N = 10  # fewer paired questions than this: an interval is said to be rough


def paired_notes(t: pd.DataFrame) -> list[str]:
    """What a paired table leaves out or cannot promise, one line each: the metrics no question scored on both
    points (never n=0 rows), and a word of warning where the intervals rest on few questions."""
    notes = []
    if t.attrs.get("unpaired"):
        notes.append("no paired questions (no question scored ok on both points): " + ", ".join(t.attrs["unpaired"]))
    small = t[t["n"] < SMALL_N] if len(t) else t
    if len(small):
        notes.append(f"few questions: {len(small)} row(s) rest on n = {int(small['n'].min())}"
                     + (f" to {int(small['n'].max())}" if small["n"].max() != small["n"].min() else "")
                     + f" (under {SMALL_N}); their 95% intervals are rough, and a verdict other than tie needs a large, "
                     "consistent difference: add questions before trusting it")
    return notes


def quality_per_1k_tokens(scores: pd.DataFrame, metric: str = "f1", seed: int = DEFAULT_SEED,
                          n_resamples: int = 1000, cost: str = "context_tokens") -> pd.DataFrame:
    """Per point: mean ``metric``, mean context tokens, and quality per 1,000 context tokens
    (1000 x mean quality / mean tokens) with a 95% bootstrap interval over questions (both means
    resampled together, so the interval is of the ratio). ``cost``: context_tokens (default) or
    prompt_tokens (what an LLM call is billed for)."""
    wides = _wides(scores, [metric, cost])
    q, t = wides[metric], wides[cost]
    rows = []
    for p in points_of(scores):
        if q.empty or t.empty or p not in q.columns or p not in t.columns:
            continue
        pair = pd.concat([q[p], t[p]], axis=1, keys=["q", "t"]).dropna()
        if pair.empty or pair.t.mean() <= 0:
            rows.append({"point": p, "n": len(pair), metric: np.nan, cost: np.nan,
                         "per_1k_tokens": np.nan, "low": np.nan, "high": np.nan})
            continue
        qa, ta = pair.q.to_numpy(float), pair.t.to_numpy(float)
        # both means over the same resamples (the seeded draws of every bootstrap here, as counts)
        with np.errstate(all="ignore"):
            ratios = 1000 * bootstrap_means(qa, n_resamples, seed) / bootstrap_means(ta, n_resamples, seed)
        ratios = ratios[np.isfinite(ratios)]
        est = 1000 * qa.mean() / ta.mean()
        rows.append({"point": p, "n": len(pair), metric: round(float(qa.mean()), 3),
                     cost: round(float(ta.mean()), 1), "per_1k_tokens": round(float(est), 4),
                     "low": round(float(np.quantile(ratios, 0.025)), 4) if len(ratios) else np.nan,
                     "high": round(float(np.quantile(ratios, 0.975)), 4) if len(ratios) else np.nan})
    return pd.DataFrame(rows, columns=["point", "n", metric, cost, "per_1k_tokens", "low", "high"])


def cell_colour(v: float) -> str:
    if v is None or not np.isfinite(v):
        return "#eee"
    # red (0) -> yellow (0.5) -> green (1), light enough for black text
    r = 255 if v < 0.5 else int(255 - (v - 0.5) * 2 * 120)
    g = int(150 + min(v, 0.5) * 2 * 105)
    return f"rgb({r},{g},150)"


def matrix_html(m: pd.DataFrame, max_rows: int = 500, table_id: str = "qmatrix") -> str:
    """The matrix as a self-contained sortable HTML table (click a header to sort; no network):
    colour-coded cells, the question text escaped."""
    if m.empty:
        return "<p>no scored questions</p>"
    pts = m.attrs.get("points", [])
    # the points right after the question (at 1440 px every point column is on screen), metadata after them
    cols = ["question_id", "question"] + pts + ["spread", "failures", "answerable"] + m.attrs.get("meta_fields", [])
    head = "".join(f"<th onclick=\"rwbSort('{table_id}',{i})\" title='click to sort'>{html_body(c)}</th>"
                   for i, c in enumerate(cols))
    body = []
    for _, r in m.head(max_rows).iterrows():
        cells = []
        for c in cols:
            v = r[c]
            if c in pts:
                txt = "" if pd.isna(v) else f"{v:.3f}"
                cells.append(f"<td data-v='{'' if pd.isna(v) else v}' style='background:{cell_colour(v)}'>{txt}</td>")
            elif c == "question":
                text = str(v)
                cells.append(f"<td class='qtext' title='{html_body(text)}'>{html_body(text[:90])}"
                             f"{'…' if len(text) > 90 else ''}</td>")
            else:
                val = ("" if v != v else f"{v:.3f}") if isinstance(v, float) else str(v)
                cells.append(f"<td data-v='{html_body(val)}'>{html_body(val)}</td>")
        body.append("<tr>" + "".join(cells) + "</tr>")
    more = f"<p>{len(m) - max_rows} more questions not shown (export the run for all)</p>" if len(m) > max_rows else ""
    return (f"<p>{html_body(m.attrs.get('metric', ''))} per question and point (mean over repeats; blank = not "
            f"scored ok); {len(m)} questions; a row is marked <i>disagree</i> when its spread is at least "
            f"{DISAGREE_GAP}.</p><table class='tbl matrix' id='{table_id}'><thead><tr>{head}</tr></thead><tbody>"
            + "".join(body) + "</tbody></table>" + more + SORT_JS)


SORT_JS = r"""<script>
function rwbSort(id, col) {
  const t = document.getElementById(id), tb = t.tBodies[0], rows = Array.from(tb.rows);
  const asc = t.dataset.col == col ? t.dataset.dir != 'asc' : true;
  t.dataset.col = col; t.dataset.dir = asc ? 'asc' : 'desc';
  // the header shows the direction (a marker drawn by CSS from aria-sort), every other header none
  Array.from(t.tHead.rows[0].cells).forEach((th, i) =>
    i == col ? th.setAttribute('aria-sort', asc ? 'ascending' : 'descending') : th.removeAttribute('aria-sort'));
  // a column sorts as numbers only when every non-empty cell is a number literal: hex ids such as
  // "0e77..." or "5e65..." are text (parseFloat would read them as 0 and Infinity)
  const raw = r => { const c = r.cells[col]; return (c.dataset.v ?? c.textContent).trim(); };
  const NUM = /^[-+]?(\d+\.?\d*|\.\d+)([eE][-+]?\d+)?$/;
  const vals = rows.map(raw), numeric = vals.every(v => v === '' || NUM.test(v));
  const key = v => numeric ? (v === '' ? -Infinity : Number(v)) : v.toLowerCase();
  const idx = rows.map((r, i) => [key(vals[i]), i]);
  idx.sort((p, q) => { const x = p[0], y = q[0];
    return ((x < y ? -1 : x > y ? 1 : 0) * (asc ? 1 : -1)) || (p[1] - q[1]); });
  idx.forEach(([, i]) => tb.appendChild(rows[i]));
}
</script>"""
