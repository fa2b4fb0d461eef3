"""``ragwb score FILE``: a system's logged outputs scored and stored as a run, the same way as any point.

With ``--dataset`` the records join the gold set by question id, else by the exact question text
(whitespace folded); contexts are located in the ingested corpus (by id or by text), so every metric
applies. A record that matches no gold question is still scored on what needs no gold, and the
unmatched are counted and named. Without a dataset the reference-free metrics are scored
(faithfulness, citation validity, statement coverage, tokens; answer correctness too when the record
has a ``reference``) and every other metric is ``not_applicable`` with the reason.

Logs run to millions of rows, so the file is streamed twice and never held: a first pass checks every
record (a malformed row or a duplicate question stores nothing), counts them and fingerprints the file;
the second scores ``batch`` records at a time and commits each batch with its questions, so memory
follows the batch and a kill loses at most the batch in flight (``--resume RUN`` scores the rest).
"""
from __future__ import annotations

import hashlib
import sys
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path

from rag.answer.answerers import Answer
from rag.answer.logged import iter_logged
from rag.models import Question
from rag.strategies import STRATEGIES, BaseParams, Block, Context
from rag.tokens import count_tokens_memo
from tqdm import tqdm

from .items import ItemEvaluator
from evals.score.metrics import FAMILIES, get_scorers
from evals.store import ResultStore, run_writer

GOLD_FAMILIES = ("answer", "abstention", "retrieval")  # need a gold answer or gold evidence
GOLD_METRICS = ("citation_precision", "citation_recall")  # need gold evidence in the blocks
COSTLY = ("faithfulness", "relevance_standin")  # families that embed (support scorer, relevance stand-in): --sample
BATCH = 10_000  # records scored and committed together: memory and what a kill can lose
KEEP_ROWS = 1_000  # rows named in a run's summary per kind (unmatched, unknown ids); the counts are whole


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


@dataclass
class Gold:
    """The gold set records join (empty without ``--dataset``) and the retriever that locates contexts."""
    dataset: str | None = None
    ds: object = None
    retriever: object = None
    by_id: dict = field(default_factory=dict)
    by_text: dict = field(default_factory=dict)

    @property
    def encoding(self) -> str:
        return self.retriever.reader.config.chunking.encoding if self.retriever else "o200k_base"

    def match(self, rec) -> tuple[Question, dict, bool]:
        """(question, metrics not applicable -> why, matched) for a record."""
        q = (self.by_id.get(rec.question_id) if rec.question_id else None) or self.by_text.get(_fold(rec.question))
        if q is not None:
            return q, {}, True
        qid = rec.question_id or f"row-{rec.row}"
        q = Question(qid, rec.question, [rec.reference] if rec.reference else [], True, "logged")
        why = ("matches no question of the gold set (by id or exact text)" if self.dataset
               else "no gold set given (--dataset)")
        gold = [m for f in GOLD_FAMILIES for m in FAMILIES.get(f, [])] + list(GOLD_METRICS)
        if rec.reference:  # a logged reference answer is gold for answer correctness
            gold = [m for m in gold if m not in FAMILIES.get("answer", [])]
        return q, {m: why for m in gold}, False


def load_gold(workspace, dataset, questions, index_cfg, progress) -> Gold:
    if not dataset:
        return Gold()
    from rag.index.retrieval import Retriever
    from rag.index.workspace import IndexConfig, Workspace

    from .runner import questions_file_for

    ws = Workspace(workspace)
    cfg = index_cfg or IndexConfig()
    ds = ws.load(dataset, questions_file_for(ws, dataset, questions), cfg, progress=progress)
    summ = ws.ingest(ds, cfg, progress=progress)
    return gold_from(dataset, ds, Retriever(ws, summ.index))


def gold_from(dataset: str, ds, retriever) -> Gold:
    """The gold set of a loaded dataset and its retriever (the workbench page's session has both already)."""
    gold = Gold(dataset, ds, retriever, {q.qid: q for q in ds.questions})
    for q in ds.questions:
        gold.by_text.setdefault(_fold(q.text), q)
    return gold


@dataclass
class Checked:
    """What the first pass over the file found: every record valid, these counts and rows."""
    vocab: str
    records: int = 0
    sha256: str = ""
    unmatched: int = 0
    unmatched_rows: list = field(default_factory=list)  # (row, question) of the first KEEP_ROWS
    unknown_ids: list = field(default_factory=list)  # (row, question_id) of the first KEEP_ROWS
    unknown_id_count: int = 0
    bad_rows: list = field(default_factory=list)  # (row, why) of the rows skipped as unstorable (all of them)


def file_sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        while chunk := fh.read(1 << 20):
            h.update(chunk)
    return h.hexdigest()


def check_file(path: Path, gold: Gold, cell_mb, progress: bool) -> Checked:
    """Every record read and matched once, nothing kept but counts: a malformed row or a question twice
    is an error before anything is stored."""
    vocab, recs = iter_logged(path, cell_mb)
    out, seen = Checked(vocab), set()
    for rec in tqdm(recs, disable=not progress, desc="checking records", unit="row", mininterval=0.5):
        out.records += 1
        q, _, matched = gold.match(rec)
        if gold.dataset and rec.question_id and rec.question_id not in gold.by_id:
            out.unknown_id_count += 1  # matched by text (or not at all): never silently
            if len(out.unknown_ids) < KEEP_ROWS:
                out.unknown_ids.append((rec.row, rec.question_id))
        if gold.dataset and not matched:
            out.unmatched += 1
            if len(out.unmatched_rows) < KEEP_ROWS:
                out.unmatched_rows.append((rec.row, rec.question))
        if q.qid in seen:
            raise ValueError(f"{path}: row {rec.row}: question {q.qid!r} appears twice; one record per question")
        seen.add(q.qid)
    out.bad_rows = list(getattr(recs, "skipped", []))
    out.sha256 = file_sha256(path)
    return out


class BatchScorer:
    """Records -> stored rows and scores, one batch at a time."""

    def __init__(self, gold: Gold, name: str, scorers: dict, run_id: str, sampled: set | None, sample_why: dict):
        self.gold, self.name, self.scorers, self.run_id = gold, name, scorers, run_id
        self.sampled, self.sample_why = sampled, sample_why
        self.ev = ItemEvaluator(gold.retriever, None, scorers)
        self.unknown_docs = []  # rows whose context doc_id/page_id the corpus lacks (first KEEP_ROWS)
        self.unknown_doc_count = 0
        self.contexts, self.unlocated, self.unlocated_rows = 0, 0, []  # contexts found in no document (said)

    def prepare(self, index: int, rec, q, na: dict):
        """(question, not applicable, context, answer) of the record at 0-based ``index`` matched to ``q``:
        everything but the scores."""
        from rag.answer.prompts import count_prompt_tokens

        enc = self.gold.encoding
        if self.gold.retriever is not None:
            from rag.answer.systems import context_blocks

            blocks, how = context_blocks(self.gold.retriever.reader, rec.contexts, enc)
            self.contexts += len(blocks)
            if how.get("unmatched"):
                self.unlocated += how["unmatched"]
                if len(self.unlocated_rows) < KEEP_ROWS:
                    self.unlocated_rows.append(rec.row)
            if how.get("unknown_ids"):
                self.unknown_doc_count += 1
                if len(self.unknown_docs) < KEEP_ROWS:
                    self.unknown_docs.append(rec.row)
        else:
            blocks = [Block(n, c["text"], "logged", (), (), (), (), count_tokens_memo(c["text"], enc),
                            float(c.get("score") or 0.0)) for n, c in enumerate(rec.contexts, 1)]
            how = {"by_id": 0, "by_text": 0, "unmatched": len(blocks)}
        if self.sampled is not None and index not in self.sampled:
            na = {**self.sample_why, **na}
        given = rec.prompt_tokens is not None
        ans = Answer(rec.answer, "ok", rec.prompt_tokens if given else count_prompt_tokens(q.text, blocks, None, enc),
                     rec.completion_tokens if rec.completion_tokens is not None else count_tokens_memo(rec.answer, enc),
                     "endpoint" if given else "tokenizer")
        return q, na, Context(self.name, {}, blocks, {"row": rec.row, "located": how}), ans

    def score(self, batch: list[tuple[int, object, tuple]], progress: bool = False):
        """(questions, result rows, score rows) of a batch of (index, record, its gold match)."""
        prepared = [(rec, *self.prepare(i, rec, q, na)) for i, rec, (q, na, _) in batch]
        if "faithfulness" in self.scorers:  # e5 once per distinct text of the batch, before any row is scored
            from evals.score.metrics import ScoringInput, score_faithfulness
            from evals.score.support import collect_embeds, prefetch_embeds

            todo = [(q, ctx, ans) for (i, _, _), (_, q, _, ctx, ans) in zip(batch, prepared)
                    if self.sampled is None or i in self.sampled]
            texts = collect_embeds(lambda: [score_faithfulness(ScoringInput(q, ctx.blocks, ans.text))
                                            for q, ctx, ans in todo])
            prefetch_embeds(texts, progress)
        if "relevance_standin" in self.scorers and self.ev.embed is not None:  # one batched embedding per batch
            from rag.answer.prompts import is_fallback, strip_citations

            texts = [t for (i, _, _), (_, q, _, _, ans) in zip(batch, prepared)
                     if (self.sampled is None or i in self.sampled) and ans.status == "ok" and not is_fallback(ans.text)
                     for t in (q.text, strip_citations(ans.text).strip()[:2000]) if t]
            if texts:
                self.ev.embed(list(dict.fromkeys(texts)))
        questions, rows, scores = [], [], []
        for rec, q, na, ctx, ans in prepared:
            # the file is the run's (config.logged.file), never the point's parameters: renaming a log
            # must not make its records a different point
            row, sc = self.ev.finish(q, self.name, BaseParams(), "default", "defaults", 0, ctx, 0.0, 0.0,
                                     extra_params={"logged": True}, answer=ans, not_applicable=na)
            if rec.latency_ms is not None:
                row["answer_ms"] = rec.latency_ms
            row["run_id"] = self.run_id
            questions.append(q)
            rows.append(row)
            scores += [{"run_id": self.run_id, "strategy": self.name, "point_id": "default", "question_id": q.qid,
                        "repeat": 0, "metric": m, "value": v.value, "status": v.status, "detail": v.detail}
                       for m, v in sc.items()]
        return questions, rows, scores


def _sample(checked: Checked, sample: int | None, seed: int, costly: list) -> tuple[set | None, dict]:
    if sample is None or sample >= checked.records or not costly:
        return None, {}
    import random

    sampled = set(random.Random(seed).sample(range(checked.records), sample))
    why = (f"not in the seeded sample of {sample:,} of {checked.records:,} records scored by "
           f"{', '.join(costly)} (--sample)")
    return sampled, {m: why for f in costly for m in FAMILIES.get(f, [])}


def _warn(checked: Checked, scorer: BatchScorer, gold: Gold) -> None:
    def rows(items, n):
        return "; ".join(items[:10]) + (" ..." if n > 10 else "")

    if checked.bad_rows:
        print(f"ragwb score: {len(checked.bad_rows)} bad row(s) skipped, the rest scored: "
              + rows([f"row {r}: {why}" for r, why in checked.bad_rows], len(checked.bad_rows)), file=sys.stderr)

    if checked.unknown_id_count:
        print(f"ragwb score: warning: {checked.unknown_id_count} record(s) carry a question_id that {gold.dataset} "
              "does not have (matched by question text instead where it matches): "
              + rows([f"row {r} {qid!r}" for r, qid in checked.unknown_ids], checked.unknown_id_count)
              + f" (ids look like {next(iter(gold.by_id), '?')!r})", file=sys.stderr)
    if scorer.unknown_doc_count:
        print(f"ragwb score: warning: {scorer.unknown_doc_count} record(s) name a context doc_id/page_id the corpus "
              "does not have; those contexts were located by their text: rows "
              + rows([str(r) for r in scorer.unknown_docs], scorer.unknown_doc_count).replace("; ", ", "),
              file=sys.stderr)
    if scorer.unlocated:
        from rag.ingest.textmatch import FUZZY_MAX_CHARS

        print(f"ragwb score: warning: {scorer.unlocated:,} of {scorer.contexts:,} context(s) were found in no document "
              f"of {gold.dataset} (exact, normalised, or fuzzy up to {FUZZY_MAX_CHARS:,} characters): evidence, page "
              "and citation-to-source metrics see them as outside the corpus; rows "
              + rows([str(r) for r in scorer.unlocated_rows], len(scorer.unlocated_rows)).replace("; ", ", "),
              file=sys.stderr)
    if checked.unmatched:
        print(f"ragwb score: {checked.unmatched} of {checked.records} records match no question of {gold.dataset} "
              "(by id or exact text), scored on the metrics that need no gold: "
              + rows([f"row {r} {q[:50]!r}" for r, q in checked.unmatched_rows], checked.unmatched), file=sys.stderr)


def _resumed(st: ResultStore, run_id: str, path: Path, checked: Checked, asked: dict) -> dict:
    """The stored ``logged`` config of the run to resume, after checking it is this file, unfinished, and
    that no flag asks for something else (never silently do less than asked)."""
    run = st.run(run_id)  # its config parsed
    logged = run["config"].get("logged")
    if not logged:
        raise ValueError(f"--resume {run_id}: not a run of `ragwb score` (resume it with `ragwb run --resume`)")
    if run["status"] == "finished":
        raise ValueError(f"--resume {run_id}: the run is finished; nothing to resume")
    if logged.get("sha256") != checked.sha256:
        raise ValueError(f"--resume {run_id}: {path} is not the file the run scored ({logged.get('file')}, "
                         f"sha256 {str(logged.get('sha256'))[:12]}...; this one {checked.sha256[:12]}...)")
    clash = [f"--{k} {v!r} (the run has {logged.get(k)!r})" for k, v in asked.items()
             if v is not None and v != logged.get(k)]
    if clash:
        raise ValueError(f"--resume {run_id} scores as the run was started; drop " + ", ".join(clash))
    return logged


def score_logged(path: str | Path, workspace: str | Path = "results", db: str | Path | None = None,
                 dataset: str | None = None, questions: str | None = None, name: str | None = None,
                 run_id: str | None = None, index_cfg=None, progress: bool = True, metrics: list[str] | None = None,
                 sample: int | None = None, seed: int | None = None, resume: str | None = None,
                 batch: int = BATCH, max_cell_mb: float | None = None, options: dict | None = None,
                 gold: Gold | None = None, on_progress=None) -> dict:
    """Score a logged file and store it as a run. Returns {"run_id", "items", "matched", "unmatched" (count),
    "vocabulary", "name", "options"}. ``metrics``: metric or family names to score (default all);
    ``sample``: the costly scorers (the offline support scorer) score a seeded sample of that many records,
    the others every record; ``resume``: a run of this file a kill left unfinished; ``gold``: the gold set of
    ``dataset`` already loaded (``gold_from``), so it is not loaded again; ``on_progress(n, total)``: n more
    records stored (or found stored by a resume) of the file's total, after each batch (the page's bar)."""
    if sample is not None and sample < 1:
        raise ValueError(f"--sample must be >= 1, got {sample}")
    path = Path(path)
    db = Path(db or Path(workspace) / "results.duckdb")
    if resume:  # the gold set and index the run was started with (a flag asking otherwise is refused below)
        from .runner import RunConfig

        with ResultStore(db, read_only=True) as st:
            resume = st.resolve_run(resume)
            prior = st.run(resume)["config"]
        was = prior.get("logged") or {}
        if dataset and dataset != was.get("dataset") or questions and questions != was.get("questions"):
            raise ValueError(f"--resume {resume} scores against the run's gold set ({was.get('dataset') or 'none'}); "
                             "drop --dataset/--questions")
        dataset, questions = was.get("dataset"), was.get("questions")
        # the stored config is a RunConfig's plus the score's own "logged" record: read the run's part only
        index_cfg = RunConfig.from_dict({k: v for k, v in prior.items() if k != "logged"}).index if dataset else None
    if gold is None or gold.dataset != dataset:
        gold = load_gold(workspace, dataset, questions, index_cfg, progress)
    checked = check_file(path, gold, max_cell_mb, progress)
    if resume:
        with ResultStore(db, read_only=True) as st:
            logged = _resumed(st, resume, path, checked, {"name": name, "metrics": metrics and list(
                scorers_for(metrics)), "sample": sample, "seed": seed})
            done = {qid for _, _, qid, _ in st.done_keys(resume)}
        name, sample, seed, run_id = logged["name"], logged["sample"], logged["seed"], resume
        scorers, options = get_scorers(logged["metrics"]), logged.get("options") or {}
    else:
        name, seed, done = name or "logged", seed or 0, set()  # the system's name, not the file's (gate)
        if name in STRATEGIES:
            raise ValueError(f"--name {name!r} is a strategy's; pick another")
        scorers = scorers_for(metrics)
        run_id = run_id or time.strftime("%Y%m%d-%H%M%S-") + uuid.uuid4().hex[:6]
    costly = [f for f in COSTLY if f in scorers]
    if sample is not None and not costly:
        raise ValueError(f"--sample {sample} samples the costly support scorer and the relevance "
                         "stand-in (faithfulness, citation_support, question_answer_similarity), which --metrics leaves out: drop --sample, or add faithfulness "
                         "to --metrics")
    scorer = BatchScorer(gold, name, scorers, run_id, *_sample(checked, sample, seed, costly))
    with run_writer(db, run_id, "ragwb score FILE --resume"), ResultStore(db) as st:
        if not resume:
            _create_run(st, run_id, path, gold, checked, {"name": name, "metrics": list(scorers), "sample": sample,
                                                         "seed": seed, "options": options or {},
                                                         "dataset": dataset, "questions": questions}, index_cfg)
        try:
            stored = _score_batches(st, path, checked, scorer, done, batch, max_cell_mb, progress, on_progress)
        except Exception as e:  # what was committed stays; the rest resumes
            from rag.llm.urls import scrub_cut

            st.mark_incomplete(run_id, {"error": scrub_cut(f"{type(e).__name__}: {e}", 500)})
            raise
        _warn(checked, scorer, gold)
        st.finish_run(run_id, {"items": stored + len(done), "source": f"ragwb score {path.name}",
                               "records": checked.records, "unmatched": [r for r, _ in checked.unmatched_rows],
                               "bad_rows": [{"row": r, "why": w} for r, w in checked.bad_rows[:KEEP_ROWS]],
                               "bad_row_count": len(checked.bad_rows),
                               "unmatched_count": checked.unmatched,
                               "unknown_question_ids": [r for r, _ in checked.unknown_ids],
                               "unknown_question_id_count": checked.unknown_id_count,
                               "unlocated_contexts": scorer.unlocated, "contexts": scorer.contexts,
                               "resumed": len(done) if resume else None})
    return {"run_id": run_id, "items": checked.records, "matched": checked.records - checked.unmatched,
            "unmatched": checked.unmatched, "vocabulary": checked.vocab, "name": name, "options": options or {},
            "resumed": len(done), "dataset": gold.dataset, "contexts": scorer.contexts, "unlocated": scorer.unlocated}


def scored_line(res: dict, path) -> str:
    """What a scored file came to, as `ragwb score` and the workbench page say it."""
    return (f"scored {res['items']:,} records of {path} ({res['vocabulary']} columns) as {res['name']} in run "
            f"{res['run_id']}" + (f" ({res['resumed']:,} stored before the resume)" if res["resumed"] else "")
            + (f"; {res['matched']:,} matched the gold set, {res['unmatched']:,} did not"
               if res["dataset"] else "; no gold set: reference-free metrics only")
            + (f"; {res['unlocated']:,} of {res['contexts']:,} context(s) found in no document of {res['dataset']}"
               if res.get("unlocated") else ""))


def _create_run(st, run_id, path, gold, checked, asked: dict, index_cfg) -> None:
    from .runner import RunConfig, git_commit, package_versions

    cfg = RunConfig(dataset=gold.ds.name if gold.ds else "logged",  # the file is in config.logged.file
                    index=gold.retriever.reader.config if gold.retriever else (index_cfg or RunConfig().index),
                    grid={})
    config = {**cfg.to_dict(), "logged": {"file": str(path.resolve()), "sha256": checked.sha256,
                                           "vocabulary": checked.vocab, **asked}}
    if gold.ds:
        st.upsert_questions(gold.ds.name, gold.ds.questions)
    st.create_run(run_id, {"dataset": cfg.dataset, "index_name": gold.retriever.index if gold.retriever else None,
                           "config": config, "config_hash": cfg.hash, "versions": package_versions(),
                           "git_commit": git_commit(), "planned": checked.records, "options": asked["options"],
                           "corpus": {d.doc_id: d.content_hash for d in gold.ds.documents} if gold.ds else {}})


def _score_batches(st, path, checked, scorer: BatchScorer, done: set, batch: int, max_cell_mb, progress,
                   on_progress=None) -> int:
    """Score the records not ``done``, ``batch`` at a time, each batch committed on its own; the count stored."""
    _, recs = iter_logged(path, max_cell_mb)
    bar = tqdm(total=checked.records, disable=not progress, desc="scoring", unit="row", initial=0, mininterval=0.5)
    pending, stored, skipped = [], 0, 0

    def flush():
        nonlocal stored, skipped
        if pending:
            st.write_scored_batch(scorer.run_id, *scorer.score(pending, progress))
            stored += len(pending)
            bar.update(len(pending))
        if on_progress is not None:
            on_progress(len(pending) + skipped, checked.records)
        pending.clear()
        skipped = 0

    for i, rec in enumerate(recs):
        match = scorer.gold.match(rec)  # once a record: the resume's check and the scoring share it
        if match[0].qid in done:
            bar.update(1)
            skipped += 1
            continue
        pending.append((i, rec, match))
        if len(pending) >= batch:
            flush()
    if pending or skipped:
        flush()
    bar.close()
    return stored
