"""Answerers by name: the deterministic offline extractor, and any OpenAI-compatible LLM.

``extractive`` (offline default): split the blocks into sentences, score each by
lexical support (idf-weighted share of the question's content terms it contains,
after language-aware stemming) blended with embedding evidence (the cosine of its
block to the question), answer with the best sentence and cite every block that
holds it. Below ``threshold`` it answers exactly the fallback.
"""
from __future__ import annotations

import bisect
import functools
import math
import re
import time
from dataclasses import dataclass, field
from typing import NamedTuple

from .prompts import FALLBACK, build_messages, count_prompt_tokens, prompt_tokens, template_messages
from rag.textproc import analyze, bounded_put, prefix_parent, term_set
from rag.tokens import count_tokens, count_tokens_memo

@dataclass
class Answer:
    text: str
    status: str = "ok"  # ok | rate_limited | timeout | error | parse_error | context_overflow
    prompt_tokens: int = 0
    completion_tokens: int = 0
    usage_source: str = "tokenizer"  # tokenizer (exact count here) | endpoint (the server's usage)
    cached: bool = False
    error: str = ""
    support: float = 0.0
    seconds: float = 0.0
    extra: dict = field(default_factory=dict)


# A sentence ends at . ! ? (or CJK enders), then closing quotes/brackets, then whitespace or the end.
# Not an end: decimals (3.5) and domains (example.com) have no space after the dot; abbreviations
# (U.S., e.g., Dr.), initials (J. K. Rowling) and list numbers ("1. First") are checked by hand.
_END = re.compile(r"[.!?\u3002\uff01\uff1f]+[\"'\u2019\u201d)\]]*(?=\s|$|\[\d+\])|\n+")
_CJK_END = re.compile(r"[\u3002\uff01\uff1f]")
ABBREVIATIONS = frozenset("""mr mrs ms dr prof sr jr st mt ft vs etc e.g i.e cf al inc ltd co corp plc llc dept univ
gov gen col lt sgt capt rev hon no nos vol vols fig figs pp approx est jan feb mar apr jun jul aug sep sept oct nov
dec mon tue wed thu fri sat sun u.s u.k u.n e.u a.m p.m""".split())


def _is_false_end(text: str, start: int, mark: str) -> bool:
    """Is the '.' ending at ``start`` part of an abbreviation, initial or list number?"""
    if mark[0] != "." or len(mark.rstrip("\"')]\u2019\u201d")) != 1:
        return False
    lo = max(0, start - 48)  # a window, not the whole prefix: long documents split in linear time
    head = text[lo:start]
    m = re.search(r"(\S+)$", head)
    if not m:
        return False
    word = m.group(1).lstrip("(\"'[")
    low = word.lower()
    if low in ABBREVIATIONS or re.fullmatch(r"(?:[a-z]\.)+[a-z]", low):  # U.S / e.g / p.m
        return True
    if re.fullmatch(r"[A-Z]", word):  # an initial: "J. K. Rowling"
        return True
    if re.fullmatch(r"\d{1,2}|[ivxIVX]{1,4}|[a-z]", word):  # "1. First", "ii. Second", "a. one"
        before = head[:m.start()].rstrip(" \t")
        return (before == "" and lo == 0) or before.endswith(("\n", ":")) or bool(_END.search(before[-3:] + " "))
    return False


def _scan(text: str, start: int = 0) -> tuple[list[str], list[int]]:
    """The raw sentences of ``text`` from ``start``, and where the scan went on after each (the end
    of its match; the tail's is ``len(text)``)."""
    segs, ends = [], []
    for m in _END.finditer(text, start):
        if m.group().startswith("\n"):
            end = m.start()
        else:
            if _is_false_end(text, m.start(), m.group()):
                continue
            end = m.end()
        seg = text[start:end].strip()
        if seg:
            segs.append(seg)
            ends.append(m.end())
        start = m.end()
    tail = text[start:].strip()
    if tail:
        segs.append(tail)
        ends.append(len(text))
    return segs, ends


_CITE_AHEAD = re.compile(r"\[\d+\]")
_RAW: dict[str, tuple] = {}  # text -> _scan(text), bounded
RAW_MEMO_SIZE = 32768


def _scan_inside(text: str, end: int, limit: int) -> bool:
    """Does the scan step ending at ``end`` look only at ``text[:limit]``? (Its match and the
    character after it; a "[n]" it looked ahead to, whole.) ``_is_false_end`` looks only back."""
    if end >= limit:
        return False
    m = _CITE_AHEAD.match(text, end) if text[end] == "[" else None
    return m is None or m.end() <= limit


def _scan_from_parent(text: str) -> tuple | None:
    """``_scan(text)`` for a text noted as a prefix of one already scanned: the parent's steps that
    lie inside the prefix are the same (the scan reads left to right and its regex has no
    look-behind), so only the rest is scanned."""
    parent = prefix_parent(text)
    got = _RAW.get(parent) if parent is not None else None
    if got is None:
        return None
    segs, ends = got
    k = 0
    while k < len(ends) and _scan_inside(parent, ends[k], len(text)):
        k += 1
    rest, rest_ends = _scan(text, ends[k - 1] if k else 0)
    return segs[:k] + rest, ends[:k] + rest_ends


def _raw_sentences(text: str) -> list[str]:
    got = _RAW.get(text)
    if got is None:
        got = _scan_from_parent(text) or _scan(text)
        bounded_put(_RAW, text, got, RAW_MEMO_SIZE)
    return got[0]


def split_sentences(text: str) -> list[str]:
    """Sentences; citation markers right after a sentence end ("... end. [2][3]") stay with it."""
    return list(_split_cached(text or ""))


@functools.lru_cache(maxsize=65536)  # block texts repeat across questions, strategies and budgets
def _split_cached(text: str) -> tuple:
    out: list[str] = []
    for s in _raw_sentences(text or ""):
        lead = re.match(r"^((?:\[\d+\]\s*)+)", s)
        if lead and out:
            out[-1] = f"{out[-1]} {lead.group(1).strip()}"
            s = s[lead.end():].strip()
        if len(s) > 1 and not re.fullmatch(r"[\W\d_]*", s):
            out.append(s)
    return tuple(out)


@functools.lru_cache(maxsize=16384)
def _block_terms(text: str, lang: str) -> tuple:
    """A block's sentences, each one's number of distinct terms, and term -> sentences holding it."""
    sents = split_sentences(text)
    sizes, postings = [], {}
    for j, s in enumerate(sents):
        ts = term_set(s, lang)
        sizes.append(len(ts))
        for t in ts:
            postings.setdefault(t, []).append(j)
    return sents, sizes, postings


class _Hits(NamedTuple):
    """One block against one question's terms."""
    rows: tuple  # (sentence, indices of the question terms it holds, holds nothing else) for the
    # sentences holding any question term, in order
    df: tuple  # per question term: the number of the block's sentences holding it
    n_sents: int
    first: str | None  # the block's first sentence ...
    first_hit: bool  # ... and whether it holds a question term
    idx: tuple  # the index of each row's sentence among the block's sentences


_HITS: dict = {}  # (text, lang, question terms) -> _Hits, least recently used dropped first
HITS_MEMO_SIZE = 65536


def _sentence_hits(text: str, lang: str, qterms: tuple) -> _Hits:
    """Memoised: a block meets the same question under many strategies and budgets."""
    key = (text, lang, qterms)
    h = _HITS.pop(key, None)
    if h is None:
        h = _hits_from_parent(text, lang, qterms) or _hits(text, lang, qterms)
        bounded_put(_HITS, key, h, HITS_MEMO_SIZE)
    else:
        _HITS[key] = h  # back to the newest end
    return h


def _hits(text: str, lang: str, qterms: tuple) -> _Hits:
    sents, sizes, postings = _block_terms(text, lang)
    hits: dict[int, list[int]] = {}
    df = []
    for i, t in enumerate(qterms):
        js = postings.get(t, ())
        df.append(len(js))
        for j in js:
            hits.setdefault(j, []).append(i)
    # a sentence adds nothing beyond the question when every one of its terms is a question term
    idx = tuple(sorted(hits))
    rows = tuple((sents[j], tuple(hits[j]), len(hits[j]) == sizes[j]) for j in idx)
    return _Hits(rows, tuple(df), len(sents), sents[0] if sents else None, 0 in hits, idx)


@functools.lru_cache(maxsize=16384)
def _shared_sentences(text: str, parent: str) -> int:
    """How many leading sentences ``text`` and ``parent`` share."""
    sents, psents = _split_cached(text), _split_cached(parent)
    k, n = 0, min(len(sents), len(psents))
    while k < n and sents[k] == psents[k]:
        k += 1
    return k


def _hits_from_parent(text: str, lang: str, qterms: tuple) -> _Hits | None:
    """``_hits`` of a truncated block whose untruncated text met the same question before: the
    sentences both share keep the parent's rows; only the rest are looked at."""
    parent = prefix_parent(text)
    ph = _HITS.get((parent, lang, qterms)) if parent is not None else None
    if ph is None:
        return None
    sents = _split_cached(text)
    k = _shared_sentences(text, parent)
    c = bisect.bisect_left(ph.idx, k)  # the parent's rows on shared sentences: ph.rows[:c]
    rows, idx = list(ph.rows[:c]), list(ph.idx[:c])
    if 2 * c <= len(ph.rows):  # count the kept rows' terms, or take the dropped ones' off the parent's
        df = [0] * len(qterms)
        for row in rows:
            for i in row[1]:
                df[i] += 1
    else:
        df = list(ph.df)
        for row in ph.rows[c:]:
            for i in row[1]:
                df[i] -= 1
    for j in range(k, len(sents)):
        ts = term_set(sents[j], lang)
        hit = tuple(i for i, t in enumerate(qterms) if t in ts)
        if hit:
            for i in hit:
                df[i] += 1
            rows.append((sents[j], hit, len(hit) == len(ts)))
            idx.append(j)
    return _Hits(tuple(rows), tuple(df), len(sents), sents[0] if sents else None, bool(idx) and idx[0] == 0,
                 tuple(idx))


ANSWERERS: dict[str, type] = {}


def register_answerer(cls):
    ANSWERERS[cls.name] = cls
    return cls


@register_answerer
class ExtractiveAnswerer:
    name = "extractive"
    # metrics this answerer meets by construction: it copies one context sentence and cites every
    # block that holds it, so they say nothing about the context (stored as not_applicable)
    by_construction = {"faithfulness": "extractive answers copy the context",
                       "citation_support": "extractive answers cite the blocks they copy",
                       "citation_validity": "extractive answers cite only existing blocks",
                       "statement_coverage": "extractive answers cite every sentence"}

    def __init__(self, threshold: float = 0.35, lexical_weight: float = 0.75, language: str = "en",
                 encoding: str = "o200k_base", max_sentences: int = 1):
        self.threshold, self.w, self.lang, self.enc = threshold, lexical_weight, language, encoding
        self.max_sentences = max_sentences

    def config(self) -> dict:
        return {"answerer": self.name, "threshold": self.threshold, "lexical_weight": self.w,
                "max_sentences": self.max_sentences}

    def answer(self, question: str, blocks, history: list[dict] | None = None, **_) -> Answer:
        """Answers from the current turn's blocks; ``prompt_tokens`` counts the full prompt, history
        included, so the bloat of a memory policy is measured offline too."""
        t0 = time.perf_counter()
        ptoks = count_prompt_tokens(question, blocks, history, self.enc)
        qterms = tuple(dict.fromkeys(analyze(question, self.lang, stopwords=True)))
        if not blocks or not qterms:
            return self._fallback(ptoks, t0)
        per_block = [_sentence_hits(b.text, self.lang, qterms) for b in blocks]
        n = sum(pb.n_sents for pb in per_block)
        if not n:
            return self._fallback(ptoks, t0)
        # idf over the context's sentences: rare question terms count more
        df = [sum(col) for col in zip(*(pb.df for pb in per_block))]
        w = [math.log(1 + n / (1 + d)) for d in df]
        wsum = sum(w) or 1.0
        nq = len(qterms)
        smax = max((b.score for b in blocks), default=0.0) or 1.0
        best, best_score = None, -1.0
        # every score is >= 0 and a sentence without a question term scores exactly 0, so such a
        # sentence can only win as the context's very first sentence (ties keep the earliest)
        bi0, first = next((bi, pb) for bi, pb in enumerate(per_block) if pb.n_sents)
        if not first.first_hit:
            best, best_score = (first.first, bi0), 0.0
        wget = w.__getitem__
        for bi, pb in enumerate(per_block):
            emb = max(0.0, blocks[bi].score) / smax
            for s, hit, no_novelty in pb.rows:
                lex = 0.5 * len(hit) / nq + 0.5 * sum(map(wget, hit)) / wsum
                score = self.w * lex + (1 - self.w) * emb * lex  # embedding evidence scales, never replaces, lexical
                if no_novelty:  # prefer sentences that add something beyond the question itself
                    score *= 0.5
                if score > best_score:
                    best, best_score = (s, bi), score
        if best is None or best_score < self.threshold:
            return self._fallback(ptoks, t0, best_score)
        sent = best[0]
        cited = [b.n for b in blocks if sent in b.text]
        text = sent.rstrip() + " " + "".join(f"[{c}]" for c in cited)
        return Answer(text, "ok", ptoks, count_tokens_memo(text, self.enc), support=best_score,
                      seconds=time.perf_counter() - t0)

    def _fallback(self, ptoks: int, t0: float, score: float = 0.0) -> Answer:
        return Answer(FALLBACK, "ok", ptoks, count_tokens_memo(FALLBACK, self.enc), support=max(score, 0.0),
                      seconds=time.perf_counter() - t0)


@register_answerer
class OpenAIAnswerer:
    name = "openai"
    by_construction: dict = {}

    def __init__(self, client, encoding: str = "o200k_base", template=None, **_):
        self.client, self.enc, self.template = client, encoding, template  # template: a user's PromptTemplate

    def config(self) -> dict:
        return {"answerer": self.name, **self.client.cfg.public(),
                **({"prompt_sha256": self.template.hash} if self.template else {})}

    def messages(self, question: str, blocks, history: list[dict] | None = None) -> list[dict]:
        if self.template is not None:
            return template_messages(self.template, question, blocks, history)
        return build_messages(question, blocks, history=history)

    def count(self, question: str, blocks, history: list[dict] | None = None) -> int:
        """Exact prompt tokens: the memoised piecewise count for the built-in prompt, the whole prompt
        encoded for a user's template."""
        if self.template is not None:
            return prompt_tokens(self.messages(question, blocks, history), self.enc)
        return count_prompt_tokens(question, blocks, history, self.enc)

    def overflow_tokens(self, question: str, blocks, history: list[dict] | None = None) -> int:
        """How many prompt tokens too many for the model's window (0: it fits, or the window is unknown).
        The prompt and the longest answer (max_tokens) must both fit."""
        window = self.client.context_window()
        if not window:
            return 0
        return max(0, self.count(question, blocks, history) + self.client.cfg.max_tokens - window)

    def answer(self, question: str, blocks, repeat: int = 0, history: list[dict] | None = None, **_) -> Answer:
        t0 = time.perf_counter()
        exact = self.count(question, blocks, history)
        window = self.client.context_window()
        if window and exact + self.client.cfg.max_tokens > window:
            # refused before any call: no paid call is wasted on a prompt that cannot fit
            return Answer("", "context_overflow", exact, 0,
                          error=f"prompt of {exact:,} tokens + max_tokens {self.client.cfg.max_tokens:,} exceeds "
                                f"the model's {window:,}-token context window (--fit-context fits it by the "
                                "point's overflow policy)", seconds=time.perf_counter() - t0)
        res = self.client.chat(self.messages(question, blocks, history), purpose="answer", repeat=repeat)
        if res.status != "ok":
            return Answer("", res.status, exact, 0, error=res.error, seconds=time.perf_counter() - t0)
        text = res.text.strip()
        if res.prompt_tokens:
            return Answer(text, "ok", res.prompt_tokens, res.completion_tokens, "endpoint", res.cached,
                          seconds=time.perf_counter() - t0, extra={"prompt_tokens_exact": exact})
        return Answer(text, "ok", exact, count_tokens(text, self.enc), "tokenizer", res.cached,
                      error=res.usage_error, seconds=time.perf_counter() - t0)


def make_answerer(name: str = "extractive", **kw):
    if name not in ANSWERERS:
        raise KeyError(f"unknown answerer {name!r}; valid: {', '.join(ANSWERERS)}")
    return ANSWERERS[name](**kw)
