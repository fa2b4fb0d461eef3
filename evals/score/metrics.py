"""Metrics, registered by name in scorer families. Formulas: docs/metrics.md.

A scorer gets one ``ScoringInput`` and returns ``{metric: Score}``. A metric that does
not apply to a question (e.g. missed abstention on an answerable one) is simply not
returned; a metric that applies but cannot be computed gets a non-ok status and no
value, and is stored that way: never dropped, never averaged as a number.
"""
from __future__ import annotations

import functools
import math
import re
import string
from collections import Counter
from dataclasses import dataclass, field
from typing import Callable

from rag.answer.answerers import split_sentences
from rag.models import Evidence, Question
from rag.answer.prompts import FALLBACK, is_fallback, parse_citations, strip_citations
from rag.tokens import estimate_tokens

STATUSES = ("ok", "undetermined", "parse_error", "timeout", "rate_limited", "error", "not_applicable",
            "context_overflow")
# not_applicable: the metric cannot tell anything here (e.g. the answerer meets it by construction);
# stored with its reason, left out of means, charts, Pareto fronts, the gate and error rates
NOT_FAILURES = ("ok", "not_applicable")


@dataclass(slots=True)
class Score:
    value: float | None
    status: str = "ok"
    detail: str = ""


@dataclass
class ScoringInput:
    question: Question
    blocks: list  # rag.strategies.Block
    answer: str
    answer_status: str = "ok"
    prompt_tokens: int = 0
    completion_tokens: int = 0
    price_usd: float | None = 0.0  # None: the answering model has no known price
    counters: dict = field(default_factory=dict)
    embed: Callable | None = None  # texts -> normalised query vectors (optional)
    by_construction: dict = field(default_factory=dict)  # metric -> why the answerer meets it by construction
    history_tokens: int | None = None  # conversations: tokens of the history the memory policy put in the prompt
    bypassed: bool | None = None  # conversations: did this turn skip retrieval?
    fallback: str = FALLBACK  # the abstention sentence (a run's prompt template may set its own)


@dataclass(frozen=True)
class MetricInfo:
    name: str
    family: str
    higher_is_better: bool
    description: str


METRICS: dict[str, MetricInfo] = {}
SCORERS: dict[str, Callable[[ScoringInput], dict[str, Score]]] = {}
FAMILIES: dict[str, list[str]] = {}  # scorer family -> the metrics it writes


def scorer(family: str, metrics: dict[str, tuple[bool, str]]):
    """Register a scorer family producing ``metrics`` = {name: (higher_is_better, description)}."""
    def deco(fn):
        SCORERS[family] = fn
        FAMILIES[family] = list(metrics)
        for name, (hib, desc) in metrics.items():
            METRICS[name] = MetricInfo(name, family, hib, desc)
        return fn
    return deco


# judged metrics (docs/judgments.md): computed when a run is read, from the relevance judgments stored then
# (evals/analyze/judgments.py); never written into a run's scores, so judgments added later apply to old runs too
for _name, _desc in (("judged_ndcg@10", "nDCG@10 over blocks, graded 0-3 by the stored judgments (unjudged = 0)"),
                     ("judged_recall@10", "share of the question's passages judged >= 2 found in the top 10 blocks"),
                     ("judged_precision@5", "share of the top 5 blocks judged >= 2 (of 5)"),
                     ("judged@10", "share of the top 10 blocks with a judgment: how far the judged metrics can be trusted")):
    METRICS[_name] = MetricInfo(_name, "judged", True, _desc)

# LLM judges (evals/score/judges.py) write these; they run only when a judge endpoint is configured
for _name, _desc in (("ragas_faithfulness", "ragas Faithfulness judged by an LLM"),
                     ("ragas_context_recall", "ragas ContextRecall (LLM): reference claims found in the context"),
                     ("ragas_answer_accuracy", "ragas AnswerAccuracy (LLM): answer vs the reference answer"),
                     ("llm_faithfulness", "share of statements an LLM judge finds supported"),
                     ("answer_relevance", "LLM judge: does the answer address the question (0-3 rubric / 3; "
                                          "reference-free)")):
    METRICS[_name] = MetricInfo(_name, "judge", True, _desc)


def get_scorers(names: list[str] | None = None) -> dict[str, Callable]:
    if not names:
        return dict(SCORERS)
    bad = [n for n in names if n not in SCORERS]
    if bad:
        raise KeyError(f"unknown scorer(s) {bad}; valid: {', '.join(SCORERS)}")
    return {n: SCORERS[n] for n in names}


def score_all(inp: ScoringInput, scorers: dict[str, Callable] | None = None) -> dict[str, Score]:
    out: dict[str, Score] = {}
    for fam, fn in (scorers or SCORERS).items():
        names = FAMILIES.get(fam, [])
        if names and all(n in inp.by_construction for n in names):
            # every metric of the family is met by construction (extractive answers): not computed
            # at all, each stored as not_applicable with its reason (when it would apply)
            if inp.answer_status == "ok" and not is_fallback(inp.answer, inp.fallback):
                out.update({n: Score(None, "not_applicable", inp.by_construction[n]) for n in names})
            continue
        try:
            out.update(fn(inp))
        except Exception as e:  # a scorer bug must not lose the row: record it
            for name in names:
                out[name] = Score(None, "error", f"{type(e).__name__}: {e}"[:300])
    if inp.question.qtype == "filler":  # an inserted "thanks": only cost and the bypass decision mean anything
        out = {k: v for k, v in out.items() if METRICS.get(k) and METRICS[k].family in ("cost", "conversation")}
    for name, why in inp.by_construction.items():
        if name in out and out[name].status == "ok":
            out[name] = Score(None, "not_applicable", why)
    return out


# --------------------------------------------------------------------------- SQuAD v2 answer metrics

_PUNCT = str.maketrans("", "", string.punctuation)


def normalize_answer(s: str) -> str:
    """Official SQuAD v2 normalisation: lowercase, drop punctuation and articles, collapse spaces."""
    s = s.lower().translate(_PUNCT)
    s = re.sub(r"\b(a|an|the)\b", " ", s)
    return " ".join(s.split())


def exact_match(pred: str, gold: str) -> float:
    return float(normalize_answer(pred) == normalize_answer(gold))


def f1_score(pred: str, gold: str) -> float:
    p, g = normalize_answer(pred).split(), normalize_answer(gold).split()
    if not p or not g:
        return float(p == g)
    common = Counter(p) & Counter(g)
    same = sum(common.values())
    if same == 0:
        return 0.0
    prec, rec = same / len(p), same / len(g)
    return 2 * prec * rec / (prec + rec)


def _failed(inp: ScoringInput, names: list[str]) -> dict[str, Score] | None:
    if inp.answer_status != "ok":
        return {n: Score(None, inp.answer_status, "answer not available") for n in names}
    return None


ABSTAINED = "the answer abstained: no statement to check"
UNKNOWN_ANSWERABILITY = "answerability unknown: the gold line has no 'answers' (add answers, or \"answers\": [] for unanswerable)"


@scorer("answer", {"em": (True, "exact match, best over gold answers (SQuAD v2)"),
                   "f1": (True, "token F1, best over gold answers (SQuAD v2)")})
def score_answer(inp: ScoringInput) -> dict[str, Score]:
    if (f := _failed(inp, ["em", "f1"])) is not None:
        return f
    q, fb = inp.question, is_fallback(inp.answer, inp.fallback)
    if q.answerable is None:  # nobody wrote an answer: not a zero (docs/datasets.md)
        return {"em": Score(None, "not_applicable", UNKNOWN_ANSWERABILITY),
                "f1": Score(None, "not_applicable", UNKNOWN_ANSWERABILITY)}
    if not q.answerable:
        v = float(fb)
        return {"em": Score(v), "f1": Score(v)}
    if not any(a.strip() for a in q.answers):  # no reference to compare with: not a zero, not applicable
        why = "answerable question with no reference answer"
        return {"em": Score(None, "not_applicable", why), "f1": Score(None, "not_applicable", why)}
    if fb:
        return {"em": Score(0.0), "f1": Score(0.0)}
    em, f1 = _best_em_f1(strip_citations(inp.answer), tuple(q.answers))
    return {"em": Score(em), "f1": Score(f1)}


@functools.lru_cache(maxsize=65536)  # the same answer meets the same gold under many strategies and budgets
def _best_em_f1(pred: str, answers: tuple) -> tuple[float, float]:
    golds = squad_gold_answers(list(answers))
    return max(exact_match(pred, g) for g in golds), max(f1_score(pred, g) for g in golds)


def squad_gold_answers(answers: list[str]) -> list[str]:
    """As the official v2.0 script: gold answers that normalise to '' are dropped; none left -> ['']."""
    return [a for a in answers if normalize_answer(a)] or [""]


@scorer("abstention", {
    "abstention_accuracy": (True, "1 when the answer abstains exactly on unanswerable questions"),
    "false_abstention": (False, "answerable questions answered with the fallback"),
    "missed_abstention": (False, "unanswerable questions not answered with the fallback")})
def score_abstention(inp: ScoringInput) -> dict[str, Score]:
    if inp.question.answerable is None:  # whether it should abstain is unknown
        return {"abstention_accuracy": Score(None, "not_applicable", UNKNOWN_ANSWERABILITY)}
    side = "false_abstention" if inp.question.answerable else "missed_abstention"
    if (f := _failed(inp, ["abstention_accuracy", side])) is not None:  # a failed item: every row, with its status
        return f
    fb = is_fallback(inp.answer, inp.fallback)
    out = {"abstention_accuracy": Score(float(fb != inp.question.answerable))}
    if inp.question.answerable:
        out["false_abstention"] = Score(float(fb))
    else:
        out["missed_abstention"] = Score(float(not fb))
    return out


# --------------------------------------------------------------------------- evidence matching

def block_holds(block, ev: Evidence) -> bool:
    """Does a block show this gold evidence? Span: the block's span covers it; page: the page is
    in the block; document: the document is in the block."""
    if ev.start is not None:
        return any(d == ev.doc_id and s <= ev.start and ev.end <= e for d, s, e in block.spans)
    if ev.page_id:
        return ev.page_id in block.page_ids
    return ev.doc_id in block.doc_ids


def block_holds_symbol(block, ev: Evidence) -> bool:
    """Does a block show any line of the gold evidence's definition (``ev.symbol``)? A later piece of a split
    function counts, so does a block cut to ``code_block_chars``, a class or file holding it: retrieval at the
    level of the definition, whatever the chunker made of it."""
    return any(d == ev.doc_id and s < ev.symbol_end and ev.symbol_start < e for d, s, e in block.spans)


def _evidence(q: Question) -> list[Evidence]:
    # unknown answerability (no 'answers') keeps its evidence: a code question pointing at a function is scored
    return q.evidence if q.answerable is not False else []


@scorer("citation", {
    "citation_validity": (True, "share of [n] markers that point at an existing block"),
    "citation_precision": (True, "share of distinct cited blocks that hold gold evidence"),
    "citation_recall": (True, "share of gold evidence items found in a cited block"),
    "statement_coverage": (True, "share of answer sentences with at least one citation")})
def score_citation(inp: ScoringInput) -> dict[str, Score]:
    names = ["citation_validity", "citation_precision", "citation_recall", "statement_coverage"]
    if (f := _failed(inp, names)) is not None:
        return f
    if is_fallback(inp.answer, inp.fallback):  # nothing claimed, nothing to cite: said, never a missing row
        return {n: Score(None, "not_applicable", ABSTAINED) for n in names}
    cites = parse_citations(inp.answer)
    k = len(inp.blocks)
    out = {"citation_validity": Score(sum(1 for c in cites if 1 <= c <= k) / len(cites) if cites else 1.0)}
    sents = split_sentences(inp.answer)
    out["statement_coverage"] = Score(sum(1 for s in sents if parse_citations(s)) / len(sents) if sents else 0.0)
    evs = _evidence(inp.question)
    if evs:
        distinct = list(dict.fromkeys(cites))
        cited_blocks = [inp.blocks[c - 1] for c in distinct if 1 <= c <= k]
        good = sum(1 for b in cited_blocks if any(block_holds(b, e) for e in evs))
        out["citation_precision"] = Score(good / len(distinct) if distinct else 0.0)
        out["citation_recall"] = Score(sum(1 for e in evs if any(block_holds(b, e) for b in cited_blocks)) / len(evs))
    return out


# --------------------------------------------------------------------------- retrieval (BEIR / pytrec_eval)

def ranking_metrics(ranked: list[str], relevant: set[str], k: int) -> dict[str, float]:
    """Binary relevance. recall@k = |rel in top k| / |rel|; MRR@k = 1/rank of the first relevant
    within k; nDCG@k = sum_{i<=k} rel_i/log2(i+1) / ideal (pytrec_eval / BEIR definitions)."""
    top = ranked[:k]
    hits = [1.0 if r in relevant else 0.0 for r in top]
    recall = sum(hits) / len(relevant) if relevant else 0.0
    mrr = next((1.0 / (i + 1) for i, h in enumerate(hits) if h), 0.0)
    dcg = sum(h / math.log2(i + 2) for i, h in enumerate(hits))
    idcg = sum(1.0 / math.log2(i + 2) for i in range(min(len(relevant), k)))
    return {"recall": recall, "mrr": mrr, "ndcg": dcg / idcg if idcg else 0.0}


RANK_K = 10


@scorer("retrieval", {
    "evidence_recall": (True, "share of gold evidence items shown in some block (span, page or document)"),
    "context_precision": (True, "share of blocks that hold gold evidence"),
    "doc_recall@10": (True, "BEIR recall@10 over distinct documents in block order"),
    "doc_mrr@10": (True, "MRR@10 over distinct documents in block order"),
    "doc_ndcg@10": (True, "nDCG@10 over distinct documents in block order"),
    "page_recall@10": (True, "BEIR recall@10 over distinct pages in block order"),
    "page_mrr@10": (True, "MRR@10 over distinct pages in block order"),
    "page_ndcg@10": (True, "nDCG@10 over distinct pages in block order"),
    "evidence_mrr@10": (True, "span evidence: 1/rank of the first block (of 10) that shows a gold span"),
    "evidence_ndcg@10": (True, "span evidence: nDCG@10 over blocks, each gold span counted at its first block"),
    "symbol_recall@10": (True, "code: share of gold definitions (symbols) shown, any line of them, in the first 10 "
                               "blocks"),
    "symbol_mrr@10": (True, "code: 1/rank of the first block (of 10) that shows any line of a gold definition")})
def score_retrieval(inp: ScoringInput) -> dict[str, Score]:
    evs = _evidence(inp.question)
    if not evs:
        return {}
    blocks = inp.blocks
    out = {"evidence_recall": Score(evidence_held(inp) / len(evs)),
           "context_precision": Score(sum(1 for b in blocks if any(block_holds(b, e) for e in evs)) / len(blocks)
                                      if blocks else 0.0)}
    docs = list(dict.fromkeys(d for b in blocks for d in b.doc_ids))
    for name, v in ranking_metrics(docs, {e.doc_id for e in evs}, RANK_K).items():
        out[f"doc_{name}@{RANK_K}"] = Score(v)
    rel_pages = {e.page_id for e in evs if e.page_id}
    if rel_pages:
        pages = list(dict.fromkeys(p for b in blocks for p in b.page_ids))
        for name, v in ranking_metrics(pages, rel_pages, RANK_K).items():
            out[f"page_{name}@{RANK_K}"] = Score(v)
    spans = [i for i, e in enumerate(evs) if e.start is not None]
    if spans:  # function-level ranking on code sets, answer spans on SQuAD: docs/metrics.md
        ranked = evidence_ranking(blocks, [evs[i] for i in spans])
        m = ranking_metrics(ranked, set(range(len(spans))), RANK_K)
        out[f"evidence_mrr@{RANK_K}"], out[f"evidence_ndcg@{RANK_K}"] = Score(m["mrr"]), Score(m["ndcg"])
    # one gold definition counts once, however many of its spans the gold names
    syms = list({(e.doc_id, e.symbol): e for e in evs if e.symbol and e.symbol_start is not None}.values())
    if syms:  # code: the definition, not the lines the chunker cut (docs/metrics.md, "Symbol metrics")
        ranked = evidence_ranking(blocks, syms, block_holds_symbol)
        m = ranking_metrics(ranked, set(range(len(syms))), RANK_K)
        out[f"symbol_recall@{RANK_K}"], out[f"symbol_mrr@{RANK_K}"] = Score(m["recall"]), Score(m["mrr"])
    return out


def evidence_held(inp: ScoringInput) -> int:
    """How many of the question's gold evidence items some block shows: evidence_recall's numerator and what
    context_sufficiency decides on, counted once per item (both families ask; memoised on the input)."""
    held = getattr(inp, "_evidence_held", None)
    if held is None:
        held = sum(1 for e in _evidence(inp.question) if any(block_holds(b, e) for b in inp.blocks))
        inp._evidence_held = held
    return held


def evidence_ranking(blocks, evs: list[Evidence], holds=block_holds) -> list:
    """Blocks in order as a ranked list over gold items: each block stands for the first gold item it
    shows that no earlier block showed (its index), else for nothing relevant (a unique marker)."""
    seen, ranked = set(), []
    for i, b in enumerate(blocks):
        new = next((j for j, e in enumerate(evs) if j not in seen and holds(b, e)), None)
        if new is None:
            ranked.append(("block", i))
        else:
            seen.add(new)
            ranked.append(new)
    return ranked


# --------------------------------------------------------------------------- faithfulness (offline)

def support_score(statement: str, passages: list[str], lang: str = "en", embed=None) -> float:
    """The probability that ``passages`` support ``statement`` (the shipped offline model; see
    evals/score/support.py and docs/metrics.md, "Support scorer"). Order of passages does not matter."""
    from .support import support_score as _score

    return _score(statement, passages, lang, embed)


@scorer("faithfulness", {
    "faithfulness": (True, "share of answer statements supported by the blocks they cite (support_score >= threshold)"),
    "citation_support": (True, "share of (statement, cited block) pairs where the block alone supports the statement")})
def score_faithfulness(inp: ScoringInput) -> dict[str, Score]:
    if (f := _failed(inp, ["faithfulness", "citation_support"])) is not None:
        return f
    if is_fallback(inp.answer, inp.fallback):
        return {n: Score(None, "not_applicable", ABSTAINED) for n in ("faithfulness", "citation_support")}
    sents = split_sentences(inp.answer)
    if not sents:
        return {"faithfulness": Score(None, "undetermined", "empty answer")}
    from .support import support_embedder, threshold

    embed = support_embedder()
    thr = threshold()
    k, supported, pairs, pairs_ok = len(inp.blocks), 0, 0, 0
    for s in sents:
        cited = [inp.blocks[c - 1] for c in dict.fromkeys(parse_citations(s)) if 1 <= c <= k]
        if not cited:
            continue  # a statement with no valid citation is unsupported
        claim = strip_citations(s)
        ok = support_score(claim, [b.text for b in cited], inp.question.language, embed) >= thr
        supported += ok
        pairs += len(cited)
        pairs_ok += ok if len(cited) == 1 else sum(  # one cited block: the pair is the statement
            support_score(claim, [b.text], inp.question.language, embed) >= thr for b in cited)
    out = {"faithfulness": Score(supported / len(sents))}
    if pairs:
        out["citation_support"] = Score(pairs_ok / pairs)
    return out


# --------------------------------------------------------------------------- sufficiency and relevance

NO_EVIDENCE_SUFFICIENCY = ("no gold evidence: an LLM autorater decides (--llm-base-url, or --judge-base-url; "
                           "docs/metrics.md, 'Context sufficiency')")


@scorer("sufficiency", {
    "context_sufficiency": (True, "1 when the packed context holds enough to answer: every gold evidence item shown "
                                  "(offline), else an LLM autorater's verdict; 0 for an unanswerable question"),
    "abstained": (False, "1 when the answer is the fallback sentence (the abstention rate; reference-free)")})
def score_sufficiency(inp: ScoringInput) -> dict[str, Score]:
    """Sufficiency from gold evidence where the question has it (docs/metrics.md, 'Context sufficiency'); with no
    evidence it is not_applicable here and an LLM autorater (evals/score/judges.py) fills it in."""
    q = inp.question
    if q.answerable is False:
        out = {"context_sufficiency": Score(0.0, "ok", "unanswerable question: no context suffices")}
    elif q.evidence:
        held = evidence_held(inp)
        out = {"context_sufficiency": Score(float(held == len(q.evidence)), "ok",
                                            f"gold evidence: {held} of {len(q.evidence)} item(s) in the context")}
    else:
        out = {"context_sufficiency": Score(None, "not_applicable", NO_EVIDENCE_SUFFICIENCY)}
    if (f := _failed(inp, ["abstained"])) is not None:
        return {**out, **f}
    out["abstained"] = Score(float(is_fallback(inp.answer, inp.fallback)))
    return out


def needs_autorater(q: Question) -> bool:
    """Does sufficiency need an LLM for this question (no gold evidence, and not known unanswerable)?"""
    return q.answerable is not False and not q.evidence


@scorer("relevance_standin", {
    "question_answer_similarity": (True, "stand-in for answer relevance offline: cosine of the question's and the "
                                         "answer's embeddings (the index's embedder; not validated against people)")})
def score_relevance_standin(inp: ScoringInput) -> dict[str, Score]:
    """Only where the question has no reference answer (answerability unknown: plain questions, logs): elsewhere
    f1 and em measure the answer against people's, and embedding every answer would double a run's time."""
    if inp.question.answerable is not None:
        return {}
    if (f := _failed(inp, ["question_answer_similarity"])) is not None:
        return f
    if is_fallback(inp.answer, inp.fallback):
        return {"question_answer_similarity": Score(None, "not_applicable", ABSTAINED)}
    if inp.embed is None:
        return {"question_answer_similarity": Score(None, "not_applicable", "no embedder: records scored without an "
                                                                            "index (give --dataset)")}
    text = strip_citations(inp.answer).strip()
    if not text:
        return {"question_answer_similarity": Score(None, "undetermined", "empty answer")}
    qv, av = inp.embed([inp.question.text, text[:2000]])
    return {"question_answer_similarity": Score(float(max(-1.0, min(1.0, float(qv @ av)))))}


# --------------------------------------------------------------------------- cost

@scorer("escalation", {
    "escalated": (False, "escalate: 1 when the cheap shape abstained and the rich one answered again (the mean is "
                         "the escalation rate)")})
def score_escalation(inp: ScoringInput) -> dict[str, Score]:
    if "escalated" not in inp.counters:
        return {}
    return {"escalated": Score(float(bool(inp.counters["escalated"])))}


@scorer("cost", {
    "prompt_tokens": (False, "prompt tokens (exact tokenizer, or the endpoint's usage)"),
    "context_tokens": (False, "tokens of the context blocks (exact)"),
    "completion_tokens": (False, "completion tokens"),
    "cost_usd": (False, "dollars from the price table"),
    "context_tokens_est": (False, "the words * 1.3 estimate of the context tokens"),
    "token_estimate_error": (False, "(estimate - exact) / exact for the context")})
def score_cost(inp: ScoringInput) -> dict[str, Score]:
    ctx = sum(b.n_tokens for b in inp.blocks)
    est = sum(estimate_tokens(b.text) for b in inp.blocks)
    out = {"context_tokens": Score(float(ctx)), "context_tokens_est": Score(est),
           "token_estimate_error": Score((est - ctx) / ctx) if ctx else Score(None, "undetermined", "empty context")}
    if inp.answer_status == "ok":
        out.update(prompt_tokens=Score(float(inp.prompt_tokens)), completion_tokens=Score(float(inp.completion_tokens)),
                   cost_usd=Score(inp.price_usd) if inp.price_usd is not None else Score(
                       None, "not_applicable", "price unknown: the model has no price (--price MODEL=IN,OUT, or "
                                             "RAGWB_PRICE)"))
    else:
        for n in ("prompt_tokens", "completion_tokens", "cost_usd"):
            out[n] = Score(None, inp.answer_status, "answer not available")
    return out


# --------------------------------------------------------------------------- conversations

@scorer("conversation", {
    "passage_recall@5": (True, "conversations: share of gold passages among the first 5 distinct passages"),
    "passage_ndcg@10": (True, "conversations: nDCG@10 of the distinct passages in block order"),
    "history_tokens": (False, "conversations: tokens of the history messages the memory policy chose"),
    "bypass_correct": (True, "conversations: 1 when the turn skipped retrieval exactly when it is a filler turn")})
def score_conversation(inp: ScoringInput) -> dict[str, Score]:
    q = inp.question
    if not q.conversation_id:
        return {}
    from rag.ingest.conversations import gold_bypass

    out = {"history_tokens": Score(float(inp.history_tokens or 0))}
    if inp.bypassed is not None:
        out["bypass_correct"] = Score(float(bool(inp.bypassed) == gold_bypass(q)))
    rel = {e.page_id for e in _evidence(q) if e.page_id}
    if rel:  # passages are pages: the page ranking is the passage ranking
        pages = list(dict.fromkeys(p for b in inp.blocks for p in b.page_ids))
        out["passage_recall@5"] = Score(ranking_metrics(pages, rel, 5)["recall"])
        out["passage_ndcg@10"] = Score(ranking_metrics(pages, rel, 10)["ndcg"])
    return out
