"""Locate gold evidence text in extracted document text (PDF text is messy).

Rules (docs/datasets.md, "Evidence text matching"), tried in order:

1. ``exact``: the string as given.
2. ``normalized``: both sides normalised the same way, matched, and mapped back to the
   original offsets: whitespace runs -> one space, a hyphen at a line end between two
   letters removed with the line break ("inter-\\nnational" -> "international"), ligatures
   expanded (ﬁ -> fi), typographic quotes and dashes folded to ASCII, soft hyphens dropped,
   case folded.
3. ``fuzzy``: the window of the normalised text with the highest ``difflib`` ratio against
   the normalised evidence, accepted at ``FUZZY_MIN`` (0.85) or above.

Callers fall back to page-level (or document-level) evidence with a warning when all fail.
"""
from __future__ import annotations

import difflib
import functools
import re
from collections import Counter
from dataclasses import dataclass

FUZZY_MIN = 0.85

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
    nn, _ = normalize_with_map(needle)
    if not nn or not nr:
        return None
    k = nr.find(nn)
    if k >= 0:
        s, e = _span_back(offs, k, k + len(nn))
        return Match(lo + s, lo + e, "normalized")
    best = _fuzzy(nn, nr)
    if best and best[2] >= fuzzy_min:
        s, e = _span_back(offs, best[0], best[1])
        return Match(lo + s, lo + e, "fuzzy", round(best[2], 4))
    return None


def _fuzzy(nn: str, nr: str) -> tuple[int, int, float] | None:
    """Best (start, end, ratio) window of ``nr`` against ``nn`` over word windows of about the same
    length; windows sharing under half the evidence's words are not scored (speed)."""
    words = [(m.start(), m.end(), m.group()) for m in re.finditer(r"\S+", nr)]
    need = nn.split()
    n = len(need)
    if not words or not n:
        return None
    want = Counter(need)
    hits = [1 if w in want else 0 for _, _, w in words]
    pre = [0]
    for h in hits:
        pre.append(pre[-1] + h)
    best = None
    sm = difflib.SequenceMatcher(autojunk=False)
    sm.set_seq2(nn)
    for i in range(len(words)):
        j = min(len(words), i + n)
        if pre[j] - pre[i] < 0.5 * n:
            continue
        for size in (n - 1, n, n + 1):
            jj = i + size
            if size < 1 or jj > len(words):
                continue
            a, b = words[i][0], words[jj - 1][1]
            sm.set_seq1(nr[a:b])
            if sm.real_quick_ratio() < (best[2] if best else 0.0) or sm.quick_ratio() < (best[2] if best else 0.0):
                continue
            r = sm.ratio()
            if best is None or r > best[2]:
                best = (a, b, r)
    return best
