"""Offline support scoring: the probability that passages support a statement (docs/metrics.md,
"Support scorer").

A small logistic regression over features computed from what the project already has (stemmed
terms, IDF, numbers, capitalised names, negation, e5 vectors); weights, feature scaling and the IDF
table ship in ``evals/score/support_model.json`` (trained by ``scripts/train_support.py`` on human labels).
Deterministic: the same inputs give the same score, bit for bit; invariant to passage order.
"""
from __future__ import annotations

import functools
import hashlib
import json
import math
import re
from pathlib import Path

import numpy as np

from rag.answer.answerers import split_sentences
from rag.answer.prompts import strip_citations
from rag.textproc import STOPWORDS, analyze, term_set, words

MODEL_PATH = Path(__file__).with_name("support_model.json")
FEATURES = ("cov_idf", "cov", "best_window_cov", "bigram_cov", "num_missing", "num_any_missing", "ent_cov",
            "neg_mismatch", "emb_best", "emb_margin", "log_len", "uncovered_idf", "uncovered_n", "longest_run",
            "best_window_plain", "min_clause_cov", "max_uncovered_idf")
_CLAUSE = re.compile(r"[,;:()]|\s(?:and|but|while|which|whereas|because|although|as well as)\s", re.I)
EMB_WINDOWS = 3  # windows per statement that e5 compares (speed: the best lexical candidates)
EMB_CHARS = 500  # e5 sees at most this much of a window (web text can hold 3,000-character "sentences")
_NUM = re.compile(r"(?<![\w.])[-+]?\$?\d[\d,]*(?:\.\d+)?%?")
_NEG = {"not", "no", "never", "none", "nor", "cannot", "without", "neither", "nobody", "nothing", "n't", "unlikely",
        "fail", "fails", "failed", "lack", "lacks"}


@functools.lru_cache(maxsize=1)
def load_model(path: str | None = None) -> dict:
    p = Path(path) if path else MODEL_PATH
    m = json.loads(p.read_text())
    # keys every cache: the weights and the feature code's version (features on the best-aligned region: 2)
    m["id"] = "support-lr-" + hashlib.sha256(p.read_bytes()).hexdigest()[:12] + f"-f{FEATURES_VERSION}"
    return m


def model_id() -> str:
    return load_model()["id"]


def _numbers(text: str) -> set[str]:
    out = set()
    for m in _NUM.finditer(text):
        n = m.group().lstrip("+$").replace(",", "").rstrip("%")
        if re.fullmatch(r"-?\d+(?:\.\d+)?", n):
            try:
                v = float(n)
            except ValueError:
                continue
            out.add(f"{v:g}")
    return out


def _entities(text: str) -> set[str]:
    """Capitalised words not at a sentence start (names, places, organisations), casefolded."""
    toks = re.findall(r"(?<![.!?]\s)(?<!^)\b([A-Z][\w'-]+)", text.strip())
    return {t.lower() for t in toks if t.lower() not in STOPWORDS.get("en", set())}


def _negations(text: str) -> int:
    return sum(1 for w in re.findall(r"[a-z']+", text.lower()) if w in _NEG or w.endswith("n't"))


@functools.lru_cache(maxsize=65536)  # passages (blocks) repeat across statements, strategies and points
def _bigrams(text: str, lang: str) -> frozenset:
    w = analyze(text, lang)
    return frozenset(zip(w, w[1:]))


def _windows(passages: list[str]) -> list[str]:
    """Sentence windows (2 sentences, stride 1) of every passage: the units a statement aligns to."""
    out = []
    for p in passages:
        s = split_sentences(p) or [p]
        out += [" ".join(s[i:i + 2]) for i in range(max(1, len(s) - 1))]
    return out


FEATURES_VERSION = 2  # bump when features() computes anything differently
REGION_WINDOWS = 4  # windows (two sentences each) a statement is checked against: its best-aligned region


def _idf(model: dict, term: str) -> float:
    return model["idf"].get(term, model["idf_unknown"])


def features(statement: str, passages: list[str], lang: str = "en", embed=None, model: dict | None = None
             ) -> np.ndarray:
    """The feature vector (FEATURES order). ``embed``: texts -> normalised vectors (e5), optional."""
    model = model or load_model()
    st = strip_citations(statement)
    passages = sorted(p for p in passages if p and p.strip())  # order-invariant
    terms = list(dict.fromkeys(analyze(st, lang, stopwords=True)))
    # every context feature is taken on the best-aligned region (the REGION_WINDOWS windows that cover the
    # statement best), never on the whole block: a long document holds more words by chance, and its
    # score must not grow with its length (a short passage is its own region: nothing changes for it)
    wins = _windows(passages)
    tw = sum(_idf(model, t) for t in terms) or 1.0
    win_terms = [term_set(w, lang) for w in wins]
    win_cov = [sum(_idf(model, t) for t in terms if t in ws) / tw for ws in win_terms]
    region = sorted(sorted(range(len(wins)), key=lambda i: (-win_cov[i], i))[:REGION_WINDOWS])
    region_text = [wins[i] for i in region] if len(wins) > REGION_WINDOWS else passages
    ctx_terms = set()
    for p in region_text:
        ctx_terms |= term_set(p, lang)
    if terms:
        w = [_idf(model, t) for t in terms]
        hit = [t in ctx_terms for t in terms]
        cov_idf = sum(wi for wi, h in zip(w, hit) if h) / sum(w)
        cov = sum(hit) / len(terms)
        uncovered_idf = sum(wi for wi, h in zip(w, hit) if not h)  # new content the passages do not hold
        uncovered_n = float(len(terms) - sum(hit))
        max_uncovered = max((wi for wi, h in zip(w, hit) if not h), default=0.0)  # the rarest missing term
    else:
        cov_idf = cov = 1.0
        uncovered_idf = uncovered_n = max_uncovered = 0.0
    # the weakest clause: a partly supported statement has a clause the passages do not cover
    min_clause = 1.0
    for clause in _CLAUSE.split(st):
        ct = list(dict.fromkeys(analyze(clause, lang, stopwords=True)))  # ordered: sums in a fixed order
        if len(ct) >= 2:
            cw = sum(_idf(model, t) for t in ct)
            min_clause = min(min_clause, sum(_idf(model, t) for t in ct if t in ctx_terms) / cw)
    best_win, best_idx = 0.0, -1
    best_plain = 0.0
    for i, ws in enumerate(win_terms):
        c = win_cov[i]
        if c > best_win:
            best_win, best_idx = c, i
        if terms:
            best_plain = max(best_plain, sum(1 for t in terms if t in ws) / len(terms))
    sw = analyze(st, lang)
    big = {(a, b) for a, b in zip(sw, sw[1:])}
    ctx_big = set().union(*(_bigrams(p, lang) for p in region_text)) if region_text else set()
    bigram_cov = len(big & ctx_big) / len(big) if big else 1.0
    run = longest = 0
    for a, b in zip(sw, sw[1:]):  # the longest stretch of the statement found word for word
        run = run + 1 if (a, b) in ctx_big else 0
        longest = max(longest, run)
    longest_run = (longest + 1) / len(sw) if sw and longest else 0.0
    nums = _numbers(st)
    ctx_nums = set().union(*(_numbers(p) for p in region_text)) if region_text else set()
    miss = len(nums - ctx_nums)
    num_missing = miss / len(nums) if nums else 0.0
    ents = _entities(st)
    ctx_words = set()
    for p in region_text:
        ctx_words |= set(words(p))
    ent_cov = sum(1 for e in ents if all(x in ctx_words for x in words(e))) / len(ents) if ents else 1.0
    best_text = wins[best_idx] if best_idx >= 0 else ""
    neg_mismatch = float((_negations(st) > 0) != (_negations(best_text) > 0)) if best_text else 0.0
    emb_best = emb_margin = 0.0
    if embed is not None and wins:
        # e5 on the statement and its EMB_WINDOWS best lexical windows (ties: first), never a mean vector
        top = sorted(range(len(wins)), key=lambda i: (-win_cov[i], i))[:EMB_WINDOWS]
        vecs = embed([st[:EMB_CHARS]] + [wins[i][:EMB_CHARS] for i in top])
        sims = vecs[1:] @ vecs[0]
        emb_best = float(sims.max())
        emb_margin = float(emb_best - sims.min())
    log_len = math.log1p(len(terms))
    return np.array([cov_idf, cov, best_win, bigram_cov, num_missing, float(miss > 0), ent_cov, neg_mismatch,
                     emb_best, emb_margin, log_len, math.log1p(uncovered_idf), uncovered_n, longest_run, best_plain,
                     min_clause, max_uncovered],
                    dtype=np.float64)


def probability(x: np.ndarray, model: dict | None = None) -> float:
    model = model or load_model()
    z = (x - np.array(model["mean"])) / np.array(model["scale"])
    logit = float(np.dot(z, np.array(model["coef"])) + model["intercept"])
    return 1.0 / (1.0 + math.exp(-logit))


def support_score(statement: str, passages: list[str], lang: str = "en", embed=None) -> float:
    """The probability (0..1) that ``passages`` support ``statement``: the shipped offline model
    (``evals/score/support_model.json``). ``embed`` (texts -> normalised vectors) adds the e5 similarity of
    the statement to its best-aligned passage window; without it the model's e5 features take their
    training means. Order of ``passages`` does not matter. Memoised per (statement, passages): logs and
    sweeps repeat answers and contexts (never while texts are only being collected)."""
    if _collecting is not None:  # collecting texts: neutral vectors, nothing to remember
        return _support_score(statement, passages, lang, embed)
    key = (statement, tuple(sorted(passages)), lang, embed is not None)  # e5 or not: one embedder either way
    v = _memo.get(key)
    if v is None:
        v = _support_score(statement, passages, lang, embed)
        if len(_memo) > 200_000:
            _memo.clear()
        _memo[key] = v
    return v


_memo: dict = {}
_collecting: list | None = None  # texts e5 would embed, gathered by ``collect_embeds`` (no model call)


def collect_embeds(fn) -> list[str]:
    """Run ``fn()`` (scoring) with e5 stubbed out; return the distinct texts it asked e5 for that are not
    cached yet. ``prefetch_embeds`` then embeds them in large batches: a log of 20,000 rows embeds each
    distinct statement and window once, in batches, never one row at a time."""
    global _collecting
    _collecting = []
    try:
        fn()
        return list(dict.fromkeys(t for t in _collecting if t not in _e5_cache))
    finally:
        _collecting = None


def prefetch_embeds(texts: list[str], progress: bool = False, batch: int = 256) -> None:
    """Embed ``texts`` with e5 into the support scorer's cache, in batches (a progress bar when asked)."""
    embed = support_embedder()
    if embed is None or not texts:
        return
    from tqdm import tqdm

    with tqdm(total=len(texts), disable=not progress, desc="faithfulness: embedding texts", unit="text") as bar:
        for i in range(0, len(texts), batch):
            embed(texts[i:i + batch])
            bar.update(len(texts[i:i + batch]))


def _support_score(statement: str, passages: list[str], lang: str = "en", embed=None) -> float:
    model = load_model()
    x = features(statement, passages, lang, embed, model)
    if embed is None:  # no embedder: neutral e5 features
        for f in ("emb_best", "emb_margin"):
            x[FEATURES.index(f)] = model["mean"][FEATURES.index(f)]
    return probability(x, model)


def threshold() -> float:
    return float(load_model()["threshold"])


_e5_cache: dict[str, np.ndarray] = {}


def support_embedder():
    """texts -> normalised e5 *passage* vectors (what the model was trained with), memoised per text in
    this process: statements and blocks repeat across strategies and budget points. ``None`` when the
    e5 model cannot load (the model then uses neutral e5 features)."""
    try:
        from rag.index.embedders import EmbedderConfig, get_embedder

        emb = get_embedder(EmbedderConfig("e5"))
    except Exception:
        return None

    def embed(texts):
        texts = list(texts)
        if _collecting is not None:  # collecting what would be embedded: no model call, neutral vectors
            _collecting.extend(texts)
            return np.zeros((len(texts), max(1, int(getattr(emb, "dim", 384) or 384))), np.float32)
        have = {t: _e5_cache[t] for t in texts if t in _e5_cache}
        todo = list(dict.fromkeys(t for t in texts if t not in have))
        if todo:
            if len(_e5_cache) + len(todo) > 200_000:  # bounded memory: start over rather than grow
                _e5_cache.clear()
            for t, v in zip(todo, emb.embed_passages(todo)):
                have[t] = _e5_cache[t] = np.asarray(v, np.float32)
        return np.vstack([have[t] for t in texts])
    return embed


def support_agreement() -> dict:
    """The offline support model's agreement with people on the shipped held-out labels, as measured by
    ``ragwb agreement`` (evals/score/support_agreement.json; re-measure with ``ragwb agreement --json FILE``)."""
    path = Path(__file__).with_name("support_agreement.json")
    try:
        d = json.loads(path.read_text())
        return next(r for r in d["rows"] if r["judge"] == "offline support model") | {"labels": d["labels"]}
    except (OSError, ValueError, KeyError, StopIteration):
        return {}


def support_caption() -> str:
    """How far the offline faithfulness judge agrees with people: shown beside it wherever it appears
    (chart, table, report, gate), with the held-out figure first."""
    a = support_agreement()
    held = (f"held-out AUROC {a['auroc']:.2f} [{a['auroc_95ci'][0]:.2f}, {a['auroc_95ci'][1]:.2f}] against human "
            f"labels on {a['n']} ExpertQA claims (0.5 = chance; `ragwb agreement`)" if a else
            "held-out agreement not measured (`ragwb agreement`)")
    cv = load_model().get("cv", {})
    return (f"Offline faithfulness is NOT validated: {held}; cross-validated AUROC on its development data "
            f"{cv.get('expertqa_auroc', float('nan')):.2f} (ExpertQA) and {cv.get('ragtruth_auroc', float('nan')):.2f} "
            "(RAGTruth sentences). Read its differences as indicative only. An LLM judge (on by default with "
            "--llm-base-url, or --judge-base-url) is trusted only as far as its own agreement with people, measured "
            "by `ragwb agreement` and printed beside its values ('not measured' until then).")
