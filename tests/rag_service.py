"""A small deployed RAG service for the tests (a real HTTP server on 127.0.0.1): it ranks the bundled
squad2 paragraphs by word overlap with the question and answers with the offline extractive answerer.

Paths:
* ``/v1``: the default contract, contexts as text only (the workbench locates them in its corpus), usage;
* ``/v1ids``: the same with each context's doc_id and page_id;
* ``/v2``: a regression: it drops its best context;
* ``/custom``: another shape (``{"query", "conv"}`` -> ``{"data": {"reply", "sources": [{"content"}]}}``) that
  needs the header ``X-Key`` to equal ``Service.key``;
* faults: ``/500``, ``/badjson``, ``/nocontexts``, ``/stall`` (answers after ``Service.stall`` seconds),
  ``/zorbland`` (its own words, "The answer is Zorbland [9]", with four contexts), ``/echo`` (the answer echoes
  the request's headers and path, as some debug endpoints do), ``/trickle`` (a valid reply sent one byte every
  ``Service.trickle`` seconds), ``/huge`` (a valid reply of ``Service.huge_mb`` MB), ``/redirect`` (307 to
  ``/v1``), ``/badusage`` (usage counts out of range), ``/deep`` (JSON nested 100,000 deep), ``/sleep`` (sleeps
  ``Service.sleep`` seconds, then answers like ``/v1``).
``Service.requests`` records each request body.
"""
from __future__ import annotations

import json
import re
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

_WORD = re.compile(r"\w+")


class Service(BaseHTTPRequestHandler):
    paragraphs: list = []  # (doc_id, page_id, text, word set)
    requests: list = []
    key = "svc-secret-key"
    stall = 5.0
    trickle = 0.2
    huge_mb = 12
    sleep = 0.2
    lock = threading.Lock()

    def log_message(self, *a):
        pass

    def _send(self, code: int, body: bytes):
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_POST(self):
        raw = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        req = json.loads(raw)
        with Service.lock:
            Service.requests.append((self.path, req))
        path = self.path.split("?")[0].rstrip("/")
        if path.endswith("/zorbland"):
            ctx = [p[2] for p in Service.paragraphs[:4]]
            return self._send(200, json.dumps({"answer": "The answer is Zorbland [9].", "contexts": ctx}).encode())
        if path.endswith("/echo"):
            ans = f"I saw {self.path} with headers {dict(self.headers)}"
            return self._send(200, json.dumps({"answer": ans, "contexts": [ans]}).encode())
        if path.endswith("/redirect"):
            self.send_response(307)
            self.send_header("Location", "/v1")
            self.send_header("Content-Length", "0")
            self.end_headers()
            return
        if path.endswith("/badusage"):
            ans, ctx = answer(req["question"], 2)
            return self._send(200, json.dumps({"answer": ans, "contexts": [c[2] for c, _ in ctx],
                                               "usage": {"prompt_tokens": -7, "completion_tokens": 10**12}}).encode())
        if path.endswith("/deep"):
            return self._send(200, b'{"answer": "x", "contexts": ' + b"[" * 100_000 + b"]" * 100_000 + b"}")
        if path.endswith("/huge"):
            big = "x" * int(Service.huge_mb * 1_000_000)
            return self._send(200, json.dumps({"answer": "big", "contexts": [big]}).encode())
        if path.endswith("/trickle"):
            body = json.dumps({"answer": "slow", "contexts": ["one slow context " * 4]}).encode()
            return send_trickle(self, body, Service.trickle)
        if path.endswith("/sleep"):
            time.sleep(Service.sleep)
        if path.endswith("/500"):
            return self._send(500, b'{"error": "boom"}')
        if path.endswith("/badjson"):
            return self._send(200, b"<html>not json</html>")
        if path.endswith("/stall"):
            time.sleep(Service.stall)
        if path.endswith("/custom"):
            if self.headers.get("X-Key") != Service.key:
                return self._send(401, b'{"error": "bad key"}')
            ans, ctx = answer(req["query"], 3)
            return self._send(200, json.dumps({"data": {"reply": ans, "sources": [{"content": p[2]} for p, _ in ctx]}})
                              .encode())
        ans, ctx = answer(req["question"], 3, drop_best=path.endswith("/v2"))
        if path.endswith("/nocontexts"):
            return self._send(200, json.dumps({"answer": ans}).encode())
        with_ids = path.endswith("/v1ids")
        body = {"answer": ans,
                "contexts": [{"text": c[2], **({"doc_id": c[0], "page_id": c[1]} if with_ids else {}), "score": s}
                             for c, s in ctx],
                "usage": {"prompt_tokens": 100 + sum(len(c[2]) // 4 for c, _ in ctx), "completion_tokens": 12}}
        self._send(200, json.dumps(body).encode())


def send_trickle(handler, body: bytes, delay: float) -> None:
    """A valid 200 JSON reply sent one byte every ``delay`` seconds (a slow server; both test servers use it)."""
    handler.send_response(200)
    handler.send_header("Content-Type", "application/json")
    handler.send_header("Content-Length", str(len(body)))
    handler.end_headers()
    try:
        for i in range(len(body)):
            handler.wfile.write(body[i:i + 1])
            handler.wfile.flush()
            time.sleep(delay)
    except (BrokenPipeError, ConnectionResetError):  # the client gave up: what a deadline is for
        pass


def answer(question: str, k: int, drop_best: bool = False):
    from rag.answer.answerers import ExtractiveAnswerer
    from rag.strategies import Block

    words = set(_WORD.findall(question.lower()))
    ranked = sorted(Service.paragraphs, key=lambda p: -len(words & p[3]))[:k + 1]
    ranked = ranked[1:k + 1] if drop_best else ranked[:k]
    ctx = [(p, float(len(words & p[3]))) for p in ranked]
    blocks = [Block(i, p[2], "chunks", (p[0],), (p[1],), (), (), 0, s) for i, (p, s) in enumerate(ctx, 1)]
    return ExtractiveAnswerer().answer(question, blocks).text, ctx


class _Quiet(ThreadingHTTPServer):
    request_queue_size = 128  # the concurrency bench opens many connections at once

    def handle_error(self, request, client_address):  # a client that gave up on a slow reply is expected
        pass


def start() -> tuple[ThreadingHTTPServer, str]:
    from rag.ingest.corpora import load_bundled

    if not Service.paragraphs:
        ds = load_bundled("squad2")
        Service.paragraphs = [(d.doc_id, pg.page_id, pg.text, set(_WORD.findall(pg.text.lower())))
                              for d in ds.documents for pg in d.pages if pg.text]
    srv = _Quiet(("127.0.0.1", 0), Service)
    srv.daemon_threads = True
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    return srv, f"http://127.0.0.1:{srv.server_address[1]}"
