"""Issue 44, item 17: a deployed service's replies are scored and committed as they come back, not in question
order: one slow reply no longer holds every reply behind it (with a client's slot not first come, first served,
that pushed most of a run's scoring after its last reply)."""
from __future__ import annotations

import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from rag.answer.systems import SystemConfig
from rag.ingest.corpora import load_bundled

from evals.run.runner import RunConfig, run_evaluation


def test_a_held_reply_does_not_hold_the_others(tmp_path):
    ds = load_bundled("xquad-en")
    qs = ds.questions[:8]
    first = qs[0].text
    committed = threading.Event()
    released_by = []
    body = json.dumps({"answer": "It is in the context [1].", "contexts": [{"text": "context"}]}).encode()

    class H(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *a):
            pass

        def do_POST(self):
            req = json.loads(self.rfile.read(int(self.headers.get("Content-Length") or 0)))
            if json.dumps(req).find(json.dumps(first)[1:-1]) >= 0:  # the first question waits ...
                # ... until the others are committed (the runner's on_flush), or 60 s on a machine where they never
                # are: the old order (every reply waits for the first) releases it only by the timeout
                released_by.append("commit" if committed.wait(60) else "timeout")
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

    srv = ThreadingHTTPServer(("127.0.0.1", 0), H)
    srv.daemon_threads = True
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    try:
        cfg = RunConfig(dataset="xquad-en", limit=8, scorers=("answer", "cost"), use_cache=False, systems=(
            SystemConfig("svc", f"http://127.0.0.1:{srv.server_address[1]}/ask", timeout=120, max_concurrency=2),))

        def on_flush(n):
            if n >= len(qs) - 1:
                committed.set()
        t = time.monotonic()
        s = run_evaluation(cfg, workspace=tmp_path, progress=False, flush_every=1, on_flush=on_flush)
        assert s.items == len(qs)
        assert released_by == ["commit"], released_by
        assert time.monotonic() - t < 60
    finally:
        srv.shutdown()
