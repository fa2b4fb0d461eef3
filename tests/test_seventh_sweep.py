"""Outside input, seventh sweep (issue 82), each item from its repro as a user hits it: the real `ragwb workbench`
server and marimo's editor behind it, a second process (another account where the suite runs as root) knocking on
its kernel endpoints, real links on disk, real ports held by another server."""
import http.client
import json
import os
import re
import socket
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
            page.get_by_placeholder("wb-...").fill(rid)
            page.get_by_role("button", name="Save as run").click()
            _wait_text(page, f"Not saved: run id '{rid}' is not valid here")
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


# --- Items 4 and 5: parse workers die with their ingest, have a memory bound, and every setting has a range -------

from test_pdf_parsing import _workers_of  # noqa: E402 (the parse workers of a process, zombies left out)


def _alive(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat[stat.rindex(")") + 2] != "Z"


@pytest.mark.parametrize("sig", ["SIGTERM", "SIGINT", "SIGKILL"])
def test_a_worker_dies_within_a_second_of_its_ingest(sig, tmp_path):
    """Item 4: after SIGTERM of `ragwb ingest` at 3.5 s its worker lived 22 s more and printed a BrokenPipeError
    traceback; after SIGKILL it lived on with parent 1. Here the worker is busy on a PDF pdfium needs ~10 s for;
    the ingest gets the signal alone (not its process group); its worker is gone within 1 s, and nothing prints a
    traceback."""
    import signal as _signal

    from pdfgen import make_heavy_pdf

    docs = tmp_path / "docs"
    docs.mkdir()
    make_heavy_pdf(docs / "heavy.pdf", 20)
    (docs / "b.md").write_text("# B\n\nDepot eight.\n")
    proc = subprocess.Popen([sys.executable, "-m", "evals.cli", "ingest", str(docs), "--workspace",
                             str(tmp_path / "ws"), "--embedder", "hash", "--no-progress"], cwd=tmp_path,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)
    try:
        deadline = time.monotonic() + 120
        workers: list[int] = []
        while not workers:
            assert proc.poll() is None and time.monotonic() < deadline, proc.communicate()
            workers = _workers_of(proc.pid)
            time.sleep(0.05)
        time.sleep(1.0)  # the worker is inside pdfium now
        assert all(_alive(w) for w in workers)
        os.kill(proc.pid, getattr(_signal, sig))
        sent = time.monotonic()
        while any(_alive(w) for w in workers) and time.monotonic() - sent < 5:
            time.sleep(0.02)
        gone_after = time.monotonic() - sent
        out, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert not any(_alive(w) for w in workers)
    assert gone_after < 1.0, f"the worker lived {gone_after:.2f} s after the ingest's {sig}"
    assert "Traceback" not in err and "BrokenPipeError" not in err, err[-2000:]
    if sig == "SIGINT":
        assert proc.returncode == 130 and "ragwb ingest: interrupted" in err, (proc.returncode, err[-2000:])


def test_a_file_past_the_workers_memory_bound_is_skipped_and_named(tmp_path, monkeypatch):
    """Item 4: a one-page 200 MB stream peaked at 3.8 GB resident in its worker. With RAGWB_PARSE_MEMORY_MB=400 a
    page that needs ~1 GB is skipped, the bound named; the rest of the folder is read."""
    from pdfgen import make_heavy_pdf
    from rag.ingest.folders import load_folder

    docs = tmp_path / "docs"
    docs.mkdir()
    make_heavy_pdf(docs / "heavy.pdf", 10)
    (docs / "b.md").write_text("# B\n\nDepot eight.\n")
    monkeypatch.setenv("RAGWB_PARSE_MEMORY_MB", "400")
    ds = load_folder(docs)
    assert [d.doc_id for d in ds.documents] == ["b.md"]
    [skip] = ds.skipped
    assert Path(skip.path).name == "heavy.pdf" and "memory bound (400 MB, RAGWB_PARSE_MEMORY_MB)" in skip.reason


@pytest.mark.parametrize("name,value", [("RAGWB_PARSE_TIMEOUT", "0"), ("RAGWB_PARSE_TIMEOUT", "1e-9"),
                                        ("RAGWB_PARSE_TIMEOUT", "1e300"), ("RAGWB_PARSE_TIMEOUT", "nan"),
                                        ("RAGWB_PARSE_WORKERS", "-1"), ("RAGWB_PARSE_WORKERS", "two"),
                                        ("RAGWB_PARSE_MEMORY_MB", "1"), ("RAGWB_PARSE_MEMORY_MB", "1e12")])
def test_a_parse_setting_out_of_range_is_one_line_before_any_file(name, value, tmp_path):
    """Item 5: RAGWB_PARSE_TIMEOUT=0 or 1e-9 skipped every PDF as "died reading this file twice"; 1e300 gave
    OverflowError tracebacks from threads. Each is one line naming the variable, exit 2, and no file parsed."""
    from pdfgen import make_pdf

    docs = tmp_path / "docs"
    docs.mkdir()
    make_pdf(docs / "a.pdf", [["Depot seven stores 12 crates."]])
    got = subprocess.run([sys.executable, "-m", "evals.cli", "ingest", str(docs), "--workspace", str(tmp_path / "ws"),
                          "--embedder", "hash", "--no-progress"], cwd=tmp_path, capture_output=True, text=True,
                         timeout=300, env={**os.environ, name: value})
    assert got.returncode == 2, (got.returncode, got.stderr[-2000:])
    assert got.stderr.count("\n") == 1 and f"{name}={value!r}" in got.stderr and "Traceback" not in got.stderr, \
        got.stderr
    assert not (tmp_path / "ws" / "cache" / "parsed").exists() or not any((tmp_path / "ws" / "cache" /
                                                                          "parsed").rglob("*.json"))


def test_a_worker_count_past_twice_the_cores_is_capped_and_said(tmp_path, monkeypatch, capsys):
    """Item 5: RAGWB_PARSE_WORKERS=10000 started 60 workers for 60 tiny PDFs on 2 cores (192.6 s against 1.2 s)."""
    from pdfgen import make_pdf
    from rag.ingest.parse_pool import parse_workers

    files = []
    for i in range(12):
        files.append((make_pdf(tmp_path / f"{i}.pdf", [[f"Page {i}."]]), f"{i}.pdf"))
    monkeypatch.setenv("RAGWB_PARSE_WORKERS", "10000")
    workers, todo = parse_workers(files, None)
    cores = os.cpu_count()
    assert workers == min(2 * cores, 12) and len(todo) == 12
    err = capsys.readouterr().err
    assert f"RAGWB_PARSE_WORKERS=10000 capped at {2 * cores}" in err


# --- Item 6: judge flags with ranges; the cost line names every juror ---------------------------------------------

@pytest.mark.parametrize("flags,said", [
    (["--judge-repeats", "1000000"], "--judge-repeats: must be 1..20, got 1000000 (each repeat is one more judge call"),
    (["--judge-repeats", "21"], "--judge-repeats: must be 1..20, got 21"),
    (["--jury", ","], "--jury ',': a jury's juror names must be model names, got an empty one"),
    (["--jury", "a,,b"], "--jury 'a,,b': a jury's juror names must be model names, got an empty one"),
    (["--jury", "a,a"], "--jury 'a,a': a juror is named twice in the jury: a"),
    (["--jury", ",".join(f"model-{i}" for i in range(50))], "a jury has 2..8 juror models, got 50"),
])
def test_judge_flags_out_of_range_are_refused_before_any_call(flags, said, tmp_path):
    """Item 6: --judge-repeats 1000000 was accepted (4,000 requests in 25 s), --jury , ran without a jury, a 50-model
    jury was named by its first model alone. Each is refused, exit 2, before any request leaves."""
    from openai_server import Handler, start

    srv, url = start()
    try:
        before = Handler.calls
        got = subprocess.run([sys.executable, "-m", "evals.cli", "run", "--dataset", str(_docs(tmp_path)),
                              "--embedder", "hash", "--workspace", str(tmp_path / "ws"), "--llm-base-url", url,
                              "--llm-model", "local-extractive", "--no-progress", "--no-report", "--yes", *flags],
                             cwd=tmp_path, capture_output=True, text=True, timeout=300)
        assert got.returncode == 2 and said in got.stderr, (got.returncode, got.stderr[-2000:])
        assert Handler.calls == before
    finally:
        srv.shutdown()


def test_the_cost_line_names_every_juror(tmp_path):
    """Item 6: `--jury` with 50 models named only `model-0` in the cost line. A jury of three is named whole, and
    each of the three is asked."""
    import json as _json

    from openai_server import Handler, start

    docs = _docs(tmp_path)
    q = tmp_path / "q.jsonl"
    q.write_text(_json.dumps({"question": "What is Alpha?", "answers": ["the first letter"]}) + "\n")
    srv, url = start()
    try:
        n0 = len(Handler.bodies)
        got = subprocess.run([sys.executable, "-m", "evals.cli", "run", "--dataset", str(docs), "--questions", str(q),
                              "--embedder", "hash", "--workspace", str(tmp_path / "ws"), "--llm-base-url", url,
                              "--llm-model", "local-extractive", "--strategies", "chunks", "--no-progress",
                              "--no-report", "--yes", "--jury", "juror-a,juror-b,juror-c", "--judges",
                              "llm_faithfulness"], cwd=tmp_path, capture_output=True, text=True, timeout=300)
        asked = {_json.loads(b).get("model") for b in Handler.bodies[n0:]}
    finally:
        srv.shutdown()
    assert got.returncode == 0, got.stderr[-2000:]
    assert "a jury of 3 (juror-a, juror-b, juror-c)" in got.stdout, got.stdout
    assert {"juror-a", "juror-b", "juror-c"} <= asked, asked


# --- Item 7: one cap for every axis, on every surface ------------------------------------------------------------

def test_memory_and_query_mode_axes_count_under_the_grids_one_cap(tmp_path, capsys):
    """Item 7: --memory window --query-mode (3 modes) --set memory.window_turns=1,...,4000 ran 12,000 points and
    exited 0. Now the count is index configs x budget points x memory points x query modes, refused in one line
    before any work (no run row, no store)."""
    from evals.cli import main

    turns = ",".join(str(i) for i in range(1, 4001))
    assert main(["run", "--dataset", "mtrag-govt", "--strategies", "chunks", "--memory", "window", "--query-mode",
                 "last_turn,history_concat,gold_rewrite", "--set", f"memory.window_turns={turns}", "--limit", "1",
                 "--workspace", str(tmp_path / "ws"), "--embedder", "hash", "--no-progress", "--no-report"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "the grid has 12,000 points" in err and "4,000 memory point(s) x 3 query mode(s)" \
        in err, err
    db = tmp_path / "ws" / "results.duckdb"
    if db.exists():  # the store may be opened first; no run was started in it
        import duckdb

        con = duckdb.connect(str(db), read_only=True)
        assert con.execute("SELECT count(*) FROM runs").fetchone()[0] == 0
        con.close()


def test_the_library_sweep_and_the_pages_sweep_points_count_under_the_same_cap(tmp_path):
    """Item 7: Workbench.sweep("top_k", range(1, 12001), strategies=["chunks", "hybrid"]) evaluated 24,000 points
    (214 s, 2.0 GB); sweep_points, which the page's Sweep and Race call, had no cap."""
    from evals.interactive.sweeps import sweep_points
    from evals.workbench import Workbench

    with pytest.raises(ValueError, match=r"the grid has 24,000 points \(2 strategies x 12,000 value\(s\) of top_k\), "
                                         r"over the 10,000"):
        sweep_points(["chunks", "hybrid"], "top_k", ",".join(map(str, range(1, 12001))), {})
    wb = Workbench(str(_docs(tmp_path)), embedder="hash", workspace=str(tmp_path / "ws"), progress=False)
    with pytest.raises(ValueError, match="the grid has 24,000 points"):
        wb.sweep("top_k", range(1, 12001), strategies=["chunks", "hybrid"])
    assert wb.last is None or not getattr(wb.last, "points", None) or len(wb.last.points) < 24000
    assert sweep_points(["chunks"], "top_k", "2,4", {})  # a sweep under the cap still runs


# --- Item 8: the e5 cache can never give wrong vectors silently ---------------------------------------------------

TEXTS = ["The harbour office opens at eight.", "Varroa mites are counted with a sugar roll."]


@pytest.fixture
def e5_copy(tmp_path, monkeypatch):
    """A copy of this machine's built e5 cache under a RAGWB_CACHE of the test's own (a build is ~10 s; the damage
    and its finding are what is tested), and the reference vectors of TEXTS from the intact cache."""
    import shutil

    from rag.index import e5_onnx

    ref = e5_onnx.engine().embed(TEXTS, False)
    built = e5_onnx.model_file().parent
    monkeypatch.setenv("RAGWB_CACHE", str(tmp_path / "cache"))
    shutil.copytree(built, e5_onnx.cache_dir() / built.name, ignore=shutil.ignore_patterns("*.lock"))
    folder = e5_onnx.model_file().parent
    assert folder == e5_onnx.cache_dir() / built.name
    return folder, ref


def _cos(a, b):
    import numpy as np

    return (a * b).sum(1) / np.linalg.norm(a, axis=1) / np.linalg.norm(b, axis=1)


def test_one_bit_flips_anywhere_in_the_model_fail_its_check_and_it_is_rebuilt(e5_copy, capsys):
    """Item 8: 30 one-bit flips between the sampled blocks of e5-small.int8.onnx left check() with nothing to report,
    and every vector came out NaN. Every byte of the model is hashed now: the flips are found, said, rebuilt."""
    import random

    from rag.index import e5_onnx
    from rag.index.e5_cache import check

    folder, ref = e5_copy
    model = folder / "e5-small.int8.onnx"
    data = bytearray(model.read_bytes())
    rng = random.Random(82)
    for _ in range(30):  # offsets a sampled digest never read: inside the gaps between its 18 blocks of 64 KB
        k = rng.randrange(17)
        gap_start = k * (len(data) - (1 << 16)) // 17 + (1 << 16)
        data[gap_start + rng.randrange(1 << 12)] ^= 1 << rng.randrange(8)
    model.write_bytes(bytes(data))
    assert any(x.startswith("e5-small.int8.onnx: its content changed") for x in check(folder)), check(folder)
    eng = e5_onnx.Engine()
    err = capsys.readouterr().err
    assert "failed its check (e5-small.int8.onnx: its content changed" in err and "rebuilding it" in err, err
    assert _cos(eng.embed(TEXTS, False), ref).min() > 0.999


def test_a_changed_word_table_row_never_enters_a_vector(e5_copy, capsys):
    """Item 8: two rows of word.npy changed between the sampled blocks: no message, cosine 0.932 to a clean cache.
    Each row is checked against its CRC the first time it is gathered: the embed that would use a changed row fails
    naming it, and the next start rebuilds the cache, said, and embeds as the reference."""
    import numpy as np

    from rag.index import e5_onnx
    from rag.index.e5_cache import DamagedCache, check

    folder, ref = e5_copy
    from rag.index.e5_cache import BLOCK, SAMPLES

    eng = e5_onnx.Engine()
    size = (folder / "word.npy").stat().st_size
    row = eng.words.shape[1] * 4
    head = size - eng.words.shape[0] * row
    blocks = [min(size - BLOCK, k * (size - BLOCK) // (SAMPLES + 1)) for k in range(SAMPLES + 2)]
    unsampled = [i for i in sorted(set(eng.ids(TEXTS[1], False)) - {eng.bos, eng.eos})
                 if not any(b < head + (i + 1) * row and head + i * row < b + BLOCK for b in blocks)]
    ids = unsampled[:2]  # rows no sampled block reads: the digest cannot tell
    assert len(ids) == 2
    words = np.load(folder / "word.npy", mmap_mode="r+")
    words[ids] = words[ids] * 1.5  # two rows scaled: the same size, outside the sampled blocks or not
    words.flush()
    del words
    assert check(folder) == []  # the sampled digest passes: the rows are what is checked
    eng = e5_onnx.Engine()
    eng.embed([TEXTS[0]], False)  # rows this text does not use are fine
    with pytest.raises(DamagedCache, match=rf"row {ids[0]:,} of the word table in .* changed since it was built"):
        eng.embed([TEXTS[1]], False)
    assert check(folder)[0].startswith("no manifest")  # marked: the next load rebuilds it
    eng = e5_onnx.Engine()
    assert "failed its check (no manifest" in capsys.readouterr().err  # rebuilt, said
    assert _cos(eng.embed(TEXTS, False), ref).min() > 0.999


def test_a_canary_that_is_not_a_finite_number_fails(e5_copy, capsys):
    """Item 8: the canary's cosine was NaN and `nan < 0.9999` is False, so the cache loaded. A NaN canary fails the
    check like a low one: rebuilt, said."""
    import json as _json

    from rag.index import e5_onnx

    folder, ref = e5_copy
    man = _json.loads((folder / "manifest.json").read_text())
    man["canary"] = [float("nan")] * len(man["canary"])
    (folder / "manifest.json").write_text(_json.dumps(man))  # Python writes NaN; the manifest's digests still match
    eng = e5_onnx.Engine()
    err = capsys.readouterr().err
    assert "its canary embeds at cosine nan" in err and "rebuilding it" in err, err
    assert _cos(eng.embed(TEXTS, False), ref).min() > 0.999


def _read_only(folder: Path):
    """``folder`` made unwritable for this process (root too): a read-only bind mount, else the immutable flag;
    returns how to undo it, or None where neither is possible here."""
    if os.geteuid() != 0:
        os.chmod(folder, 0o555)
        return lambda: os.chmod(folder, 0o755)
    if subprocess.run(["mount", "--bind", str(folder), str(folder)], capture_output=True).returncode == 0:
        if subprocess.run(["mount", "-o", "remount,ro,bind", str(folder)], capture_output=True).returncode == 0:
            return lambda: subprocess.run(["umount", str(folder)], check=True)
        subprocess.run(["umount", str(folder)])
    if subprocess.run(["chattr", "+i", str(folder)], capture_output=True).returncode == 0:
        return lambda: subprocess.run(["chattr", "-i", str(folder)], check=True)
    return None


def test_a_damaged_cache_that_cannot_be_written_is_rebuilt_in_a_temporary_folder(e5_copy, tmp_path):
    """Item 8: a damaged cache in a read-only folder gave only `Permission denied: ...e5-small.int8.onnx.lock`, with
    no fallback. It is rebuilt in a temporary folder, said once, and embeds as the reference (a fresh process)."""
    folder, ref = e5_copy
    scores = folder / "scores.npy"
    scores.write_bytes(scores.read_bytes()[::-1])  # damaged: the check says so
    undo = _read_only(folder)
    if undo is None:
        pytest.skip("no way to make a folder read-only for this account here (not root, no mount, no chattr)")
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    try:
        got = subprocess.run([sys.executable, "-c", "from rag.index import e5_onnx; import numpy as np, sys, json; "
                              f"v = e5_onnx.Engine().embed({TEXTS!r}, False); print(json.dumps(v.tolist()))"],
                             capture_output=True, text=True, timeout=600,
                             env={**os.environ, "RAGWB_CACHE": os.environ["RAGWB_CACHE"], "TMPDIR": str(tmp)})
    finally:
        undo()
    assert got.returncode == 0, got.stderr[-2000:]
    said = [x for x in got.stderr.splitlines() if "cannot be written" in x]
    assert len(said) == 1 and "scores.npy: its content changed" in said[0] and str(tmp) in said[0], got.stderr
    import numpy as np

    assert _cos(np.array(json.loads(got.stdout)), ref).min() > 0.999


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


def test_the_scrubber_changes_no_text_of_the_bundled_sets():
    """Item 10: case-folded runs of 12 must not blank real text: every text file the project ships (the bundled
    corpora and gold sets, the code set's sources) passes through the scrubber unchanged with four keys registered
    (two realistic, two random)."""
    import gzip
    import secrets

    from rag.llm.urls import scrub

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
