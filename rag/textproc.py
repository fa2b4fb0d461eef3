"""Language-aware lexical analysis for BM25 and lexical scorers.

casefold (Greek final sigma, Cyrillic), accent stripping (Greek tonos), \\w+ words,
CJK runs segmented into character bigrams, Snowball stemming (PyStemmer) for
English, Greek and Russian.
"""
from __future__ import annotations

import functools
import re
import unicodedata

_WORD = re.compile(r"\w+", re.U)
_CJK = re.compile(r"[\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uac00-\ud7af]+")
_STEMMERS = {"en": "english", "el": "greek", "ru": "russian", "de": "german", "fr": "french", "es": "spanish"}

STOPWORDS = {
    "en": set("a an the of to in on at for and or is are was were be been by with as from that this it its "
              "which who whom what when where why how did do does".split()),
}


@functools.lru_cache(maxsize=16)
def _stemmer(lang: str):
    try:
        import Stemmer
    except ImportError:  # stemming is an improvement, not a requirement
        return None
    name = _STEMMERS.get(lang)
    return Stemmer.Stemmer(name) if name else None


def strip_accents(s: str) -> str:
    if s.isascii():
        return s
    d = unicodedata.normalize("NFD", s)
    return "".join(c for c in d if not unicodedata.combining(c)) if _has_combining(d) else s


def _has_combining(s: str) -> bool:
    return any(unicodedata.combining(c) for c in s if ord(c) >= 0x300)


def words(text: str) -> list[str]:
    """Casefolded, accent-stripped words; CJK runs become character bigrams."""
    text = strip_accents(unicodedata.normalize("NFKC", text).casefold())
    out: list[str] = []
    for w in _WORD.findall(text):
        if _CJK.search(w):
            for part in re.split(f"({_CJK.pattern})", w):
                if not part:
                    continue
                if _CJK.fullmatch(part):
                    out.extend(part[i:i + 2] for i in range(max(1, len(part) - 1)))
                else:
                    out.append(part)
        else:
            out.append(w)
    return out


_stem_cache: dict[tuple[str, str], str] = {}


_IDENT_PART = re.compile(r"[A-Z]+(?=[A-Z][a-z])|[A-Z]?[a-z]+|[A-Z]+|[0-9]+")


def split_identifier(word: str) -> list[str]:
    """``parse_header``, ``parseHeader``, ``HTTPServer2`` -> their parts, casefolded (one part: [])."""
    parts = [p.casefold() for chunk in word.split("_") for p in _IDENT_PART.findall(chunk)]
    return parts if len(parts) > 1 else []


def code_words(text: str) -> list[str]:
    """``words`` for source code: each identifier, then its parts (snake_case, camelCase; dotted names
    are already separate words), so a query for "parse header" finds ``parseHeader``."""
    out: list[str] = []
    for w in _WORD.findall(unicodedata.normalize("NFKC", text)):
        if not w.isascii():  # not an identifier of ours: the prose rules (CJK bigrams, accents)
            out.extend(words(w))
            continue
        out.append(w.casefold())
        if "_" in w.strip("_") or (not w.isupper() and not w.islower()):
            out.extend(split_identifier(w))
    return out


def analyze(text: str, lang: str = "en", stopwords: bool = False, identifiers: bool = False) -> list[str]:
    """Analysed terms; ``identifiers``: split code identifiers into their words as well (code corpora)."""
    toks = code_words(text) if identifiers else words(text)
    if stopwords and lang in STOPWORDS:
        toks = [t for t in toks if t not in STOPWORDS[lang]]
    st = _stemmer(lang)
    if st is None:
        return toks
    out = []
    for t in toks:
        k = (lang, t)
        s = _stem_cache.get(k)
        if s is None:
            s = st.stemWord(t)
            if len(_stem_cache) < 500_000:
                _stem_cache[k] = s
        out.append(s)
    return out


@functools.lru_cache(maxsize=262_144)
def term_set(text: str, lang: str = "en") -> frozenset:
    """Memoised set of analysed terms of a text (sentences and blocks repeat across questions)."""
    return frozenset(analyze(text, lang))


# --------------------------------------------------------------------------- known prefixes

# A truncated block's text is a prefix of a text already seen (the untruncated chunk or document,
# usually answered at another budget): truncation sites note it here, and the extractive answerer
# re-uses the longer text's sentences and question hits for the part both share.
_PREFIX_OF: dict[str, str] = {}
PREFIX_MEMO_SIZE = 65536


def bounded_put(memo: dict, key, value, cap: int) -> None:
    """``memo[key] = value``, first dropping the oldest entry when ``cap`` entries are held."""
    if len(memo) >= cap:
        try:
            memo.pop(next(iter(memo)), None)
        except (StopIteration, RuntimeError):  # emptied or changed by another thread: nothing to drop
            pass
    memo[key] = value


def note_prefix(child: str, parent: str) -> None:
    """Record that ``child == parent[:len(child)]`` (checked again where it is used)."""
    if child and len(child) < len(parent):
        bounded_put(_PREFIX_OF, child, parent, PREFIX_MEMO_SIZE)


def prefix_parent(text: str) -> str | None:
    """The longer text ``text`` was noted as a prefix of, if it still is one."""
    parent = _PREFIX_OF.get(text)
    return parent if parent is not None and parent.startswith(text) else None
