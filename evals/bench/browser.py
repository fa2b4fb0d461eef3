"""`ragwb bench --only browser`: the workbench's Apply timed where a person waits for it, in Chromium.

A budget applied before (chunks top_k toggled between 2 and 4) is clicked, and the clock runs from the click to
every output updated: the question matrix's columns, the headline table and the applied-budgets table naming the
new point (they are drawn after the chart). At 12 and 300 questions of a bundled set, offline and with an LLM
answerer whose every answer and judgment is in the response cache (a local OpenAI-compatible endpoint on
127.0.0.1 that copies the first sentence of its context: warmed first, so no timed click sends anything), on a
quiet machine and beside two busy processes. The library's own time for the same toggle, in a fresh session,
stands beside each figure (docs/performance.md)."""
from __future__ import annotations

import json
import os
import re
import socket
import statistics
import subprocess
import sys
import threading
import time
import urllib.request
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

TOGGLE = (2, 4)  # chunks top_k values the clicks toggle between (both applied before the clock runs)


_WORDS = re.compile(r"[a-z0-9]{3,}")


def judge_reply(system: str, user: str) -> str | None:
    """A judge's verdict in the schema its prompt asks for (evals/score/judges.py), from word overlap: faithfulness
    (a statement is supported when 60% of its words are in the context: ``{"verdicts": [...]}``), answer relevance
    (``{"relevance": 0-3}``) and context sufficiency (``{"sufficient": 0|1}``). None: not a judge prompt. The bench's
    judged figure is of verdicts the judges parse, never of parse errors."""
    # the judges fence what they read in data blocks (evals/score/judge_io.py): the text inside is what is judged
    user = re.sub(r'\n</data id="[0-9a-f]+">', "", re.sub(r'<data id="[0-9a-f]+">\n', "", user))

    def words(t: str) -> set:
        return set(_WORDS.findall(t.lower()))

    if system.startswith("You check whether statements are supported"):
        ctx = re.search(r"Context:\n(.*?)\n\nStatements:\n", user, re.S)
        stmts = re.findall(r"^\d+\. (.*)$", user.split("\n\nStatements:\n", 1)[-1], re.M)
        have = words(ctx.group(1) if ctx else "")
        return json.dumps({"verdicts": [int(len(words(x) & have) >= 0.6 * max(len(words(x)), 1)) for x in stmts]})
    m = re.search(r"^Question: (.*?)\n\n(Answer: |Context:\n)(.*)$", user, re.S)
    if system.startswith("You rate whether an answer addresses") and m:
        q, a = words(m.group(1)), words(m.group(3))
        share = len(q & a) / len(q) if q else 0.0
        return json.dumps({"relevance": 3 if share >= 0.5 else 2 if share >= 0.25 else 1 if share > 0 else 0})
    if system.startswith("You decide whether a context holds enough") and m:
        q, c = words(m.group(1)), words(m.group(3))
        return json.dumps({"sufficient": int(bool(q) and len(q & c) >= 0.6 * len(q))})
    return None


class _EchoHandler(BaseHTTPRequestHandler):
    """An OpenAI-compatible chat endpoint for the bench: the first sentence of the context, cited [1]; a judge
    prompt gets a well-formed verdict. Only the warm-up reaches it: every timed click is answered from the cache."""

    def do_POST(self):  # noqa: N802 - http.server's name
        body = json.loads(self.rfile.read(int(self.headers.get("content-length", 0))) or b"{}")
        msgs = body.get("messages") or []
        text = "\n".join(str(m.get("content") or "") for m in msgs)
        system = next((str(m.get("content") or "") for m in msgs if m.get("role") == "system"), "")
        user = next((str(m.get("content") or "") for m in reversed(msgs) if m.get("role") == "user"), "")
        verdict = judge_reply(system, user)
        if verdict is not None:  # each judge answered in its own schema (issue 83, item 19: prose was a parse error)
            reply = verdict
        else:
            m = re.search(r"\[1\][^\n]*\n(.+?[.!?])", text, re.S)
            reply = (m.group(1).strip() if m else "I don't know.") + " [1]"
        out = json.dumps({"id": "x", "object": "chat.completion", "created": 0, "model": body.get("model", ""),
                          "choices": [{"index": 0, "message": {"role": "assistant", "content": reply},
                                       "finish_reason": "stop"}],
                          "usage": {"prompt_tokens": len(text) // 4, "completion_tokens": len(reply) // 4,
                                    "total_tokens": (len(text) + len(reply)) // 4}}).encode()
        self.send_response(200)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(out)))
        self.end_headers()
        self.wfile.write(out)

    def do_GET(self):  # noqa: N802 - /models for the context-window probe
        out = json.dumps({"object": "list", "data": []}).encode()
        self.send_response(200)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(out)))
        self.end_headers()
        self.wfile.write(out)

    def log_message(self, *a):  # quiet
        pass


def free_port() -> int:
    """A TCP port free on 127.0.0.1 now (a page or server the bench, or a test, starts)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_http(url: str, seconds: float = 120) -> None:
    """Until ``url`` answers (a server starting), at most ``seconds``."""
    deadline = time.time() + seconds
    while True:
        try:
            urllib.request.urlopen(url, timeout=2)
            return
        except OSError:
            if time.time() > deadline:
                raise
            time.sleep(0.3)


def _busy(n: int) -> list:
    """``n`` processes that spin a core each (the load a person's other work puts beside the page)."""
    return [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(n)]


def _set_top_k(page, value: int, now: list) -> None:
    slider = page.locator("[role=slider]").nth(1)  # chunks top_k: the budget form's first slider
    slider.focus()
    cur = now[0]
    for _ in range(abs(value - cur)):
        page.keyboard.press("ArrowRight" if value > cur else "ArrowLeft")
    now[0] = value


def _apply_and_wait(page, value: int, timeout_ms: int = 300_000) -> float:
    """Click Apply; seconds until the question matrix's columns name ``chunks · top_k=value``, the headline table and
    the applied-budgets table each have a row ``chunks | top_k=value``, and none of them still names the other toggle
    value (the sections drawn when scrolled to, below the fold, are not waited for: a person does not see them)."""
    new, old = f"top_k={value}", f"top_k={TOGGLE[0] if value == TOGGLE[1] else TOGGLE[1]}"
    t0 = time.perf_counter()
    page.get_by_text("Apply budgets").click()
    page.wait_for_function(
        """([nw, od]) => { const all = (r) => [...r.querySelectorAll('*')].flatMap(
               e => e.shadowRoot ? [e, ...all(e.shadowRoot)] : [e]);
           const els = all(document);
           const th = els.filter(e => e.tagName === 'TH').map(e => e.textContent);
           const rows = els.filter(e => e.tagName === 'TR').map(
               r => [...r.children].filter(c => c.tagName === 'TD').map(c => c.textContent.trim()));
           const point = (v) => rows.filter(c => c.length > 1 && c[0] === 'chunks' && c[1] === v).length;
           return th.some(t => t.includes('chunks · ' + nw)) && !th.some(t => t.includes('chunks · ' + od))
                  && point(nw) >= 2 && point(od) === 0; }""",
        arg=[new, old], timeout=timeout_ms, polling=50)
    return time.perf_counter() - t0


def library_toggle(dataset: str, workspace: Path, embedder: str, n: int, clicks: int) -> float:
    """The library's time for the same toggle (points, items from the session, summary, chart JSON, headline,
    matrix, drill-down, paired table), median over ``clicks``, in this process's fresh session."""
    import pandas as pd

    from evals.analyze import explore
    from evals.analyze.summary import HEADLINE, headline_table
    from evals.workbench.calls import evaluate_points, open_session, points_from_budgets, side_by_side_html, \
        summarize_session
    from evals.report.charts import quality_cost_figure
    from rag.strategies import default_strategies

    sess = open_session(dataset, str(workspace), embedder)
    names, hist, times = list(default_strategies()), [], []
    for k in range(clicks + 2):
        t = time.perf_counter()
        sc = evaluate_points(sess, points_from_budgets(names, {"chunks__top_k": TOGGLE[k % 2]}), n)
        summ = summarize_session(sess, sc)
        quality_cost_figure(summ, "f1", "context_tokens", pd.concat(hist, ignore_index=True) if hist else None).to_json()
        headline_table(summ, HEADLINE, numeric=True)
        hist.append(summ)
        m = explore.question_matrix(sc, sess.dataset.questions, "f1")
        pts = explore.points_of(sc)
        side_by_side_html(sess, m.question_id.iloc[0], pts[0], None)
        explore.paired_points(sc, pts[0], pts[1])
        if k >= 2:  # both values applied before: the timed ones
            times.append(time.perf_counter() - t)
    return statistics.median(times)


def judged_values(dataset: str, workspace: Path, embedder: str, n: int, llm_url: str) -> dict:
    """What the LLM Apply's judges drew for both toggle values on ``n`` questions, from the response cache the page
    filled (nothing is sent: every prompt is cached by then): {status: count} over the judged metrics, so the figure
    says it timed verdicts, not parse errors (issue 83, item 19)."""
    from evals.workbench.calls import evaluate_points, open_session, points_from_budgets, session_for_answerer, \
        workbench_args
    from evals.score.judges import judge_metric
    from rag.strategies import default_strategies

    wb = workbench_args(["--llm-base-url", llm_url, "--llm-model", "bench-echo"], environ={})
    base = open_session(dataset, str(workspace), embedder)
    sess = session_for_answerer({}, base, "LLM: bench-echo", wb.llm, {}, wb.judge)
    judged = {judge_metric(j.name) for j in getattr(sess.evaluator, "judges", []) or []}
    out: dict = {}
    for v in TOGGLE:
        sc = evaluate_points(sess, points_from_budgets(list(default_strategies()), {"chunks__top_k": v}), n)
        for status, k in sc[sc.metric.isin(judged)].status.value_counts().items():
            out[status] = out.get(status, 0) + int(k)
    return out


def page_toggle(browser, dataset: str, workspace: Path, embedder: str, n: int, llm_url: str | None, busy: int,
                clicks: int) -> dict:
    """One page (a fresh marimo kernel) on ``n`` questions: both toggle values applied (and, with the LLM,
    answered and judged) first, then ``clicks`` timed clicks beside ``busy`` spinning processes."""
    from rag.ingest.bundled import checkout_root, notebook

    port = free_port()
    root = checkout_root() or workspace.parent  # the project's marimo settings where there is a checkout
    argv = ["--dataset", dataset, "--limit", str(n), "--embedder", embedder, "--workspace", str(workspace), "--send"]
    if llm_url:
        argv += ["--llm-base-url", llm_url, "--llm-model", "bench-echo"]
    proc = subprocess.Popen([sys.executable, "-m", "marimo", "run", "--headless", "--no-token", "--port", str(port),
                             str(notebook("workbench.py")), "--", *argv],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, cwd=str(root))
    spinners: list = []
    try:
        wait_http(f"http://127.0.0.1:{port}/")
        page = browser.new_page(viewport={"width": 1440, "height": 1000})
        t0 = time.perf_counter()
        page.goto(f"http://127.0.0.1:{port}/")
        page.wait_for_selector("th:has-text('chunks · defaults')", timeout=600_000)
        first = time.perf_counter() - t0
        now = [8]
        for v in TOGGLE:  # warm: each value applied once (sent and judged once with the LLM, then cached)
            _set_top_k(page, v, now)
            _apply_and_wait(page, v, 900_000)
        spinners = _busy(busy)
        times = []
        for k in range(clicks):
            v = TOGGLE[k % 2]
            _set_top_k(page, v, now)
            times.append(_apply_and_wait(page, v))
        page.close()
        return {"first_load_s": first, "clicks_s": times, "median_s": statistics.median(times), "max_s": max(times)}
    finally:
        for s in spinners:
            s.kill()
        proc.terminate()
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()


def browser_figure(workspace: Path, dataset: str = "squad2", embedder: str = "e5", sizes=(12, 300),
                   clicks: int = 6) -> dict:
    """Click to every output updated, in Chromium: per size, offline and with a cached LLM answerer, quiet and
    beside two busy processes; the library's time for the same toggle beside each size."""
    from playwright.sync_api import sync_playwright

    workspace.mkdir(parents=True, exist_ok=True)
    srv = ThreadingHTTPServer(("127.0.0.1", 0), _EchoHandler)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    url = f"http://127.0.0.1:{srv.server_address[1]}/v1"
    rows = []
    exe = _chromium()
    try:
        with sync_playwright() as p:
            browser = p.chromium.launch(executable_path=exe, args=["--headless", "--no-sandbox", "--disable-gpu"])
            for n in sizes:
                lib = library_toggle(dataset, workspace, embedder, n, clicks)
                for answerer, llm in (("offline", None), ("LLM (cached)", url)):
                    for busy in (0, 2):
                        r = page_toggle(browser, dataset, workspace, embedder, n, llm, busy, clicks)
                        if llm:  # the judged values the page's Apply drew: verdicts, not parse errors
                            r["judged"] = judged_values(dataset, workspace, embedder, n, llm)
                        rows.append({"questions": n, "answerer": answerer, "busy_processes": busy,
                                     "library_s": lib, **r})
                        print(f"browser apply: {n} questions, {answerer}, {busy} busy: median {r['median_s']:.2f} s "
                              f"(library {lib:.2f} s)", file=sys.stderr, flush=True)
            browser.close()
    finally:
        srv.shutdown()
    return {"dataset": dataset, "embedder": embedder, "cpus": os.cpu_count(), "clicks": clicks, "rows": rows,
            "target": "<= 1 s at 300 questions in the browser"}


def _chromium() -> str:
    import shutil

    path = shutil.which("chromium") or shutil.which("chromium-browser") or shutil.which("google-chrome")
    if not path:
        raise RuntimeError("the browser figure needs Chromium: apt-get install chromium")
    return path


def render(f: dict) -> list[str]:
    lines = [f"apply in Chromium (click to every output updated, chunks top_k toggled {TOGGLE[0]}<->{TOGGLE[1]}, "
             f"both applied before; {f['clicks']} clicks, {f['cpus']} cores; target {f['target']}):"]
    for r in f["rows"]:
        lines.append(f"  {r['questions']:>4} questions, {r['answerer']:<13} {r['busy_processes']} busy: median "
                     f"{r['median_s']:.2f} s (max {r['max_s']:.2f} s); library {r['library_s']:.2f} s; first load "
                     f"{r['first_load_s']:.1f} s")
        if r.get("judged"):
            lines.append("       judged values its Apply drew: " + ", ".join(
                f"{k} {v:,}" for k, v in sorted(r["judged"].items())))
    return lines
