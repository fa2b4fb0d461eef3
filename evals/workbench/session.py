"""The workbench's session: a loaded dataset and index, its evaluator (answerer, scorers, deployed services) and
the items evaluated so far. The floor under the workbench's other modules (they import it, never the package)."""
from __future__ import annotations

from dataclasses import dataclass, field

from rag.index.retrieval import Retriever

from ..run.runner import ItemEvaluator

FRAME_COLUMNS = ["strategy", "point_label", "question_id", "repeat", "metric", "value", "status", "detail"]


@dataclass
class Session:
    """A loaded dataset + index with a warm candidate cache (one per notebook kernel)."""
    dataset: object
    retriever: Retriever
    evaluator: ItemEvaluator
    items: dict = field(default_factory=dict)  # (strategy, label, qid) -> (row, scores)
    frames: dict = field(default_factory=dict)  # (strategy, label, limit) -> that point's long scores frame
    summaries: dict = field(default_factory=dict)  # (strategy, label, n rows, first/last qid) -> its summary
    plans: dict = field(default_factory=dict)  # (points, limit, items, sends) -> its AnswerPlan (answer_plan_kept)
    layout: tuple = (None, [])  # (weakref to evaluate_points' last frame, [((strategy, label), n rows)])
    client: object = None  # the LLM client of an LLM session (its response cache answers the cost line)
    answerer_label: str = "offline (extractive)"
    workers: int = 1  # items answered at once (an LLM session: its --concurrency)
    spec: str = ""  # what was opened (a bundled name or a folder path): a stored run from the page names it
    embedded: int = 0  # chunks the opening ingest embedded now (shipped or cached vectors are not embedded: issue 83)



def item_for(sess: Session, point: str, qid: str):
    """(row, scores) of the item shown for ``point`` ("strategy · label") and a question, or None."""
    from ..analyze.explore import point_name

    for (s, label, q), item in sess.items.items():
        if q == qid and point_name(s, label) == point:
            return item
    return None


def dataset_spec(sess) -> str:
    """What a stored run of the page names as its dataset: a bundled set by name, a folder by its absolute path, so
    that `ragwb best`'s TOML runs from any folder (a folder's bare name ran only from its parent: issue 72)."""
    from rag.ingest.corpora import dataset_spec as spec_of

    return spec_of(sess.spec or sess.dataset.name)


def session_run_config(sess, **fields):
    """The RunConfig of a stored run made from the page (Save as run, Race, Index sweep): the session's dataset (by
    ``dataset_spec``), index, answerer and judges, so that whichever button stores a run, it is evaluated as Apply
    evaluates (a race on a judged metric is judged: issue 72). ``fields`` add or override (grid, limit, race...)."""
    from ..run.config import RunConfig

    judges = list(getattr(sess.evaluator, "judges", []) or [])
    llm = sess.client.cfg if sess.client is not None else None
    base = {"dataset": dataset_spec(sess), "index": sess.retriever.reader.config,
            "answerer": "openai" if llm is not None else "extractive", "llm": llm,
            "judge": judges[0].client.cfg if judges else None, "judges": tuple(j.name for j in judges)}
    return RunConfig(**{**base, **fields})
