"""Questions generated from a corpus, with evidence by construction (docs/generate.md).

Passages are sampled from the corpus (stratified by document, seeded, boilerplate skipped); an LLM writes one
question and a short answer per passage (two passages of one document for ``multi``); the answer must be found
in its passage, and that span becomes the gold evidence. Every drop is counted by its reason; nothing is
written until the whole set is done, and then in one atomic replace, so a killed run leaves no half file (the
LLM cache makes the rerun cheap: only what was not answered is asked).
"""
from __future__ import annotations

import hashlib
import json
import os
import random
import re
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from rag.safeio import loads_bounded

from rag.ingest.textmatch import locate
from rag.llm.client import LLMClient, structured_format

TYPES = ("single", "multi", "unanswerable")
MIN_WORDS = 40  # a page shorter than this is a header, a caption or a stub: no question is asked of it
NEAR_DUPLICATE = 0.95  # cosine of two questions' embeddings above which the later one is dropped
FLAG_OVERLAP = 6  # a question sharing a run of this many words with its passage is lexical (favours BM25)
MAX_PASSAGE_CHARS = 6_000
MAX_ANSWER_WORDS = 25  # the prompt asks for a short answer; a longer one is a passage copied, not an answer
MIN_VALIDATE = 10  # generated questions --validate needs before ranking nine points means anything

PROMPTS = {
    "single": (
        "Write one question that a user of this document collection could ask and that the passage below "
        "answers, and its short answer copied word for word from the passage (a few words). Do not copy long "
        "phrases from the passage into the question.\n\nPassage:\n{p1}\n\n"
        'Reply with JSON only: {{"question": "...", "answer": "..."}}'),
    "multi": (
        "Write one question that needs BOTH passages below to answer, and its short answer copied word for word "
        "from one of them (a few words). Do not copy long phrases into the question.\n\nPassage 1:\n{p1}\n\n"
        'Passage 2:\n{p2}\n\nReply with JSON only: {{"question": "...", "answer": "..."}}'),
    "unanswerable": (
        "Write one question on the topic of the passage below that the passage does NOT answer (a reader would "
        "expect the answer nearby, but it is not there).\n\nPassage:\n{p1}\n\n"
        'Reply with JSON only: {{"question": "...", "answer": ""}}'),
}
PROMPT_SHA = hashlib.sha256(json.dumps(PROMPTS, sort_keys=True).encode()).hexdigest()[:16]
_TOC = re.compile(r"(\.{4,}|\s)\d{1,4}\s*$")


def boilerplate(text: str) -> str | None:
    """Why a page is no place for a question ('' when it is fine): too short, or a table of contents."""
    words = len(text.split())
    if words < MIN_WORDS:
        return "short"
    lines = [ln for ln in text.splitlines() if ln.strip()]
    if len(lines) >= 5 and sum(bool(_TOC.search(ln)) for ln in lines) / len(lines) > 0.5:
        return "table of contents"
    return None


def sample_passages(documents, n: int, types: tuple, seed: int = 0) -> tuple[list[tuple[str, list]], Counter]:
    """``n`` (type, [pages]) jobs: types in turn, documents in a seeded round robin (stratified: no document
    gives a second passage before every document gave one), each document's pages in a seeded order."""
    rng = random.Random(seed)
    skipped = Counter()
    pools = {}
    for d in documents:
        ok = []
        for p in d.pages:
            why = boilerplate(p.text)
            if why:
                skipped[why] += 1
            else:
                ok.append(p)
        if ok:
            rng.shuffle(ok)
            pools[d.doc_id] = ok
    order = sorted(pools)
    rng.shuffle(order)
    jobs, cursor, t, di, stuck = [], {d: 0 for d in order}, 0, 0, 0
    while len(jobs) < n and order:
        kind = types[t % len(types)]
        need = 2 if kind == "multi" else 1  # multi: two passages of one document
        for _ in range(len(order)):  # the next document in the round robin that still has `need` pages
            doc = order[di % len(order)]
            di += 1
            if cursor[doc] + need <= len(pools[doc]):
                break
        else:  # no document can serve this type any more: the next type, or stop when none can
            stuck += 1
            if stuck >= len(types):
                break
            t += 1
            continue
        stuck = 0
        jobs.append((kind, pools[doc][cursor[doc]:cursor[doc] + need]))
        cursor[doc] += need
        t += 1
    return jobs, skipped


def parse_reply(text: str | None) -> dict | None:
    """{"question", "answer"} from a reply (a JSON object, possibly inside a code fence), else None."""
    if not text:
        return None
    m = re.search(r"\{.*\}", text, re.S)
    if not m:
        return None
    try:
        d = json.loads(m.group(0))
    except ValueError:
        return None
    if not isinstance(d, dict) or not isinstance(d.get("question"), str) or not isinstance(d.get("answer", ""), str):
        return None
    return {"question": d["question"].strip(), "answer": (d.get("answer") or "").strip()}


def longest_shared_run(question: str, passage: str) -> int:
    """The longest run of consecutive words (case folded) the question copies from the passage."""
    q = re.findall(r"\w+", question.casefold())
    p = re.findall(r"\w+", passage.casefold())
    grams = {}
    best = 0
    for k in range(1, len(q) + 1):
        grams = {tuple(p[i:i + k]) for i in range(len(p) - k + 1)}
        if any(tuple(q[i:i + k]) in grams for i in range(len(q) - k + 1)):
            best = k
        else:
            break
    return best


@dataclass
class GenerateResult:
    questions: list[dict] = field(default_factory=list)
    counts: Counter = field(default_factory=Counter)  # drops and flags by reason
    skipped_pages: Counter = field(default_factory=Counter)
    stats: object = None


def check_types(types, what: str = "--types") -> tuple:
    """The question types asked for, each one of ``TYPES`` (an unknown one, or none, is an error naming the valid)."""
    types = tuple(t for t in (types or ()) if t)
    unknown = [t for t in types if t not in TYPES]
    if unknown or not types:
        raise ValueError(f"{what}: unknown type(s) {', '.join(unknown) or '(none)'}; valid: {', '.join(TYPES)}")
    return types


def question_messages(kind: str, pages: list, language: str = "auto") -> list[dict]:
    """The messages that ask for one question of ``kind`` about ``pages`` (the page's cost line counts these)."""
    texts = [p.text[:MAX_PASSAGE_CHARS] for p in pages]
    prompt = PROMPTS[kind].format(p1=texts[0], p2=texts[1] if len(texts) > 1 else "")
    if language != "auto":  # auto: the prompts leave the language to the passage's own
        prompt += f"\nWrite the question and the answer in this language: {language}."
    return [{"role": "user", "content": prompt}]


def reply_format(client: LLMClient) -> dict:
    """The request's structured-output parameters, as --llm-format asks ({} for plain text, parsed)."""
    return structured_format(client.cfg.response_format, "qa", {
        "type": "object", "additionalProperties": False, "required": ["question", "answer"],
        "properties": {"question": {"type": "string"}, "answer": {"type": "string"}}})


def _ask(client: LLMClient, kind: str, pages: list, extra: dict, language: str = "auto") -> tuple[dict | None, str]:
    msgs = question_messages(kind, pages, language)
    for attempt in range(2):  # a reply that is not the JSON asked for is asked once more, then counted
        res = client.chat(msgs, purpose="generate", repeat=attempt, **extra)
        if res.status != "ok":
            return None, f"error ({res.status}: {res.error[:120]})"
        d = parse_reply(res.text)
        if d is not None:
            return d, ""
    return None, "not the JSON asked for (after one retry)"


def generate(client: LLMClient, documents, n: int, types: tuple = ("single",), seed: int = 0,
             embed=None, max_overlap: int = 0, progress=None, language: str = "auto") -> GenerateResult:
    check_types(types)
    if n < 1:
        raise ValueError(f"--n must be >= 1, got {n}")
    out = GenerateResult()
    jobs, out.skipped_pages = sample_passages(documents, n, types, seed)
    if not jobs:
        raise ValueError("no passage to ask about: every page is shorter than "
                         f"{MIN_WORDS} words or a table of contents")
    if len(jobs) < n:
        out.counts[f"asked for {n}, the corpus has passages for {len(jobs)}"] += 1
    doc_language = {d.doc_id: d.language for d in documents}
    extra = reply_format(client)

    def one(job):
        kind, pages = job
        d, why = _ask(client, kind, pages, extra, language)
        return kind, pages, d, why

    replies = []
    with ThreadPoolExecutor(max_workers=client.cfg.max_concurrency) as ex:
        for reply in ex.map(one, jobs):  # counted on the caller's thread (a page's bar is updated only there)
            replies.append(reply)
            if progress is not None:
                progress.update(1)
    kept = []
    for kind, pages, d, why in replies:
        if d is None:
            out.counts[why.split(" (")[0]] += 1
            continue
        if not d["question"]:
            out.counts["empty question"] += 1
            continue
        # lengths first: a 1 MB "question" must not reach the fuzzy match, the overlap scan or the embedder
        if len(d["question"]) > MAX_QUESTION_CHARS:
            out.counts[f"question longer than {MAX_QUESTION_CHARS:,} characters"] += 1
            continue
        if len(d.get("answer") or "") > MAX_ANSWER_CHARS:
            out.counts[f"answer longer than {MAX_ANSWER_CHARS:,} characters"] += 1
            continue
        evidence, answers = [], []
        if kind != "unanswerable" and len(d["answer"].split()) > MAX_ANSWER_WORDS:
            out.counts[f"answer longer than {MAX_ANSWER_WORDS} words"] += 1
            continue
        if kind == "unanswerable":
            evidence = [{"doc": p.doc_id, "page": p.page_no} for p in pages]
        else:
            hit = next(((p, m) for p in pages if d["answer"] for m in [locate(d["answer"], p.text)] if m), None)
            if hit is None:
                out.counts["answer not found in its passage"] += 1
                continue
            p, m = hit
            answers = [p.text[m.start:m.end]]
            evidence = [{"doc": q.doc_id, "page": q.page_no, **({"text": answers[0]} if q is p else {})}
                        for q in pages]
        overlap = max(longest_shared_run(d["question"], p.text) for p in pages)
        if max_overlap and overlap > max_overlap:
            out.counts["copies the passage (--max-overlap)"] += 1
            continue
        if overlap >= FLAG_OVERLAP:
            out.counts[f"flagged lexical (shares >= {FLAG_OVERLAP} words in a row)"] += 1
        key = hashlib.sha256("\0".join(p.text for p in pages).encode()).hexdigest()[:16]
        kept.append({"id": f"gen-{key[:12]}-{kind}", "question": d["question"], "answers": answers,
                     "answerable": kind != "unanswerable", "type": kind,
                     "language": doc_language.get(pages[0].doc_id, "en") if language == "auto" else language,
                     "evidence": evidence,
                     "metadata": {"generator": {"model": client.cfg.model, "prompt_sha256": PROMPT_SHA, "seed": seed,
                                                "passage_key": key, "overlap_words": overlap,
                                                # what the reviewer reads beside the question (capped)
                                                "passage": "\n\n".join(p.text for p in pages)[:PASSAGE_CHARS],
                                                "verified": "answer span found in the passage" if answers else
                                                "not checked: the LLM's word that the passage does not answer it"}}})
    if embed is not None and len(kept) > 1:  # near-duplicate questions: the later one goes
        vecs = np.asarray(embed([k["question"] for k in kept]), dtype=np.float32)
        vecs /= np.maximum(np.linalg.norm(vecs, axis=1, keepdims=True), 1e-12)
        keep = []
        for i in range(len(kept)):
            if keep and float(np.max(vecs[keep] @ vecs[i])) >= NEAR_DUPLICATE:
                out.counts["near-duplicate question"] += 1
                continue
            keep.append(i)
        kept = [kept[i] for i in keep]
    out.questions = kept
    out.stats = client.stats
    return out


def write_jsonl(rows: list[dict], path: str | Path) -> Path:
    """All at once: a temporary file beside the target, then one atomic replace (never a half-written set)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".partial")
    with open(tmp, "w", encoding="utf-8") as f:
        for r in rows:
            f.write(json.dumps(r, ensure_ascii=False) + "\n")
    os.replace(tmp, path)
    return path


# --------------------------------------------------------------------------- do generated questions rank like real ones?

PASSAGE_CHARS = 4000  # the passage stored beside a generated question for its reviewer
MAX_QUESTION_CHARS = 1000  # a generated question longer than this is dropped before any costly check
MAX_ANSWER_CHARS = 1000

VALIDATION_POINTS = [("chunks", {"top_k": 2}), ("chunks", {"top_k": 5}), ("chunks", {"top_k": 10}),
                     ("hybrid", {"alpha": 0.2}), ("hybrid", {"alpha": 0.8}), ("parent_child", {"top_k": 3}),
                     ("parent_child", {"top_k": 6}), ("two_phase_pages", {}), ("full_documents", {})]
VALIDATION_METRICS = ("evidence_recall", "doc_ndcg@10", "page_ndcg@10")


def kendall_tau_b(x, y) -> float:
    """Kendall's tau-b of two equally long sequences (ties in either counted as tau-b counts them)."""
    x, y = np.asarray(x, float), np.asarray(y, float)
    i, j = np.triu_indices(len(x), 1)
    dx, dy = np.sign(x[i] - x[j]), np.sign(y[i] - y[j])
    s = float(np.sum(dx * dy))
    den = float(np.sqrt(np.sum(dx != 0) * np.sum(dy != 0)))
    return s / den if den else float("nan")


def _point_means(frame, metrics) -> dict:
    ok = frame[(frame.status == "ok") & frame.metric.isin(metrics)]
    return {k: g.groupby("question_id").value.mean() for k, g in ok.groupby(["metric", "strategy", "point_label"])}


def validate(sess, generated: list, points=None, limit: int = 200, resamples: int = 300, seed: int = 0) -> list[dict]:
    """The same points over the set's human questions and the generated ones: per metric, Kendall's tau of the
    points' means (95% bootstrap interval, questions resampled in both sets) and the share of point pairs whose
    paired difference has the same sign in both."""
    from dataclasses import replace

    from .interactive import Session, evaluate_points

    points = points or VALIDATION_POINTS
    human = evaluate_points(sess, points, limit)
    gen_sess = Session(replace(sess.dataset, questions=generated), sess.retriever, sess.evaluator)
    gen = evaluate_points(gen_sess, points, len(generated))
    mh, mg = _point_means(human, VALIDATION_METRICS), _point_means(gen, VALIDATION_METRICS)
    rng = np.random.default_rng(seed)
    rows = []
    for metric in VALIDATION_METRICS:
        keys = sorted(k[1:] for k in mh if k[0] == metric and (metric,) + k[1:] in mg)
        if len(keys) < 3:
            continue
        h = [mh[(metric,) + k] for k in keys]
        g = [mg[(metric,) + k] for k in keys]
        xh, xg = [s.mean() for s in h], [s.mean() for s in g]
        tau = kendall_tau_b(xh, xg)
        i, j = np.triu_indices(len(keys), 1)
        differ = np.sign(np.asarray(xh)[i] - np.asarray(xh)[j]) != 0
        same = np.sign(np.asarray(xh)[i] - np.asarray(xh)[j]) == np.sign(np.asarray(xg)[i] - np.asarray(xg)[j])
        qh = sorted(set().union(*[s.index for s in h]))
        qg = sorted(set().union(*[s.index for s in g]))
        boots = []
        for _ in range(resamples):
            bh = rng.choice(qh, len(qh))
            bg = rng.choice(qg, len(qg))
            boots.append(kendall_tau_b([s.reindex(bh).mean() for s in h], [s.reindex(bg).mean() for s in g]))
        lo, hi = np.nanpercentile(boots, [2.5, 97.5])
        rows.append({"metric": metric, "points": len(keys), "human_questions": len(qh),
                     "generated_questions": len(qg), "kendall_tau": tau, "low": float(lo), "high": float(hi),
                     "sign_agreement": float(same[differ].mean()) if differ.any() else float("nan")})
    return rows


# --------------------------------------------------------------------------- review before use (notebooks/review.py)

def read_generated(path: str | Path) -> list[dict]:
    """A generated (or any gold) JSONL as rows; a line that is not a JSON object is an error naming it."""
    rows = []
    for i, line in enumerate(Path(path).read_text(encoding="utf-8").splitlines(), start=1):
        if not line.strip():
            continue
        try:
            r = loads_bounded(line)  # a 100,000-deep line is an error naming it, never a RecursionError
        except ValueError as e:
            raise ValueError(f"{path} line {i}: not JSON ({e})") from None
        if not isinstance(r, dict) or "id" not in r or "question" not in r:
            raise ValueError(f"{path} line {i}: a question needs 'id' and 'question'")
        rows.append(r)
    ids = [r["id"] for r in rows]
    if len(set(ids)) != len(ids):
        dup = sorted({i for i in ids if ids.count(i) > 1})
        raise ValueError(f"{path}: question id(s) used twice: {', '.join(map(str, dup[:10]))}")
    return rows


def review_frame(rows: list[dict]):
    """One row per question for the review table: id, type, question, answer, evidence, copied words and the
    passage it was written from (its head; ``passage_text`` has it whole)."""
    import pandas as pd

    return pd.DataFrame([{"id": r["id"], "type": r.get("type", ""), "question": r["question"],
                          "answer": "; ".join(r.get("answers") or []),
                          "evidence": "; ".join(f"{e.get('doc')}#p{e.get('page')}" for e in r.get("evidence") or []),
                          "copied_words": ((r.get("metadata") or {}).get("generator") or {}).get("overlap_words"),
                          "passage": (passage_text(r)[:160] + ("…" if len(passage_text(r)) > 160 else ""))}
                         for r in rows])


def passage_text(row: dict) -> str:
    """The passage a generated question was written from (stored by ``ragwb generate``), else its evidence
    texts, else ''."""
    gen = (row.get("metadata") or {}).get("generator") or {}
    if isinstance(gen.get("passage"), str):
        return gen["passage"]
    return " … ".join(e["text"] for e in row.get("evidence") or [] if isinstance(e, dict) and
                      isinstance(e.get("text"), str))


def review_paths(questions: str | Path, out: str | Path | None) -> Path:
    """Where the accepted set goes: ``--out``, else QUESTIONS.accepted.jsonl. The generated file itself is
    never the target (a review must not rewrite what it reviews)."""
    q = Path(questions)
    target = Path(out) if out else q.with_name(q.name.removesuffix(".jsonl") + ".accepted.jsonl")
    if target.resolve() == q.resolve():
        raise ValueError(f"--out {out} is the generated file itself; the review never rewrites it: give another "
                         "--out (default: QUESTIONS.accepted.jsonl)")
    return target


def resume_review(rows: list[dict], accepted: list[dict]) -> tuple[list, dict, str]:
    """A review saved before: (the ids it kept, its rewrites, its reviewer), so a second Save starts from the
    last accepted file instead of the generated one. Accepted rows whose id is not generated are an error."""
    by_id = {r["id"]: r for r in rows}
    stray = [a["id"] for a in accepted if a.get("id") not in by_id]
    if stray:
        raise ValueError(f"the accepted file has question id(s) the generated file lacks: {', '.join(map(str, stray[:10]))}")
    edits = {a["id"]: a["question"] for a in accepted if a["question"] != by_id[a["id"]]["question"]}
    who = next((((a.get("metadata") or {}).get("review") or {}).get("reviewer", "") for a in accepted), "")
    return [a["id"] for a in accepted], edits, who


def pending_edit(edits: dict, qid, typed: str, original: str) -> dict:
    """The rewrites to save, with the one typed in the box but not yet kept (a Save never drops typing)."""
    typed = (typed or "").strip()
    if qid is None or not typed or typed == (edits.get(qid) or original):
        return dict(edits)
    return {**edits, qid: typed}


def apply_review(rows: list[dict], kept_ids, edits: dict, reviewer: str) -> list[dict]:
    """The accepted set: the kept questions, edited where the reviewer rewrote them, each with its review
    (who, when, whether edited and the original text) beside the generator's provenance."""
    import copy
    import datetime

    who = (reviewer or "").strip()
    if not who:
        raise ValueError("who reviewed? type your name first")
    kept_ids = set(kept_ids)
    unknown = sorted(set(edits) - {r["id"] for r in rows}, key=str)
    if unknown:
        raise ValueError(f"edits of unknown question id(s): {', '.join(map(str, unknown))}")
    at = datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")
    out = []
    for r in rows:
        if r["id"] not in kept_ids:
            continue
        r2 = copy.deepcopy(r)
        new = (edits.get(r["id"]) or "").strip()
        edited = bool(new) and new != r["question"]
        if edited:
            r2["question"] = new
        r2.setdefault("metadata", {})["review"] = {"reviewer": who, "at": at, "edited": edited,
                                                   **({"original": r["question"]} if edited else {})}
        out.append(r2)
    return out
