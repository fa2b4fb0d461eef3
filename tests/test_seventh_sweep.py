"""Outside input, seventh sweep (issue 82), items 1-3 and 9-11, each from its repro as a user hits it: the real
`ragwb workbench` server and marimo's editor behind it, a second process (another account where the suite runs as
root) knocking on its kernel endpoints, real links on disk, real ports held by another server, the page walked in
Chromium, names with terminal escapes through every printed surface, a key echoed cut short, a FIFO in place of a
snapshot. Items 4-8 are in tests/test_seventh_sweep_limits.py."""
import http.client
import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest

from evals.bench.browser import free_port

ROOT = Path(__file__).resolve().parents[1]
NOBODY = 65534


def _docs(tmp_path: Path) -> Path:
    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "a.md").write_text("# Alpha\n\nAlpha is the first letter.\n")
    return docs


def _start(tmp_path: Path, *flags: str) -> tuple[subprocess.Popen, str]:
    """`ragwb workbench` as typed (a fresh process), and the URL it prints once its server answers."""
    proc = subprocess.Popen([sys.executable, "-m", "evals.cli", "workbench", "--headless", *flags],
                            cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.time() + 150
    for line in proc.stdout:
        m = re.match(r"ragwb workbench: (http://\S+)", line)
        if m:
            return proc, m.group(1)
        assert time.time() < deadline, "no URL printed"
    proc.wait(timeout=30)
    raise AssertionError(f"ragwb workbench exited {proc.returncode}: {proc.stderr.read()[-2000:]}")


def _stop(proc: subprocess.Popen) -> str:
    proc.terminate()
    try:
        _, err = proc.communicate(timeout=30)
    except subprocess.TimeoutExpired:
        proc.kill()
        _, err = proc.communicate()
    return err


KNOCK = r"""
import http.client, json, sys
port = int(sys.argv[1])
out = {}
for name, method, path, body, headers in [
        ("execute", "POST", "/api/kernel/execute", b'{"cellIds": ["x"], "codes": ["1"]}',
         {"Content-Type": "application/json"}),
        ("run", "POST", "/api/kernel/run", b'{"cellIds": [], "codes": []}', {"Content-Type": "application/json"}),
        ("status", "GET", "/api/status", None, {}),
        ("ws", "GET", "/ws?session_id=s-knock", None, {"Connection": "Upgrade", "Upgrade": "websocket",
                                                       "Sec-WebSocket-Key": "dGhlIHNhbXBsZSBub25jZQ==",
                                                       "Sec-WebSocket-Version": "13"})]:
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=20)
    c.request(method, path, body=body, headers=headers)
    out[name] = c.getresponse().status
    c.close()
print(json.dumps(out))
"""


def _knock(port: int) -> dict:
    """The kernel endpoints asked by another process without the token: as uid 65534 (another local account, the
    sweep's repro) where the suite runs as root, else as a plain second process."""
    # the system's python3 where the suite's own is in root's home (mode 700, out of another account's reach)
    system_python = next((p for p in ("/usr/bin/python3", "/usr/local/bin/python3") if os.access(p, os.X_OK)), None)
    if os.geteuid() == 0 and system_python:
        exe, other = system_python, {"user": NOBODY, "group": NOBODY, "extra_groups": []}
    else:
        exe, other = sys.executable, {}
    got = subprocess.run([exe, "-c", KNOCK, str(port)], capture_output=True, text=True, timeout=120, cwd="/",
                         env={"PATH": "/usr/bin:/bin"}, **other)
    assert got.returncode == 0, got.stderr
    return json.loads(got.stdout)


def test_the_editor_answers_only_whoever_holds_its_token(tmp_path):
    """Item 1: `--edit` passed --no-token whatever the host; another account ran code through
    POST /api/kernel/execute. Now the printed URL carries a token, the token is on no command line, and without it
    every kernel endpoint answers 401/403 (the websocket too); with it the editor opens."""
    docs = _docs(tmp_path)
    port = free_port()
    proc, url = _start(tmp_path, "--edit", "--port", str(port), "--edit-dir", str(tmp_path / "nb"),
                       "--dataset", str(docs), "--embedder", "hash")
    try:
        token = re.search(r"\?access_token=([\w-]{24,})$", url)
        assert token, url
        knocked = _knock(port)
        assert all(code in (401, 403) for code in knocked.values()), knocked
        # the token is nowhere in any process's command line (readable by every account in /proc)
        for pid in os.listdir("/proc"):
            if pid.isdigit():
                try:
                    cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
                except OSError:
                    continue
                assert token.group(1).encode() not in cmdline, pid
        # ... and with the token the editor answers
        c = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
        c.request("GET", f"/?access_token={token.group(1)}")
        r = c.getresponse()
        r.read()
        # marimo takes the token off the address bar: a redirect to the page with its session cookie, not the login
        assert r.status in (200, 303) and "login" not in (r.getheader("location") or ""), r.getheaders()
        c.request("GET", "/api/status", headers={"Authorization": f"Bearer {token.group(1)}"})
        assert c.getresponse().status == 200
    finally:
        _stop(proc)


def test_the_editor_on_a_non_loopback_host_is_refused_unless_meant_and_still_asks_its_token(tmp_path, capsys):
    """Item 1: `--edit --host 0.0.0.0` served the tokenless editor to other machines. It is refused (one line, exit
    2, no server) unless --allow-remote-edit says so; then it warns in one line and still asks for the token, from
    an address of the machine's own (the sweep's other-machine repro stays on this machine: 0.0.0.0 reached
    through loopback). The run mode on 0.0.0.0 warns in one line."""
    from evals.cli import main

    docs = _docs(tmp_path)
    assert main(["workbench", "--edit", "--host", "0.0.0.0", "--headless", "--edit-dir", str(tmp_path / "nb"),
                 "--dataset", str(docs)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "--allow-remote-edit" in err and "0.0.0.0" in err, err
    assert not (tmp_path / "nb").exists()  # refused before anything was written or started

    port = free_port()
    proc, url = _start(tmp_path, "--edit", "--allow-remote-edit", "--host", "0.0.0.0", "--port", str(port),
                       "--edit-dir", str(tmp_path / "nb"), "--dataset", str(docs), "--embedder", "hash")
    try:
        assert "access_token=" in url
        knocked = _knock(port)
        assert all(code in (401, 403) for code in knocked.values()), knocked
    finally:
        err = _stop(proc)
    assert len([x for x in err.splitlines() if x.startswith("ragwb workbench: warning: serving on 0.0.0.0")]) == 1

    port = free_port()
    proc, url = _start(tmp_path, "--host", "0.0.0.0", "--port", str(port), "--dataset", str(docs), "--embedder",
                       "hash")
    err = _stop(proc)
    assert len([x for x in err.splitlines() if x.startswith("ragwb workbench: warning: serving on 0.0.0.0")]) == 1


@pytest.mark.parametrize("port", ["99999", "-1", "0"])
def test_a_port_out_of_range_is_one_line(port, tmp_path):
    """Item 11: `--port 99999` or `-1` printed an 82-line uvicorn traceback."""
    got = subprocess.run([sys.executable, "-m", "evals.cli", "workbench", "--headless", "--port", port, "--dataset",
                          str(_docs(tmp_path))], capture_output=True, text=True, timeout=120, cwd=tmp_path)
    assert got.returncode == 2 and got.stdout == ""
    assert got.stderr.count("\n") == 1 and f"--port {port} is not a port (1..65535" in got.stderr, got.stderr


def test_a_busy_port_is_one_line_and_never_the_other_servers_url(tmp_path):
    """Item 11: with the port held by another server, `ragwb workbench` printed that server's URL as its own, then
    exited 3."""
    import http.server
    import threading

    other = http.server.ThreadingHTTPServer(("127.0.0.1", 0), http.server.SimpleHTTPRequestHandler)
    threading.Thread(target=other.serve_forever, daemon=True).start()
    try:
        port = other.server_address[1]
        got = subprocess.run([sys.executable, "-m", "evals.cli", "workbench", "--headless", "--port", str(port),
                              "--dataset", str(_docs(tmp_path))], capture_output=True, text=True, timeout=120,
                             cwd=tmp_path)
    finally:
        other.shutdown()
        other.server_close()
    assert got.returncode == 2 and "http://" not in got.stdout, got.stdout
    assert got.stderr.count("\n") == 1 and f"port {port} on 127.0.0.1 is in use" in got.stderr, got.stderr


def test_edit_never_writes_through_a_link(tmp_path, capsys):
    """Item 3: a link at WORKSPACE/notebooks/head.html had its target overwritten with the shipped head.html; a
    link at WORKSPACE/notebooks had the linked folder's head.html overwritten. Each is refused in one line naming
    the link, and the linked file or folder is left as it was."""
    from evals.cli import main

    docs = _docs(tmp_path)
    precious = tmp_path / "precious.html"
    precious.write_text("mine, not the workbench's\n")
    nb = tmp_path / "ws" / "notebooks"
    nb.mkdir(parents=True)
    (nb / "head.html").symlink_to(precious)
    assert main(["workbench", "--edit", "--headless", "--workspace", str(tmp_path / "ws"), "--dataset",
                 str(docs)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and f"{nb / 'head.html'} is a symbolic link" in err, err
    assert precious.read_text() == "mine, not the workbench's\n" and not (nb / "workbench.py").exists()

    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (elsewhere / "head.html").write_text("theirs\n")
    ws2 = tmp_path / "ws2"
    ws2.mkdir()
    (ws2 / "notebooks").symlink_to(elsewhere, target_is_directory=True)
    assert main(["workbench", "--edit", "--headless", "--workspace", str(ws2), "--dataset", str(docs)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and f"{ws2 / 'notebooks'} is a symbolic link" in err, err
    assert sorted(p.name for p in elsewhere.iterdir()) == ["head.html"]
    assert (elsewhere / "head.html").read_text() == "theirs\n"

    # the files themselves are written new and swapped in: a second link planted at a temporary name is unused
    from evals.cli.workbench import edit_copy

    fresh = tmp_path / "fresh"
    nbp, written = edit_copy(fresh)
    assert written and not any(p.is_symlink() for p in fresh.iterdir())
    assert sorted(p.name for p in fresh.iterdir()) == ["head.html", "pyproject.toml", "workbench.py"]


# --- Item 2: names from outside never become markup, on the page, in the report, in the Jupyter displays ---------

# each payload a user can plant in a name, and what it would do if it ever became markup (top.__pwn = its number);
# no "/" (a folder or file name cannot hold one), so the <script> never closes: inserted as markup it would still be
# an element the walk finds
PAYLOAD = ('<script>top.__pwn=1<\\script><img src=x onerror=top.__pwn=2>'
           '<iframe srcdoc="<img src=x onerror=top.__pwn=3>">[j](javascript:top.__pwn=4)')
RUN_A = '<img src=x onerror=top.__pwn=5>[r](javascript:top.__pwn=6)'
RUN_B = '<svg onload=top.__pwn=7>*b*'
MODEL = '<img src=x onerror=top.__pwn=8>`m`[m](javascript:top.__pwn=9)'
STRATEGY = '<iframe srcdoc="<img src=x onerror=top.__pwn=10>"></script><script>top.__pwn=11</script>'
# what each shows literally somewhere once its section is drawn (a part that markup would have eaten)
LITERAL = {"folder": "set " + PAYLOAD, "file": PAYLOAD[:60], "model": MODEL, "strategy": STRATEGY}

WALK = """() => { const roots = [document]; const els = [];
    for (let i = 0; i < roots.length; i++) for (const e of roots[i].querySelectorAll('*')) {
        els.push(e); if (e.shadowRoot) roots.push(e.shadowRoot); }
    const bad = els.filter(e => {
        const t = e.tagName.toLowerCase();
        return (t === 'img' && e.getAttribute('src') === 'x') || (t === 'iframe' && e.hasAttribute('srcdoc'))
            || e.hasAttribute('onload') || e.hasAttribute('onerror')
            || (t === 'a' && /^\\s*javascript:/i.test(e.getAttribute('href') || ''))
            // a script holding a planted name: only plotly's data, where the name is JSON with < as \\u003c
            || (t === 'script' && e.textContent.includes('__pwn')
                && (!e.textContent.includes('Plotly.newPlot') || /<(img|iframe|svg|\\/?script)/i.test(e.textContent))); });
    // every text node of every root (a callout's message sits beside its <strong>), titles and field values
    const text = [];
    for (const r of roots) { const w = document.createTreeWalker(r, NodeFilter.SHOW_TEXT);
        while (w.nextNode()) text.push(w.currentNode.nodeValue); }
    for (const e of els) { if (e.getAttribute('title')) text.push(e.getAttribute('title'));
        if (typeof e.value === 'string' && e.value) text.push(e.value); }
    return {pwn: window.__pwn === undefined ? null : window.__pwn, bad: bad.map(e => e.outerHTML.slice(0, 160)),
            text: text.join('\\n')}; }"""


DEEP_TEXT = """(want) => { const roots = [document]; const seen = [];
    for (let i = 0; i < roots.length; i++) for (const e of roots[i].querySelectorAll('*')) {
        if (e.shadowRoot) roots.push(e.shadowRoot); }
    for (const r of roots) { const w = document.createTreeWalker(r, NodeFilter.SHOW_TEXT);
        while (w.nextNode()) seen.push(w.currentNode.nodeValue); }
    return seen.join('').includes(want); }"""


def _wait_text(page, want: str, timeout: int = 120000) -> None:
    """Until ``want`` is shown (marimo draws outputs in shadow roots, which body.innerText leaves out)."""
    page.wait_for_function(DEEP_TEXT, arg=want, timeout=timeout)


def _walked(page) -> dict:
    got = page.evaluate(WALK)
    assert got["pwn"] is None and got["bad"] == [], (got["pwn"], got["bad"])
    return got


def _scroll_all(page) -> None:
    """Down the whole page a screen at a time, waiting at each, so every lazy section (mo.lazy) is drawn."""
    for _ in range(80):
        at_end = page.evaluate("() => { window.scrollBy(0, 700); return window.innerHeight + window.scrollY >= "
                               "document.body.scrollHeight - 5; }")
        page.wait_for_timeout(250)
        if at_end:
            break
    page.wait_for_timeout(1500)
    page.evaluate("() => window.scrollTo(0, 0)")


def _hostile_set(tmp_path: Path) -> tuple[Path, Path, Path]:
    from plugin_files import chunks_plugin

    docs = tmp_path / ("set " + PAYLOAD)
    docs.mkdir()
    (docs / (PAYLOAD + ".md")).write_text("# Hives\n\nA hive holds frames of comb where the colony stores honey.\n")
    (docs / "swarms.md").write_text("# Swarms\n\nA swarm leaves the hive with the old queen in spring.\n")
    q = tmp_path / "questions.jsonl"
    q.write_text(json.dumps({"id": "q1", "question": "What does a hive hold?", "answers": ["frames of comb"]}) + "\n"
                 + json.dumps({"id": "q2", "question": "When does a swarm leave?", "answers": ["in spring"]}) + "\n")
    plugin = chunks_plugin(tmp_path / "hostile_plugin.py", "Hostile", STRATEGY)
    return docs, q, plugin


def test_names_from_outside_never_run_as_script_on_the_page_in_the_report_or_in_jupyter(browser, tmp_path):
    """Item 2: a folder named `<iframe srcdoc="<img src=x onerror=...>">` ran script in Chromium within 4 s
    ("Loaded **name**", "Stored runs of {name}"). Here a folder, a file, two run ids, a model (the answerer and its
    judge) and a plugin strategy carry <script>, <img onerror>, <iframe srcdoc>, <svg onload> and javascript: links;
    the page is walked section by section (every lazy one scrolled to; Send, Save as run twice, Best config, Compare
    and Search pressed), then the saved HTML report and the marimo report, then the Jupyter displays: no planted
    element exists anywhere (shadow roots included), nothing set top.__pwn, and each name shows as written."""
    from openai_server import start

    srv, llm = start()
    docs, q, plugin = _hostile_set(tmp_path)
    ws = tmp_path / "ws"
    port = free_port()
    proc = subprocess.Popen([sys.executable, "-m", "marimo", "run", "--headless", "--no-token", "--port", str(port),
                             str(ROOT / "notebooks" / "workbench.py"), "--", "--dataset", str(docs), "--questions",
                             str(q), "--embedder", "hash", "--workspace", str(ws), "--plugins", str(plugin),
                             "--llm-base-url", llm, "--llm-model", MODEL],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        from evals.bench.browser import wait_http

        wait_http(f"http://127.0.0.1:{port}/")
        page = browser.new_page(viewport={"width": 1440, "height": 1000})
        errors: list[str] = []
        page.on("pageerror", lambda e: errors.append(str(e)))
        page.goto(f"http://127.0.0.1:{port}/")
        page.get_by_role("button", name=re.compile(r"^Send (up to )?\d+ call\(s\)$")).click(timeout=180000)
        page.wait_for_selector("text=/judged by .*agreement not measured/", timeout=180000)
        _scroll_all(page)
        seen = _walked(page)["text"]
        for what in ("folder", "file", "model", "strategy"):
            assert LITERAL[what] in seen, what

        # a hostile run id is refused, and the refusal quotes it as written; two plain ones are saved, then every
        # stored-run section: the sweep's curve, Best and Compare
        for rid in (RUN_A, RUN_B):
            # pressed again until the refusal shows: on a loaded machine a press can land while the cell that reads
            # the field is still re-running from the fill, and then it does nothing
            for attempt in range(4):
                page.get_by_placeholder("wb-...").fill(rid)
                page.get_by_role("button", name="Save as run").click()
                try:
                    _wait_text(page, f"Not saved: run id '{rid}' is not valid here", timeout=60000)
                    break
                except Exception:
                    if attempt == 3:
                        raise
            _walked(page)
        for rid in ("run-a", "run-b"):
            page.get_by_placeholder("wb-...").fill(rid)
            page.get_by_role("button", name="Save as run").click()
            _wait_text(page, f"Saved run {rid}")
            _walked(page)
        page.get_by_role("button", name="Best config of the stored sweep (TOML to paste)").click()
        page.locator(".codehilite-wrapper").first.wait_for(timeout=120000)
        page.get_by_role("button", name="Compare the two runs").click()
        page.wait_for_selector("text=/compared \\d+ of \\d+ candidate points/", timeout=120000)
        page.get_by_placeholder("a question").fill("hive comb")
        page.get_by_role("button", name="Search").click()
        page.wait_for_selector("text=/frames of comb/", timeout=120000)
        _scroll_all(page)
        seen = _walked(page)["text"]
        for what in LITERAL:
            assert LITERAL[what] in seen, what
        assert str(docs) in seen  # the best point's TOML holds the folder's path as written
        assert errors == [], errors
        page.close()
    finally:
        proc.terminate()
        proc.wait(timeout=30)
        srv.shutdown()

    # the HTML report Save as run wrote, opened from disk, and the marimo report of the same run
    reports = sorted((ws / "reports").glob("report-*.html"))
    assert len(reports) == 2 and all(p.parent == ws / "reports" for p in reports), reports
    from evals.cli import main

    assert main(["report", "run-a", "--db", str(ws / "results.duckdb"), "--out", str(tmp_path / "rep")]) == 0
    for path in reports + sorted((tmp_path / "rep").glob("*.html")):
        rp = browser.new_page(viewport={"width": 1440, "height": 1000})
        rp.goto(path.as_uri())
        rp.wait_for_load_state("load")
        rp.wait_for_timeout(1500)
        seen = _walked(rp)["text"]
        assert ("set " + PAYLOAD) in seen or "marimo" in path.name, path
        rp.close()

    # the Jupyter displays: the cost line's Markdown as Jupyter renders it, and the controls' HTML widgets
    import markdown

    from evals.workbench import CostLine

    line = CostLine(text=f"{MODEL} would answer {PAYLOAD}", calls=3, how=f"wb.apply(..., send=True) {RUN_A}")
    jp = browser.new_page()
    jp.set_content("<div id=out>" + markdown.markdown(line._repr_markdown_()) + "</div>")
    jp.wait_for_timeout(500)
    seen = _walked(jp)["text"]
    assert MODEL in seen and PAYLOAD in seen and f"wb.apply(..., send=True) {RUN_A}" in seen
    jp.close()


# --- Item 9: names from outside never reach a terminal raw --------------------------------------------------------

PLANTED = ["\x1b]0;pwned\x07", "\x1b[31m", "\u202e", "\x9b"]  # a window title, SGR, a bidi override, a C1 CSI


def test_names_with_terminal_escapes_are_shown_escaped_in_bars_search_show_and_the_report(tmp_path):
    """Item 9: escapes in folder and file names printed raw in the ingest/run progress labels, `ragwb search`,
    `ragwb show --by document` and the HTML report's cells. Every surface, typed as a user types it: none of the
    planted sequences comes out raw; each shows as its escape."""
    name = "docs" + "".join(PLANTED)
    docs = tmp_path / name
    docs.mkdir()
    (docs / ("alpha" + "".join(PLANTED) + ".md")).write_text("# Alpha\n\nAlpha is the first letter of the list.\n")
    (docs / "beta.md").write_text("# Beta\n\nBeta is the second letter of the list.\n")
    q = tmp_path / "q.jsonl"
    q.write_text(json.dumps({"id": "q1", "question": "What is Alpha?", "answers": ["the first letter"],
                             "document": "alpha" + "".join(PLANTED)}) + "\n"
                 + json.dumps({"id": "q2", "question": "What is Beta?", "answers": ["the second letter"],
                               "document": "beta"}) + "\n")
    ws = str(tmp_path / "ws")

    def ragwb(*args) -> str:
        got = subprocess.run([sys.executable, "-m", "evals.cli", *args], cwd=tmp_path, capture_output=True,
                             text=True, timeout=300, env={**os.environ, "COLUMNS": "200"})
        assert got.returncode == 0, (args, got.stderr[-2000:])
        return got.stdout + got.stderr

    out = {"ingest": ragwb("ingest", str(docs), "--questions", str(q), "--workspace", ws, "--embedder", "hash"),
           "run": ragwb("run", "--dataset", str(docs), "--questions", str(q), "--workspace", ws, "--embedder",
                        "hash", "--strategies", "chunks", "--run-id", "esc-run", "--yes"),
           "search": ragwb("search", "Alpha letter", "--dataset", str(docs), "--workspace", ws, "--embedder", "hash",
                           "--strategy", "chunks"),
           "show": ragwb("show", "esc-run", "--by", "document", "--workspace", ws)}
    for surface, text in out.items():
        for seq in PLANTED:
            assert seq not in text, (surface, repr(seq))
    assert "\\x1b]0;pwned\\x07" in out["search"] and "\\u202e" in out["search"]  # the file name, escaped
    assert "\\x1b]0;pwned\\x07" in out["show"]  # the document field's value, escaped
    report = (Path(ws) / "reports" / "report-esc-run.html").read_text()
    for seq in PLANTED:
        assert seq not in report, repr(seq)
    assert "\\x1b]0;pwned\\x07" in report


def test_a_stored_agreement_note_and_figure_never_reach_a_terminal_raw():
    """Item 9: ESC/BEL in a failed agreement entry's note printed raw in `show`, and n=10**400 printed as a figure.
    The note shows its escapes; an n past any labelled set is a damaged entry, said as damaged."""
    from evals.score.agreement import _stored_figure

    line = _stored_figure({"n": 0, "failed": 3, "note": "reply \x1b]0;pwned\x07 \x1b[2J unparsed",
                           "measured": "2026-11-28"})
    assert "\x1b" not in line and "\x07" not in line and "\\x1b]0;pwned\\x07" in line
    damaged = _stored_figure({"n": 10 ** 400, "balanced_accuracy": 0.8, "balanced_accuracy_95ci": [0.7, 0.9],
                              "measured": "2026-11-28"})
    assert damaged == "agreement not measured (the stored figure is damaged; measure again with ragwb agreement)"
    ok = _stored_figure({"n": 400, "balanced_accuracy": 0.8, "balanced_accuracy_95ci": [0.7, 0.9],
                         "measured": "2026-11-28"})
    assert ok == (0.8, 0.7, 0.9, 400, "2026-11-28")


# --- Item 10: the scrubber finds every 12-character run of every form, case-folded --------------------------------

def test_every_cut_of_12_or_more_of_every_form_of_a_key_is_scrubbed():
    """Item 10: mixed-case hex cut to 20 or 24, a case-folded percent-encoding and every 12- to 15-character cut of
    every form survived (RUN_MIN was 16). The forms are spelled here apart from the scrubber (percent-encoding in
    each case and mixed, hex in each case and mixed, base64 at each offset, JSON-escaped, the key itself)."""
    import base64
    from urllib.parse import quote

    from rag.llm.urls import scrub

    key = "Zq8/Lm3+Rt6Vw9Yb2Nc5Xd7Fg1Hj4Kp0"  # 32 characters, as the sweep's bearer key
    raw = key.encode()
    pct = quote(key, safe="")
    forms = {key, pct, pct.lower(), "".join(c.lower() if i % 2 else c for i, c in enumerate(pct)),
             raw.hex(), raw.hex().upper(), "".join(c.upper() if i % 3 == 0 else c for i, c in enumerate(raw.hex())),
             json.dumps(key).replace("/", "\\/")[1:-1]}
    for shift in range(3):
        enc = base64.b64encode(b"\0" * shift + raw).decode().rstrip("=")
        forms.add(enc[(shift * 8 + 5) // 6:-1])
    survived = []
    for f in forms:
        for length in range(12, len(f) + 1):
            for k in range(len(f) - length + 1):
                cut = f[k:k + length]
                if cut.lower() in scrub(f"as sent: {cut} (rejected)", [key]).lower():
                    survived.append(cut)
    assert survived == [], survived[:10]


def test_the_scrubber_changes_no_text_of_the_bundled_sets(monkeypatch):
    """Item 10: case-folded runs of 12 must not blank real text: every text file the project ships (the bundled
    corpora and gold sets, the code set's sources) passes through the scrubber unchanged with four keys registered
    (two realistic, two random)."""
    import gzip
    import secrets

    from rag.llm import urls
    from rag.llm.urls import scrub

    # only these keys: secrets earlier tests in this worker registered ("hunter2"-like short ones) are not this
    # check's (a process scrubs every secret it holds, by design)
    monkeypatch.setattr(urls, "_KNOWN", set())
    keys = ["wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY", "Zq8/Lm3+Rt6Vw9Yb2Nc5Xd7Fg1Hj4Kp0Qs/Tu",
            "sk-" + secrets.token_urlsafe(36), secrets.token_hex(16)]
    files = changed = 0
    for p in sorted((ROOT / "datasets").rglob("*")):
        if not p.is_file():
            continue
        data = p.read_bytes()
        if p.suffix == ".gz":
            data = gzip.decompress(data)
        try:
            text = data.decode("utf-8")
        except UnicodeDecodeError:
            continue  # parquet, PDF: no text to scrub as it is
        files += 1
        changed += scrub(text, keys) != text
    assert files >= 20 and changed == 0, (files, changed)


# --- Item 11: snapshots open only regular files, of the sizes their writer recorded -------------------------------

def test_a_fifo_or_a_device_in_place_of_a_snapshot_file_is_never_read(tmp_path):
    """Item 11: a FIFO in place of a snapshot file made `ragwb search` hang; a `.done` linked to /dev/zero read
    2.7 GB, then raised MemoryError. Each is passed over (LanceDB answers, the snapshot is written again) and the
    search prints what it prints from an intact snapshot."""
    docs = _docs(tmp_path)
    (docs / "b.md").write_text("# Beta\n\nBeta is the second letter.\n")
    ws = tmp_path / "ws"

    def ragwb(*args) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "-m", "evals.cli", *args], cwd=tmp_path, capture_output=True,
                              text=True, timeout=120)

    assert ragwb("ingest", str(docs), "--workspace", str(ws), "--embedder", "hash", "--no-progress").returncode == 0
    search = ("search", "second letter", "--dataset", str(docs), "--workspace", str(ws), "--embedder", "hash",
              "--strategy", "chunks")
    first = ragwb(*search)
    assert first.returncode == 0 and "b.md" in first.stdout, first.stderr
    snaps = ws / "cache" / "snapshots"
    arrow = sorted(snaps.glob("*.chunks.arrow"))
    assert len(arrow) == 1
    arrow[0].unlink()
    os.mkfifo(arrow[0])
    got = ragwb(*search)  # a FIFO opened for reading would block forever (the 120 s timeout would fail the test)
    assert got.returncode == 0 and got.stdout == first.stdout, got.stderr
    assert arrow[0].is_file() and not arrow[0].is_symlink()  # written again as a file

    done = sorted(snaps.glob("*.done"))
    assert len(done) == 1
    done[0].unlink()
    done[0].symlink_to("/dev/zero")
    got = ragwb(*search)
    assert got.returncode == 0 and got.stdout == first.stdout, got.stderr
    assert done[0].is_file() and not done[0].is_symlink()
