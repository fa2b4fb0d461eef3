"""The page tells the truth (issue 72), in Chromium as a researcher uses it: a new folder of Markdown, plain
questions, an LLM answerer and judge behind a real 127.0.0.1 server. A Race and an Index sweep pressed in the page
are judged as Apply is (their stored runs hold the judged metric they race on, and their lines count the judge's
calls); after "How far to trust the judge" every judge line on the page shows the stored figure without another
Apply; the index sweep's result stays and its plan says the configs are built now; a best TOML copied from the
page runs unchanged from another working folder."""
import json
import re
import subprocess
import sys
from pathlib import Path

import duckdb
from openai_server import Handler
from test_workbench_own import llm  # noqa: F401 (the module's 127.0.0.1 server, as that file's tests use it)

ROOT = Path(__file__).resolve().parents[1]
TOPICS = {"hives.md": ("Hives", "A hive holds frames of comb where the colony raises brood and stores honey"),
          "swarms.md": ("Swarms", "A swarm leaves the hive with the old queen when the colony grows crowded"),
          "feeding.md": ("Feeding", "Colonies are fed sugar syrup in autumn when their honey stores run low"),
          "mites.md": ("Mites", "Varroa mites are counted with a sugar roll and treated after the harvest")}
QUESTIONS = ["What does a hive hold?", "When does a swarm leave the hive?", "When are colonies fed syrup?",
             "How are varroa mites counted?"]


def _folder(tmp_path: Path) -> tuple[Path, Path]:
    docs = tmp_path / "bees"
    docs.mkdir()
    for name, (title, first) in TOPICS.items():
        # long enough that 64- and 256-token chunks differ (an index sweep that built one index would be refused)
        body = "\n\n".join(f"{first}, as note {i} of the {title.lower()} chapter explains in plain words for a "
                           f"beekeeper who keeps two hives and reads this in the evening." for i in range(12))
        (docs / name).write_text(f"# {title}\n\n{body}\n")
    q = tmp_path / "questions.jsonl"
    q.write_text("".join(json.dumps({"question": x}) + "\n" for x in QUESTIONS))
    return docs, q


def _metrics_of(db: Path, run_id: str) -> set:
    con = duckdb.connect(str(db), read_only=True)
    try:
        return {m for (m,) in con.execute("SELECT DISTINCT metric FROM scores WHERE run_id = ? AND status = 'ok'",
                                          [run_id]).fetchall()}
    finally:
        con.close()


def _runs(db: Path) -> list[str]:
    con = duckdb.connect(str(db), read_only=True)
    try:
        return [r for (r,) in con.execute("SELECT run_id FROM runs ORDER BY created_at").fetchall()]
    finally:
        con.close()


def test_race_index_sweep_and_agreement_from_the_page_are_judged_and_refresh_their_lines(browser, tmp_path, llm):
    from test_workbench_own import _port, _wait_http

    docs, q = _folder(tmp_path)
    ws = tmp_path / "ws"
    db = ws / "results.duckdb"
    port = _port()
    proc = subprocess.Popen([sys.executable, "-m", "marimo", "run", "--headless", "--no-token", "--port", str(port),
                             str(ROOT / "notebooks" / "workbench.py"), "--", "--dataset", str(docs), "--questions",
                             str(q), "--embedder", "hash", "--workspace", str(ws), "--db", str(db), "--limit", "10",
                             "--llm-base-url", llm, "--llm-model", "local-extractive"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        _wait_http(f"http://127.0.0.1:{port}/")
        page = browser.new_page(viewport={"width": 1440, "height": 1000})
        errors: list[str] = []
        page.on("pageerror", lambda e: errors.append(str(e)))
        page.goto(f"http://127.0.0.1:{port}/")
        # the first Apply waits for its Send; Save as run pressed now says what it needs (never a silent button)
        send = page.get_by_role("button", name=re.compile(r"^Send (up to )?\d+ call\(s\)$"))
        send.wait_for(timeout=120000)
        page.get_by_role("button", name="Save as run").click()
        page.wait_for_selector("text=/Not saved: .*press Apply first \\(and, with an LLM, Send/", timeout=60000)
        send.click()
        page.wait_for_selector("text=/llm_faithfulness judged by local-extractive: agreement not measured/",
                               timeout=120000)

        # Race these budgets (chunks top_k 2,4,8,16): its stored run holds the judged metric it raced on
        race = page.get_by_role("button", name=re.compile(r"^Race these budgets"))
        race.wait_for(timeout=60000)
        before = set(_runs(db)) if db.exists() else set()
        race.click()
        page.wait_for_selector("text=/Raced and stored as/", timeout=180000)
        raced = [r for r in _runs(db) if r not in before]
        assert len(raced) == 1
        assert "llm_faithfulness" in _metrics_of(db, raced[0])
        # its curve draws: no "no point has a llm_faithfulness value" under the race's chart
        assert page.locator("text=/no point has a llm_faithfulness value/").count() == 0

        # the index sweep: tokens x chunk tokens 64,256; its line names the judge's calls before anything is sent
        boxes = {}
        for box in page.locator("input[type=text]").all():  # the Index form's fields, found by what they hold
            boxes.setdefault(box.input_value(), box)
        boxes["auto"].fill("tokens")
        boxes["128"].fill("64,256")
        page.get_by_role("button", name="Plan the index sweep").click()
        line = page.locator("text=/index config\\(s\\):.*judge call\\(s\\) to local-extractive/").first
        line.wait_for(timeout=120000)
        judge_calls = int(re.search(r"up to ([\d,]+) judge call", line.inner_text()).group(1).replace(",", ""))
        assert judge_calls > 0
        go = page.get_by_role("button", name=re.compile(r"^(Embed [\d,]+ chunks and run|Run the index sweep)"))
        before = set(_runs(db))
        calls = Handler.calls
        go.click()
        page.wait_for_selector("text=/Stored as run .*ragwb best/", timeout=240000)
        swept = [r for r in _runs(db) if r not in before]
        assert len(swept) == 1 and "llm_faithfulness" in _metrics_of(db, swept[0])
        assert Handler.calls > calls  # answered and judged on the new configs
        # the plan is counted again: both configs built, nothing left to embed, and the result stays on screen
        page.wait_for_selector("button:has-text('Run the index sweep')", timeout=60000)
        assert page.locator("text=/Stored as run .*ragwb best/").count() >= 1

        # How far to trust the judge: after its Send, the judge lines here and under the headline show the figure
        measure = page.get_by_role("button", name=re.compile(r"^Send [\d,]+ judge call\(s\)$"))
        measure.scroll_into_view_if_needed()
        measure.click()
        page.wait_for_selector("text=/Stored:/", timeout=180000)
        page.wait_for_function(
            """() => { const all = (r) => [...r.querySelectorAll('*')].flatMap(
                   e => e.shadowRoot ? [e, ...all(e.shadowRoot)] : [e]);
               const text = all(document).map(e => e.shadowRoot ? '' : (e.childElementCount ? '' : e.textContent))
                   .join('\\n');
               return !/llm_faithfulness judged by local-extractive: agreement not measured/.test(text)
                   && (text.match(/llm_faithfulness judged by local-extractive: balanced accuracy/g) || []).length
                      >= 2; }""", timeout=60000)
        # a second press would send nothing: the section's button is gone (0 calls left)
        page.wait_for_function(
            """() => !document.body.innerText.match(/Send [1-9][\\d,]* judge call/)""", timeout=60000)
        assert errors == [], errors
        page.close()
    finally:
        proc.terminate()
        proc.wait(timeout=20)

    # the best TOML of the index sweep runs unchanged from another working folder and reproduces its point
    from evals.cli import main

    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    out = elsewhere / "best.toml"
    # the page measured its scripted judge against people: at chance, so `best` refuses it unless trusted (issue 85)
    assert main(["best", swept[0], "--metric", "llm_faithfulness", "--workspace", str(ws)]) == 2
    assert main(["best", swept[0], "--metric", "llm_faithfulness", "--workspace", str(ws), "--out", str(out),
                 "--trust-judge"]) == 0
    assert str(docs.resolve()) in out.read_text()
    import os

    here = os.getcwd()
    os.chdir(elsewhere)
    try:
        # the endpoint is given as flags (a TOML never stores where a key goes); the folder is the TOML's own
        assert main(["run", "--config", str(out), "--workspace", str(ws), "--no-progress", "--no-report",
                     "--run-id", "PASTED", "--yes", "--llm-base-url", llm, "--llm-model", "local-extractive"]) == 0
    finally:
        os.chdir(here)
    assert "llm_faithfulness" in _metrics_of(db, "PASTED")
    # ... and reproduces its point: the pasted run's per-question context tokens are one swept point's, exactly
    con = duckdb.connect(str(db), read_only=True)
    pasted = con.execute("SELECT list(value ORDER BY question_id) FROM scores WHERE run_id = 'PASTED' AND "
                         "metric = 'context_tokens' GROUP BY strategy, point_id").fetchall()
    grid = con.execute("SELECT list(value ORDER BY question_id) FROM scores WHERE run_id = ? AND "
                       "metric = 'context_tokens' GROUP BY strategy, point_id", [swept[0]]).fetchall()
    con.close()
    assert len(pasted) == 1 and pasted[0] in grid


DEEP = """(sel) => { const all = (r) => [...r.querySelectorAll('*')].flatMap(
              e => e.shadowRoot ? [e, ...all(e.shadowRoot)] : [e]);
          return all(document).filter(e => e.matches(sel)).map(e => { const b = e.getBoundingClientRect();
              return {top: b.top, bottom: b.bottom, right: b.right, width: b.width,
                      text: (e.innerText || e.textContent || '').slice(0, 4000)}; }); }"""


def test_the_first_screen_shows_the_charts_points_and_the_headline_fits_at_1440(browser, tmp_path, llm):
    """Issue 72, item 8: at 1440x1000 the first screen ended at the top of the chart (no point visible without
    scrolling), and with an LLM the headline's 12 columns scrolled context_tokens off to the right."""
    from test_workbench_own import _port, _wait_http

    docs, q = _folder(tmp_path)
    for flags, llm_on in (([], False), (["--llm-base-url", llm, "--llm-model", "local-extractive", "--send"], True)):
        port = _port()
        proc = subprocess.Popen([sys.executable, "-m", "marimo", "run", "--headless", "--no-token", "--port",
                                 str(port), str(ROOT / "notebooks" / "workbench.py"), "--", "--dataset", str(docs),
                                 "--questions", str(q), "--embedder", "hash", "--workspace", str(tmp_path / "ws"),
                                 "--limit", "10"] + flags, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        try:
            _wait_http(f"http://127.0.0.1:{port}/")
            page = browser.new_page(viewport={"width": 1440, "height": 1000})
            page.goto(f"http://127.0.0.1:{port}/")
            page.wait_for_selector("th:has-text('chunks · defaults')", timeout=180000)
            page.wait_for_function("(d) => eval(d)('rect.nsewdrag').length > 0", arg=DEEP, timeout=60000)
            page.evaluate("window.scrollTo(0, 0)")
            # the chart's plot area (where the points are) inside the first screen once the page has settled (a
            # progress bar or spinner above it stands there for a moment while cells run)
            try:
                page.wait_for_function("(d) => { window.scrollTo(0, 0); const r = eval(d)('rect.nsewdrag')[0];"
                                       " return r && r.top > 0 && r.bottom <= 1000; }", arg=DEEP, timeout=60000)
            finally:
                plot = page.evaluate(DEEP, "rect.nsewdrag")[0]
            assert 0 < plot["top"] and plot["bottom"] <= 1000, plot
            page.wait_for_function("(d) => { const h = eval(d)('table').filter(t => t.text.includes('context_tokens')"
                                   " && t.text.includes('point')); return h.length && h[0].right <= 1440; }",
                                   arg=DEEP, timeout=60000)  # the headline (the first such table) fits 1440 px
            if llm_on:  # judged columns first; the rest behind the toggle, named
                page.wait_for_selector("text=/more column\\(s\\):/", timeout=60000)
                page.get_by_text("all columns").click()
                page.wait_for_function("(d) => eval(d)('table').some(t => t.text.includes('statement_coverage'))",
                                       arg=DEEP, timeout=60000)
            page.close()
        finally:
            proc.terminate()
            proc.wait(timeout=20)
