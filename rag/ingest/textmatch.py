"""Locate gold evidence text in extracted document text (PDF text is messy).

Rules (docs/datasets.md, "Evidence text matching"), tried in order:

1. ``exact``: the string as given.
2. ``normalized``: both sides normalised the same way, matched, and mapped back to the
   original offsets: whitespace runs -> one space, a hyphen at a line end between two
   letters removed with the line break ("inter-\\nnational" -> "international"), ligatures
   expanded (ﬁ -> fi), typographic quotes and dashes folded to ASCII, soft hyphens dropped,
   case folded.
3. ``fuzzy``: the window of the normalised text with the highest ``difflib`` ratio against
   the normalised evidence, accepted at ``FUZZY_MIN`` (0.85) or above; evidence of at most
   ``FUZZY_MAX_CHARS`` (1,000) normalised characters, the ``FUZZY_WINDOWS`` (16) windows sharing most
   of its words scored.

Callers fall back to page-level (or document-level) evidence with a warning when all fail.
"""
from __future__ import annotations

import difflib
import functools
import re
from dataclasses import dataclass

import numpy as np

FUZZY_MIN = 0.85
# What comes from outside (a logged context, up to --max-cell-mb) is bounded before difflib, which is quadratic: a
# 200-word context of a document's own words shuffled passed every ratio bound and took 50 s a document. Fuzzy
# matching reads evidence up to FUZZY_MAX_CHARS (normalised; longer text is matched exactly or normalised only) and
# scores at most FUZZY_WINDOWS windows, those sharing most of its words (a real near-copy shares the most).
FUZZY_MAX_CHARS = 1000
FUZZY_WINDOWS = 16

_FOLD = {"\ufb00": "ff", "\ufb01": "fi", "\ufb02": "fl", "\ufb03": "ffi", "\ufb04": "ffl", "\ufb05": "st",
         "\ufb06": "st", "\u2018": "'", "\u2019": "'", "\u201a": "'", "\u201b": "'", "\u2032": "'",
         "\u201c": '"', "\u201d": '"', "\u201e": '"', "\u201f": '"', "\u2033": '"', "\u00ab": '"', "\u00bb": '"',
         "\u2010": "-", "\u2011": "-", "\u2012": "-", "\u2013": "-", "\u2014": "-", "\u2212": "-",
         "\u00a0": " ", "\u00ad": ""}
_HYPHENS = "-\u2010\u2011\u00ad"
_LINE_HYPHEN = re.compile(r"[-\u2010\u2011\u00ad][ \t]*\r?\n\s*")


@dataclass(frozen=True)
class Match:
    start: int
    end: int
    method: str  # exact | normalized | fuzzy
    ratio: float = 1.0


def normalize_with_map(text: str) -> tuple[str, list[int]]:
    """(normalised text, offs) with ``offs[i]`` the original index of normalised char ``i``;
    ``offs[len(norm)] == len(text)``."""
    out: list[str] = []
    offs: list[int] = []
    i, n = 0, len(text)
    while i < n:
        ch = text[i]
        if ch in _HYPHENS and i > 0 and text[i - 1].isalpha():
            m = _LINE_HYPHEN.match(text, i)
            if m and m.end() < n and text[m.end()].isalpha():
                i = m.end()  # hyphenation at a line end: join the word
                continue
        if ch.isspace() or ch == "\u00a0":
            j = i
            while j < n and (text[j].isspace() or text[j] == "\u00a0"):
                j += 1
            if out and out[-1] != " ":
                out.append(" ")
                offs.append(i)
            i = j
            continue
        rep = _FOLD.get(ch, ch).lower()
        for c in rep:
            out.append(c)
            offs.append(i)
        i += 1
    if out and out[-1] == " ":
        out.pop()
        offs.pop()
    offs.append(n)
    return "".join(out), offs


@functools.lru_cache(maxsize=64)
def _normalized_region(region: str) -> tuple[str, list[int]]:
    """``normalize_with_map`` of a searched region, kept: a log's records are located in the same few documents
    (a 25,000-character document was normalised again for every context: 0.15 s a record). Read only."""
    return normalize_with_map(region)


@functools.lru_cache(maxsize=16)
def _normalized_needle(needle: str) -> str:
    """A needle's normalised text, kept: a context is searched in the few documents sharing most of its words."""
    return normalize_with_map(needle)[0]


def _span_back(offs: list[int], a: int, b: int) -> tuple[int, int]:
    return offs[a], offs[b - 1] + 1


def locate(needle: str, text: str, lo: int = 0, hi: int | None = None,
           fuzzy_min: float = FUZZY_MIN) -> Match | None:
    """Where ``needle`` occurs in ``text[lo:hi]`` (offsets into ``text``), or None."""
    hi = len(text) if hi is None else hi
    if not needle or not needle.strip():
        return None
    at = text.find(needle, lo, hi)
    if at >= 0:
        return Match(at, at + len(needle), "exact")
    region = text[lo:hi]
    nr, offs = _normalized_region(region)
    nn = _normalized_needle(needle)
    if not nn or not nr:
        return None
    k = nr.find(nn)
    if k >= 0:
        s, e = _span_back(offs, k, k + len(nn))
        return Match(lo + s, lo + e, "normalized")
    best = _fuzzy(nn, nr, fuzzy_min) if len(nn) <= FUZZY_MAX_CHARS else None
    if best and best[2] >= fuzzy_min:
        s, e = _span_back(offs, best[0], best[1])
        return Match(lo + s, lo + e, "fuzzy", round(best[2], 4))
    return None


@functools.lru_cache(maxsize=64)
def _region_words(nr: str) -> tuple[np.ndarray, np.ndarray, np.ndarray, dict[str, int]]:
    """A normalised region's words, kept beside ``_normalized_region``: (starts, ends, word ids) and the word -> id
    map. Splitting a 25,000-character document into words again for every needle was most of a logged record's
    time on a gold set (1,500 records of squad2: 25 s)."""
    vocab: dict[str, int] = {}
    starts, ends, ids = [], [], []
    for m in re.finditer(r"\S+", nr):
        starts.append(m.start())
        ends.append(m.end())
        ids.append(vocab.setdefault(m.group(), len(vocab)))
    return np.array(starts, np.int64), np.array(ends, np.int64), np.array(ids, np.int64), vocab


def _fuzzy(nn: str, nr: str, floor: float = 0.0) -> tuple[int, int, float] | None:
    """Best (start, end, ratio) window of ``nr`` against ``nn`` over word windows of about the same
    length; windows sharing under half the evidence's words are not scored (speed), nor windows whose ratio
    cannot reach ``floor`` (the caller's acceptance: the same answer wherever one is accepted)."""
    starts, ends, ids, vocab = _region_words(nr)
    need = nn.split()
    n = len(need)
    if not len(ids) or not n:
        return None
    want = [vocab[w] for w in need if w in vocab]
    if not want:
        return None
    wanted = np.zeros(len(vocab), np.int64)
    wanted[want] = 1
    pre = np.concatenate(([0], np.cumsum(wanted[ids])))
    i_all = np.arange(len(ids))
    j_all = np.minimum(len(ids), i_all + n)
    hits = pre[j_all] - pre[i_all]
    cand = np.nonzero(hits >= 0.5 * n)[0]
    # windows sharing most words first: the best ratio is found early and bounds out the rest (quick_ratio); the
    # answer is the scan's (highest ratio, the earliest window among equals), whatever the order
    cand = cand[np.argsort(-hits[cand], kind="stable")][:FUZZY_WINDOWS].tolist()
    best, key = None, None
    sm = difflib.SequenceMatcher(autojunk=False)
    sm.set_seq2(nn)
    for i in cand:
        for k, size in enumerate((n - 1, n, n + 1)):
            jj = i + size
            if size < 1 or jj > len(ids):
                continue
            a, b = int(starts[i]), int(ends[jj - 1])
            sm.set_seq1(nr[a:b])
            bar = best[2] if best else floor
            if sm.real_quick_ratio() < bar or sm.quick_ratio() < bar:
                continue
            r = sm.ratio()
            if r >= floor and (best is None or (r, -i, -k) > key):
                best, key = (a, b, r), (r, -i, -k)
    return best
