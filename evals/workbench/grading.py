"""Grading passages in the workbench (docs/judgments.md): point A's passages for one question, each grade
stored at once as ``ragwb judge --import`` stores it, and the judged metrics of the session's items."""
from __future__ import annotations

import json
from pathlib import Path

import pandas as pd

from .session import FRAME_COLUMNS, Session, item_for

# --------------------------------------------------------------------------- grading passages (docs/judgments.md)

GRADE_LABELS = {0: "0 not relevant", 1: "1 related", 2: "2 partly answers", 3: "3 answers"}


def gradable_passages(sess: Session, point: str, qid: str) -> list[dict]:
    """The blocks point A showed for a question, as passages to grade: rank, source, key and text."""
    from ..analyze.judgments import passage_key

    item = item_for(sess, point, qid)
    if item is None:
        return []
    blocks = json.loads(item[0]["blocks"]) if isinstance(item[0]["blocks"], str) else item[0]["blocks"]
    return [{"rank": b["n"], "source": ", ".join((b.get("page_ids") or b.get("doc_ids") or [])[:1]),
             "passage_key": passage_key(b["text"]), "text": b["text"]} for b in blocks]


def grade_passage(db: str, sess: Session, qid: str, passage: dict, grade: int, judge: str) -> None:
    """Store one person's grade of one passage: the same table, keys and checks as ``ragwb judge --import``."""
    from ..analyze.judgments import GRADES, question_key
    from ..store import ResultStore

    if grade not in GRADES:
        raise ValueError(f"grade {grade!r} is outside 0-3")
    name = (judge or "").strip()
    if not name:
        raise ValueError("who is grading? type your name first")
    q = next(x for x in sess.dataset.questions if x.qid == qid)
    with ResultStore(db) as st:
        st.add_judgments([{"question_key": question_key(q.text), "passage_key": passage["passage_key"],
                           "judge": name if ":" in name else f"human:{name}", "grade": grade, "question_id": qid,
                           "question": q.text, "text": passage["text"], "status": "ok", "detail": "workbench"}],
                         source="workbench")


def stored_grades(db: str, sess: Session, qid: str) -> dict[str, str]:
    """passage_key -> "human:ana=3; llm:m=2" for a question, from the store (empty when there is none yet)."""
    from ..analyze.judgments import question_key
    from ..store import ResultStore

    if not Path(db).exists():
        return {}
    q = next((x for x in sess.dataset.questions if x.qid == qid), None)
    if q is None:
        return {}
    with ResultStore(db, read_only=True) as st:
        j = st.judgments({question_key(q.text)})
    j = j[j.status == "ok"]
    out: dict[str, list[str]] = {}
    for pk, judge, g in zip(j.passage_key, j.judge, j.grade):
        out.setdefault(pk, []).append(f"{judge}={int(g)}")
    return {k: "; ".join(v) for k, v in out.items()}


def grading_table_html(db: str, sess: Session, qid: str, passages: list[dict]) -> str:
    """The passages being graded with every grade stored for them so far (the report's plain table)."""
    import pandas as pd

    from ..report.html import plain_table_html

    stored = stored_grades(db, sess, qid) if passages else {}
    return plain_table_html(pd.DataFrame([{"rank": p["rank"], "source": p["source"],
                                           "grades": stored.get(p["passage_key"], ""), "text": p["text"]}
                                          for p in passages]))


_CLICKS = __import__("itertools").count(1)


def grade_click(db: str, sess: Session, qid: str, passages: list[dict], index, grade: int, judge: str) -> tuple:
    """A grade button's value: (click number, what happened). The notebook shows the latest click's message,
    whichever button it was; a refusal (no name, no passage) is a message, never a traceback."""
    try:
        p = passages[index]
        grade_passage(db, sess, qid, p, grade, judge)
        return next(_CLICKS), f"stored: {judge.strip()} graded passage [{p['rank']}] {grade}"
    except (ValueError, KeyError, TypeError, IndexError) as e:
        return next(_CLICKS), f"not stored: {e.args[0] if e.args else e}"


def latest_click(values) -> str:
    clicks = [v for v in (values or []) if v]
    return max(clicks)[1] if clicks else ""


def next_ungraded(passages: list[dict], grades: dict[str, str], after: int | None = None) -> int | None:
    """The index of the passage to grade next: the first ungraded one after ``after`` (wrapping round), else
    ``after`` itself (every passage graded: stay where the grader is)."""
    if not passages:
        return None
    start = -1 if after is None else after
    order = list(range(start + 1, len(passages))) + list(range(0, start + 1))
    return next((i for i in order if not grades.get(passages[i]["passage_key"])),
                after if after is not None and after < len(passages) else 0)


_GRADES: dict = {}  # (store file, its mtime and size, question keys, source) -> the effective grades


def session_judged_scores(db: str, sess, scores: pd.DataFrame, source: str = "auto") -> pd.DataFrame:
    """The judged metrics (judged_ndcg@10, judged_recall@10, judged_precision@5, judged@10) of the session's
    applied items, from the grades in the store now: the same formulas as ``ragwb show`` (computed on read,
    evals/analyze/judgments.py), in the workbench's long frame shape (empty when nothing is graded)."""
    from ..analyze.judgments import effective_grades, judged_rows, question_key
    from ..store import ResultStore

    if scores is None or scores.empty or not Path(db).exists():
        return pd.DataFrame(columns=FRAME_COLUMNS)
    qtext = {q.qid: q.text for q in sess.dataset.questions}
    qkeys = {qid: question_key(qtext[qid]) for qid in scores.question_id.unique() if qid in qtext}
    # the grades read once while the store file is unchanged (every Apply asked again: ~50 ms of the page's click;
    # a grade, a save or another process's write changes the file, and the grades are read again)
    wal = Path(str(db) + ".wal")  # DuckDB's write-ahead log: a write lands there first
    marks = tuple((x.stat().st_mtime_ns, x.stat().st_size) if x.exists() else None for x in (Path(db), wal))
    key = (str(Path(db).resolve()), marks, frozenset(qkeys.values()), source)
    grades = _GRADES.get(key)
    if grades is None:
        with ResultStore(db, read_only=True) as st:
            grades = effective_grades(st.judgments(set(qkeys.values())), source)
        _GRADES.clear()
        _GRADES[key] = grades
    if not grades:
        return pd.DataFrame(columns=FRAME_COLUMNS)
    points = scores[["strategy", "point_label", "question_id"]].drop_duplicates()
    items = ((s_, lab, qid, 0, sess.items[(s_, lab, qid)][0]["blocks"]) for s_, lab, qid in
             zip(points.strategy.tolist(), points.point_label.tolist(), points.question_id.tolist())
             if (s_, lab, qid) in sess.items)
    return pd.DataFrame(list(judged_rows(items, qkeys, grades)), columns=FRAME_COLUMNS).astype({"value": float})
