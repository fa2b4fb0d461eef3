"""Issue 52: the data teams bring, through every surface. `tests/data/as_written/` (a copy of the shared set) holds a
handbook folder and question files in the shapes of a first day: none at all, plain (only `question`), mixed, evidence
only, messy (BOM, CRLF, a blank line, a duplicate). Each shape goes through `ragwb ingest`, `run` with the offline
answerer and with an LLM behind a real 127.0.0.1 server, `show`, `report` (and `--compare`), `export` (CSV and
parquet), `gate`, `compare` and `judge --export`; the workbench as a script and under `marimo export`; Chromium for
plain.jsonl and the folder without questions. A shape that fails a surface fails here."""
import csv
import re
import json
import shutil
import subprocess
import sys
from pathlib import Path

import duckdb
import pytest

from evals.cli import main
from openai_server import start

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT / "tests" / "data" / "as_written"
SHAPES = ["none", "plain", "mixed", "evidence_only", "messy"]
QUESTIONS = {"plain": 8, "mixed": 7, "evidence_only": 4, "messy": 2}  # usable questions each file gives


@pytest.fixture(scope="module")
def llm():
    srv, url = start()
    yield url
    srv.shutdown()


def _folder(tmp_path: Path) -> Path:
    docs = tmp_path / "handbook"
    shutil.copytree(DATA / "handbook", docs)
    return docs


def _qflag(shape: str) -> list[str]:
    return [] if shape == "none" else ["--questions", str(DATA / f"{shape}.jsonl")]


def _scores(db: Path, run_id: str) -> list[tuple]:
    con = duckdb.connect(str(db), read_only=True)
    rows = con.execute("SELECT question_id, metric, value, status, detail FROM scores WHERE run_id = ?",
                       [run_id]).fetchall()
    con.close()
    return rows


@pytest.mark.parametrize("shape", SHAPES)
def test_every_shape_through_every_cli_surface(shape, tmp_path, llm, capsys):
    docs, ws = _folder(tmp_path), tmp_path / "ws"
    common = ["--workspace", str(ws), "--embedder", "hash"]
    assert main(["ingest", str(docs), *_qflag(shape), "--no-progress", *common]) == 0
    out = capsys.readouterr().out
    if shape == "messy":  # the BOM, CRLF and blank line read silently; the duplicate named with both line numbers
        assert ":4: the same question text as line 2" in out and "BOM" not in out and ":3:" not in out
        assert main(["ingest", str(docs), *_qflag(shape), "--no-progress", "--strict", *common]) == 3
        capsys.readouterr()
    # the corpus is searchable whatever the questions
    assert main(["search", "How many days of annual leave?", "--dataset", str(docs), "--strategy", "hybrid",
                 "--no-progress", *common]) == 0
    assert "leave.md" in capsys.readouterr().out
    run = ["run", "--dataset", str(docs), *_qflag(shape), "--no-progress", *common]
    if shape == "none":  # nothing to score: one line saying how to get questions, exit 2, nothing stored
        assert main(run + ["--run-id", "OFF"]) == 2
        err = capsys.readouterr().err
        assert "has no questions to score" in err and "Traceback" not in err
        return
    llm_flags = ["--llm-base-url", llm, "--llm-model", "local-extractive"]
    assert main(run + ["--run-id", "OFF"]) == 0
    assert main(run + ["--run-id", "LLM"] + llm_flags) == 0
    out = capsys.readouterr()
    assert "failed" not in out.out + out.err  # the reports were written
    assert (ws / "reports" / "report-LLM.html").is_file() and (ws / "reports" / "report-OFF.html").is_file()
    # an unknown price is said as unknown, never $0
    assert "price unknown" in out.out and "$0.0000 saved" not in out.out
    db = ws / "results.duckdb"
    rows = _scores(db, "LLM")
    by = {}
    for qid, m, v, st, d in rows:
        by.setdefault(m, []).append((qid, v, st, d))
    n_questions = len({r[0] for r in rows})
    assert n_questions == QUESTIONS[shape]
    cost = by["cost_usd"]
    assert all(st == "not_applicable" and "price unknown" in d for _, _, st, d in cost)
    # each line measured on what it has: a question without answers is unknown, never unanswerable
    f1_ok = {q for q, _, st, _ in by["f1"] if st == "ok"}
    f1_unknown = {q for q, _, st, d in by["f1"] if st == "not_applicable" and "answerability unknown" in d}
    # mixed: three lines with answers and one declared unanswerable (scored as SQuAD 2.0 scores it), three unknown
    expect_scored = {"plain": 0, "mixed": 4, "evidence_only": 0, "messy": 0}[shape]
    assert len(f1_ok) == expect_scored and len(f1_unknown) == n_questions - expect_scored
    # the LLM's answers are scored on faithfulness and citations on every shape; an abstention is n/a with why
    assert len(by["faithfulness"]) == len(by["f1"]) and len(by["citation_validity"]) == len(by["f1"])
    assert all(st == "ok" or "abstained" in d for _, _, st, d in by["faithfulness"])
    if shape != "messy":  # (messy's two questions find nothing in this hash-embedded index: both abstain)
        assert any(st == "ok" for _, _, st, _ in by["faithfulness"])
    if shape in ("mixed", "evidence_only"):
        assert any(st == "ok" for _, _, st, _ in by["evidence_recall"])
    # every read surface
    for argv, ok in ((["show", "LLM"], (0,)), (["show", "OFF"], (0,)), (["report", "LLM"], (0,)),
                     (["report", "LLM", "--compare", "OFF"], (0,)), (["export", "LLM", "--format", "csv"], (0,)),
                     (["export", "LLM"], (0,)), (["gate", "--baseline", "OFF", "--candidate", "LLM"], (0, 1)),
                     (["compare", "LLM", "--points", "chunks", "hybrid"], (0,)),
                     (["judge", "LLM", "--export", str(tmp_path / "pool.csv")], (0,))):
        assert main(argv + ["--workspace", str(ws)]) in ok, argv
    out = capsys.readouterr()
    assert "Traceback" not in out.err and not re.search(r"\b(nan|NaN)\b", out.out)  # n/a cells say n/a
    if shape == "mixed":  # every aggregate says on how many questions it stands
        assert "questions scored per metric" in out.out
    report = (ws / "reports" / "report-LLM.html").read_text()
    if shape in ("plain", "evidence_only", "messy"):  # nobody declared a question unanswerable
        assert "(unanswerable)" not in report
    assert "gold evidence on <code></code>" not in report and "<script src=\"http" not in report
    with open(tmp_path / "pool.csv", newline="", encoding="utf-8") as f:
        pool = list(csv.DictReader(f))
    assert pool and {r["question_id"] for r in pool} <= {r[0] for r in rows}
    exported = list((ws / "export").glob("*scores*.csv"))
    assert exported


@pytest.mark.parametrize("shape", SHAPES)
def test_every_shape_through_the_workbench_as_a_script(shape, tmp_path):
    """`python notebooks/workbench.py -- --dataset FOLDER --questions FILE` runs every cell; the folder without
    questions ends with one line and exit code 2 (as an unknown dataset or a bad flag)."""
    docs = _folder(tmp_path)
    p = subprocess.run([sys.executable, str(ROOT / "notebooks" / "workbench.py"), "--dataset", str(docs),
                        *_qflag(shape), "--workspace", str(tmp_path / "ws"), "--embedder", "hash"],
                       capture_output=True, text=True, timeout=300)
    if shape == "none":
        assert p.returncode == 2, p.stderr[-2000:]
        lines = [x for x in p.stderr.splitlines() if x.strip()]
        assert len(lines) == 1 and "has no questions yet" in lines[0] and "ragwb generate" in lines[0]
    else:
        assert p.returncode == 0, p.stderr[-3000:]
        assert "Traceback" not in p.stderr


def test_the_workbench_script_refuses_a_bad_flag_and_an_unknown_dataset_with_one_line(tmp_path):
    for argv, said in ((["--datset", str(tmp_path)], "unknown argument(s) --datset"),
                       (["--dataset", "nosuch"], "unknown dataset 'nosuch'")):
        p = subprocess.run([sys.executable, str(ROOT / "notebooks" / "workbench.py"), *argv, "--workspace",
                            str(tmp_path / "ws"), "--embedder", "hash"], capture_output=True, text=True, timeout=300)
        lines = [x for x in p.stderr.splitlines() if x.strip()]
        assert p.returncode == 2 and len(lines) == 1 and said in lines[0], p.stderr[-2000:]


@pytest.mark.parametrize("shape", ["plain", "none"])
def test_marimo_export_of_the_workbench_on_plain_questions_and_on_none(shape, tmp_path, llm):
    """Under `marimo export html` plain questions with an LLM export every cell (faithfulness is the chart's
    metric: f1 has no value without answers, and the page says so); the folder without questions fails the
    export with its one line first (marimo's exporter sets the exit code: 1)."""
    docs, out = _folder(tmp_path), tmp_path / "wb.html"
    p = subprocess.run([sys.executable, "-m", "marimo", "export", "html", str(ROOT / "notebooks" / "workbench.py"),
                        "-o", str(out), "--", "--dataset", str(docs), *_qflag(shape), "--embedder", "hash",
                        "--workspace", str(tmp_path / "ws"), "--llm-base-url", llm, "--llm-model", "local-extractive",
                        "--send"], capture_output=True, text=True, timeout=600)
    if shape == "none":
        assert p.returncode != 0
        first = next(x for x in p.stderr.splitlines() if x.strip())
        assert first.startswith("workbench: handbook has no questions yet"), p.stderr[-2000:]
        return
    assert p.returncode == 0, p.stderr[-3000:]
    html = out.read_text()
    # the chart's metric is one with values, and the page says why it moved (the export escapes '<' as \u003C)
    shown = html.replace("\\u003C", "<").replace("\\u003E", ">")
    # the judge (the answering model, by default) heads the chart: llm_faithfulness, never the offline scorer
    assert "Showing <strong>llm_faithfulness</strong>: f1 has no value on these questions" in shown
    assert "f1 (n/a here)" in html and "price unknown" in html


def embedded_count(ws: Path) -> int:
    """Texts in a workspace's embedding cache (what was embedded so far)."""
    import sqlite3

    con = sqlite3.connect(ws / "cache" / "embeddings.sqlite")
    n = con.execute("SELECT count(*) FROM emb").fetchone()[0]
    con.close()
    return n


def open_page(browser, url: str):
    """A 1440 px page on ``url`` and the list its script errors land in."""
    page = browser.new_page(viewport={"width": 1440, "height": 1000})
    errors: list[str] = []
    page.on("pageerror", lambda e: errors.append(str(e)))
    page.goto(url)
    return page, errors


def _serve(argv: list[str]):
    from test_workbench_own import _port, _wait_http

    port = _port()
    proc = subprocess.Popen([sys.executable, "-m", "marimo", "run", "--headless", "--no-token", "--port", str(port),
                             str(ROOT / "notebooks" / "workbench.py"), "--", *argv],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    _wait_http(f"http://127.0.0.1:{port}/")
    return proc, f"http://127.0.0.1:{port}/"


def test_plain_questions_in_chromium_chart_apply_sweep_save_drilldown_report(browser, tmp_path, llm):
    """plain.jsonl with an LLM answerer, as a team opens it on day one: the cost line before any call (price
    unknown, never $0), the first chart on a metric that has values (and why), Apply and a Sweep each waiting for
    their Send and sending exactly what they said, the line counted again after, Save as run said and listed at once,
    the drill-down saying the answerability is unknown, the saved report opened from disk with no network."""
    from openai_server import Handler

    docs, ws = _folder(tmp_path), tmp_path / "ws"
    proc, url = _serve(["--dataset", str(docs), "--questions", str(DATA / "plain.jsonl"), "--embedder", "hash",
                        "--workspace", str(ws), "--llm-base-url", llm, "--llm-model", "local-extractive"])
    try:
        page = browser.new_page(viewport={"width": 1440, "height": 1000})
        errors = []
        page.on("pageerror", lambda e: errors.append(str(e)))
        calls = Handler.calls
        page.goto(url)
        line = page.locator("text=/[1-9]\\d* answer call\\(s\\) to local-extractive/").first
        line.wait_for(timeout=120000)
        assert "price unknown" in line.inner_text() and "$0.0000" not in line.inner_text()
        page.wait_for_selector("text=questions (of 8)", timeout=30000)  # the slider runs over the file's questions
        assert Handler.calls == calls  # the cost line sent nothing
        # the judge is the answering model by default: its calls are in the same line and the same Send (a bound:
        # an abstention is not judged), with no environment variable set
        answers = int(re.search(r"(\d+) answer call", line.inner_text()).group(1))
        judges = int(re.search(r"up to (\d+) judge call\(s\) to local-extractive", line.inner_text()).group(1))
        assert judges > 0
        page.get_by_role("button", name=f"Send up to {answers + judges} call(s)", exact=True).click()
        page.wait_for_selector(".main-svg", timeout=120000)
        page.wait_for_selector("text=f1 has no value on these questions", timeout=60000)
        page.wait_for_selector("text=nothing new to answer", timeout=60000)  # the line counted again after Send
        assert answers < Handler.calls - calls <= answers + judges
        # judged quality first, the judge's agreement line, and why points lose (the sufficiency bar)
        page.wait_for_selector("text=Showing llm_faithfulness", timeout=60000)
        page.wait_for_selector("text=/judge: llm_faithfulness judged by local-extractive: agreement not measured/",
                               timeout=60000)
        page.wait_for_selector("text=Why points lose: context sufficiency x answer outcome", timeout=60000)
        # the bar is drawn when scrolled to (an Apply does not wait for it), as a person scrolls to it
        page.get_by_role("heading", name="Why points lose: context sufficiency x answer outcome").scroll_into_view_if_needed()
        page.wait_for_selector("text=Context sufficiency x answer outcome (share of items placed)", timeout=60000)
        # issue 64, item 2: the page's tables download through the project's CSV writer (formula cells escaped)
        dl_button = page.get_by_text("Download rows as CSV")
        dl_button.wait_for(timeout=60000)
        with page.expect_download(timeout=60000) as dl:
            dl_button.click()
        got = Path(dl.value.path()).read_text(encoding="utf-8")
        assert got.startswith("strategy,") or "question_id" in got.splitlines()[0]
        assert all(not line.startswith(("=", "+", "@")) for line in got.replace("\r", "\n").split("\n"))
        assert page.locator("button:has-text('Export')").count() == 0  # marimo's own export is off
        page.wait_for_selector("text=answerability unknown (no reference answer)", timeout=60000)  # the drill-down
        # Apply a changed budget: a new cost line and Send, exactly what it said
        slider = page.locator("[role=slider]").nth(1)  # chunks top_k (the questions slider is the first)
        slider.focus()
        for _ in range(7):
            page.keyboard.press("ArrowLeft")
        page.get_by_text("Apply budgets").click()
        page.wait_for_selector("text=Nothing sent yet", timeout=60000)
        send = page.get_by_role("button", name=re.compile(r"^Send (up to )?[1-9]\d* call\(s\)$"))
        send.wait_for(timeout=60000)
        n = int(re.search(r"Send (?:up to )?(\d+)", send.inner_text()).group(1))
        calls = Handler.calls
        send.click()
        page.wait_for_selector("text=/chunks · top_k=1/", timeout=120000)
        page.wait_for_selector("text=nothing new to answer", timeout=60000)
        assert 0 < Handler.calls - calls <= n
        # a Sweep says what it sends first and waits; its button sends exactly that
        sweep_line = page.locator("text=/Sweep \\/ race, LLM: local-extractive/").first
        sweep_line.wait_for(timeout=60000)
        sweep = page.get_by_role("button", name=re.compile(r"^Sweep \((up to )?\d+ new call\(s\)\)$"))
        sweep.wait_for(timeout=60000)
        n = int(re.search(r"\((?:up to )?(\d+) new", sweep.inner_text()).group(1))
        said = sweep_line.locator("xpath=..").inner_text()  # the line names the answer and the judge calls
        assert n == int(re.search(r"(\d+) answer call", said).group(1)) + int(
            re.search(r"(\d+) judge call", said).group(1))
        calls = Handler.calls
        sweep.click()
        page.wait_for_selector("text=/sweeping top_k = 2,4,8,16/", timeout=120000)
        page.get_by_role("button", name="Sweep", exact=True).wait_for(timeout=60000)  # counted again: nothing new
        assert 0 < Handler.calls - calls <= n
        # how far to trust the judge: measured behind its own cost line and Send, then printed with its figure
        measure = page.get_by_role("button", name=re.compile(r"^Send [1-9]\d* judge call\(s\)$"))
        measure.wait_for(timeout=60000)
        m = int(re.search(r"Send (\d+)", measure.inner_text()).group(1))
        calls = Handler.calls
        measure.click()
        page.wait_for_selector("text=/Stored: llm_faithfulness judged by local-extractive: balanced accuracy/",
                               timeout=120000)
        assert Handler.calls - calls == m  # exactly what it said (the claims' prompts are known before sending)
        # Save as run: said, and in every stored-run list at once
        page.get_by_placeholder("wb-...").fill("SAVED")
        page.keyboard.press("Tab")
        page.get_by_role("button", name="Save as run").click()
        page.wait_for_selector("text=Saved run SAVED", timeout=120000)
        page.locator("select").filter(has=page.locator("option", has_text="SAVED")).first.wait_for(timeout=60000)
        assert errors == [], errors
        page.close()
    finally:
        proc.terminate()
        proc.wait(timeout=30)
    # the saved run's report, opened from disk: its charts draw and nothing is fetched from outside
    report = ws / "reports" / "report-SAVED.html"
    page = browser.new_page()
    outside = []
    page.on("request", lambda r: None if r.url.startswith(("file://", "data:", "blob:")) else outside.append(r.url))
    page.goto(report.as_uri())
    page.wait_for_selector(".main-svg", timeout=60000)
    text = page.inner_text("body")
    assert "answerability unknown (no reference answer)" in text and "(unanswerable)" not in text
    assert outside == [], outside
    page.close()


def test_a_folder_without_questions_in_chromium_is_searchable_and_says_how_to_get_questions(browser, tmp_path):
    docs = _folder(tmp_path)
    proc, url = _serve(["--dataset", str(docs), "--embedder", "hash", "--workspace", str(tmp_path / "ws")])
    try:
        page, errors = open_page(browser, url)
        page.wait_for_selector("text=has no questions yet", timeout=120000)
        page.wait_for_selector("text=ragwb generate", timeout=30000)
        page.get_by_placeholder("a question", exact=True).fill("annual leave days")
        page.get_by_role("button", name="Search").click()
        # the matched text, not only a heading line
        page.wait_for_selector("text=/26 days/", timeout=60000)
        assert page.locator("text=Traceback").count() == 0 and errors == [], errors
        page.close()
    finally:
        proc.terminate()
        proc.wait(timeout=30)


def _logged_file(path: Path, bad_line: bool = False, extra: tuple = ()) -> Path:
    """What a team's system logged for three of plain.jsonl's questions and one the gold set does not hold
    (``extra``: more records after them)."""
    rows = [{"question": "How many days of annual leave do full-time staff get?", "answer": "26 days",
             "contexts": ["Full-time staff receive 26 days of annual leave per calendar year."]},
            {"question": "How long is the probation period?", "answer": "I don't know", "contexts": []},
            {"question": "What is the meal allowance when travelling abroad?", "answer": "60 euros",
             "contexts": ["The daily meal allowance while travelling is 45 euros in the home country and 60 euros "
                          "abroad."]},
            {"question": "Where is the canteen?", "answer": "Floor 2", "contexts": ["Nothing about it."]}]
    lines = [json.dumps(r) for r in rows + list(extra)]
    if bad_line:
        lines.insert(2, '{"question": "cut off", "answer": ')
    path.write_text("\n".join(lines) + "\n")
    return path


@pytest.mark.parametrize("shape", ["plain", "none", "messy"])
def test_the_page_scores_a_logged_file_as_the_cli_does(shape, tmp_path):
    """The workbench page's `ragwb score FILE` (interactive.score_logged_file): joined to the page's own loaded
    questions (plain.jsonl: no ids, no answers; messy.jsonl: a BOM, CRLF, a blank line, a question twice) or with
    none at all, stored as a run under the page's dataset, its report written; a malformed line is named and
    stores nothing."""
    from evals.workbench import calls as interactive
    from evals.store import ResultStore

    docs, ws = _folder(tmp_path), tmp_path / "ws"
    sess = interactive.open_session(str(docs), str(ws), "hash",
                                    questions=None if shape == "none" else str(DATA / f"{shape}.jsonl"))
    db = str(ws / "results.duckdb")
    with pytest.raises(ValueError, match=r"bad\.jsonl:3: not valid JSON"):
        interactive.score_logged_file(sess, str(ws), db, str(_logged_file(tmp_path / "bad.jsonl", True)))
    assert interactive.list_runs(db).empty  # nothing stored
    with pytest.raises(ValueError, match="no such file"):
        interactive.score_logged_file(sess, str(ws), db, str(tmp_path / "missing.jsonl"))
    calls = []
    partners = {"question": "How long do partners get for parental leave?", "answer": "two weeks", "contexts": []}
    logged = _logged_file(tmp_path / "l.jsonl", extra=(partners,))  # a question messy.jsonl holds
    rid, line, report, why = interactive.score_logged_file(sess, str(ws), db, str(logged),
                                                           name="prod", metrics="answer,citation,cost",
                                                           on_progress=lambda n, total: calls.append((n, total)),
                                                           batch=3)
    assert why == "" and report is not None and report.exists()
    assert calls == [(3, 5), (2, 5)]  # the page's bar: after each stored batch, of the file's total
    matched = {"plain": 3, "none": 0, "messy": 1}[shape]
    # "Nothing about it." is in no document of the folder: said on the line (page and CLI), never dropped quietly
    assert f"scored 5 records of l.jsonl (workbench columns) as prod in run {rid}; {matched} matched the gold set, " \
           f"{5 - matched} did not; 1 of 3 context(s) found in no document of {docs}" == line
    runs = interactive.list_runs(db)
    assert list(runs["run_id"]) == [rid] and list(runs["dataset"]) == [sess.dataset.name]  # the page's run lists
    with ResultStore(db, read_only=True) as st:
        rows = st.con.execute("select strategy, count(*) from results where run_id = ? group by 1", [rid]).fetchall()
        statuses = dict(st.con.execute("select status, count(*) from scores where run_id = ? group by 1",
                                       [rid]).fetchall())
    assert rows == [("prod", 5)] and statuses.get("ok", 0) > 0


def test_plain_questions_in_chromium_score_a_logged_file(browser, tmp_path):
    """The page's Score a logged file, as a team uses it on day one: a cut-off line is named and stores nothing;
    the good file is scored, said, and joins the stored-run lists at once."""
    docs, ws = _folder(tmp_path), tmp_path / "ws"
    bad, good = _logged_file(tmp_path / "bad.jsonl", True), _logged_file(tmp_path / "prod.jsonl")
    proc, url = _serve(["--dataset", str(docs), "--questions", str(DATA / "plain.jsonl"), "--embedder", "hash",
                        "--workspace", str(ws)])
    try:
        page, errors = open_page(browser, url)
        page.wait_for_selector("text=questions (of 8)", timeout=120000)
        path_box = page.get_by_placeholder("prod_log.jsonl")
        path_box.fill(str(bad))
        page.get_by_placeholder("logged", exact=True).fill("prod")
        page.get_by_role("button", name="Score the file").click()
        page.wait_for_selector("text=/Not scored:.*bad\\.jsonl:3: not valid JSON/", timeout=120000)
        path_box.fill(str(good))
        page.get_by_role("button", name="Score the file").click()
        said = page.locator("text=/scored 4 records of prod\\.jsonl .* as prod in run /").first
        said.wait_for(timeout=120000)
        assert "3 matched the gold set, 1 did not" in said.inner_text()
        rid = re.search(r"in run (\S+?);", said.inner_text()).group(1)
        page.locator("select").filter(has=page.locator("option", has_text=rid)).first.wait_for(timeout=60000)
        assert page.locator("text=Traceback").count() == 0 and errors == [], errors
        page.close()
    finally:
        proc.terminate()
        proc.wait(timeout=30)
    assert (ws / "reports" / f"report-{rid}.html").exists()


def test_a_folder_without_questions_in_chromium_generates_them_after_the_cost_line(browser, tmp_path, llm):
    """A folder with no questions, as teams bring it, and an LLM: Save as run, Sweep and Race say what they need
    (no dead buttons), no code-index control on a folder with no source file; the page's Generate counts its calls
    first and sends nothing (price unknown, never $0), the corpus's shortfall said (3 passages of 40 words or more);
    Send asks exactly that many, writes the file and remembers it for the folder, and the page evaluates them with
    no reload (issue 63, items 4-6). A Race's result then stays on screen (its curve and leaderboard), and the best
    point's TOML is a block apart from its prose, with a Copy button, that `ragwb run --config` takes as pasted
    (items 1-2)."""
    from openai_server import Handler

    docs, ws = _folder(tmp_path), tmp_path / "ws"
    proc, url = _serve(["--dataset", str(docs), "--embedder", "hash", "--workspace", str(ws),
                        "--llm-base-url", llm, "--llm-model", "local-extractive", "--send"])
    try:
        page, errors = open_page(browser, url)
        page.context.grant_permissions(["clipboard-read", "clipboard-write"], origin=url.rstrip("/"))
        page.wait_for_selector("text=has no questions yet", timeout=120000)
        page.wait_for_selector("text=Sweep and Race need questions: handbook has none yet", timeout=60000)
        page.wait_for_selector("text=/Save as run, Sweep and Race need questions/", timeout=60000)
        assert page.get_by_role("button", name="Save as run").count() == 0
        assert page.get_by_role("button", name=re.compile("^Race these budgets")).count() == 0
        assert page.locator("text=code indexes").count() == 0  # Markdown, HTML and text: no source file
        page.get_by_placeholder("model name").fill("questioner")
        calls = Handler.calls
        page.get_by_role("button", name="Count the cost").click()
        line = page.locator("text=/Generate: 3 passage\\(s\\) to ask about/").first
        line.wait_for(timeout=120000)
        text = line.inner_text()
        assert "asked for 50: the corpus has passages for 3" in text and "3 call(s) to questioner" in text
        assert "price unknown" in text and "$0" not in text and Handler.calls == calls
        n0 = len(Handler.bodies)
        page.get_by_role("button", name="Send 3 call(s)", exact=True).click()
        page.wait_for_selector("text=/Generated: wrote .*questions\\.jsonl/", timeout=120000)
        asked = [json.loads(b).get("model") for b in Handler.bodies[n0:]]
        assert asked.count("questioner") == 3, asked
        rows = [json.loads(x) for x in (ws / "generated" / "handbook.questions.jsonl").read_text().splitlines()]
        assert rows and all(r["evidence"] for r in rows)
        # no reload: the page loads what it wrote and evaluates it (--send: the Apply's calls go without a click)
        page.wait_for_selector(f"text=questions (of {len(rows)})", timeout=120000)
        page.wait_for_selector("text=/Generated: wrote .*questions\\.jsonl/", timeout=60000)  # still said
        page.wait_for_selector("text=/Few questions: every interval here rests on at most [1-3] question/",
                               timeout=120000)  # evaluated: the reloaded page has settled
        # counted again: every call is in the response cache now, and the file would be replaced (the reloaded page
        # may still be re-drawing the form below the chart: asked again until the line comes)
        again = page.locator("text=/Generate: .*0 call\\(s\\) to questioner/").first
        for attempt in range(6):
            page.get_by_placeholder("model name").fill("questioner")
            page.get_by_role("button", name="Count the cost").click()
            try:
                again.wait_for(timeout=20000)
                break
            except Exception:
                if attempt == 5:
                    raise
        assert "3 already in the response cache" in again.inner_text() and "replacing its" in again.inner_text()
        page.get_by_role("button", name="Write them from the response cache (0 new calls)").wait_for(timeout=60000)
        assert page.locator("text=Traceback").count() == 0 and errors == [], errors
        page.wait_for_selector("text=/Few questions: every interval here rests on at most [1-3] question/",
                               timeout=120000)
        # a Race: its result stays after the store and the cost lines are counted again
        page.get_by_role("button", name=re.compile("^Race these budgets")).click()
        page.wait_for_selector("text=/Raced and stored as/", timeout=120000)
        rid = re.search(r"Raced and stored as (\S+)", page.locator("text=/Raced and stored as/").first.inner_text()
                        ).group(1)
        page.locator("select").filter(has=page.locator("option", has_text=rid)).first.wait_for(timeout=60000)
        page.wait_for_timeout(1500)  # every cell the store's bump re-runs has run: the result is still there
        page.wait_for_selector("text=/Raced and stored as/", timeout=30000)
        page.wait_for_selector(f"text=/race {rid}: /", timeout=30000)  # its curve
        # the best point: prose apart, a TOML block that pastes whole, a Copy button
        page.get_by_role("button", name="Best config of the stored sweep (TOML to paste)").click()
        block_el = page.locator(".codehilite-wrapper", has=page.locator("text=/# ragwb best: /")).first
        block_el.wait_for(timeout=60000)
        block = block_el.locator("pre").first.inner_text()
        assert block.startswith("# ragwb best: ") and "best on " not in block, block
        # the prose is apart (above the block), and the block's Copy button is visible without a hover
        page.wait_for_selector("text=/^best on f1: /", timeout=30000)
        # how far to trust it (issue 81): what to expect on new questions, and how sure the pick is
        page.wait_for_selector("text=/expected on new questions: f1 [0-9.]+ \\[/", timeout=30000)
        page.wait_for_selector("text=/P\\(best\\): /", timeout=30000)
        copy = block_el.get_by_role("button", name="Copy to clipboard")
        assert copy.is_visible() and copy.evaluate("b => getComputedStyle(b.parentElement).opacity") == "1"
        box = block_el.bounding_box()
        assert box["x"] + box["width"] <= 1440  # wrapped: nothing past the right edge
        page.bring_to_front()  # the clipboard is written by a focused page only
        copy.click()
        pasted = page.evaluate("navigator.clipboard.readText()")
        assert pasted.strip() == block.strip(), pasted
        toml_file = tmp_path / "pasted.toml"
        toml_file.write_text(pasted)
        assert page.locator("text=Traceback").count() == 0 and errors == [], errors
        page.close()
    finally:
        proc.terminate()
        proc.wait(timeout=30)
    from rag.index.workspace import Workspace
    from evals.run.runner import questions_file_for

    assert questions_file_for(Workspace(str(ws)), str(docs), None) == str(ws / "generated" / "handbook.questions.jsonl")
    assert main(["run", "--config", str(toml_file), "--dataset", str(docs), "--embedder", "hash", "--workspace",
                 str(ws), "--no-progress", "--no-report", "--llm-base-url", llm, "--llm-model", "local-extractive",
                 "--run-id", "PASTED"]) == 0
