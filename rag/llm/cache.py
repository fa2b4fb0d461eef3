"""A caching httpx transport for LLM calls made by third-party clients (ragas through instructor).

Only the judges import this: ragas 0.4.3 drives ``openai`` 1.x, whose clients take an httpx
client. (openai 3.x moved to httpx2; the workbench's own client does not need this module.)
"""
from __future__ import annotations

import hashlib
import json

import httpx

from .client import CacheStats, ResponseCache, current_repeat

# Third-party clients (ragas via instructor) call the endpoint themselves; an httpx transport
# that caches by request body gives their calls the same response cache and the same keying
# (endpoint + model + messages + parameters, all in the body, + the repeat index).

def _transport_key(request: httpx.Request) -> str:
    h = hashlib.sha256()
    for part in (request.method.encode(), str(request.url).encode(), request.content or b"",
                 str(current_repeat.get()).encode()):
        h.update(part + b"\x00")
    return h.hexdigest()

class CachingAsyncTransport(httpx.AsyncBaseTransport):
    def __init__(self, cache: ResponseCache | None, stats: CacheStats, inner: httpx.AsyncBaseTransport | None = None):
        self.cache, self.stats = cache, stats
        self.inner = inner or httpx.AsyncHTTPTransport()

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        key = _transport_key(request) if self.cache is not None and request.method == "POST" else None
        if key is not None:
            hit = self.cache.get("http:" + key)
            if hit is not None:
                self.stats.hits += 1
                try:
                    self.stats.tokens_saved += int(json.loads(hit["body"]).get("usage", {}).get("total_tokens") or 0)
                except (ValueError, AttributeError):
                    pass
                return httpx.Response(hit["status"], headers={"content-type": "application/json"},
                                      content=hit["body"].encode(), request=request)
        self.stats.misses += 1
        self.stats.calls += 1
        from .guard import ReadBudget, max_response_bytes
        from .urls import scrub

        # the same deadline and size cap as every other client (rag/llm/guard.py)
        budget = ReadBudget(request, (request.extensions.get("timeout") or {}).get("read") or 60.0,
                            max_response_bytes())
        resp = await self.inner.handle_async_request(request)
        try:
            budget.check_headers(resp)
            chunks = [budget.take(chunk) async for chunk in resp.aiter_raw()]  # decoded by the budget, capped
        finally:
            await resp.aclose()
        body = b"".join(chunks)
        if key is not None and 200 <= resp.status_code < 300:
            try:
                json.loads(body)  # cache only well-formed replies; an echoed secret is stored nowhere
                self.cache.put("http:" + key, {"status": resp.status_code, "body": scrub(body.decode())})
            except ValueError:
                pass
        headers = [(k, v) for k, v in resp.headers.items()
                   if k.lower() not in ("content-encoding", "content-length", "transfer-encoding")]
        return httpx.Response(resp.status_code, headers=headers, content=body, request=request)

    async def aclose(self) -> None:
        await self.inner.aclose()

