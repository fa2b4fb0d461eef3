"""OpenAI-compatible chat client with a response cache, retries and statuses.

Works with OpenAI, vLLM, Ollama, llama.cpp's server: anything speaking the protocol.
Every call is cached in the workspace, keyed by endpoint, model, the full messages,
the parameters and the repeat index, so re-running a run makes zero calls. Failures
never raise out of ``chat``: they come back as a status (rate_limited, timeout, error).
The API key is read from the environment variable named in the config and is never
stored or printed.
"""
from __future__ import annotations

import math
import contextlib
import contextvars
import hashlib
import json
import os
import random
import sqlite3
import threading
import time
from dataclasses import asdict, dataclass
from urllib.parse import urlsplit
from pathlib import Path

from .urls import redact_url, register_secret, require_http, scrub, scrub_cut, split_query, url_secrets

# dollars per million tokens (input, output); edit or extend with --price MODEL=IN,OUT
PRICES: dict[str, tuple[float, float]] = {
    "gpt-4o": (2.50, 10.00),
    "gpt-4o-mini": (0.15, 0.60),
    "gpt-4.1": (2.00, 8.00),
    "gpt-4.1-mini": (0.40, 1.60),
    "gpt-4.1-nano": (0.10, 0.40),
    "local": (0.0, 0.0),
}


def parse_prices(items: list[str], base: dict | None = None) -> dict:
    """['gpt-x=0.5,1.5'] -> {'gpt-x': [0.5, 1.5]} (dollars per million input, output tokens)."""
    out = {k: [float(x) for x in v] for k, v in (base or {}).items()}
    for it in items:
        try:
            model, vals = it.split("=", 1)
            pin, pout = (float(x) for x in vals.split(","))
        except ValueError:
            raise ValueError(f"--price expects MODEL=INPUT,OUTPUT dollars per million tokens, got {it!r}") from None
        if not model or not all(math.isfinite(x) and x >= 0 for x in (pin, pout)):
            raise ValueError(f"--price {it!r}: prices must be finite numbers >= 0 (dollars per million tokens)")
        out[model] = [pin, pout]
    return out


PRICE_ENV = "RAGWB_PRICE"  # MODEL=IN,OUT[;MODEL=IN,OUT]: what --price says, for the workbench and ragwb run


def env_prices(environ=None) -> list[str]:
    """The --price items the environment gives (RAGWB_PRICE, ';'-separated)."""
    import os

    raw = (os.environ if environ is None else environ).get(PRICE_ENV, "")
    return [x.strip() for x in raw.split(";") if x.strip()]


def price_known(model: str, prices: dict | None = None) -> bool:
    """Is there a price for ``model``? An unknown price is said as "price unknown", never as $0."""
    return model in (prices or PRICES)


def dollars_text(dollars: float, known: bool, prefix: str = "") -> str:
    """A dollar amount as a line says it: "$0.0123", or "price unknown (--price MODEL=IN,OUT)" for a model
    with no price (its calls are not free)."""
    return f"{prefix}${dollars:,.4f}" if known else "price unknown (--price MODEL=IN,OUT)"


def price_of(model: str, prompt_tokens: int, completion_tokens: int, prices: dict | None = None) -> float:
    table = prices or PRICES
    pin, pout = table.get(model, (0.0, 0.0))  # unknown models cost 0: add them with --price
    return (prompt_tokens * pin + completion_tokens * pout) / 1e6


def retry_delay(attempt: int, base: float, cap: float, exc: Exception | None = None) -> float:
    """Seconds to wait before retry ``attempt`` (0-based): the server's Retry-After when it sent
    one, else exponential backoff with +-25% jitter; never more than ``cap``."""
    resp = getattr(exc, "response", None)
    ra = resp.headers.get("retry-after") if resp is not None else None
    if ra:
        try:
            return min(cap, float(ra))
        except ValueError:
            pass
    return min(cap, base * 2 ** attempt) * (0.75 + 0.5 * random.random())


@dataclass(frozen=True)
class LLMConfig:
    base_url: str
    model: str
    api_key_env: str = "OPENAI_API_KEY"
    temperature: float = 0.0
    max_tokens: int = 256
    timeout: float = 60.0
    retries: int = 3
    backoff: float = 0.5
    max_backoff: float = 30.0
    max_concurrency: int = 4
    response_format: str = ""  # "" | "json_object" | "json_schema" (a judge sends its own schema)
    context_window: int = 0  # the model's window in tokens (0 = unknown: asked of the endpoint's /models)

    def __post_init__(self):
        checks = {"timeout": self.timeout > 0, "retries": self.retries >= 0, "max_concurrency": self.max_concurrency >= 1,
                  "max_tokens": self.max_tokens >= 1, "backoff": self.backoff >= 0,
                  "context_window": isinstance(self.context_window, int) and self.context_window >= 0}
        require_http(self.base_url, "an LLM endpoint")
        bad = [k for k, ok in checks.items() if not ok]
        if bad:
            raise ValueError("LLM endpoint setting(s) out of range: "
                             + ", ".join(f"{k}={getattr(self, k)!r}" for k in bad))

    def public(self) -> dict:
        """What may be stored: no key, only the name of its variable; credentials in the URL redacted."""
        d = asdict(self)
        d["base_url"] = redact_url(d["base_url"])
        return d


@dataclass
class LLMResult:
    text: str | None
    status: str  # ok | rate_limited | timeout | error
    prompt_tokens: int = 0
    completion_tokens: int = 0
    cached: bool = False
    error: str = ""
    latency_s: float = 0.0
    calls: int = 0
    usage_error: str = ""  # the endpoint's usage was not a plausible count (tokens then counted here)
    http_status: int = 0  # the HTTP status of a refused call (400 context length, 422 ...)


@dataclass
class CacheStats:
    hits: int = 0
    misses: int = 0
    calls: int = 0
    tokens_saved: int = 0
    dollars_saved: float = 0.0
    tokens_used: int = 0
    dollars_spent: float = 0.0  # price of the calls actually made (price table)


def open_cache_db(path: str | Path, schema: list[str]) -> sqlite3.Connection:
    """A workspace cache (SQLite): a damaged file (truncated, overwritten, not a database) is moved aside as
    ``<name>.damaged-<time>`` with one warning naming it, and a fresh cache starts: a cache only saves work,
    so losing it never stops a run (the moved file is kept for whoever wants to look)."""
    import sys

    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    for attempt in range(2):
        db = sqlite3.connect(str(path), check_same_thread=False, timeout=60)  # shared by Ray workers
        try:
            for sql in schema:
                db.execute(sql)
            db.execute("SELECT count(*) FROM sqlite_master").fetchone()
            return db
        except sqlite3.DatabaseError as e:
            db.close()
            if attempt or "locked" in str(e):
                raise
            aside = path.with_name(f"{path.name}.damaged-{time.strftime('%Y%m%d-%H%M%S')}")
            path.rename(aside)
            print(f"warning: cache {path} is damaged ({e}); moved aside to {aside.name}, starting a fresh cache",
                  file=sys.stderr)
    raise AssertionError("unreachable")


class ResponseCache:
    def __init__(self, path: str | Path):
        self.db = open_cache_db(path, ["CREATE TABLE IF NOT EXISTS responses (k TEXT PRIMARY KEY, v TEXT)"])
        self.lock = threading.Lock()

    def get(self, k: str) -> dict | None:
        with self.lock:
            try:
                row = self.db.execute("SELECT v FROM responses WHERE k = ?", (k,)).fetchone()
            except sqlite3.DatabaseError:  # damaged under a page we had not read yet: a miss, not a crash
                return None
        try:
            return json.loads(row[0]) if row else None
        except ValueError:
            return None

    def put(self, k: str, v: dict) -> None:
        with self.lock:
            self.db.execute("INSERT OR REPLACE INTO responses VALUES (?, ?)", (k, json.dumps(v)))
            self.db.commit()


class Limiter:
    """At most ``n`` calls in flight, and one shared backoff: when any caller is rate-limited every
    caller waits (a 429 is about the account, not the thread). The Ray engine swaps in one shared by
    the whole cluster (evals/run/engines.py); the interface is ``slot()`` and ``pause(seconds)``."""

    def __init__(self, n: int):
        self._sem = threading.Semaphore(max(1, n))
        self._lock = threading.Lock()
        self._until = 0.0

    @contextlib.contextmanager
    def slot(self):
        with self._sem:
            while True:  # wait out a backoff another caller started
                with self._lock:
                    wait = self._until - time.monotonic()
                if wait <= 0:
                    break
                time.sleep(min(wait, 1.0))
            yield

    def pause(self, seconds: float) -> None:
        with self._lock:
            self._until = max(self._until, time.monotonic() + seconds)


# answers to the request itself (too long, malformed): the same request gets the same answer, so it is
# stored like a result; 401/403/404/429 may change with the account or the server, so they are retried
DETERMINISTIC_REFUSALS = (400, 413, 422)
MAX_USAGE_TOKENS = 100_000_000  # no real prompt or completion is larger; a bigger "count" is a broken server


def check_usage(pt, ct) -> str:
    """'' when the endpoint's usage counts are plausible, else why not (the run then counts here)."""
    for name, v in (("prompt_tokens", pt), ("completion_tokens", ct)):
        if isinstance(v, bool) or not isinstance(v, int) or not 0 <= v <= MAX_USAGE_TOKENS:
            return f"endpoint usage {name}={str(v)[:40]} is not a count in 0..{MAX_USAGE_TOKENS:,}: rejected"
    return ""


def structured_format(fmt: str, name: str, schema: dict) -> dict:
    """The ``response_format`` that constrains a reply to ``schema``: ``json_schema`` in OpenAI's form (OpenAI,
    vLLM, llama.cpp's server), ``json_object`` with the schema (llama-cpp-python's server); {} for plain text."""
    if fmt == "json_schema":
        return {"response_format": {"type": "json_schema", "json_schema": {"name": name, "strict": True,
                                                                            "schema": schema}}}
    if fmt == "json_object":
        return {"response_format": {"type": "json_object", "schema": schema}}
    return {}


# the windows asked of endpoints' GET /models this process: (base_url, model) -> tokens (0 = unknown)
_WINDOWS: dict = {}
_WINDOWS_LOCK = threading.Lock()


class LLMClient:
    def __init__(self, cfg: LLMConfig, cache_path: str | Path | None = None, use_cache: bool = True,
                 prices: dict | None = None, limiter=None):
        from openai import OpenAI

        self.cfg = cfg
        key = os.environ.get(cfg.api_key_env) or ""
        base, query = split_query(cfg.base_url)
        if key and "@" in (urlsplit(base).netloc or ""):
            # httpx sends the URL's user:password as Basic auth in the one Authorization header, so the Bearer
            # key would silently never be sent: refused, naming both
            raise ValueError(f"{redact_url(cfg.base_url)} carries a user:password (sent as Basic auth) and "
                             f"{cfg.api_key_env} holds a key (sent as Bearer): one Authorization header cannot "
                             f"carry both; drop the password from the URL or unset {cfg.api_key_env} (or point "
                             "--llm-key-env/--judge-key-env at an empty variable)")
        # sent as they are; scrubbed from every error text this client returns (stored, printed)
        self.secrets = [x for x in [key, *url_secrets(cfg.base_url)] if len(x) >= 3]
        register_secret(*self.secrets)  # every stored or printed text of the process hides them
        from .guard import guarded_http_client

        # the timeout is a deadline for the whole response, and its size is capped (rag/llm/guard.py)
        self.client = OpenAI(base_url=base, api_key=key or "not-needed", default_query=query or None,
                             max_retries=0, timeout=cfg.timeout, http_client=guarded_http_client(cfg.timeout))
        self.cache = ResponseCache(cache_path) if (use_cache and cache_path) else None
        self.stats = CacheStats()
        self.prices = prices
        self.limiter = limiter or Limiter(cfg.max_concurrency)
        self._lock = threading.Lock()
        self._inflight: dict = {}  # cache key -> [its lock, threads using it]: one request a prompt at a time
        self._window: int | None = None

    def context_window(self) -> int:
        """The model's context window in tokens: the configured one, else what the endpoint's
        ``/models`` reports for this model (vLLM's max_model_len, llama.cpp's n_ctx, ...), else 0."""
        if self.cfg.context_window:
            return self.cfg.context_window
        with self._lock:  # asked once; every thread waits for the one answer
            if self._window is None:
                # once a process per endpoint and model: the page makes a client per answerer, judge and generator
                # (it sent 17 GET /models no line mentioned: issue 72); the endpoint's answer is the same for all
                key = (self.cfg.base_url, self.cfg.model)
                with _WINDOWS_LOCK:
                    if key not in _WINDOWS:
                        _WINDOWS[key] = self._ask_window()
                    self._window = _WINDOWS[key]
        return self._window

    def known_window(self) -> int | None:
        """The window without asking anything: the configured one, or what this process's ``GET /models`` already
        said for this endpoint and model; None when neither (the page counts before consent: issue 83)."""
        if self.cfg.context_window:
            return self.cfg.context_window
        with _WINDOWS_LOCK:
            return _WINDOWS.get((self.cfg.base_url, self.cfg.model))

    def window_probed(self) -> bool:
        """Has this process asked the endpoint's ``GET /models`` for this model's window (the page says so)?"""
        return not self.cfg.context_window and (self.cfg.base_url, self.cfg.model) in _WINDOWS

    def _ask_window(self) -> int:
        try:
            data = [m.model_dump() for m in
                    self.client.with_options(timeout=min(10.0, self.cfg.timeout)).models.list().data]
        except Exception:  # no /models: unknown, never a failure
            return 0
        mine = [d for d in data if d.get("id") == self.cfg.model] or (data if len(data) == 1 else [])
        for d in mine:
            meta = d.get("meta") or {}
            for v in (d.get("max_model_len"), d.get("context_length"), d.get("context_window"), d.get("n_ctx"),
                      meta.get("n_ctx"), meta.get("n_ctx_train")):
                if isinstance(v, int) and not isinstance(v, bool) and v > 0:
                    return v
        return 0

    def cache_key(self, messages: list[dict], params: dict, repeat: int) -> str:
        blob = json.dumps({"endpoint": self.cfg.base_url, "model": self.cfg.model, "messages": messages,
                           "params": params, "repeat": repeat}, sort_keys=True, ensure_ascii=False)
        return hashlib.sha256(blob.encode()).hexdigest()

    def _params(self, overrides: dict) -> dict:
        params = {"temperature": self.cfg.temperature, "max_tokens": self.cfg.max_tokens}
        if self.cfg.response_format == "json_object":
            params["response_format"] = {"type": "json_object"}
        # json_schema: the caller names its schema (overrides["response_format"]); never sent without one
        params.update(overrides)
        return params

    def is_cached(self, messages: list[dict], repeat: int = 0, **overrides) -> bool:
        """Would ``chat`` with these arguments be answered from the response cache (no call, no cost)? The
        workbench's cost line asks this before an Apply sends anything."""
        return self.has_key(self.cache_key(messages, self._params(overrides), repeat))

    def has_key(self, key: str) -> bool:
        """Is this ``cache_key`` in the response cache?"""
        return self.cache is not None and self.cache.get(key) is not None

    def chat(self, messages: list[dict], purpose: str = "answer", repeat: int = 0, **overrides) -> LLMResult:
        params = self._params(overrides)
        key = self.cache_key(messages, params, repeat)
        if self.cache is None:
            return self._chat(messages, purpose, params, key)
        # one request a prompt: two threads asking the same prompt at once (two points that pack the same context)
        # send it once; the second waits and reads the reply from the cache (the cost line counted one call)
        with self._lock:
            held = self._inflight.setdefault(key, [threading.Lock(), 0])
            held[1] += 1
        try:
            with held[0]:
                return self._chat(messages, purpose, params, key)
        finally:
            with self._lock:
                held[1] -= 1
                if not held[1]:
                    self._inflight.pop(key, None)

    def _chat(self, messages: list[dict], purpose: str, params: dict, key: str) -> LLMResult:
        if self.cache is not None:
            hit = self.cache.get(key)
            if hit is not None and hit.get("refused"):  # a deterministic refusal is a result, not a call to repeat
                with self._lock:
                    self.stats.hits += 1
                return LLMResult(None, "error", cached=True, http_status=hit["refused"],
                                 error=f"{hit['error']} (stored refusal: the same request is not sent again; "
                                       "--no-cache to retry)")
            if hit is not None:
                with self._lock:
                    self.stats.hits += 1
                    self.stats.tokens_saved += hit["prompt_tokens"] + hit["completion_tokens"]
                    self.stats.dollars_saved += price_of(self.cfg.model, hit["prompt_tokens"],
                                                         hit["completion_tokens"], self.prices)
                bad = check_usage(hit["prompt_tokens"], hit["completion_tokens"])
                if bad:  # cached before counts were checked: the text stands, the counts do not
                    return LLMResult(hit["text"], "ok", 0, 0, cached=True, usage_error=bad)
                return LLMResult(hit["text"], "ok", hit["prompt_tokens"], hit["completion_tokens"], cached=True,
                                 usage_error=hit.get("usage_error", ""))
        with self._lock:
            self.stats.misses += 1
        res = self._call(messages, params)
        res.error = scrub(res.error, self.secrets)
        res.text = scrub(res.text, self.secrets)  # a server that echoes the request must not get its key stored
        if res.status == "error" and res.http_status in DETERMINISTIC_REFUSALS and self.cache is not None:
            self.cache.put(key, {"refused": res.http_status, "error": res.error, "purpose": purpose})
        if res.status == "ok" and self.cache is not None:
            self.cache.put(key, {"text": res.text, "prompt_tokens": res.prompt_tokens,
                                 "completion_tokens": res.completion_tokens, "purpose": purpose,
                                 **({"usage_error": res.usage_error} if res.usage_error else {})})
        return res

    def _call(self, messages, params) -> LLMResult:
        import openai

        t0 = time.perf_counter()
        last_status, last_err, calls = "error", "", 0
        for attempt in range(self.cfg.retries + 1):
            err: Exception | None = None
            try:
                with self.limiter.slot():
                    calls += 1
                    with self._lock:
                        self.stats.calls += 1
                    resp = self.client.chat.completions.create(model=self.cfg.model, messages=messages, **params)
                text = resp.choices[0].message.content if resp.choices else None
                if text is None or not isinstance(text, str):
                    what = "no message content" if text is None else \
                        f"message content of type {type(text).__name__}, not a string"
                    return LLMResult(None, "parse_error", error=f"response had {what}",
                                     latency_s=time.perf_counter() - t0, calls=calls)
                u = resp.usage
                pt, ct = (u.prompt_tokens or 0, u.completion_tokens or 0) if u else (0, 0)
                bad = check_usage(pt, ct)
                if bad:
                    return LLMResult(text, "ok", 0, 0, latency_s=time.perf_counter() - t0, calls=calls,
                                     usage_error=bad)
                with self._lock:
                    self.stats.tokens_used += pt + ct
                    self.stats.dollars_spent += price_of(self.cfg.model, pt, ct, self.prices)
                return LLMResult(text, "ok", pt, ct, latency_s=time.perf_counter() - t0, calls=calls)
            except openai.RateLimitError as e:
                last_status, last_err, err = "rate_limited", _short(e), e
            except openai.APITimeoutError as e:
                last_status, last_err = "timeout", _short(e)
            except openai.APIStatusError as e:
                last_status, last_err, err = "error", f"HTTP {e.status_code}: {_short(e)}", e
                if e.status_code < 500:
                    return LLMResult(None, "error", error=last_err, latency_s=time.perf_counter() - t0, calls=calls,
                                     http_status=e.status_code)  # a client error will not fix itself
            except openai.APIConnectionError as e:
                from .guard import guard_cause

                big = guard_cause(e)
                if big is not None:  # the same request would get the same flood or encoding: not retried, not stored
                    return LLMResult(None, "error", error=scrub_cut(str(big), 300, self.secrets),
                                     latency_s=time.perf_counter() - t0, calls=calls)
                last_status, last_err = "error", _short(e)
            except (ValueError, KeyError, TypeError, AttributeError) as e:  # malformed JSON body
                return LLMResult(None, "parse_error", error=_short(e), latency_s=time.perf_counter() - t0,
                                 calls=calls)
            except RecursionError:  # a reply nested 100,000 deep: this item's parse error, never the run's end
                return LLMResult(None, "parse_error", error=f"{redact_url(self.cfg.base_url)} replied with JSON "
                                 "nested too deep to read", latency_s=time.perf_counter() - t0, calls=calls)
            if attempt < self.cfg.retries:
                delay = retry_delay(attempt, self.cfg.backoff, self.cfg.max_backoff, err)
                if last_status == "rate_limited":
                    self.limiter.pause(delay)  # every caller backs off, not just this one
                time.sleep(delay)
        return LLMResult(None, last_status, error=last_err, latency_s=time.perf_counter() - t0, calls=calls)


# the repeat index of the item being evaluated, for caches that only see HTTP requests
current_repeat: contextvars.ContextVar[int] = contextvars.ContextVar("ragwb_repeat", default=0)


def _short(e: Exception) -> str:
    """An error as stored: scrubbed whole (every secret this process holds, in every spelling), then cut; a secret
    straddling the cut never leaves its prefix behind (a guard refusal is named by its own message)."""
    from .guard import guard_cause

    cause = guard_cause(e)
    return scrub_cut(f"{type(e).__name__}: {e}" + (f" ({cause})" if cause is not None and cause is not e else ""),
                     300)
