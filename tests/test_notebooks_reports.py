"""Notebooks and HTML reports: marimo check, three ways to run, a real headless Chromium."""
import io
import json
import subprocess
import sys
from pathlib import Path

import pytest
from PIL import Image

from evals.cli import main
from evals.report.serve import serve

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOKS = sorted((ROOT / "notebooks").glob("*.py"))
HOSTILE = "<script>window.__pwned = 1</script> and <img src=x onerror=\"window.__pwned = 2\"> inside"


@pytest.fixture(scope="module")
def hostile_run(tmp_path_factory):
    root = tmp_path_factory.mktemp("hostile")
    (root / "docs").mkdir()
    (root / "docs" / "evil.md").write_text(f"# Evil\n\nThe tower is in Paris. {HOSTILE} the text.\n")
    (root / "docs" / "ok.md").write_text("# Fine\n\nThe river is long and wide.\n")
    q = root / "q.jsonl"
    q.write_text("\n".join(json.dumps(x) for x in [
        {"id": "q1", "question": "Where is the tower?", "answers": ["Paris"], "evidence": [{"doc": "evil.md"}]},
        {"id": "q2", "question": "What is long?", "answers": ["the river"], "evidence": [{"doc": "ok.md"}]}]) + "\n")
    ws = root / "ws"
    assert main(["run", "--dataset", str(root / "docs"), "--questions", str(q), "--embedder", "hash",
                 "--workspace", str(ws), "--run-id", "H", "--no-progress", "--notebook-report"]) == 0
    return ws


@pytest.mark.parametrize("nb", NOTEBOOKS, ids=lambda p: p.name)
def test_marimo_check(nb):
    proc = subprocess.run([sys.executable, "-m", "marimo", "check", str(nb)], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout + proc.stderr


@pytest.mark.parametrize("nb", NOTEBOOKS, ids=lambda p: p.name)
def test_marimo_edit_runs_the_notebook_on_open(nb):
    """marimo >= 0.2x opens `marimo edit` with nothing run until Run is pressed (issue 37, 12); the project's
    pyproject.toml turns auto-run on. Asked of marimo's own config reader, as `marimo edit` asks it."""
    from marimo._config.manager import get_default_config_manager

    assert get_default_config_manager(current_path=str(nb)).get_config()["runtime"]["auto_instantiate"] is True


def test_notebooks_run_as_scripts(hostile_run, tmp_path):
    db = hostile_run / "results.duckdb"
    p = subprocess.run([sys.executable, str(ROOT / "notebooks" / "report.py"), "--db", str(db), "--run", "H"],
                       capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stderr[-2000:]
    p = subprocess.run([sys.executable, str(ROOT / "notebooks" / "workbench.py"), "--dataset", "xquad-en",
                        "--limit", "10", "--embedder", "hash", "--workspace", str(tmp_path / "ws"), "--db", str(db)],
                       capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stderr[-2000:]


def _not_blank(png: bytes) -> bool:
    img = Image.open(io.BytesIO(png)).convert("L").resize((200, 200))
    lo, hi = img.getextrema()
    return hi - lo > 100 and len(set(img.tobytes())) > 20


def _visit(browser, url):
    page = browser.new_page(viewport={"width": 1300, "height": 2000})
    errors = []
    # errors, and marimo's warnings about the page itself ("Cell ID ... cannot be found": a table asking a kernel
    # an exported page does not have); the browser's own resource hints are not the page's fault
    page.on("console", lambda m: errors.append(m.text) if m.type == "error" or (
        m.type == "warning" and "preload" not in m.text) else None)
    page.on("pageerror", lambda e: errors.append(str(e)))
    # no request may leave the machine (marimo's plotly plugin used to fetch MathJax from a CDN)
    page.on("request", lambda r: None if r.url.startswith(("http://127.0.0.1", "ws://127.0.0.1", "file:", "data:",
                                                           "blob:")) else errors.append(f"outside request {r.url}"))
    page.goto(url)
    page.wait_for_selector(".main-svg", timeout=60000)  # plotly drew the charts
    page.wait_for_timeout(500)
    return page, errors


def test_report_notebook_export_renders_in_chromium(hostile_run, browser):
    out = hostile_run / "reports" / "report-H.marimo.html"
    assert out.exists()  # `ragwb run` exported notebooks/report.py
    srv, url = serve(out)  # marimo's own frontend from the installed package, on 127.0.0.1
    try:
        page, errors = _visit(browser, url)
        assert page.locator(".main-svg").count() >= 2
        assert errors == []
        assert _not_blank(page.screenshot(full_page=True))
        assert page.evaluate("window.__pwned") is None  # the hostile document ran nothing
        assert "<script>window.__pwned = 1</script>" in page.inner_text("body")
        body = page.inner_text("body")
        assert "sortable" not in body  # an exported page cannot sort: it does not say it can
        assert "95% bootstrap intervals" in body and "[" in body.split("Summary", 1)[1][:2000]  # intervals shown
        page.close()
    finally:
        srv.shutdown()


def test_static_report_renders_offline_from_file(hostile_run, browser):
    out = hostile_run / "reports" / "report-H.html"
    page, errors = _visit(browser, out.as_uri())
    assert errors == [] and page.locator(".main-svg").count() >= 2
    assert _not_blank(page.screenshot(full_page=True))
    assert page.evaluate("window.__pwned") is None
    assert "onerror=\"window.__pwned = 2\"" in page.inner_text("body")
    # the question x point matrix sorts by a clicked header (descending on the second click)
    first = lambda: page.locator("#qmatrix tbody tr").first.locator("td").first.inner_text()  # noqa: E731
    page.locator("#qmatrix th").first.click()
    asc = first()
    page.locator("#qmatrix th").first.click()
    assert (asc, first()) == ("q1", "q2")
    assert page.locator("#qmatrix th").first.get_attribute("aria-sort") == "descending"  # the marker's state
    # every table sorts, with a marker on the clicked header only (issue 37, item 9)
    tables = page.locator("table.sortable")
    assert tables.count() >= 4
    t = tables.first
    col = [h.inner_text() for h in t.locator("th").all()].index("strategy")
    t.locator("th").nth(col).click()
    cells = [r.locator("td").nth(col).inner_text() for r in t.locator("tbody tr").all()]
    assert cells == sorted(cells) and t.locator("th[aria-sort]").count() == 1
    t.locator("th").nth(col).click()
    assert [r.locator("td").nth(col).inner_text() for r in t.locator("tbody tr").all()] == sorted(cells, reverse=True)
    # numbers are rounded as everywhere (no 16-digit floats), and the page uses the window's width
    body = page.inner_text("body")
    import re
    assert not re.search(r"\d\.\d{7,}", body)
    assert page.evaluate("document.body.getBoundingClientRect().width") > 1200
    # no mode-bar button sends a chart out of the page (Chart Studio, "Share"): the report stays offline
    titles = page.evaluate("Array.from(document.querySelectorAll('.modebar-btn')).map(b => b.getAttribute("
                           "'data-title') || '')")
    assert titles and not [x for x in titles if re.search(r"cloud|studio|share|edit", x, re.I)]
    assert "<code>ragwb agreement</code>" in page.content() and "`ragwb agreement`" not in body
    page.close()


def test_marimo_export_of_report_exits_zero(hostile_run, tmp_path):
    out = tmp_path / "r.html"
    p = subprocess.run([sys.executable, "-m", "marimo", "export", "html", str(ROOT / "notebooks" / "report.py"), "-o",
                        str(out), "--", "--db", str(hostile_run / "results.duckdb"), "--run", "H"],
                       capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stderr[-2000:]
    assert "RAG Workbench report" in out.read_text()


def test_workbench_in_chromium_apply_matrix_drilldown_pairs_offline(browser, tmp_path):
    """`marimo run` serves the workbench with a live kernel. In Chromium: Apply changes the drill-down
    (which names the point it shows) and embeds nothing new; the matrix filter narrows the rows; a
    cell click opens that question and point; the paired comparison shows intervals; no request
    leaves 127.0.0.1 and the console has no error. Screenshots are saved beside the test's files."""
    import socket
    import sqlite3
    import time
    import urllib.request

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    ws = tmp_path / "ws"
    db = ws / "results.duckdb"
    # what a user has after running `ragwb run` twice, and a sweep: three stored runs of one dataset
    common = ["run", "--dataset", "xquad-en", "--embedder", "hash", "--limit", "20", "--workspace", str(ws),
              "--no-progress", "--no-report", "--strategies", "chunks,hybrid"]
    for rid in ("R1", "R2"):
        assert main(common + ["--run-id", rid]) == 0
    assert main(common + ["--run-id", "SWEEP", "--set", "chunks.top_k=2,4,8"]) == 0
    # a user's strategy plugin joins the workbench's strategy list (issue 26)
    plugin = tmp_path / "browser_plugin.py"
    plugin.write_text("from dataclasses import dataclass\n"
                      "from rag.extend import BaseParams, Strategy, register_strategy, get_strategy\n\n"
                      "@dataclass(frozen=True)\nclass P(BaseParams):\n    top_k: int = 2\n\n"
                      "@register_strategy\nclass BrowserLines(Strategy):\n    name = 'plugin_lines'\n"
                      "    description = 'two chunks (a plugin)'\n    Params = P\n\n"
                      "    def pack(self, r, pool, p):\n"
                      "        return get_strategy('chunks').pack(r, pool, get_strategy('chunks').Params(top_k=p.top_k))\n")
    proc = subprocess.Popen([sys.executable, "-m", "marimo", "run", "--headless", "--no-token", "--port", str(port),
                             str(ROOT / "notebooks" / "workbench.py"), "--", "--dataset", "xquad-en", "--embedder",
                             "hash", "--limit", "20", "--workspace", str(ws), "--db", str(db), "--plugins",
                             str(plugin)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    shots = tmp_path / "screenshots"
    shots.mkdir()
    try:
        deadline = time.time() + 60
        while True:
            try:
                urllib.request.urlopen(f"http://127.0.0.1:{port}/", timeout=2)
                break
            except OSError:
                if time.time() > deadline:
                    raise
                time.sleep(0.3)
        page = browser.new_page(viewport={"width": 1440, "height": 1600})
        outside, errors = [], []
        page.on("request", lambda r: None if r.url.startswith(("http://127.0.0.1", "ws://127.0.0.1", "data:", "blob:"))
                else outside.append(r.url))
        page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
        page.on("pageerror", lambda e: errors.append(str(e)))
        t_open = time.time()
        page.goto(f"http://127.0.0.1:{port}/")
        page.wait_for_selector(".main-svg", timeout=90000)
        first_chart_s = time.time() - t_open
        print(f"first chart after {first_chart_s:.1f} s")
        assert first_chart_s < 90  # with two stored runs of the dataset: nothing compares them on load
        # the comparison waits for its button (waited for: on a loaded machine the cell renders after the chart)
        page.wait_for_selector("text=Compare the two runs", timeout=60000)
        page.wait_for_selector("text=plugin_lines", timeout=30000)  # the plugin's point is on the page
        page.wait_for_selector("text=How much could routing save at most?", timeout=30000)  # the oracle section
        page.wait_for_selector("text=showing: chunks · defaults", timeout=60000)

        def embedded():
            con = sqlite3.connect(ws / "cache" / "embeddings.sqlite")
            n = con.execute("SELECT count(*) FROM emb").fetchone()[0]
            con.close()
            return n
        before = embedded()
        # 1. Apply a budget: the drill-down follows it and says which point it shows
        slider = page.locator("[role=slider]").nth(1)  # chunks top_k, the first slider of the budget form
        slider.focus()
        for _ in range(5):
            page.keyboard.press("ArrowLeft")
        page.get_by_text("Apply budgets").click()
        page.wait_for_selector("text=showing: chunks · top_k=3", timeout=60000)
        assert page.locator("text=showing: chunks · defaults").count() == 0  # never a stale drill-down
        assert embedded() == before  # questions and passages were not embedded again
        page.screenshot(path=str(shots / "1-applied.png"), full_page=True)
        # 2. the matrix filter: searching question text narrows the rows
        page.wait_for_selector("text=20 of 20 questions", timeout=30000)
        page.get_by_placeholder("question text or id").fill("Broncos")
        page.keyboard.press("Enter")
        # (marimo renders UI labels in shadow roots: Playwright's text selectors pierce them)
        page.wait_for_selector("text=/^([0-9]|1[0-9]) of 20 questions$/", timeout=30000)
        page.screenshot(path=str(shots / "2-filtered.png"), full_page=True)
        # 3. a cell click on a non-first row of the filtered matrix opens that row's question and point
        header = "parent_child · defaults"
        table = page.locator("table", has=page.locator(f"th:has-text('{header}')")).first
        col = table.locator(f"th:has-text('{header}')").first
        col.scroll_into_view_if_needed()
        heads = [h.strip() for h in table.locator("thead th").all_inner_texts()]
        idx = col.evaluate("t => [...t.parentElement.children].indexOf(t)")
        q_idx = next(i for i, h in enumerate(heads) if h.split()[0:1] == ["question"])
        rows = table.locator("tbody tr")
        assert rows.count() >= 2
        row = rows.nth(1)
        question = row.locator("td").nth(q_idx).inner_text().strip()
        row.locator("td").nth(idx).click()
        page.wait_for_selector(f"text=showing: {header}", timeout=30000)
        shown = page.locator("h3").filter(has_text=question[:40])
        shown.first.wait_for(timeout=30000)  # the clicked row's question, not the first row's
        page.screenshot(path=str(shots / "3-cell-drilldown.png"), full_page=True)
        # 3b. Apply again: the drill-down keeps that question and that point
        slider.focus()
        page.keyboard.press("ArrowLeft")
        page.get_by_text("Apply budgets").click()
        page.wait_for_selector("th:has-text('chunks · top_k=2')", timeout=60000)  # the Apply has landed
        page.wait_for_selector(f"text=showing: {header}", timeout=60000)
        assert page.locator("h3").filter(has_text=question[:40]).count() >= 1
        # 3b'. the matrix controls survived the Apply: the search still filters (issue 37, item 2)
        assert page.get_by_placeholder("question text or id").input_value() == "Broncos"
        page.wait_for_selector("text=/^([0-9]|1[0-9]) of 20 questions$/", timeout=30000)
        # ... and the point columns come first: at 1440 px five of the six start on screen (was one), every one
        # before the metadata columns (item 4)
        xs = [h.bounding_box()["x"] for h in table.locator("th").filter(has_text=" · ").all()]
        meta = [h.bounding_box()["x"] for h in table.locator("th").filter(has_text="answerable").all()]
        assert len(xs) == 6 and sum(x < 1440 for x in xs) >= 5 and meta and max(xs) < min(meta), (xs, meta)
        # 3c. Save as run: the applied items become a stored run that `ragwb runs` lists
        page.get_by_text("Save as run", exact=True).click()
        page.wait_for_selector("text=/Saved run/", timeout=60000)
        import duckdb
        con = duckdb.connect(str(db), read_only=True)
        saved = con.execute("SELECT run_id, status FROM runs WHERE run_id LIKE 'wb-%'").fetchall()
        con.close()
        assert len(saved) == 1 and saved[0][1] == "finished"
        # 3c'. grading point A's passages (issue 35): a click on "3 answers", then the key 1 (on the next passage);
        # each lands in the store's judgments at once, as `ragwb judge --import` stores them
        page.get_by_placeholder("ana (stored as human:ana)").fill("tess")
        page.keyboard.press("Tab")
        page.get_by_role("button", name="3 answers").click()
        page.wait_for_selector("text=/stored: tess graded passage \\[1\\] 3/", timeout=30000)
        page.evaluate("document.activeElement && document.activeElement.blur()")
        # after a grade the picker moves to the next ungraded passage (issue 43, item 5): the key grades [2]
        page.keyboard.press("1")
        page.wait_for_selector("text=/stored: tess graded passage \\[2\\] 1/", timeout=30000)
        page.wait_for_selector("text=human:tess=1", timeout=30000)  # the table shows the stored grade
        con = duckdb.connect(str(db), read_only=True)
        graded = sorted(con.execute("SELECT judge, grade, status FROM judgments").fetchall())
        con.close()
        assert graded == [("human:tess", 1, "ok"), ("human:tess", 3, "ok")], graded
        # 3d. the run just saved is offered in the stored-run dropdowns without a reload (issue 37, item 6)
        page.wait_for_function("rid => Array.from(document.querySelectorAll('*')).some(e => e.shadowRoot && "
                               "Array.from(e.shadowRoot.querySelectorAll('option')).some(o => o.textContent.includes(rid)))"
                               " || Array.from(document.querySelectorAll('option')).some(o => o.textContent.includes(rid))",
                               arg=saved[0][0], timeout=60000)
        # 4. the paired comparison shows intervals and verdicts (computed when scrolled to, as a person scrolls)
        page.get_by_role("heading", name="Paired comparison inside this run", exact=False).scroll_into_view_if_needed()
        page.wait_for_selector("text=delta with 95% interval", timeout=30000)
        page.wait_for_selector("text=per 1,000 context tokens", timeout=30000)  # (inside the lazy section's shadow)
        verdicts = page.evaluate("""() => { const all = (r) => [...r.querySelectorAll('*')].flatMap(
            e => e.shadowRoot ? [e, ...all(e.shadowRoot)] : [e]);
            return all(document).filter(e => e.tagName === 'TD').map(e => e.textContent.trim()); }""")
        assert {"tie", "better", "worse"} & set(verdicts), verdicts[:40]
        page.screenshot(path=str(shots / "4-paired.png"), full_page=True)
        # 5. two stored runs of the dataset are compared only when asked, and quickly
        page.get_by_role("button", name="Compare the two runs").click()
        page.wait_for_selector("text=/compared \\d+ of \\d+/", timeout=60000)
        assert outside == [], outside  # MathJax and every other CDN request is gone
        assert errors == [], errors
        for png in shots.glob("*.png"):
            assert _not_blank(png.read_bytes()), png
        page.close()
    finally:
        proc.terminate()
        proc.wait(timeout=20)


def test_budget_form_sends_each_strategy_only_its_own_budgets():
    from evals.workbench.calls import points_from_budgets
    pts = dict(points_from_budgets(["chunks", "parent_child", "hybrid"],
                                   {"chunks__top_k": 3, "hybrid__top_k": 8, "parent_child__top_k": 20,
                                    "max_context_tokens": 500, "overflow": "truncate", "hybrid__alpha": 0.5}))
    assert pts["chunks"] == {"top_k": 3, "max_context_tokens": 500}
    assert pts["parent_child"] == {"max_context_tokens": 500}  # keeps its shipped top_k of 20
    assert pts["hybrid"] == {"max_context_tokens": 500, "alpha": 0.5}
    for typo in ({"overflw": "truncate"}, {"hybrid__fusion_weight": 0.3}, {"nosuch__top_k": 3}):
        with pytest.raises(ValueError, match="unknown budget .* valid: .*hybrid__alpha"):
            points_from_budgets(["chunks"], typo)
