"""Serve an exported marimo HTML with marimo's own bundled frontend (no CDN, no network).

``marimo export html`` writes a page that loads marimo's frontend from a CDN. The same
frontend ships inside the marimo package (``marimo/_static``); this serves the page and those
assets on 127.0.0.1 so an export renders on a machine with no network:
``python -m evals.report.serve results/reports/report.marimo.html``.
The self-contained report that needs nothing at all is the one ``ragwb report`` writes.
"""
from __future__ import annotations

import argparse
import re
import threading
from functools import partial
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

_CDN = re.compile(r"https://cdn\.jsdelivr\.net/npm/@marimo-team/frontend@[^/\"']+/dist")
# marimo's plotly plugin always fetches MathJax (only used for LaTeX labels, which the
# workbench's charts never have) from a CDN; served locally as an empty script instead.
_MATHJAX = re.compile(rb"https://cdn\.jsdelivr\.net/npm/mathjax-full@[^`'\"]+")
_STUB = "/dist/__no_mathjax__.js"


def marimo_static_dir() -> Path:
    import marimo

    return Path(marimo.__file__).parent / "_static"


def localize(html: str, base: str = "/dist") -> str:
    return _CDN.sub(base, html)


class _Handler(SimpleHTTPRequestHandler):
    page: bytes = b""

    def log_message(self, *a):
        pass

    def _bytes(self, data: bytes, ctype: str):
        self.send_response(200)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self):
        if self.path in ("/", "/index.html") or self.path.startswith("/?"):
            self.send_response(200)
            self.send_header("Content-Type", "text/html; charset=utf-8")
            self.send_header("Content-Length", str(len(self.page)))
            self.end_headers()
            self.wfile.write(self.page)
            return
        if self.path == _STUB:
            return self._bytes(b"/* MathJax is not bundled; no LaTeX in these charts */", "text/javascript")
        if self.path.startswith("/dist/"):
            rel = self.path[len("/dist/"):].split("?", 1)[0]
            f = (Path(self.directory) / rel).resolve()
            if f.suffix == ".js" and f.is_file() and Path(self.directory).resolve() in f.parents:
                data = f.read_bytes()
                if b"mathjax-full@" in data:
                    data = _MATHJAX.sub(_STUB.encode(), data)
                return self._bytes(data, "text/javascript")
            self.path = "/" + rel
            return super().do_GET()
        self.send_error(404)


def serve(html_path: str | Path, port: int = 0) -> tuple[ThreadingHTTPServer, str]:
    page = localize(Path(html_path).read_text(encoding="utf-8")).encode()
    handler = type("H", (_Handler,), {"page": page})
    srv = ThreadingHTTPServer(("127.0.0.1", port), partial(handler, directory=str(marimo_static_dir())))
    srv.daemon_threads = True
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    return srv, f"http://127.0.0.1:{srv.server_address[1]}/"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("html", help="an HTML file written by `marimo export html`")
    ap.add_argument("--port", type=int, default=8700)
    a = ap.parse_args()
    srv, url = serve(a.html, a.port)
    print(f"serving {a.html} at {url} (Ctrl-C to stop)", flush=True)
    try:
        threading.Event().wait()
    except KeyboardInterrupt:
        srv.shutdown()


if __name__ == "__main__":
    main()
