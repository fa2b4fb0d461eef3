"""The workbench on your own folder with your own LLM (issue 43): a folder dataset with plain questions (no ids, no
answers), the LLM answerer behind a real 127.0.0.1 server, the cost line before anything is sent (and exact: the
server counts the calls), the response cache shared with `ragwb run`, grading by keys, judged metrics in the
matrix; `marimo export html` of the workbench."""
import json
import re
import subprocess
import sys
from pathlib import Path

import duckdb
import pytest

from evals.cli import main
from openai_server import Handler, start

ROOT = Path(__file__).resolve().parents[1]
DOCS = {"install.md": "# Install\n\nInstall the beta package first, then run the setup wizard to finish.\n\n"
                      "## Upgrade\n\nUpgrades keep your settings; run the wizard again after each upgrade.\n",
        "billing.md": "# Billing\n\nInvoices are sent on the first day of every month by email to the account owner.\n",
        "support.md": "# Support\n\nSupport answers within two working days, and faster on paid plans.\n"}
QUESTIONS = [{"question": "When are invoices sent?", "evidence": [{"doc": "billing.md"}]},
             {"question": "What is installed first?", "answers": ["the beta package"]},
             {"question": "How fast does support answer?"},
             {"question": "What keeps your settings?"}]


QUESTION_IDS = [__import__("rag.ingest.questions", fromlist=["x"]).derived_question_id(q["question"]) for q in QUESTIONS]


def _folder(tmp_path):
    docs = tmp_path / "my_docs"
    docs.mkdir()
    for name, text in DOCS.items():
        (docs / name).write_text(text)
    q = tmp_path / "plain_questions.jsonl"
    q.write_text("".join(json.dumps(x) + "\n" for x in QUESTIONS))
    return docs, q


from evals.bench.browser import free_port as _port, wait_http as _wait_http  # noqa: E402 (one helper)


@pytest.fixture(scope="module")
def llm():
    srv, url = start()
    yield url
    srv.shutdown()


def test_workbench_library_on_a_folder_with_an_llm(tmp_path, llm):
    """The session code the page calls: the cost line counts exactly what is then sent; a CLI run's answers are
    cache hits for the notebook; systems and LLM points share one store when saved."""
    from evals.workbench import calls as interactive

    docs, q = _folder(tmp_path)
    ws = tmp_path / "ws"
    wb = interactive.workbench_args(["--dataset", str(docs), "--questions", str(q), "--embedder", "hash",
                                     "--workspace", str(ws), "--llm-base-url", llm, "--llm-model", "local-extractive"])
    assert wb.error == "" and wb.llm.model == "local-extractive"
    base = interactive.open_session(str(docs), str(ws), "hash", questions=str(q))
    sess = interactive.session_for_answerer({}, base, "LLM: local-extractive", wb.llm)
    pts = interactive.points_from_budgets(["chunks", "hybrid"], {"chunks__top_k": 3})
    plan = interactive.answer_plan(sess, pts, 10)
    before = Handler.calls
    scores = interactive.evaluate_points(sess, pts, 10)
    assert Handler.calls - before == plan.new_calls == 8 and plan.cached_calls == 0
    # LLM answers are scored on faithfulness and citations; f1 n/a where nobody wrote an answer
    ok = scores[scores.status == "ok"]
    for m in ("faithfulness", "citation_validity", "statement_coverage"):
        assert (ok.metric == m).sum() >= 1, m
    f1 = scores[scores.metric == "f1"]
    assert (f1.status == "not_applicable").sum() == 6 and (f1.status == "ok").sum() == 2
    # the drill-down marks each answer sentence with the blocks it cites and whether they support it
    q0 = next(x for x in base.dataset.questions if x.text == "What is installed first?")
    html = interactive.side_by_side_html(sess, q0.qid, "hybrid · defaults")
    assert "offline support scorer" in html and ("supported (" in html or "no valid citation" in html)
    # a fresh session (the next notebook, or `ragwb run`'s answers) finds every prompt in the response cache
    again = interactive.llm_session(base, wb.llm)
    p2 = interactive.answer_plan(again, pts, 10)
    assert (p2.new_calls, p2.cached_calls) == (0, 8) and "8 already in the response cache" in p2.line()
    # unknown names are messages naming the valid ones
    with pytest.raises(ValueError, match="unknown dataset 'nosuch'; valid: squad2, .*my_docs"):
        interactive.resolve_dataset("nosuch", str(ws))
    assert interactive.resolve_dataset("my_docs", str(ws)) == str(docs.resolve())
    bad = interactive.workbench_args(["--datset", "x"])
    assert "unknown argument(s) --datset x" in bad.error and "--dataset" in bad.error
    assert "must be" in interactive.workbench_args(["--limit", "zero"]).error


def test_workbench_in_chromium_on_a_folder_with_an_llm(browser, tmp_path, llm):
    """Done-when of issue 43: a folder dataset with the LLM answerer; the cost line before any call and the
    response cache shared with `ragwb run` (its answers are 0 new calls here); an Apply that needs calls waits
    for Send, then shows faithfulness and citation numbers with n; grading by keys with focus on the passage
    picker stores grades, the picker moves on, and the matrix shows judged metrics."""
    docs, q = _folder(tmp_path)
    ws = tmp_path / "ws"
    db = ws / "results.duckdb"
    flags = ["--embedder", "hash", "--workspace", str(ws), "--llm-base-url", llm, "--llm-model", "local-extractive"]
    # the CLI answers the defaults first: the notebook must not pay for them again
    assert main(["run", "--dataset", str(docs), "--questions", str(q), "--no-progress", "--no-report",
                 "--run-id", "CLI"] + flags) == 0
    port = _port()
    proc = subprocess.Popen([sys.executable, "-m", "marimo", "run", "--headless", "--no-token", "--port", str(port),
                             str(ROOT / "notebooks" / "workbench.py"), "--", "--dataset", str(docs), "--limit", "10",
                             "--db", str(db)] + flags, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    shots = tmp_path / "screenshots"
    shots.mkdir()
    try:
        _wait_http(f"http://127.0.0.1:{port}/")
        page = browser.new_page(viewport={"width": 1440, "height": 900})
        errors = []
        page.on("pageerror", lambda e: errors.append(str(e)))
        page.goto(f"http://127.0.0.1:{port}/")
        # the first Apply of the defaults: every prompt was answered by `ragwb run` -> 0 calls, nothing to confirm
        page.wait_for_selector("text=/0 answer call\\(s\\) to local-extractive .* already in the response cache/",
                               timeout=120000)
        page.wait_for_selector(".main-svg", timeout=120000)
        page.screenshot(path=str(shots / "own-1-cached.png"), full_page=True)
        # a changed budget: the cost line comes first, nothing is sent until Send
        calls = Handler.calls
        slider = page.locator("[role=slider]").nth(1)  # chunks top_k, the first slider of the budget form
        slider.focus()
        for _ in range(7):  # top_k 8 -> 1: one block where the corpus's four chunks were (a new prompt)
            page.keyboard.press("ArrowLeft")
        page.get_by_text("Apply budgets").click()
        line = page.locator("text=/[1-9]\\d* answer call\\(s\\) to local-extractive/").first
        line.wait_for(timeout=60000)
        announced = int(line.inner_text().split(" answer call")[0].split(";")[-1].strip().replace(",", ""))
        # the answering model judges too (no flag, no environment variable): its calls in the same line and Send
        judges = int(re.search(r"up to (\d+) judge call", line.inner_text()).group(1))
        page.wait_for_selector("text=Nothing sent yet", timeout=30000)
        assert Handler.calls == calls  # the cost line sent nothing
        page.get_by_role("button", name=f"Send up to {announced + judges} call(s)").click()
        page.wait_for_selector("th:has-text('chunks · top_k=1')", timeout=120000)
        # the answers exactly, and at most the judge calls counted (an abstention is not judged)
        assert announced <= Handler.calls - calls <= announced + judges
        # faithfulness and citation numbers with n (the headline table of the LLM answers): the judged columns
        # first, the citation columns behind *all columns* (the headline fits 1440 px: issue 72)
        page.get_by_text("all columns").click()
        table = page.locator("table", has=page.locator("th:has-text('statement_coverage')")).first
        table.wait_for(timeout=60000)
        heads = " ".join(table.locator("thead th").all_inner_texts())
        for col in ("faithfulness", "citation_validity", "statement_coverage", "n"):
            assert col in heads, heads
        page.wait_for_selector("text=/not shown \\(n\\/a on every row\\)|f1/", timeout=30000)
        table.scroll_into_view_if_needed()
        page.screenshot(path=str(shots / "own-2-llm.png"))
        # grading with focus on the passage picker: keys 0-3 grade, the picker moves to the next passage
        # (point A: hybrid, which shows every passage of this small corpus)
        page.locator("select").filter(has=page.locator("option", has_text="hybrid · defaults")).first.select_option(
            label="hybrid · defaults")
        page.wait_for_selector("text=showing: hybrid · defaults", timeout=60000)
        page.get_by_placeholder("ana (stored as human:ana)").fill("tess")
        page.keyboard.press("Tab")
        picker = page.locator("select").filter(has=page.locator("option", has_text="[1]")).first
        picker.wait_for(timeout=60000)
        picker.focus()
        page.keyboard.press("3")
        page.wait_for_selector("text=/stored: tess graded passage \\[1\\] 3/", timeout=30000)
        # (marimo's elements live in shadow roots: the check walks into them)
        page.wait_for_function("""() => { const all = (r) => [...r.querySelectorAll('*')].flatMap(
                                   e => e.shadowRoot ? [e, ...all(e.shadowRoot)] : [e]);
                               return all(document).some(s => s instanceof HTMLSelectElement && s.selectedOptions.length
                                   && s.selectedOptions[0].textContent.trim().startsWith('[2]')); }""", timeout=30000)
        picker = page.locator("select").filter(has=page.locator("option", has_text="[2]")).first
        picker.focus()
        page.keyboard.press("0")
        page.wait_for_selector("text=/stored: tess graded passage \\[2\\] 0/", timeout=30000)
        con = duckdb.connect(str(db), read_only=True)
        graded = sorted(con.execute("SELECT judge, grade FROM judgments").fetchall())
        con.close()
        assert graded == [("human:tess", 0), ("human:tess", 3)], graded
        # the matrix shows judged metrics from those grades (was nan)
        metric = page.locator("select").filter(has=page.locator("option", has_text="judged_ndcg@10")).first
        metric.select_option("judged_ndcg@10")
        # the drilled-down question's hybrid cell: a judged nDCG (passage [1] graded 3), where it was nan
        matrix = page.locator("table", has=page.locator("th:has-text('spread')")).first
        col = matrix.locator("th:has-text('hybrid · defaults')").first
        col.wait_for(timeout=30000)
        idx = col.evaluate("t => [...t.parentElement.children].indexOf(t)")
        qid = QUESTION_IDS[0]
        row = matrix.locator("tbody tr", has=page.locator(f"text={qid}")).first
        page.wait_for_function("([r, i]) => r.children[i] && /^[01]\\.\\d{3}$/.test(r.children[i].textContent.trim())",
                               arg=[row.element_handle(), idx], timeout=30000)
        page.screenshot(path=str(shots / "own-3-graded.png"), full_page=True)
        assert errors == [], errors
        page.close()
    finally:
        proc.terminate()
        proc.wait(timeout=20)


def test_marimo_export_of_the_workbench_on_a_folder_with_an_llm(tmp_path, llm):
    """`marimo export html notebooks/workbench.py -- --dataset FOLDER --llm-base-url URL --llm-model M` runs every
    cell (--send answers without the button nobody can press in an export)."""
    docs, q = _folder(tmp_path)
    out = tmp_path / "wb.html"
    p = subprocess.run([sys.executable, "-m", "marimo", "export", "html", str(ROOT / "notebooks" / "workbench.py"),
                        "-o", str(out), "--", "--dataset", str(docs), "--questions", str(q), "--embedder", "hash",
                        "--workspace", str(tmp_path / "ws"), "--llm-base-url", llm, "--llm-model", "local-extractive",
                        "--limit", "10", "--send"], capture_output=True, text=True, timeout=600)
    assert p.returncode == 0, p.stderr[-3000:]
    html = out.read_text()
    assert "faithfulness" in html and "LLM: local-extractive" in html


def test_a_deployed_service_is_a_point_beside_the_shapes_in_the_workbench(tmp_path):
    """Issue 43, item 4: `--system NAME=URL` (docs/your-system.md) is evaluated, scored the same way, and
    shown in the matrix, the drill-down and a saved run beside the shapes."""
    from rag_service import start as start_service

    from evals.workbench import calls as interactive
    from evals.analyze import explore

    srv, url = start_service()
    try:
        wb = interactive.workbench_args(["--dataset", "squad2", "--embedder", "hash", "--workspace",
                                         str(tmp_path / "ws"), "--system", f"v1={url}/v1"])
        assert wb.error == "" and [x.name for x in wb.systems] == ["v1"]
        sess = interactive.open_session("squad2", str(tmp_path / "ws"), "hash", systems=wb.systems)
        pts = interactive.points_from_budgets(["chunks", "v1"], {}, systems=["v1"])
        assert pts == [("chunks", {}), ("v1", {})]
        plan = interactive.answer_plan(sess, pts, 6)
        assert plan.service_requests == 6 and "6 request(s) to deployed services" in plan.line()
        scores = interactive.evaluate_points(sess, pts, 6)
        v1 = scores[scores.strategy == "v1"]
        assert set(v1.question_id) == {q.qid for q in sess.dataset.questions[:6]}
        assert (v1[v1.metric == "f1"].status == "ok").all() and (v1.metric == "faithfulness").any()
        assert "v1 · defaults" in explore.points_of(scores)
        html = interactive.side_by_side_html(sess, sess.dataset.questions[0].qid, "v1 · defaults", "chunks · defaults")
        assert "showing: v1 · defaults" in html
        assert "a deployed service" in interactive.applied_budgets_table(pts).iloc[1, 2]
        rid = interactive.save_as_run(sess, str(tmp_path / "ws" / "results.duckdb"), pts, 6)
        con = duckdb.connect(str(tmp_path / "ws" / "results.duckdb"), read_only=True)
        got = dict(con.execute("SELECT strategy, count(*) FROM results WHERE run_id = ? GROUP BY 1", [rid]).fetchall())
        cfg = json.loads(con.execute("SELECT config FROM runs WHERE run_id = ?", [rid]).fetchone()[0])
        con.close()
        assert got == {"chunks": 6, "v1": 6}
        assert "v1" not in cfg["grid"] and "v1" in json.dumps(cfg.get("systems"))
    finally:
        srv.shutdown()
