"""Labels that fit each default judge, at no human cost, built from the bundled SQuAD 2.0 set (docs/metrics.md,
"How far to trust a judge"):

- **context sufficiency**: a question with its own gold paragraph is sufficient (1); with another paragraph of the
  same article, or an *unanswerable* question with the paragraph it was written against (SQuAD 2.0's adversarial
  half: on topic, yet the answer is not there), it is not (0);
- **answer relevance** (constructed pairs): a question with its gold answer, or the first half of it (a partial
  answer, the rubric's 2), is relevant (1); with another question's gold answer, from another article, it is not (0).

Faithfulness stays on ExpertQA's human support labels (evals/score/agreement.py). Each judge is measured only on
labels of what it judges, and the line that prints its figure names the label source and chance beside it."""
from __future__ import annotations

import random

import numpy as np

LABEL_SOURCES = {
    "llm_faithfulness": "ExpertQA, human support labels",
    "ragas_faithfulness": "ExpertQA, human support labels",
    "llm_context_sufficiency": "SQuAD 2.0 gold evidence: a question's own paragraph vs another paragraph or an "
                               "unanswerable question's paragraph; no human labels",
    "llm_answer_relevance": "constructed pairs from SQuAD 2.0: a question with its gold or a partial answer vs "
                            "another question's answer; no human labels",
}
SEED = 7


def _squad():
    from rag.ingest.corpora import load_bundled

    ds = load_bundled("squad2")
    pages = {p.page_id: (d.doc_id, p.text) for d in ds.documents for p in d.pages}
    by_doc: dict = {}
    for pid, (doc, _) in pages.items():
        by_doc.setdefault(doc, []).append(pid)
    return ds, pages, by_doc


def sufficiency_items(n: int = 200, seed: int = SEED) -> list[dict]:
    """``n`` items, balanced: a third sufficient (own paragraph), a third another paragraph of the article, a third
    unanswerable questions with their paragraph. {"question", "contexts", "label", "kind"}."""
    ds, pages, by_doc = _squad()
    rng = random.Random(seed)
    answerable = [q for q in ds.questions if q.answerable and q.evidence and q.evidence[0].page_id in pages]
    unanswerable = [q for q in ds.questions if q.answerable is False and q.evidence and q.evidence[0].page_id in pages]
    rng.shuffle(answerable)
    rng.shuffle(unanswerable)
    third = max(1, n // 3)
    out = []
    for q in answerable[:third]:
        out.append({"question": q.text, "contexts": [pages[q.evidence[0].page_id][1]], "label": 1, "kind": "own"})
    for q in answerable[third:2 * third]:
        own = q.evidence[0].page_id
        doc = pages[own][0]
        others = [p for p in by_doc[doc] if p != own and not any(a.lower() in pages[p][1].lower() for a in q.answers)]
        if others:
            out.append({"question": q.text, "contexts": [pages[rng.choice(others)][1]], "label": 0, "kind": "other"})
    for q in unanswerable[:n - len(out)]:
        out.append({"question": q.text, "contexts": [pages[q.evidence[0].page_id][1]], "label": 0,
                    "kind": "unanswerable"})
    rng.shuffle(out)
    return out[:n]


def relevance_items(n: int = 200, seed: int = SEED) -> list[dict]:
    """``n`` constructed pairs, half relevant (the question's gold answer), half not (another article's question's
    answer). {"question", "answer", "label", "kind"}."""
    ds, pages, _ = _squad()
    rng = random.Random(seed)
    qs = [q for q in ds.questions if q.answerable and q.answers and q.evidence]
    rng.shuffle(qs)
    half = max(1, n // 2)
    out = []
    for i, q in enumerate(qs[:half]):  # a third of the relevant ones a partial answer (the rubric's 2: relevant)
        words = q.answers[0].split()
        if i % 3 == 2 and len(words) >= 2:
            out.append({"question": q.text, "answer": " ".join(words[:(len(words) + 1) // 2]), "label": 1,
                        "kind": "partial"})
        else:
            out.append({"question": q.text, "answer": q.answers[0], "label": 1, "kind": "gold"})
    pool = qs[half:]
    for q in qs[:n - half]:
        other = next((o for o in pool if o.evidence[0].doc_id != q.evidence[0].doc_id), None)
        if other is None:
            break
        pool.remove(other)
        out.append({"question": q.text, "answer": other.answers[0], "label": 0, "kind": "another question's"})
    rng.shuffle(out)
    return out


def items_for(name: str, n: int) -> list[dict]:
    if name == "llm_context_sufficiency":
        return sufficiency_items(n)
    if name == "llm_answer_relevance":
        return relevance_items(n)
    raise KeyError(name)


def judge_item(j, item: dict):
    """The judge's Score of one labelled item (asked ``j.repeats`` times, as a run asks it: judges.judge_repeated)."""
    from .judges import judge_repeated

    if "answer" in item:
        return judge_repeated(j, item["question"], item["answer"], [], 0, None)
    return judge_repeated(j, item["question"], "", item["contexts"], 0, None)


def cohen_kappa(y: np.ndarray, pred: np.ndarray) -> float:
    """Cohen's kappa of two binary raters (labels and the judge at its threshold); 0 when chance explains all."""
    po = float((y == pred).mean())
    pe = float(y.mean() * pred.mean() + (1 - y.mean()) * (1 - pred.mean()))
    return (po - pe) / (1 - pe) if pe < 1 else 0.0
