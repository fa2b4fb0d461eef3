"""What comes back from an endpoint is hostile until read: a size cap and a deadline for the whole response.

httpx's timeouts bound each read, not the response: a server sending one byte a second never trips a
3 s read timeout, and nothing bounds a body's size (a 60 MB reply took 2.2 GB of memory and landed in
the cache). Every client of the workbench (LLM answerer and judges, deployed services, embeddings)
sends through ``GuardedTransport``, which reads the body itself and stops at

* the deadline: ``timeout`` seconds after the request was sent, for headers and body together
  (``httpx.ReadTimeout``, so each client reports its usual ``timeout`` status);
* the cap: ``max_response_bytes()`` (``RAGWB_MAX_RESPONSE_MB``, default 8 MB; ``ragwb run
  --max-response-mb``): ``ResponseTooLarge``, reported per item and never stored or cached.

Replies are asked for uncompressed (``Accept-Encoding: identity``). A server that compresses anyway (gzip or
deflate) is decoded here, chunk by chunk with a bounded output, and the cap counts the *decoded* bytes while
decoding: a 300 KB gzip of 300 MB of zeros stops at the cap, never holding more than the cap in memory; the bytes
read count too, and bytes after the end of the stream (a second member, trailing junk) are refused by name. Any
other encoding (br, zstd, compress, "gzip, gzip") is refused with its name, on every client's path.
"""
from __future__ import annotations

import contextvars
import time
import zlib

import httpcore
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

    decoder = None  # a zlib decompressor when the body is gzip/deflate-encoded

    def check_headers(self, resp) -> None:
        cl = resp.headers.get("content-length", "")
        encoding = resp.headers.get("content-encoding", "").strip().lower()
        if encoding in ("gzip", "x-gzip", "deflate"):
            # 47: zlib or gzip header, detected; a raw deflate stream is tried on the first chunk
            self.decoder = zlib.decompressobj(47)
        elif encoding not in ("", "identity"):
            raise httpx.DecodingError(f"response Content-Encoding {encoding!r} is not supported (identity was "
                                      "asked for); nothing of it is kept", request=self.request)
        elif self.max_bytes and cl.isdigit() and int(cl) > self.max_bytes:
            raise ResponseTooLarge(too_large_message(self.max_bytes), request=self.request)
        self.take(b"")

    raw = 0  # bytes read off the wire (a compressed body's own size counts against the cap too)
    raw_deflate_tried = False  # "deflate" without its zlib header: decoded raw, tried once on the first chunk

    def take(self, chunk: bytes) -> bytes:
        """One raw chunk of the body -> its decoded bytes, counted against the cap as they are decoded. Every byte
        read counts: a compressed body's trailing bytes after its stream ends (a second gzip member, junk) are
        refused by name, never left uncounted in the decoder's ``unused_data``."""
        if time.monotonic() > self.deadline:
            raise httpx.ReadTimeout(f"no complete response within {self.timeout:g} s (a server sending slowly: "
                                    f"{self.n:,} bytes by then)", request=self.request)
        if self.decoder is None:
            out = chunk
            self._count(len(out))
            return out
        self.raw += len(chunk)
        if self.max_bytes and self.raw > self.max_bytes:
            raise ResponseTooLarge(too_large_message(self.max_bytes) + " (counted as read: the reply was compressed)",
                                   request=self.request)
        if chunk and self.decoder.eof:
            self._trailing(len(chunk))
        parts, data = [], chunk
        while data:
            room = (self.max_bytes - self.n + 1) if self.max_bytes else 0  # at most one byte past the cap
            try:
                out = self.decoder.decompress(data, max(room, 1) if self.max_bytes else 0)
            except zlib.error as e:
                if self.n == 0 and self.raw == len(chunk) and data is chunk and not self.raw_deflate_tried:
                    # "deflate" sent without its zlib header (raw deflate, as some servers do): decoded as browsers do
                    self.raw_deflate_tried, self.decoder = True, zlib.decompressobj(-15)
                    continue
                raise httpx.DecodingError(f"response body is not valid gzip/deflate ({e})",
                                          request=self.request) from None
            self._count(len(out))
            parts.append(out)
            data = self.decoder.unconsumed_tail
            if self.decoder.eof and self.decoder.unused_data:
                self._trailing(len(self.decoder.unused_data))
        return b"".join(parts)

    def _trailing(self, n: int) -> None:
        raise httpx.DecodingError(f"response body continues after the end of its gzip/deflate stream ({n:,} more "
                                  "bytes: a second member or trailing data); refused, nothing of it is kept",
                                  request=self.request)

    def _count(self, n: int) -> None:
        self.n += n
        if self.max_bytes and self.n > self.max_bytes:
            decoded = " (counted decoded: the reply was compressed)" if self.decoder is not None else ""
            raise ResponseTooLarge(too_large_message(self.max_bytes) + decoded, request=self.request)


# the deadline of the request this thread is sending (GuardedTransport sets it; every socket read and write of
# that request waits at most until then, so a server trickling its *headers* a byte at a time is cut off too)
_DEADLINE: contextvars.ContextVar[float | None] = contextvars.ContextVar("ragwb_http_deadline", default=None)


def _clip(timeout: float | None) -> float | None:
    d = _DEADLINE.get()
    if d is None:
        return timeout
    left = d - time.monotonic()
    if left <= 0:
        raise httpcore.ReadTimeout("no complete response before the deadline (headers and body together)")
    return left if timeout is None else min(timeout, left)


class _DeadlineStream(httpcore.NetworkStream):
    def __init__(self, inner):
        self.inner = inner

    def read(self, max_bytes: int, timeout: float | None = None) -> bytes:
        return self.inner.read(max_bytes, _clip(timeout))

    def write(self, buffer: bytes, timeout: float | None = None) -> None:
        self.inner.write(buffer, _clip(timeout))

    def close(self) -> None:
        self.inner.close()

    def start_tls(self, ssl_context, server_hostname=None, timeout=None):
        return _DeadlineStream(self.inner.start_tls(ssl_context, server_hostname, _clip(timeout)))

    def get_extra_info(self, info: str):
        return self.inner.get_extra_info(info)


class _DeadlineBackend(httpcore.NetworkBackend):
    """httpcore's sync backend, every stream's reads and writes clipped to the request's deadline."""

    def __init__(self):
        self.inner = httpcore.SyncBackend()

    def connect_tcp(self, host, port, timeout=None, local_address=None, socket_options=None):
        return _DeadlineStream(self.inner.connect_tcp(host, port, _clip(timeout), local_address, socket_options))

    def connect_unix_socket(self, path, timeout=None, socket_options=None):
        return _DeadlineStream(self.inner.connect_unix_socket(path, _clip(timeout), socket_options))

    def sleep(self, seconds: float) -> None:
        self.inner.sleep(seconds)


def _deadline_transport() -> httpx.HTTPTransport:
    t = httpx.HTTPTransport()
    pool = getattr(t, "_pool", None)
    if pool is not None and hasattr(pool, "_network_backend"):  # httpcore 1.x: its pool takes a backend
        pool._network_backend = _DeadlineBackend()
    return t


class GuardedTransport(httpx.BaseTransport):
    """An httpx transport that enforces one deadline per response and a cap on its body size."""

    def __init__(self, timeout: float, max_bytes: int | None = None, inner: httpx.BaseTransport | None = None):
        self.timeout = float(timeout)
        self.max_bytes = max_response_bytes() if max_bytes is None else int(max_bytes)
        self.inner = inner or _deadline_transport()

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        budget = ReadBudget(request, self.timeout, self.max_bytes)
        token = _DEADLINE.set(budget.deadline)
        try:
            resp = self.inner.handle_request(request)
            try:
                budget.check_headers(resp)
                chunks = [budget.take(chunk) for chunk in resp.stream]
            finally:
                resp.close()
        finally:
            _DEADLINE.reset(token)
        # the body is decoded already: its encoding and length headers would make httpx decode it again
        headers = [(k, v) for k, v in resp.headers.items()
                   if k.lower() not in ("transfer-encoding", "content-encoding", "content-length")]
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


def guard_cause(e: BaseException) -> httpx.TransportError | None:
    """What the guard refused behind an exception a client library wrapped (openai's "APIConnectionError:
    Connection error."): a body over the cap, or an encoding refused by name (br, zstd, a second gzip member).
    The same request would be refused again: callers report its own message and do not retry."""
    seen = 0
    while e is not None and seen < 10:
        if isinstance(e, (ResponseTooLarge, httpx.DecodingError)):
            return e
        if isinstance(e, httpx.RemoteProtocolError) and "Transfer-Encoding" in str(e):
            # e.g. "Transfer-Encoding: gzip": HTTP/1.1 clients read only chunked; was "Connection error."
            return httpx.DecodingError(f"the server replied with a Transfer-Encoding this client cannot read ({e}); "
                                       "a server or proxy setting (gzip belongs in Content-Encoding)")
        e, seen = e.__cause__ or e.__context__, seen + 1
    return None
