"""What comes back from an endpoint is hostile until read: a size cap and a deadline for the whole response.

httpx's timeouts bound each read, not the response: a server sending one byte a second never trips a
3 s read timeout, and nothing bounds a body's size (a 60 MB reply took 2.2 GB of memory and landed in
the cache). Every client of the workbench (LLM answerer and judges, deployed services, embeddings)
sends through ``GuardedTransport``, which reads the body itself and stops at

* the deadline: ``timeout`` seconds after the request was sent, for headers and body together
  (``httpx.ReadTimeout``, so each client reports its usual ``timeout`` status);
* the cap: ``max_response_bytes()`` (``RAGWB_MAX_RESPONSE_MB``, default 8 MB; ``ragwb run
  --max-response-mb``): ``ResponseTooLarge``, reported per item and never stored or cached.

Replies are asked for uncompressed (``Accept-Encoding: identity``), so the cap bounds memory too.
"""
from __future__ import annotations

import time

import httpx

from rag.errors import env_number

DEFAULT_MAX_RESPONSE_MB = 8.0


def max_response_bytes() -> int:
    """The cap on one response's body, in bytes (``RAGWB_MAX_RESPONSE_MB``; 0 = no cap)."""
    return int(env_number("RAGWB_MAX_RESPONSE_MB", DEFAULT_MAX_RESPONSE_MB) * 1_000_000)


class ResponseTooLarge(httpx.TransportError):
    """A response body over the cap: the item fails with this, nothing of it is kept."""


def too_large_message(limit: int) -> str:
    return (f"response larger than the {limit / 1e6:g} MB cap; not stored (raise it with --max-response-mb or "
            "RAGWB_MAX_RESPONSE_MB)")


class ReadBudget:
    """One response's budget while its body is read, chunk by chunk: the deadline and the size cap (the sync
    transport below and the judges' async one in rag/llm/cache.py both read through it)."""

    def __init__(self, request: httpx.Request, timeout: float, max_bytes: int):
        self.request, self.timeout, self.max_bytes = request, float(timeout), int(max_bytes)
        self.deadline, self.n = time.monotonic() + self.timeout, 0

    def check_headers(self, resp) -> None:
        cl = resp.headers.get("content-length", "")
        if self.max_bytes and cl.isdigit() and int(cl) > self.max_bytes:
            raise ResponseTooLarge(too_large_message(self.max_bytes), request=self.request)
        self.take(b"")

    def take(self, chunk: bytes) -> bytes:
        self.n += len(chunk)
        if self.max_bytes and self.n > self.max_bytes:
            raise ResponseTooLarge(too_large_message(self.max_bytes), request=self.request)
        if time.monotonic() > self.deadline:
            raise httpx.ReadTimeout(f"no complete response within {self.timeout:g} s (a server sending slowly: "
                                    f"{self.n:,} bytes by then)", request=self.request)
        return chunk


class GuardedTransport(httpx.BaseTransport):
    """An httpx transport that enforces one deadline per response and a cap on its body size."""

    def __init__(self, timeout: float, max_bytes: int | None = None, inner: httpx.BaseTransport | None = None):
        self.timeout = float(timeout)
        self.max_bytes = max_response_bytes() if max_bytes is None else int(max_bytes)
        self.inner = inner or httpx.HTTPTransport()

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        budget = ReadBudget(request, self.timeout, self.max_bytes)
        resp = self.inner.handle_request(request)
        try:
            budget.check_headers(resp)
            chunks = [budget.take(chunk) for chunk in resp.stream]
        finally:
            resp.close()
        headers = [(k, v) for k, v in resp.headers.items() if k.lower() not in ("transfer-encoding",)]
        return httpx.Response(resp.status_code, headers=headers, content=b"".join(chunks), request=request,
                              extensions=resp.extensions)

    def close(self) -> None:
        self.inner.close()


def guarded_http_client(timeout: float, max_bytes: int | None = None) -> httpx.Client:
    """An httpx client whose every response is bounded by ``timeout`` seconds (whole) and the size cap;
    redirects are not followed (a request may carry credentials)."""
    return httpx.Client(transport=GuardedTransport(timeout, max_bytes), timeout=timeout,
                        headers={"Accept-Encoding": "identity"})


def too_large_cause(e: BaseException) -> ResponseTooLarge | None:
    """The ResponseTooLarge behind an exception a client library wrapped (openai's APIConnectionError)."""
    seen = 0
    while e is not None and seen < 10:
        if isinstance(e, ResponseTooLarge):
            return e
        e, seen = e.__cause__ or e.__context__, seen + 1
    return None
