"""Evaluating points in the workbench's session: the applied budgets as points (``points_from_budgets``), each point's
items answered (from cached candidates where the search allows) and scored, and their summary."""
from __future__ import annotations

import atexit
import contextlib
import gc
import weakref

import numpy as np
import pandas as pd

from rag.strategies import get_strategy, make_params

from ..run.runner import point_id, point_label
from .session import FRAME_COLUMNS, Session


atexit.register(gc.unfreeze)  # shutdown frees what Applies froze (extensions report frozen objects as leaks)


@contextlib.contextmanager
def _gc_paused():
    """Pause the cyclic garbage collector while a batch of items is built, then freeze what
    survived: a session holds hundreds of thousands of cached objects (items, memos, frames), and
    each collection that walks them costs tens to hundreds of ms (a generation-1 pass over a few
    Applies' items measured 0.67 s). The items are acyclic (a collection right after an Apply finds
    nothing to free), so moving them to the permanent generation (``gc.freeze``) loses nothing and
    keeps later collections down to the objects made since."""
    was = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        gc.freeze()
        if was:
            gc.enable()


@_gc_paused()
def evaluate_points(sess: Session, points: list[tuple[str, dict]], limit: int = 100,
                    on_item=None) -> pd.DataFrame:
    """Long frame of per-question scores for each (strategy, params) point on the first ``limit`` questions.

    Moving a budget slider only re-packs: the question embeddings and candidate pools are cached,
    and the items of points already evaluated in this session (a strategy whose budgets did not
    change, or a budget tried before) are reused as they are.
    """
    qs = sess.dataset.questions[:limit]
    frames = sess.frames
    parts, layout = [], []
    for name, kw in points:
        p = None if name in sess.evaluator.systems else make_params(name, **kw)
        pid, label = point_id(kw), point_label(kw)
        if (name, label, limit) not in frames:
            frames[(name, label, limit)] = _point_frame(sess, qs, name, p, pid, label, on_item)
        parts.append(frames[(name, label, limit)])
        layout.append(((name, label), len(parts[-1])))
    out = pd.concat(parts, ignore_index=True) if parts else pd.DataFrame(columns=FRAME_COLUMNS)
    sess.layout = (weakref.ref(out), layout)
    return out


def _point_frame(sess: Session, qs: list, name: str, p, pid: str, label: str, on_item=None) -> pd.DataFrame:
    """One point's long scores frame; an item already evaluated in this session is reused. A deployed service
    (``--system``) is asked like ``ragwb run`` asks it; an LLM session answers ``sess.workers`` items at once.
    Each item is kept as soon as it is done, so an interrupted Apply loses none (the next one reuses them)."""
    todo = [q for q in qs if (name, label, q.qid) not in sess.items]
    ev = sess.evaluator
    if todo and name in ev.systems:
        def one(q):
            return ev.system_item(q, name, 0, ev.systems[name].ask(q.text, q.qid, [], repeat=0), [])
    elif todo:  # an item already evaluated in this session (same strategy, same budgets) is reused
        sess.retriever.warm([q.text for q in todo], p.search_key(get_strategy(name).needed(p)))

        def one(q):
            return ev.evaluate(q, name, p, pid, label)
    for q, item in _answered(one, todo, sess.workers) if todo else ():
        sess.items[(name, label, q.qid)] = item
        if on_item is not None:
            on_item(1)
    qid, metric, value, status, detail = [], [], [], [], []  # by column: a frame from dicts costs 3x
    for q in qs:
        item = sess.items[(name, label, q.qid)]
        for m, sc in item[1].items():
            qid.append(q.qid)
            metric.append(m)
            value.append(sc.value)
            status.append(sc.status)
            detail.append(sc.detail)
    n = len(qid)
    return pd.DataFrame(
        {"strategy": [name] * n, "point_label": [label] * n, "question_id": qid, "repeat": [0] * n,
         "metric": metric, "value": np.array(value, dtype=np.float64),  # None -> NaN, as before
         "status": status, "detail": detail}, columns=FRAME_COLUMNS)


def _answered(fn, questions: list, workers: int):
    """(question, fn(question)) as each is done, ``workers`` at a time. An interrupt (the notebook's stop)
    cancels what has not started and keeps what is done: nothing queued is sent after it."""
    if workers <= 1 or len(questions) <= 1:
        for q in questions:
            yield q, fn(q)
        return
    from concurrent.futures import ThreadPoolExecutor

    ex = ThreadPoolExecutor(max_workers=workers)
    try:
        futures = [(q, ex.submit(fn, q)) for q in questions]
        for q, f in futures:
            yield q, f.result()
    finally:
        ex.shutdown(wait=True, cancel_futures=True)




@_gc_paused()
def summarize_session(sess: Session, scores: pd.DataFrame) -> pd.DataFrame:
    """``summarize_scores`` of the applied points, re-using the summary of every point already
    summarised over the same questions in this session (only a changed point is bootstrapped again)."""
    from ..analyze.summary import summarize_scores

    if scores.empty:
        return summarize_scores(scores)
    cache = sess.summaries
    parts = []
    for (strategy, label), g in _point_groups(sess, scores):
        key = (strategy, label, len(g), tuple(g.question_id.iloc[[0, -1]]))
        if key not in cache:
            cache[key] = summarize_scores(g)
        parts.append(cache[key])
    return pd.concat(parts, ignore_index=True)


def _point_groups(sess: Session, scores: pd.DataFrame) -> list[tuple[tuple, pd.DataFrame]]:
    """``scores.groupby(["strategy", "point_label"], sort=True)``, as a list. The frame evaluate_points
    returned last holds each point's rows back to back, in lengths it noted: its groups are slices
    (not a hash grouping of ~100,000 string pairs); any other frame is grouped."""
    ref, layout = sess.layout
    keys = [k for k, _ in layout]
    if (ref is not None and ref() is scores and sum(n for _, n in layout) == len(scores)
            and len(set(keys)) == len(keys)):
        starts = np.cumsum([0] + [n for _, n in layout])
        return sorted(((k, scores.iloc[a:b]) for k, a, b in zip(keys, starts, starts[1:])), key=lambda kv: kv[0])
    return list(scores.groupby(["strategy", "point_label"], sort=True))


SHIPPED = "shipped"  # a budget control's "each strategy keeps its own default" (parent_child's imports differ)


def points_from_budgets(strategies: list[str], budgets: dict, systems=()) -> list[tuple[str, dict]]:
    """One point per strategy. ``STRATEGY__PARAM`` keys go to that strategy only; plain keys to every
    strategy that has the parameter. Only values that differ from the strategy's shipped default are
    kept, so a strategy never receives another's budget (parent_child keeps its top_k of 20) and
    labels name what was changed. A key no registered strategy has (a typo) is an error naming the
    valid keys, never silently dropped."""
    import dataclasses

    from rag.strategies import STRATEGIES

    known = {n: {f.name for f in dataclasses.fields(get_strategy(n).Params)} for n in STRATEGIES}
    for key in budgets or {}:
        owner, _, param = key.rpartition("__")
        if (owner and param not in known.get(owner, ())) or (not owner and not any(param in f for f in known.values())):
            valid = sorted({p for f in known.values() for p in f}) + sorted(f"{n}__{p}" for n, f in known.items() for p in f)
            raise ValueError(f"unknown budget {key!r}; valid: {', '.join(valid)}")
    out = []
    for name in strategies:
        if name in systems:  # a deployed service (--system) has no budgets: one point, its own answers
            out.append((name, {}))
            continue
        defaults, fields = get_strategy(name).Params(), known[name]
        kw = {}
        for key, v in (budgets or {}).items():
            owner, _, param = key.rpartition("__")
            if v is None or v == SHIPPED or param not in fields or (owner and owner != name):
                continue
            if v != getattr(defaults, param):
                kw[param] = v
        out.append((name, kw))
    return out
