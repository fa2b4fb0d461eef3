"""A deployed RAG service as a system beside the reference shapes (docs/your-system.md).

For each gold question the workbench POSTs JSON to the service and reads its answer, the contexts it
used and (optionally) its token usage. The default contract:

    request   {"question": "...", "question_id": "...", "history": [{"role": "user"|"assistant", "content": "..."}]}
    response  {"answer": "...",
               "contexts": [{"text": "...", "doc_id": "...", "page_id": "...", "source": "...", "score": 0.9}
                            | "plain text", ...],
               "usage": {"prompt_tokens": 123, "completion_tokens": 45}}          (usage optional)

A mapping file (TOML or JSON) adapts other shapes: dotted field paths for the request and the response,
constant request fields, and headers whose values may come from environment variables
(``"env:MY_KEY"``: only the variable's name is stored). Retries (429, 5xx, timeouts), timeouts,
bounded concurrency, the response cache and the statuses are the LLM path's; latency is end to end.
Contexts without ids are located in the ingested corpus by their text (rag/ingest/textmatch.py), so
evidence recall, page metrics and citations work for any service.
"""
from __future__ import annotations

import hashlib
import json
import os
import threading
import time
import tomllib
from dataclasses import asdict, dataclass, field
from pathlib import Path

from rag.errors import EndpointError
from rag.llm.guard import ResponseTooLarge
from rag.safeio import loads_bounded
from rag.llm.client import MAX_USAGE_TOKENS
from rag.llm.urls import redact_url, register_secret, scrub, scrub_cut, scrub_obj, url_secrets

REQUEST_KEYS = {"question", "question_id", "history", "extra", "headers"}
RESPONSE_KEYS = {"answer", "contexts", "context_text", "context_doc_id", "context_page_id", "context_source",
                 "context_score", "prompt_tokens", "completion_tokens"}
DEFAULT_MAPPING = {
    "request": {"question": "question", "question_id": "question_id", "history": "history"},
    "response": {"answer": "answer", "contexts": "contexts", "context_text": "text", "context_doc_id": "doc_id",
                 "context_page_id": "page_id", "context_source": "source", "context_score": "score",
                 "prompt_tokens": "usage.prompt_tokens", "completion_tokens": "usage.completion_tokens"},
}


def load_mapping(path: str | Path) -> dict:
    """A mapping file: ``[request]`` and ``[response]`` tables of dotted paths. An unknown key is an
    error naming the file and the valid keys (a typo must never silently use the default)."""
    p = Path(path)
    try:
        raw = p.read_bytes()
        d = json.loads(raw) if p.suffix == ".json" else tomllib.loads(raw.decode("utf-8"))
    except OSError as e:
        raise ValueError(f"{p}: cannot read the mapping file ({e.strerror})") from None
    except (ValueError, UnicodeDecodeError) as e:
        raise ValueError(f"{p}: not a valid {'JSON' if p.suffix == '.json' else 'TOML'} mapping file ({e})") from None
    bad = set(d) - {"request", "response"}
    if bad:
        raise ValueError(f"{p}: unknown section(s) {sorted(bad)}; valid: request, response")
    for sec, valid in (("request", REQUEST_KEYS), ("response", RESPONSE_KEYS)):
        if not isinstance(d.get(sec, {}), dict):
            raise ValueError(f"{p}: [{sec}] must be a table of field paths")
        extra = set(d.get(sec, {})) - valid
        if extra:
            raise ValueError(f"{p}: unknown key(s) [{sec}] {sorted(extra)}; valid: {', '.join(sorted(valid))}")
        for k, v in d.get(sec, {}).items():
            if k in ("extra", "headers"):
                if not isinstance(v, dict) or (k == "headers" and not all(isinstance(x, str) for x in v.values())):
                    raise ValueError(f"{p}: [{sec}] {k} must be a table" + (" of text values" if k == "headers" else ""))
                continue
            if not isinstance(v, str):  # a path is text: `question = 5` would be a KeyError mid-run
                raise ValueError(f"{p}: [{sec}] {k} = {v!r} must be a dotted field path in quotes (e.g. \"data.reply\")")
            # the question, answer, contexts and their text must go somewhere; the others may be "" (not sent/read)
            if not v.strip() and k in ("question", "answer", "contexts", "context_text"):
                raise ValueError(f"{p}: [{sec}] {k} = \"\" names no field; the {k.replace('_', ' ')} must have a path")
            if v != v.strip() or ".." in v or v.startswith(".") or v.endswith("."):
                raise ValueError(f"{p}: [{sec}] {k} = {v!r} is not a dotted field path (no spaces or empty steps)")
    return {"request": {**DEFAULT_MAPPING["request"], **d.get("request", {})},
            "response": {**DEFAULT_MAPPING["response"], **d.get("response", {})}}


@dataclass(frozen=True)
class SystemConfig:
    name: str
    url: str
    mapping: dict = field(default_factory=lambda: DEFAULT_MAPPING)
    timeout: float = 60.0
    retries: int = 3
    max_concurrency: int = 4
    mapping_file: str = ""

    def public(self) -> dict:
        """What is stored: the URL redacted; header values from the environment by name only, any
        literal header value hidden."""
        d = json.loads(json.dumps(asdict(self)))
        d["url"] = redact_url(self.url)
        heads = d["mapping"].get("request", {}).get("headers") or {}
        for k, v in heads.items():
            if not (isinstance(v, str) and v.startswith("env:")):
                heads[k] = "***"
        return d

    @classmethod
    def from_dict(cls, d: dict) -> "SystemConfig":
        return cls(**d)


@dataclass
class SystemResult:
    status: str  # ok | rate_limited | timeout | error | parse_error
    answer: str = ""
    contexts: list = field(default_factory=list)  # [{"text", "doc_id", "page_id", "source", "score"}]
    prompt_tokens: int | None = None
    completion_tokens: int | None = None
    latency_ms: float = 0.0
    error: str = ""
    cached: bool = False
    usage_error: str = ""  # the service's usage count was not a plausible count: tokens counted here instead


def get_path(obj, path: str):
    """``get_path({"a": {"b": [1]}}, "a.b.0") -> 1``; a missing step raises KeyError naming the path."""
    cur = obj
    for step in path.split("."):
        if isinstance(cur, dict) and step in cur:
            cur = cur[step]
        elif isinstance(cur, list) and step.lstrip("-").isdigit() and -len(cur) <= int(step) < len(cur):
            cur = cur[int(step)]
        else:
            raise KeyError(path)
    return cur


def set_path(obj: dict, path: str, value) -> None:
    steps = path.split(".")
    for step in steps[:-1]:
        obj = obj.setdefault(step, {})
    obj[steps[-1]] = value


class SystemClient:
    """Calls one deployed service: retries, timeouts, a concurrency bound and the response cache."""

    def __init__(self, cfg: SystemConfig, cache_path: str | Path | None = None, use_cache: bool = True):

        from rag.llm.client import Limiter, ResponseCache

        self.cfg = cfg
        self.headers, header_secrets = {}, []
        for k, v in (cfg.mapping.get("request", {}).get("headers") or {}).items():
            if isinstance(v, str) and v.startswith("env:"):
                var = v[4:]
                val = os.environ.get(var)
                if val is None:
                    raise ValueError(f"system {cfg.name}: header {k} takes environment variable {var}, which is not set")
                v = val
            header_secrets.append(str(v))  # a literal header value is as secret as one from the environment
            self.headers[k] = str(v)
        self.secrets = [s for s in [*header_secrets, *url_secrets(cfg.url)] if len(s) >= 3]
        register_secret(*self.secrets)
        from rag.llm.guard import guarded_http_client

        # one deadline for the whole response and a size cap (rag/llm/guard.py); a redirect is reported,
        # never followed (the request carries the service's credentials)
        self.http = guarded_http_client(cfg.timeout)
        self.cache = ResponseCache(cache_path) if (use_cache and cache_path) else None
        self.limiter = Limiter(cfg.max_concurrency)
        self.calls = self.hits = 0
        self._lock = threading.Lock()

    def request_body(self, question: str, question_id: str, history: list[dict] | None) -> dict:
        m = self.cfg.mapping["request"]
        body: dict = {}
        for k, v in (m.get("extra") or {}).items():
            set_path(body, k, v)
        set_path(body, m["question"], question)
        if m.get("question_id"):
            set_path(body, m["question_id"], question_id)
        if m.get("history"):
            set_path(body, m["history"], history or [])
        return body

    def ask(self, question: str, question_id: str = "", history: list[dict] | None = None,
            repeat: int = 0) -> SystemResult:
        body = self.request_body(question, question_id, history)
        key = hashlib.sha256(json.dumps({"url": self.cfg.url, "body": body, "repeat": repeat}, sort_keys=True,
                                        ensure_ascii=False).encode()).hexdigest()
        if self.cache is not None:
            hit = self.cache.get(key)
            if hit is not None:
                with self._lock:
                    self.hits += 1
                res = self.parse(hit["json"])
                res.cached, res.latency_ms = True, hit.get("latency_ms", 0.0)
                return res
        res, raw = self._post(body)
        res.error = scrub(res.error, self.secrets)
        if res.status == "ok":  # what the service echoed of its request (headers, URL) is stored nowhere
            res.answer = scrub(res.answer, self.secrets)
            res.contexts = [{**c, "text": scrub(c["text"], self.secrets)} for c in res.contexts]
            if self.cache is not None:
                self.cache.put(key, {"json": scrub_obj(raw), "latency_ms": res.latency_ms,
                                     "purpose": f"system:{self.cfg.name}"})
        return res

    def _post(self, body: dict) -> tuple[SystemResult, object]:
        import httpx

        from rag.llm.client import retry_delay

        t0 = time.perf_counter()
        status, err = "error", ""
        for attempt in range(self.cfg.retries + 1):
            exc = None
            try:
                with self.limiter.slot():
                    with self._lock:
                        self.calls += 1
                    resp = self.http.post(self.cfg.url, json=body, headers=self.headers)
                ms = (time.perf_counter() - t0) * 1000
                if resp.status_code == 429 or resp.status_code >= 500:
                    status = "rate_limited" if resp.status_code == 429 else "error"
                    err = f"HTTP {resp.status_code}: {scrub_cut(resp.text, 200, self.secrets)}"
                    exc = _Resp(resp)
                elif resp.status_code >= 400:
                    return SystemResult("error", latency_ms=ms,
                                        error=f"HTTP {resp.status_code}: {scrub_cut(resp.text, 200, self.secrets)}"), None
                elif 300 <= resp.status_code < 400:
                    where = redact_url(resp.headers.get("location", "")) or "nowhere (no Location header)"
                    return SystemResult("error", latency_ms=ms,
                                        error=f"HTTP {resp.status_code}: the service redirected to {where}; "
                                              "redirects are not followed (the request carries credentials): "
                                              "give --system the final URL"), None
                else:
                    try:
                        raw = loads_bounded(resp.content)
                    except ValueError as e:
                        return SystemResult("parse_error", latency_ms=ms,
                                            error=f"response is not JSON ({e}): {resp.text[:120]!r}"), None
                    res = self.parse(raw)
                    res.latency_ms = ms
                    return res, raw
            except httpx.TimeoutException:
                status, err = "timeout", f"no answer within {self.cfg.timeout:g} s"
            except ResponseTooLarge as e:  # the same request would get the same flood: not retried
                return SystemResult("error", latency_ms=(time.perf_counter() - t0) * 1000, error=str(e)), None
            except httpx.HTTPError as e:
                status, err = "error", f"{type(e).__name__}: {e}"
            if attempt < self.cfg.retries:
                time.sleep(retry_delay(attempt, 0.5, 30.0, exc))
        return SystemResult(status, latency_ms=(time.perf_counter() - t0) * 1000, error=err), None

    def parse(self, raw) -> SystemResult:
        """The response as answer, contexts and usage through the mapping; what is missing or of the
        wrong type is status parse_error naming the field path."""
        m = self.cfg.mapping["response"]

        def field(key: str, what: str, typ: type, typ_name: str):
            """(value, None) or (None, the parse_error naming the field path and the mapping key)."""
            try:
                v = get_path(raw, m[key])
            except KeyError:
                return None, SystemResult("parse_error", error=f"response has no {m[key]!r} ({what}; mapping "
                                                                f"[response] {key})")
            if not isinstance(v, typ):
                return None, SystemResult("parse_error", error=f"response {m[key]!r} is {type(v).__name__}, "
                                                                f"not {typ_name}")
            return v, None

        answer, bad = field("answer", "the answer", str, "text")
        if bad:
            return bad
        items, bad = field("contexts", "the contexts used", list, "a list")
        if bad:
            return bad
        contexts = []
        for i, it in enumerate(items):
            if isinstance(it, str):
                contexts.append({"text": it})
                continue
            if not isinstance(it, dict):
                return SystemResult("parse_error", error=f"context {i} is {type(it).__name__}, not text or an object")
            c = {}
            for k in ("text", "doc_id", "page_id", "source", "score"):
                try:
                    c[k] = get_path(it, m[f"context_{k}"])
                except KeyError:
                    if k == "text":
                        return SystemResult("parse_error", error=f"context {i} has no {m['context_text']!r} (its text; "
                                                                 "mapping [response] context_text)")
            if not isinstance(c["text"], str):
                return SystemResult("parse_error", error=f"context {i} text is {type(c['text']).__name__}, not text")
            contexts.append(c)
        usage, bad_usage = {}, []
        for k in ("prompt_tokens", "completion_tokens"):
            try:
                v = get_path(raw, m[k])
            except KeyError:
                continue
            if isinstance(v, bool) or not isinstance(v, int) or not 0 <= v <= MAX_USAGE_TOKENS:
                # the documented rule (docs/your-system.md): keep the answer, count the tokens here
                bad_usage.append(f"response {m[k]!r} = {str(v)[:30]} is not a token count in 0..{MAX_USAGE_TOKENS:,}")
                continue
            usage[k] = v
        if bad_usage:
            usage = {}  # both counts from one source: never the service's prompt with our completion
        return SystemResult("ok", answer, contexts, usage.get("prompt_tokens"), usage.get("completion_tokens"),
                            usage_error="; ".join(bad_usage) + ("; tokens counted here" if bad_usage else ""))


def context_blocks(reader, contexts: list[dict], encoding: str = "o200k_base") -> tuple[list, dict]:
    """A service's contexts as numbered blocks located in the ingested corpus: by its page or document id
    when it gives one, else by its text (exact, normalised, then fuzzy; rag/ingest/textmatch.py), so evidence,
    page and citation metrics work for any system. Returns (blocks, counters: how each was located)."""
    from rag.strategies import Block
    from rag.ingest.textmatch import locate
    from rag.tokens import count_tokens_memo

    rd = reader
    how = {"by_id": 0, "by_text": 0, "unmatched": 0}
    unknown = 0  # contexts naming an id the corpus does not have (then located by text): counted, never silent
    blocks = []
    for n, c in enumerate(contexts, 1):
        text = c["text"]
        doc_id, page_id = c.get("doc_id"), c.get("page_id")
        span = None
        if page_id is not None and rd.pages.get(str(page_id)) is not None:
            pg = rd.pages.get(str(page_id))
            doc_id = pg["doc_id"]
            doc = rd.documents.get(doc_id)
            m = locate(text, doc["text"], int(pg["start"]), int(pg["end"])) if doc else None
            span = (m.start, m.end) if m else (int(pg["start"]), int(pg["end"]))
            how["by_id"] += 1
        elif doc_id is not None and rd.documents.get(str(doc_id)) is not None:
            doc_id = str(doc_id)
            m = locate(text, rd.documents.get(doc_id)["text"])
            span = (m.start, m.end) if m else None
            how["by_id"] += 1
        else:
            if page_id is not None or doc_id is not None:
                unknown += 1
            doc_id, span = _find_text(rd, text)
            how["by_text" if doc_id else "unmatched"] += 1
        if doc_id and span:
            pages = _overlapping(rd, "page", doc_id, span)
            chunks = _overlapping(rd, "chunk", doc_id, span)
            spans = ((doc_id, span[0], span[1]),)
        else:
            pages, chunks, spans = (), (), ()
        score = c.get("score")
        blocks.append(Block(n, text, "system", (doc_id,) if doc_id else (), pages, chunks, spans,
                            count_tokens_memo(text, encoding), float(score) if isinstance(score, (int, float)) else 0.0))
    if unknown:
        how["unknown_ids"] = unknown
    return blocks, how


def _find_text(rd, text: str) -> tuple[str | None, tuple | None]:
    """The document holding ``text``: exact first (every document), else normalised / fuzzy against the
    documents sharing most of its words."""
    from rag.ingest.textmatch import locate

    docs = getattr(rd, "_system_docs", None)
    if docs is None:  # once per reader: (doc_id, text, word set)
        docs = rd._system_docs = [(d, row["text"], set(row["text"].lower().split())) for d, row in rd.documents.items()]
    for d, t, _ in docs:
        i = t.find(text)
        if i >= 0:
            return d, (i, i + len(text))
    words = set(text.lower().split())
    if not words:
        return None, None
    best = sorted(docs, key=lambda x: -len(words & x[2]))[:3]
    for d, t, _ in best:
        m = locate(text, t)
        if m is not None:
            return d, (m.start, m.end)
    return None, None


def _overlapping(rd, kind: str, doc_id: str, span: tuple) -> tuple:
    """Ids of the pages or chunks of ``doc_id`` that overlap ``span`` (in reading order)."""
    cache = getattr(rd, "_system_spans", None)
    if cache is None:  # once per reader: doc -> [(start, end, page_id, chunk_id)]
        cache = rd._system_spans = {}
        for i in range(len(rd.chunk_ids)):
            cache.setdefault(rd.doc_ids[i], []).append((int(rd.starts[i]), int(rd.ends[i]), rd.page_ids[i],
                                                        rd.chunk_ids[i]))
    s, e = span
    hits = [x for x in cache.get(doc_id, []) if x[0] < e and x[1] > s]
    return tuple(dict.fromkeys(x[2] if kind == "page" else x[3] for x in sorted(hits)))


class _Resp(Exception):
    """A retryable HTTP answer, carrying its response for Retry-After."""

    def __init__(self, response):
        super().__init__(response.status_code)
        self.response = response


def parse_system_args(items: list[str], maps: list[str] | None = None, timeout: float = 60.0, retries: int = 3,
                      concurrency: int = 4) -> list[SystemConfig]:
    """``["v1=http://...", "v2=http://..."]`` (+ ``["v1=map.toml"]``) -> configs. Names must be unique and not
    a strategy's; a mapping for an unknown system is an error."""
    out, names = [], set()
    for it in items or []:
        name, sep, url = it.partition("=")
        name, url = name.strip(), url.strip()
        if not sep or not name or not url.startswith(("http://", "https://")):
            raise ValueError(f"--system expects NAME=URL (http or https), got {it!r}")
        if name in names:
            raise ValueError(f"--system {name} given twice; names must be unique (v1=..., v2=...)")
        from rag.strategies import STRATEGIES

        if name in STRATEGIES:
            raise ValueError(f"--system name {name!r} is a strategy's; pick another (e.g. {name}_service)")
        names.add(name)
        out.append(SystemConfig(name, url, DEFAULT_MAPPING, timeout, retries, concurrency))
    for it in maps or []:
        name, sep, path = it.partition("=")
        if not sep:
            raise ValueError(f"--system-map expects NAME=FILE, got {it!r}")
        if name not in names:
            raise ValueError(f"--system-map {name}: no --system {name}=URL given; systems: {', '.join(names) or 'none'}")
        mp = load_mapping(path)
        out = [SystemConfig(c.name, c.url, mp, c.timeout, c.retries, c.max_concurrency, str(Path(path).resolve()))
               if c.name == name else c for c in out]
    return out


__all__ = ["SystemConfig", "SystemClient", "SystemResult", "load_mapping", "parse_system_args", "EndpointError"]
