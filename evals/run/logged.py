"""``ragwb score FILE``: a system's logged outputs scored and stored as a run, the same way as any point.

With ``--dataset`` the records join the gold set by question id, else by the exact question text
(whitespace folded); contexts are located in the ingested corpus (by id or by text), so every metric
applies. A record that matches no gold question is still scored on what needs no gold, and the
unmatched are counted and named. Without a dataset the reference-free metrics are scored
(faithfulness, citation validity, statement coverage, tokens; answer correctness too when the record
has a ``reference``) and every other metric is ``not_applicable`` with the reason.
"""
from __future__ import annotations

import sys
import time
import uuid
from pathlib import Path

from rag.answer.answerers import Answer
from rag.answer.logged import read_logged
from rag.models import Question
from rag.strategies import STRATEGIES, BaseParams, Block, Context
from rag.tokens import count_tokens_memo
from tqdm import tqdm

from .items import ItemEvaluator
from evals.score.metrics import FAMILIES, get_scorers
from evals.store import ResultStore

GOLD_FAMILIES = ("answer", "abstention", "retrieval")  # need a gold answer or gold evidence
GOLD_METRICS = ("citation_precision", "citation_recall")  # need gold evidence in the blocks
COSTLY = ("faithfulness",)  # families that embed (the offline support scorer): what --sample samples


def scorers_for(metrics: list[str] | None) -> dict:
    """Scorer families for metric or family names (cost metrics always: every row has a cost). An unknown
    name is an error listing the valid ones."""
    from evals.score.metrics import METRICS, SCORERS

    if not metrics:
        return get_scorers()
    fams, bad = [], []
    for m in metrics:
        if m in SCORERS:
            fams.append(m)
        elif m in METRICS and METRICS[m].family in SCORERS:
            fams.append(METRICS[m].family)
        else:
            bad.append(m)
    if bad:
        raise ValueError(f"--metrics: unknown metric(s) {', '.join(bad)}; valid: families "
                         f"{', '.join(SCORERS)} or metrics {', '.join(m for m in METRICS if METRICS[m].family in SCORERS)}")
    return get_scorers(list(dict.fromkeys(fams + ["cost"] if "cost" in SCORERS else fams)))


def _fold(text: str) -> str:
    return " ".join(text.split()).casefold()


def score_logged(path: str | Path, workspace: str | Path = "results", db: str | Path | None = None,
                 dataset: str | None = None, questions: str | None = None, name: str | None = None,
                 run_id: str | None = None, index_cfg=None, progress: bool = True, metrics: list[str] | None = None,
                 sample: int | None = None, seed: int = 0) -> dict:
    """Score a logged file and store it as a run. Returns {"run_id", "items", "matched", "unmatched": [...]}.
    ``metrics``: metric or family names to score (default all); ``sample``: the costly scorers (the offline
    support scorer) score a seeded sample of that many records, the others every record."""
    if sample is not None and sample < 1:
        raise ValueError(f"--sample must be >= 1, got {sample}")
    from rag.answer.prompts import count_prompt_tokens

    recs, vocab = read_logged(path)
    # the system's name, not the file's: the same records from a renamed file are the same point (gate)
    name = name or "logged"
    if name in STRATEGIES:
        raise ValueError(f"--name {name!r} is a strategy's; pick another")
    retriever, ds, gold_by_id, gold_by_text = None, None, {}, {}
    if dataset:
        from rag.index.workspace import IndexConfig, Workspace
        from rag.index.retrieval import Retriever

        ws = Workspace(workspace)
        cfg = index_cfg or IndexConfig()
        from .runner import questions_file_for

        ds = ws.load(dataset, questions_file_for(ws, dataset, questions), cfg, progress=progress)
        summ = ws.ingest(ds, cfg, progress=progress)
        retriever = Retriever(ws, summ.index)
        gold_by_id = {q.qid: q for q in ds.questions}
        for q in ds.questions:
            gold_by_text.setdefault(_fold(q.text), q)
    enc = retriever.reader.config.chunking.encoding if retriever else "o200k_base"
    scorers = scorers_for(metrics)
    if sample is not None and not any(f in scorers for f in COSTLY):
        raise ValueError(f"--sample {sample} samples the costly support scorer ({', '.join(COSTLY)}: faithfulness, "
                         "citation_support), which --metrics leaves out: drop --sample, or add faithfulness to "
                         "--metrics")
    ev = ItemEvaluator(retriever, None, scorers)
    rows, scores, unmatched, seen, qs = [], [], [], set(), []
    run_id = run_id or time.strftime("%Y%m%d-%H%M%S-") + uuid.uuid4().hex[:6]
    unknown_ids, unknown_docs = [], []
    prepared = []  # (rec, question, not_applicable, context, answer): everything but the scores
    for rec in tqdm(recs, disable=not progress, desc="reading records", unit="row"):
        q = (gold_by_id.get(rec.question_id) if rec.question_id else None) or gold_by_text.get(_fold(rec.question))
        if dataset and rec.question_id and rec.question_id not in gold_by_id:
            unknown_ids.append(rec)  # matched by text (or not at all): never silently
        na = {}
        if q is None:
            if dataset:
                unmatched.append(rec)
            qid = rec.question_id or f"row-{rec.row}"
            q = Question(qid, rec.question, [rec.reference] if rec.reference else [], True, "logged")
            why = ("matches no question of the gold set (by id or exact text)" if dataset
                   else "no gold set given (--dataset)")
            gold = [m for f in GOLD_FAMILIES for m in FAMILIES.get(f, [])] + list(GOLD_METRICS)
            if rec.reference:  # a logged reference answer is gold for answer correctness
                gold = [m for m in gold if m not in FAMILIES.get("answer", [])]
            na = {m: why for m in gold}
        if q.qid in seen:
            raise ValueError(f"{path}: row {rec.row}: question {q.qid!r} appears twice; one record per question")
        seen.add(q.qid)
        qs.append(q)
        if retriever is not None:
            from rag.answer.systems import context_blocks

            blocks, how = context_blocks(retriever.reader, rec.contexts, enc)
            if how.get("unknown_ids"):
                unknown_docs.append(rec.row)
        else:
            blocks = [Block(n, c["text"], "logged", (), (), (), (), count_tokens_memo(c["text"], enc),
                            float(c.get("score") or 0.0)) for n, c in enumerate(rec.contexts, 1)]
            how = {"by_id": 0, "by_text": 0, "unmatched": len(blocks)}
        given = rec.prompt_tokens is not None
        ans = Answer(rec.answer, "ok", rec.prompt_tokens if given else count_prompt_tokens(q.text, blocks, None, enc),
                     rec.completion_tokens if rec.completion_tokens is not None else count_tokens_memo(rec.answer, enc),
                     "endpoint" if given else "tokenizer")
        prepared.append((rec, q, na, Context(name, {}, blocks, {"row": rec.row, "located": how}), ans))
    costly = [f for f in COSTLY if f in scorers]
    sampled = None
    if sample is not None and sample < len(prepared) and costly:
        import random

        sampled = set(random.Random(seed).sample(range(len(prepared)), sample))
        why = (f"not in the seeded sample of {sample:,} of {len(prepared):,} records scored by "
               f"{', '.join(costly)} (--sample)")
        skip = {m: why for f in costly for m in FAMILIES.get(f, [])}
        prepared = [(rec, q, na if i in sampled else {**skip, **na}, ctx, ans)
                    for i, (rec, q, na, ctx, ans) in enumerate(prepared)]
    if "faithfulness" in scorers:  # e5 once per distinct text, in batches, before any row is scored
        from evals.score.metrics import ScoringInput, score_faithfulness
        from evals.score.support import collect_embeds, prefetch_embeds

        todo = [(q, ctx, ans) for i, (_, q, _, ctx, ans) in enumerate(prepared) if sampled is None or i in sampled]
        texts = collect_embeds(lambda: [score_faithfulness(ScoringInput(q, ctx.blocks, ans.text)) for q, ctx, ans
                                        in todo])
        prefetch_embeds(texts, progress)
    for rec, q, na, ctx, ans in tqdm(prepared, disable=not progress, desc="scoring", unit="row"):
        # the file is the run's (config.logged.file), never the point's parameters: renaming a log
        # must not make its records a different point
        row, sc = ev.finish(q, name, BaseParams(), "default", "defaults", 0, ctx, 0.0, 0.0,
                            extra_params={"logged": True}, answer=ans, not_applicable=na)
        if rec.latency_ms is not None:
            row["answer_ms"] = rec.latency_ms
        row["run_id"] = run_id
        rows.append(row)
        scores += [{"run_id": run_id, "strategy": name, "point_id": "default", "question_id": q.qid, "repeat": 0,
                    "metric": m, "value": v.value, "status": v.status, "detail": v.detail} for m, v in sc.items()]
    if unknown_ids:
        print(f"ragwb score: warning: {len(unknown_ids)} record(s) carry a question_id that {dataset} does not have "
              "(matched by question text instead where it matches): "
              + "; ".join(f"row {r.row} {r.question_id!r}" for r in unknown_ids[:10])
              + (" ..." if len(unknown_ids) > 10 else "") + f" (ids look like {next(iter(gold_by_id), '?')!r})",
              file=sys.stderr)
    if unknown_docs:
        print(f"ragwb score: warning: {len(unknown_docs)} record(s) name a context doc_id/page_id the corpus does not "
              f"have; those contexts were located by their text: rows {', '.join(map(str, unknown_docs[:10]))}"
              + (" ..." if len(unknown_docs) > 10 else ""), file=sys.stderr)
    if unmatched:
        print(f"ragwb score: {len(unmatched)} of {len(recs)} records match no question of {dataset} (by id or exact "
              "text), scored on the metrics that need no gold: "
              + "; ".join(f"row {r.row} {r.question[:50]!r}" for r in unmatched[:10])
              + (" ..." if len(unmatched) > 10 else ""), file=sys.stderr)
    from .runner import RunConfig, git_commit, package_versions

    cfg = RunConfig(dataset=ds.name if ds else "logged",  # the file is in config.logged.file, not the name
                    index=retriever.reader.config if retriever else (index_cfg or RunConfig().index), grid={})
    config = {**cfg.to_dict(), "logged": {"file": str(Path(path).resolve()), "vocabulary": vocab, "name": name,
                                           "metrics": list(scorers), "sample": sample, "seed": seed}}
    with ResultStore(db or Path(workspace) / "results.duckdb") as st:
        if ds:
            st.upsert_questions(ds.name, ds.questions)
        st.store_finished_run(  # one transaction: the whole file or nothing
            run_id, {"dataset": cfg.dataset, "index_name": retriever.index if retriever else None,
                     "config": config, "config_hash": cfg.hash, "versions": package_versions(),
                     "git_commit": git_commit(), "planned": len(rows),
                     "corpus": {d.doc_id: d.content_hash for d in ds.documents} if ds else {}},
            qs, rows, scores, {"items": len(rows), "source": f"ragwb score {Path(path).name}",
                               "records": len(recs), "unmatched": [r.row for r in unmatched],
                               "unknown_question_ids": [r.row for r in unknown_ids]})
    return {"run_id": run_id, "items": len(rows), "matched": len(rows) - len(unmatched),
            "unmatched": [r.row for r in unmatched], "vocabulary": vocab, "name": name}
