"""`ragwb bench --only score`: `ragwb score` at the size of real logs (distinct contexts, repeated contexts, bulk)."""
from __future__ import annotations

import json
import time
from pathlib import Path


def logged_rows(n: int, distinct_contexts: int | None = None, seed: int = 0) -> list[dict]:
    """``n`` logged records over SQuAD 2.0 paragraphs (each ~860 characters): the question, the paragraph it was
    written on as the context and its first sentence as a cited answer. ``distinct_contexts``: records cycle over
    that many paragraphs (real logs repeat their contexts), else each record has its own paragraph."""
    import random

    from rag.answer.answerers import split_sentences
    from rag.ingest.corpora import load_bundled

    ds = load_bundled("squad2")
    paras = [pg.text for d in ds.documents for pg in d.pages if len(pg.text) > 300]
    rnd = random.Random(seed)
    rnd.shuffle(paras)
    k = distinct_contexts or n
    if k > len(paras):
        paras = (paras * (k // len(paras) + 1))[:k]  # more distinct rows than paragraphs: each gets a suffix
        paras = [p + f" (record {i})" for i, p in enumerate(paras)]
    out = []
    for i in range(n):
        p = paras[i % k]
        first = (split_sentences(p) or [p])[0]
        out.append({"question_id": f"q{i}", "question": f"What does record {i} say about {first.split()[0]}?",
                    "answer": f"{first} [1]", "contexts": [p], "latency_ms": 100.0 + i % 7})
    return out


def score_figure(root: Path, distinct: int = 300, repeated: int = 20_000, bulk: int = 100_000) -> dict:
    """``ragwb score`` at the size of real logs (issue 33): distinct contexts (each embeds), repeated contexts
    (each distinct text embeds once), and a bulk log without the support scorer."""
    from evals.run.logged import score_logged
    from evals.score.support import _e5_cache, _memo, collect_embeds, support_embedder

    root.mkdir(parents=True, exist_ok=True)
    figs = {}

    def write(name, recs):
        p = root / f"{name}.jsonl"
        p.write_text("".join(json.dumps(r) + "\n" for r in recs))
        return p

    # 1. distinct: the raw embedder on exactly the texts scoring must embed, then scoring itself
    recs = logged_rows(distinct)
    path = write("distinct", recs)
    from evals.score.metrics import ScoringInput, score_faithfulness
    from rag.models import Question
    from rag.strategies import Block

    _e5_cache.clear()
    _memo.clear()
    inputs = [ScoringInput(Question(r["question_id"], r["question"], [], True), [Block(1, r["contexts"][0], "logged",
                                    (), (), (), (), 0, 0.0)], r["answer"]) for r in recs]
    texts = collect_embeds(lambda: [score_faithfulness(x) for x in inputs])
    emb = support_embedder()
    emb(["warm up"])
    _e5_cache.clear()
    t = time.perf_counter()
    emb(texts)
    raw = time.perf_counter() - t
    _e5_cache.clear()
    _memo.clear()
    t = time.perf_counter()
    score_logged(path, root / "ws1", progress=False)
    sec = time.perf_counter() - t
    figs["distinct"] = {"rows": distinct, "texts_embedded": len(texts), "raw_embedder_s": raw, "score_s": sec,
                        "throughput_vs_raw": raw / sec, "target": ">= 0.8 and <= 45 s"}
    # 2. repeated contexts: 20,000 rows over 300 paragraphs
    if repeated:
        path = write("repeated", logged_rows(repeated, 300))
        _e5_cache.clear()
        _memo.clear()
        t = time.perf_counter()
        score_logged(path, root / "ws2", progress=False)
        figs["repeated"] = {"rows": repeated, "distinct_contexts": 300, "score_s": time.perf_counter() - t,
                            "target": "<= 120 s"}
    # 3. bulk without the support scorer
    if bulk:
        path = write("bulk", logged_rows(bulk, 300))
        t = time.perf_counter()
        score_logged(path, root / "ws3", progress=False,
                     metrics=[m for m in ("answer", "abstention", "citation", "retrieval", "cost")])
        figs["bulk_no_support"] = {"rows": bulk, "score_s": time.perf_counter() - t, "target": "<= 60 s"}
    return figs
