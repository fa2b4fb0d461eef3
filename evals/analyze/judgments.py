"""Pooled relevance judgments: the pool a run retrieved, grades from people and LLMs, and the judged
metrics, agreement and prediction-powered estimates computed from them (docs/judgments.md).

Judgments are keyed by content, not by ids: a question by its normalised text, a passage by its normalised
text. A re-chunked corpus or a later run that shows the same passage for the same question reuses the grade.
They are read when a run is shown, reported or gated and never written into a run's scores: a stored run is
history, and judgments added later apply to it as to every other run.

Scale (UMBRELA; Upadhyay et al. 2024): 0 = not relevant, 1 = related, 2 = partly answers, 3 = answers.
"""
from __future__ import annotations

import csv
import functools
import hashlib
import json
import math
import re
import unicodedata
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd

from evals.csvout import FORMULA_START, escape_cell, unescape_cell, write_csv  # noqa: F401 (one CSV writer)

GRADES = (0, 1, 2, 3)
RELEVANT = 2  # judged_recall and judged_precision count a passage as relevant from this grade up
DEFAULT_DEPTH = 10
LOW_JUDGED = 0.8  # a point whose mean judged@10 is below this is flagged: its judged metrics understate it
POOL_COLUMNS = ["question_id", "question", "doc", "page", "passage_key", "text", "grade", "retrieved_by"]
MAX_POOL_FILE_BYTES = 200_000_000  # 200 MB, decimal as the message says
JUDGED_METRICS = ("judged_ndcg@10", "judged_recall@10", "judged_precision@5", "judged@10")


def _norm(text: str) -> str:
    return re.sub(r"\s+", " ", unicodedata.normalize("NFKC", text or "")).strip()


def question_key(text: str) -> str:
    """A question by its text (case and spacing folded): the same question in another run or set reuses grades."""
    return hashlib.sha256(("q\0" + _norm(text).casefold()).encode()).hexdigest()[:16]


@functools.lru_cache(maxsize=262_144)  # the same passage is shown by many points and questions
def passage_key(text: str) -> str:
    """A passage by its text (spacing folded): not by chunk id, so a re-chunked corpus reuses what still matches."""
    return hashlib.sha256(("p\0" + _norm(text)).encode()).hexdigest()[:16]


# --------------------------------------------------------------------------- the pool

@dataclass
class Pool:
    rows: pd.DataFrame  # one row per distinct (question, passage): POOL_COLUMNS + question_key, best_rank, block
    depth: int
    points: int
    items: int


def _gold(store, run_id: str) -> pd.DataFrame:
    with store.session() as con:
        g = con.execute("SELECT question_id, text FROM run_gold WHERE run_id = ?", [run_id]).df()
    return g.drop_duplicates("question_id")


def build_pool(store, run_id: str, depth: int = DEFAULT_DEPTH) -> Pool:
    """The union, over every point of the run, of the top ``depth`` blocks per question (TREC pooling)."""
    if depth < 1:
        raise ValueError(f"--depth must be >= 1, got {depth}")
    with store.session() as con:
        res = con.execute("SELECT strategy, point_label, question_id, blocks FROM results WHERE run_id = ? "
                          "AND repeat = 0", [run_id]).df()
    if res.empty:
        raise ValueError(f"run {run_id} has no stored items to pool")
    g = _gold(store, run_id)
    qtext = dict(zip(g.question_id, g.text))
    seen: dict[tuple, dict] = {}
    for strategy, label, qid, blocks in res.itertuples(index=False):
        point = f"{strategy} · {label}"
        for b in sorted(json.loads(blocks or "[]"), key=lambda b: b["n"])[:depth]:
            pk = passage_key(b["text"])
            row = seen.get((qid, pk))
            if row is None:
                row = seen[(qid, pk)] = {
                    "question_id": qid, "question": qtext.get(qid, ""), "doc": ";".join(b.get("doc_ids") or []),
                    "page": ";".join(str(p) for p in b.get("page_ids") or []), "passage_key": pk,
                    "text": b["text"], "grade": "", "by": {}, "best_rank": b["n"], "block": b}
            row["by"].setdefault(point, b["n"])
            row["best_rank"] = min(row["best_rank"], b["n"])
    rows = []
    for row in seen.values():
        by = row.pop("by")
        row["retrieved_by"] = "; ".join(f"{p}@{r}" for p, r in sorted(by.items(), key=lambda x: (x[1], x[0])))
        rows.append(row)
    df = pd.DataFrame(rows, columns=POOL_COLUMNS + ["best_rank", "block"])
    df["question_key"] = [question_key(q) for q in df.question]
    df = df.sort_values(["question_id", "best_rank", "passage_key"], kind="stable").reset_index(drop=True)
    return Pool(df, depth, res[["strategy", "point_label"]].drop_duplicates().shape[0], len(res))


def write_pool(pool: Pool, judged: pd.DataFrame, out: str | Path, include_judged: bool = False) -> dict:
    """The CSV a person grades. Pairs someone already judged are left out (``include_judged``: kept, their
    grades in a ``judged`` column), so a person labels only what is new."""
    df = pool.rows.copy()
    known = judged[judged.status == "ok"] if len(judged) else judged
    marks: dict[tuple, list] = defaultdict(list)
    for qk, pk, judge, grade in (known[["question_key", "passage_key", "judge", "grade"]].itertuples(index=False)
                                 if len(known) else ()):
        marks[(qk, pk)].append(f"{judge}={int(grade)}")
    df["judged"] = ["; ".join(marks.get((qk, pk), [])) for qk, pk in zip(df.question_key, df.passage_key)]
    already = df.judged != ""
    if not include_judged:
        df = df[~already]
    cols = POOL_COLUMNS + (["judged"] if include_judged else [])
    Path(out).parent.mkdir(parents=True, exist_ok=True)
    # every text cell is hostile (corpus text, question ids, pages): never a formula (evals/csvout.py)
    write_csv(df[cols], out, quoting=csv.QUOTE_NONNUMERIC)
    return {"rows": len(df), "already_judged": int(already.sum()), "questions": int(df.question_id.nunique())}


# --------------------------------------------------------------------------- importing grades

@dataclass
class ImportPlan:
    rows: list[dict] = field(default_factory=list)  # what will be stored, one per (question, passage, judge)
    errors: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    ungraded: int = 0


def _grade(v) -> int | None | str:
    s = str(v).strip()
    if s == "" or s.lower() == "nan":
        return None
    try:
        f = float(s)
    except ValueError:
        return f"grade {s!r} is not a number 0-3"
    if f not in GRADES:
        return f"grade {s} is outside 0-3 (0 not relevant, 1 related, 2 partly answers, 3 answers)"
    return int(f)


def read_pool_file(path: str | Path, pool: Pool, judge_name: str | None = None) -> ImportPlan:
    """Check every row of a graded pool file against the run's pool; nothing is stored unless all rows pass.
    One line per problem: unknown question ids or passage keys, grades outside 0-3, an edited text."""
    p = Path(path)
    if not p.is_file():
        raise FileNotFoundError(f"{p}: no such pool file")
    if p.stat().st_size > MAX_POOL_FILE_BYTES:
        raise ValueError(f"{p}: {p.stat().st_size / 1e6:,.1f} MB is over the {MAX_POOL_FILE_BYTES / 1e6:g} MB cap "
                         "of a pool file")
    raw = p.read_bytes()
    try:  # UTF-8 (with or without a BOM) as exported; a spreadsheet's cp1252 save is read as cp1252, said
        text, encoding = raw.decode("utf-8-sig"), "utf-8"
    except UnicodeDecodeError as e:
        try:
            text, encoding = raw.decode("cp1252"), "cp1252"
        except UnicodeDecodeError:
            raise ValueError(f"{p}: neither UTF-8 nor cp1252 text (byte {e.start}: {raw[e.start:e.start + 1]!r}); "
                             "save it as CSV UTF-8") from None
    sep = sniff_delimiter(text)
    try:
        import io

        df = pd.read_csv(io.StringIO(text), dtype=str, keep_default_na=False, sep=sep)
    except (pd.errors.ParserError, pd.errors.EmptyDataError) as e:
        raise ValueError(f"{p}: not a readable CSV pool file ({type(e).__name__}: {str(e)[:200]})") from None
    need = {"question_id", "passage_key", "grade"}
    missing = sorted(need - set(df.columns))
    if missing:
        raise ValueError(f"{p}: missing column(s) {', '.join(missing)}; a pool file has {', '.join(POOL_COLUMNS)} "
                         "(write one with `ragwb judge RUN --export pool.csv`)")
    if "judge" not in df.columns and not judge_name:
        raise ValueError(f"{p}: who judged? add a 'judge' column or pass --judge-name NAME (stored as human:NAME)")
    known = {(q, k): t for q, k, t in pool.rows[["question_id", "passage_key", "text"]].itertuples(index=False)}
    qids = set(pool.rows.question_id)
    qtext = dict(zip(pool.rows.question_id, pool.rows.question))
    plan = ImportPlan()
    if encoding != "utf-8" or sep != ",":
        plan.notes.append(f"{p.name}: read as {encoding}, columns separated by {sep!r} (a spreadsheet's save)")
    edited = 0
    chosen: dict[tuple, tuple[int, dict]] = {}
    for i, r in enumerate(df.to_dict("records"), start=2):  # line 1 is the header
        where = f"{p.name} line {i}"
        # the id byte for byte as exported (" q7" and "q8 " are ids too: issue 73); a spreadsheet that trimmed or
        # padded it is matched by its trimmed form only where that names one id, and said
        qid, pk = unescape_cell(r["question_id"]), r["passage_key"].strip()
        if qid not in qids:
            near = [x for x in qids if x.strip() == qid.strip()]
            if len(near) == 1:
                plan.notes.append(f"{where}: question_id {qid!r} read as {near[0]!r} (they differ only in spaces)")
                qid = near[0]
        if qid not in qids:
            plan.errors.append(f"{where}: unknown question_id {qid!r} (not in this run's pool)")
            continue
        if (qid, pk) not in known:
            plan.errors.append(f"{where}: unknown passage_key {pk!r} for question {qid!r} (not in this run's pool)")
            continue
        if "text" in r and _norm(unescape_cell(r["text"])) != _norm(known[(qid, pk)]):
            # the passage_key is the hash of the text shown: the grade is keyed by it, whatever a spreadsheet did
            # to the cell (evaluated a formula, trimmed it); counted and said, never a refusal
            edited += 1
        g = _grade(r["grade"])
        if isinstance(g, str):
            plan.errors.append(f"{where}: {g}")
            continue
        if g is None:
            plan.ungraded += 1
            continue
        raw_judge = (r.get("judge") or "").strip() or judge_name
        if not raw_judge:
            plan.errors.append(f"{where}: empty judge and no --judge-name")
            continue
        judge = raw_judge if ":" in raw_judge else f"human:{raw_judge}"
        # keyed as the store keys a grade (question text, passage, judge): two rows that fold to one key (an id
        # with a tab or CR, two ids of one question text) are one grade, never two silently replaced
        key = (question_key(qtext[qid]), pk, judge)
        row = {"question_key": key[0], "passage_key": pk, "judge": judge, "grade": g,
               "question_id": qid, "question": qtext[qid], "text": known[(qid, pk)], "status": "ok", "detail": ""}
        if key in chosen:
            was_line, was = chosen[key]
            if was["grade"] != g:
                plan.errors.append(f"{where}: {judge} grades passage {pk} of {qid} {g}, but line {was_line} grades "
                                   f"the same pair {was['grade']} (rows that name one pair, ids compared without "
                                   "surrounding spaces, tabs or CRs): keep one of them")
            else:
                plan.notes.append(f"{where}: the same grade as line {was_line} for the same pair: stored once")
            continue
        chosen[key] = (i, row)
    plan.rows = [row for _, row in chosen.values()]
    if edited:
        plan.notes.append(f"{p.name}: {edited} row(s) whose text cell differs from the passage exported (a "
                          "spreadsheet may have changed it); graded by passage_key, the passage as exported")
    return plan




def sniff_delimiter(text: str) -> str:
    """',' as exported, or the ';' or tab a European spreadsheet saves with (read from the header line)."""
    head = text.split("\n", 1)[0]
    counts = {d: head.count(d) for d in (",", ";", "\t")}
    best = max(counts, key=counts.get)
    return best if counts[best] and ("question_id" in head) else ","


# --------------------------------------------------------------------------- grades for metrics

def effective_grades(judged: pd.DataFrame, source: str = "auto") -> dict[tuple[str, str], int]:
    """(question_key, passage_key) -> the grade metrics use. ``auto``: a person's grade where one exists
    (several people: their mean, rounded half up), else the LLM's (several: their mean); ``human``/``llm``:
    only that kind; any other value: one judge by name."""
    if judged is None or judged.empty:
        return {}
    ok = judged[judged.status == "ok"]
    kind = ok.judge.str.split(":").str[0]
    if source == "human":
        ok = ok[kind != "llm"]
    elif source == "llm":
        ok = ok[kind == "llm"]
    elif source != "auto":
        ok = ok[ok.judge == source]
        if ok.empty and not (judged.judge == source).any():
            raise ValueError(f"no judgments by {source!r}; judges: {', '.join(sorted(set(judged.judge)))}")
    if ok.empty:
        return {}
    ok = ok.assign(kind=np.where(ok.judge.str.startswith("llm:"), 1, 0))
    if source == "auto":  # people first: a pair a person graded ignores the LLM's grade
        best = ok.groupby(["question_key", "passage_key"]).kind.transform("min")
        ok = ok[ok.kind == best]
    m = ok.groupby(["question_key", "passage_key"]).grade.mean()
    return {k: int(math.floor(v + 0.5)) for k, v in m.items()}


RANKED_KEYS = 10  # the distinct passages an item's judged metrics read (judged@10, nDCG@10; P@5 within them)


def ranked_passage_keys(texts) -> str:
    """An item's distinct passage keys in block order, the first ``RANKED_KEYS``, comma-joined: what its judged
    metrics read. Stored with the item when it is written (``results.passage_keys``), so reading a run's judged
    metrics is a lookup, not a JSON parse and a hash of every passage (the gate at 50,000 items)."""
    seen, out = set(), []
    for t in texts:
        pk = passage_key(t)
        if pk not in seen:  # the same passage twice in one context counts once
            seen.add(pk)
            out.append(pk)
            if len(out) == RANKED_KEYS:
                break
    return ",".join(out)


_DISCOUNT = tuple(1 / math.log2(i + 2) for i in range(RANKED_KEYS))  # nDCG's discount of rank i + 1


@functools.lru_cache(maxsize=65536)  # one per question's grades, not one sum per item
def _idcg(ideal: tuple) -> float:
    return sum(g * d for g, d in zip(ideal, _DISCOUNT))


def judged_item_scores(blocks: list[dict] | str, grades: dict, qk: str, rel_total: int, ideal: list[int],
                       any_judged: bool) -> dict[str, tuple]:
    """(value, status, detail) of each judged metric for one item (``blocks``: the item's blocks, or its stored
    ``ranked_passage_keys``). Unjudged passages count as not relevant (as trec_eval does), which is why judged@10 is
    always shown beside them."""
    if not any_judged:
        why = "no judgments for this question"
        return {m: (None, "not_applicable", why) for m in JUDGED_METRICS}
    keys = blocks if isinstance(blocks, str) else ranked_passage_keys(
        b["text"] for b in sorted(blocks, key=lambda b: b["n"]))
    get = grades.get
    ranked = [get((qk, pk)) for pk in keys.split(",")] if keys else []
    top10, top5 = ranked[:10], ranked[:5]
    out = {}
    if not top10:
        out["judged@10"] = (None, "not_applicable", "no blocks retrieved")
    else:
        out["judged@10"] = (sum(g is not None for g in top10) / len(top10), "ok", "")
    dcg = sum((g or 0) * d for g, d in zip(top10, _DISCOUNT))
    idcg = _idcg(tuple(ideal[:10]))
    out["judged_ndcg@10"] = (dcg / idcg, "ok", "") if idcg > 0 else (
        None, "not_applicable", "no passage of this question judged above 0")
    hits10 = sum((g or 0) >= RELEVANT for g in top10)
    out["judged_recall@10"] = (hits10 / rel_total, "ok", "") if rel_total else (
        None, "not_applicable", f"no passage graded {RELEVANT} or higher")
    out["judged_precision@5"] = (sum((g or 0) >= RELEVANT for g in top5) / 5, "ok", "")
    return out


def judged_scores(store, run_id: str, source: str = "auto") -> pd.DataFrame:
    """The judged metrics of every item of a run, in the scores table's shape (empty when no question of the
    run has a judgment). Computed on read from the judgments as they are now."""
    gold = _gold(store, run_id)
    qkeys = {qid: question_key(t) for qid, t in gold.itertuples(index=False)}
    judged = store.judgments(set(qkeys.values()))
    grades = effective_grades(judged, source)
    cols = ["run_id", "strategy", "point_id", "question_id", "repeat", "metric", "value", "status", "detail"]
    if not grades:
        return pd.DataFrame(columns=cols)
    with store.session() as con:
        # an item's stored passage keys where it has them (written since they were kept), else its blocks
        res = con.execute("SELECT strategy, point_id, question_id, repeat, passage_keys, "
                          "CASE WHEN passage_keys IS NULL THEN blocks END AS blocks FROM results WHERE run_id = ?",
                          [run_id]).df()
    # plain lists, not itertuples over Arrow-backed columns (element access cost seconds at 50,000 items); an item
    # written before keys were kept has its blocks instead
    keys = [k if isinstance(k, str) else ranked_passage_keys(b["text"] for b in sorted(json.loads(bl or "[]"),
                                                                                      key=lambda b: b["n"]))
            for k, bl in zip(res.passage_keys.tolist(), res.blocks.tolist())]
    return judged_frame(run_id, res.strategy.tolist(), res.point_id.tolist(), res.question_id.tolist(),
                        res["repeat"].tolist(), keys, qkeys, grades)


def judged_frame(run_id: str, strategies: list, points: list, qids: list, reps: list, keys: list[str],
                 qkeys: dict[str, str], grades: dict) -> pd.DataFrame:
    """``judged_rows`` of a stored run's items (their ranked passage keys), computed column-wise: the same
    values, statuses and details in the same order (tests/test_judgments.py holds them equal), a grade lookup
    per passage and numpy for the rest (the row loop was ~1 s of the gate's read at 50,000 items)."""
    per_q: dict[str, list[int]] = defaultdict(list)
    for (qk, _), g in grades.items():
        per_q[qk].append(g)
    of_q = {qk: (sum(g >= RELEVANT for g in gs), _idcg(tuple(sorted(gs, reverse=True)[:RANKED_KEYS])))
            for qk, gs in per_q.items()}
    n = len(qids)
    G = np.zeros((n, RANKED_KEYS))  # grades of the ranked passages (unjudged: 0, as trec_eval counts them)
    seen = np.zeros((n, RANKED_KEYS), dtype=bool)  # judged at all
    length, rel, idcg = np.zeros(n), np.zeros(n), np.zeros(n)
    anyj = np.zeros(n, dtype=bool)
    get = grades.get
    for i, (qid, k) in enumerate(zip(qids, keys)):
        qk = qkeys.get(qid, "")
        q = of_q.get(qk)
        if q is None:
            continue
        anyj[i], (rel[i], idcg[i]) = True, q
        if k:
            ks = k.split(",")[:RANKED_KEYS]
            length[i] = len(ks)
            for j, pk in enumerate(ks):
                g = get((qk, pk))
                if g is not None:
                    G[i, j], seen[i, j] = g, True
    dcg = np.zeros(n)
    for j in range(RANKED_KEYS):  # left to right, as the row loop's sum adds them
        dcg = dcg + G[:, j] * _DISCOUNT[j]
    hits10, hits5 = (G >= RELEVANT).sum(axis=1), (G[:, :5] >= RELEVANT).sum(axis=1)
    with np.errstate(divide="ignore", invalid="ignore"):
        judged = seen.sum(axis=1) / length
        metrics = {  # metric -> (value, ok where, n/a detail where judged but not ok)
            "judged@10": (judged, length > 0, "no blocks retrieved"),
            "judged_ndcg@10": (dcg / idcg, idcg > 0, "no passage of this question judged above 0"),
            "judged_recall@10": (hits10 / rel, rel > 0, f"no passage graded {RELEVANT} or higher"),
            "judged_precision@5": (hits5 / 5, np.ones(n, dtype=bool), ""),
        }
    order = ["judged@10", "judged_ndcg@10", "judged_recall@10", "judged_precision@5"]
    cols = {}
    for m in order:
        v, ok, why = metrics[m]
        good = anyj & ok
        cols[m] = (np.where(good, v, np.nan), np.where(good, "ok", "not_applicable"),
                   np.where(good, "", np.where(anyj, why, "no judgments for this question")))
    # item-major rows, the row loop's metric order (JUDGED_METRICS' for an item with no judgments)
    k = len(order)
    metric = np.array(order * n, dtype=object)
    if (~anyj).any():
        metric.reshape(n, k)[~anyj] = list(JUDGED_METRICS)
    pos = {m: i for i, m in enumerate(order)}
    which = np.array([pos[m] for m in metric], dtype=np.int64).reshape(n, k)
    rows = np.repeat(np.arange(n), k)
    stacked = [np.stack([cols[m][c] for m in order], axis=1) for c in range(3)]
    pick = which.ravel()
    return pd.DataFrame({
        "run_id": run_id, "strategy": np.asarray(strategies, dtype=object)[rows],
        "point_id": np.asarray(points, dtype=object)[rows], "question_id": np.asarray(qids, dtype=object)[rows],
        "repeat": np.asarray(reps, dtype=np.int64)[rows], "metric": metric,
        "value": stacked[0][rows, pick].astype(float), "status": stacked[1][rows, pick],
        "detail": stacked[2][rows, pick]})


def judged_rows(items, qkeys: dict[str, str], grades: dict):
    """(strategy, point, question_id, repeat, metric, value, status, detail) of the judged metrics of each item
    ``(strategy, point, question_id, repeat, blocks)`` (blocks as JSON or a list): the one loop behind
    ``judged_scores`` (a stored run) and the workbench's session items."""
    per_q: dict[str, list[int]] = defaultdict(list)
    for (qk, _), g in grades.items():
        per_q[qk].append(g)
    # per question once (its relevant count, its ideal ranking), not per item: 50,000 items share 10,000 of them
    of_q = {qk: (sum(g >= RELEVANT for g in gs), sorted(gs, reverse=True), True) for qk, gs in per_q.items()}
    none = (0, [], False)
    for strategy, point, qid, rep, blocks in items:
        qk = qkeys.get(qid, "")
        rel_total, ideal, any_judged = of_q.get(qk, none)
        if blocks is None or (isinstance(blocks, str) and blocks.startswith("[")):  # blocks as JSON, else keys
            blocks = json.loads(blocks or "[]")
        rep = int(rep)
        for m, (v, st, d) in judged_item_scores(blocks, grades, qk, rel_total, ideal, any_judged).items():
            yield strategy, point, qid, rep, m, v, st, d


def judged_coverage(scores: pd.DataFrame) -> pd.DataFrame:
    """Per point: mean judged@10 and whether it is below LOW_JUDGED (its judged metrics understate it)."""
    j = scores[(scores.metric == "judged@10") & (scores.status == "ok")]
    if j.empty:
        return pd.DataFrame(columns=["strategy", "point_id", "judged@10", "low"])
    t = j.groupby(["strategy", "point_id"]).value.mean().rename("judged@10").reset_index()
    t["low"] = t["judged@10"] < LOW_JUDGED
    return t


# --------------------------------------------------------------------------- agreement

def weighted_kappa(a: list[int], b: list[int], weights: str = "quadratic", k: int = 4) -> float:
    """Cohen's kappa of two raters on 0..k-1 grades; weights quadratic (default), linear or none."""
    if len(a) != len(b) or not a:
        raise ValueError("kappa needs two equally long, non-empty lists of grades")
    o = np.zeros((k, k))
    for x, y in zip(a, b):
        o[int(x), int(y)] += 1
    o /= o.sum()
    e = np.outer(o.sum(1), o.sum(0))
    i, j = np.indices((k, k))
    w = {"quadratic": (i - j) ** 2 / (k - 1) ** 2, "linear": np.abs(i - j) / (k - 1),
         "none": (i != j).astype(float)}[weights]
    den = (w * e).sum()
    return float(1 - (w * o).sum() / den) if den > 0 else float("nan")


def agreement_table(judged: pd.DataFrame) -> tuple[pd.DataFrame, dict]:
    """Every pair of judges on the (question, passage) pairs both graded: n, exact agreement, Cohen's kappa
    (unweighted and quadratic-weighted) and the 4x4 confusion table (rows: the first judge)."""
    ok = judged[judged.status == "ok"]
    by = {j: dict(zip(zip(g.question_key, g.passage_key), g.grade.astype(int))) for j, g in ok.groupby("judge")}
    rows, confusion = [], {}
    names = sorted(by)
    for x in range(len(names)):
        for y in range(x + 1, len(names)):
            a, b = by[names[x]], by[names[y]]
            common = sorted(set(a) & set(b))
            if not common:
                continue
            ga, gb = [a[c] for c in common], [b[c] for c in common]
            cm = pd.crosstab(pd.Categorical(ga, GRADES), pd.Categorical(gb, GRADES), dropna=False)
            cm.index.name, cm.columns.name = names[x], names[y]
            confusion[(names[x], names[y])] = cm
            rows.append({"judge_a": names[x], "judge_b": names[y], "n": len(common),
                         "exact": float(np.mean(np.array(ga) == np.array(gb))),
                         "kappa": weighted_kappa(ga, gb, "none"), "kappa_quadratic": weighted_kappa(ga, gb)})
    return pd.DataFrame(rows, columns=["judge_a", "judge_b", "n", "exact", "kappa", "kappa_quadratic"]), confusion


# --------------------------------------------------------------------------- prediction-powered inference

def ppi_mean(llm_all: np.ndarray, human_sub: np.ndarray, llm_sub: np.ndarray, z: float = 1.959964) -> dict:
    """Prediction-powered estimate of a mean (Angelopoulos et al. 2023, as ARES uses it): the LLM-labelled
    mean over all N questions, corrected by the mean human-minus-LLM difference on the n questions people
    labelled; the interval adds both variances. Valid whatever the LLM's bias, wider the less it agrees."""
    llm_all, human_sub, llm_sub = (np.asarray(x, float) for x in (llm_all, human_sub, llm_sub))
    n, big_n = len(human_sub), len(llm_all)
    if n < 2 or big_n < 2 or len(llm_sub) != n:
        raise ValueError(f"PPI needs >= 2 human-labelled and >= 2 LLM-labelled questions (got n={n}, N={big_n})")
    rect = human_sub - llm_sub
    est = llm_all.mean() + rect.mean()
    se = math.sqrt(llm_all.var(ddof=1) / big_n + rect.var(ddof=1) / n)
    return {"estimate": float(est), "low": float(est - z * se), "high": float(est + z * se), "n_human": n,
            "n_llm": big_n, "llm_only": float(llm_all.mean()), "rectifier": float(rect.mean())}


def ppi_table(store, run_id: str, metrics: tuple = ("judged_ndcg@10", "judged_recall@10", "judged_precision@5"),
              human: str = "human", llm: str = "llm") -> pd.DataFrame:
    """Per point and judged metric: the prediction-powered estimate with its 95% interval, beside the
    LLM-only mean. Questions count as human-labelled when a person graded every passage of the point's
    top 10 for them."""
    a = judged_scores(store, run_id, llm)
    h = judged_scores(store, run_id, human)
    if a.empty or h.empty:
        return pd.DataFrame()
    key = ["strategy", "point_id", "question_id", "repeat"]
    full = h[(h.metric == "judged@10") & (h.status == "ok") & (h.value >= 1.0)][key]
    rows = []
    for m in metrics:
        la = a[(a.metric == m) & (a.status == "ok")]
        hs = h[(h.metric == m) & (h.status == "ok")].merge(full, on=key)
        both = hs.merge(la, on=key, suffixes=("_h", "_l"))
        for (s, pid), g in la.groupby(["strategy", "point_id"]):
            sub = both[(both.strategy == s) & (both.point_id == pid)]
            try:
                r = ppi_mean(g.value.values, sub.value_h.values, sub.value_l.values)
            except ValueError as e:
                rows.append({"strategy": s, "point_id": pid, "metric": m, "estimate": None, "note": str(e)})
                continue
            rows.append({"strategy": s, "point_id": pid, "metric": m, **r, "note": "prediction-powered"})
    return pd.DataFrame(rows)


def judged_notes(store, run_id: str, scores: pd.DataFrame) -> list[str]:
    """What a reader of judged metrics must know: whose grades they are, and which points too few of whose
    top 10 passages were judged for them to be trusted (TREC's warning: unjudged counts as not relevant)."""
    if scores.empty or not (scores.metric == "judged@10").any():
        return []
    gold = _gold(store, run_id)
    judged = store.judgments({question_key(t) for t in gold.text})
    ok = judged[judged.status == "ok"]
    kinds = sorted(set(ok.judge))
    people = [j for j in kinds if not j.startswith("llm:")]
    notes = [f"judged metrics use the relevance judgments of {', '.join(kinds)} (a person's grade first where both "
             "exist); unjudged passages count as not relevant, so read them beside judged@10"]
    # how many questions the judged means stand on (a mean over 3 graded questions is not one over the run's items)
    j = scores[scores.metric == "judged@10"]
    graded_q = j[j.status == "ok"].question_id.nunique()
    notes.append(f"judged means cover {graded_q:,} of {j.question_id.nunique():,} questions (those with at least one "
                 "graded passage); the rest are not_applicable, never 0")
    if not people:
        t, _ = agreement_table(judged)
        notes.append("every judged number here is an LLM's grade (no person graded these questions); its measured "
                     "agreement with people: " + ("none measured yet (`ragwb judge RUN --agreement` after a person "
                                                  "grades a sample)" if t.empty else
                                                  "; ".join(f"{r.judge_a} vs {r.judge_b}: kappa {r.kappa_quadratic:.2f} "
                                                            f"(n={r.n})" for r in t.itertuples())))
    cov = judged_coverage(scores)
    low = cov[cov.low]
    if len(low):
        labels = scores.drop_duplicates(["strategy", "point_id"]).set_index(["strategy", "point_id"]).point_label
        names = [f"{s} · {labels.get((s, p), p)} ({v:.2f})" for s, p, v in
                 low[["strategy", "point_id", "judged@10"]].itertuples(index=False)]
        notes.append(f"judged@10 below {LOW_JUDGED:.1f} (its judged metrics understate it until more of what it "
                     f"retrieves is judged): {'; '.join(names)}")
    return notes
