"""Where researchers work, second pass (issue 83), each item from its repro: `ragwb workbench --edit` typed in a new
folder, the Workbench object against a real counting 127.0.0.1 model server, a best TOML run from another folder,
the example notebook copied out of the installation, cost at scale."""
import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest

from evals.cli import main
from evals.workbench import Applied, Workbench
from openai_server import Handler, start
from test_jupyter import plain_folder

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def server():
    srv, url = start()
    yield url
    srv.shutdown()


def _marimo_argv(port: int) -> list[str]:
    """The command line of the marimo server listening on ``port`` (read from /proc)."""
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        args = [a.decode(errors="replace") for a in argv if a]
        if "marimo" in " ".join(args[:3]) and "--port" in args and args[args.index("--port") + 1] == str(port):
            return args
    return []


def _workbench(cwd: Path, *flags: str):
    from evals.bench.browser import free_port

    port = free_port()
    proc = subprocess.Popen([sys.executable, "-m", "evals.cli", "workbench", "--headless", "--edit", "--port",
                             str(port), *flags], cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.time() + 150
    for line in proc.stdout:
        if re.match(r"ragwb workbench: http://\S+", line):
            return proc, port
        assert time.time() < deadline, "no URL printed"
    proc.wait(timeout=30)
    raise AssertionError(f"ragwb workbench --edit exited {proc.returncode}: {proc.stderr.read()[-2000:]}")


def _stop(proc):
    proc.terminate()
    try:
        proc.communicate(timeout=30)
    except subprocess.TimeoutExpired:
        proc.kill()


def test_edit_works_from_a_new_folder_and_keeps_the_users_workspace(tmp_path):
    """Items 1-2: `mkdir e && cd e && ragwb workbench --edit --headless` exited 1 ("Parent directory does not exist:
    results/notebooks"); `--edit-dir /abs/nb` put a second workspace at /abs/nb/results."""
    e = tmp_path / "e"
    docs = e / "docs"
    docs.mkdir(parents=True)
    (docs / "a.md").write_text("# Alpha\n\nAlpha is the first letter.\n")
    proc, port = _workbench(e, "--dataset", "docs", "--embedder", "hash")
    try:
        argv = _marimo_argv(port)
        assert argv[argv.index("edit") + 1] == str(e / "results" / "notebooks" / "workbench.py"), argv
        assert argv[argv.index("--workspace") + 1] == str(e / "results"), argv
        assert argv[argv.index("--dataset") + 1] == str(docs), argv
    finally:
        _stop(proc)
    nb = tmp_path / "nb"
    proc, port = _workbench(e, "--dataset", "docs", "--embedder", "hash", "--edit-dir", str(nb))
    try:
        argv = _marimo_argv(port)
        # the page reads the user's workspace, not one beside the copy
        assert argv[argv.index("--workspace") + 1] == str(e / "results"), argv
        assert (nb / "workbench.py").is_file() and not (nb / "results").exists()
    finally:
        _stop(proc)


def test_the_object_sends_nothing_before_consent_and_counts_what_it_sends(tmp_path, server, capsys):
    """Items 4-6: `cost = wb.apply(); cost.calls` raised AttributeError; apply() without send sent GET /v1/models;
    measure_judge announced 62,485 prompt tokens and sent 64,285 (the chat framing uncounted)."""
    docs, q = plain_folder(tmp_path)
    gets, calls = len(Handler.gets), Handler.calls
    wb = Workbench(str(docs), questions=str(q), workspace=str(tmp_path / "ws"), embedder="hash",
                   llm=(server, "local-extractive"), progress=False)
    cost = wb.apply(["chunks"])
    assert isinstance(cost, Applied) and cost.calls == cost.cost.calls > 0 and not cost.sent
    assert Handler.gets[gets:] == [] and Handler.calls == calls  # nothing reached the endpoint, not even /models
    assert "GET /models" in cost.text and "at the send" in cost.text
    assert "price=['MODEL=IN,OUT']" in cost.text and "--price" not in cost.text  # the object's words
    done = wb.apply(["chunks"], send=True)
    assert done.sent and any(p.rstrip("/").endswith("/models") for p in Handler.gets[gets:])
    # the judge's measurement: the tokens announced are the tokens the endpoint counts (framing included)
    plan = wb.measure_judge()
    announced = int(re.search(r"\(([\d,]+) prompt tokens", plan.text).group(1).replace(",", ""))
    n0 = len(Handler.bodies)
    capsys.readouterr()
    wb.measure_judge(send=True)
    err = capsys.readouterr().err
    assert "judge llm_faithfulness" not in err  # progress=False: no bar text on stderr (a widget in Jupyter)
    from rag.tokens import count_tokens

    sent = [json.loads(b) for b in Handler.bodies[n0:]]
    endpoint = sum(sum(count_tokens(m.get("content") or "") + 3 for m in b["messages"]) + 3 for b in sent)
    assert len(sent) == plan.calls and announced == endpoint, (announced, endpoint)


def test_the_object_picks_a_metric_with_values_and_says_things_plainly(tmp_path, capsys):
    """Items 3, 7, 8, 9: wb.best(run) failed on plain questions (its default "f1"); race printed ingest lines;
    notes showed a literal **faithfulness**; the y-axis title was clipped."""
    docs, q = plain_folder(tmp_path)
    wb = Workbench(str(docs), questions=str(q), workspace=str(tmp_path / "ws"), embedder="hash", progress=False)
    wb.apply()
    metric, note = wb.quality_metric()
    assert "**" not in note and "&#" not in note and "No quality metric is measured" in note
    rid = wb.save()
    best = wb.best(rid)  # no metric named: the first with values in that run, never f1 on plain questions
    assert best.prose[0].startswith("best on ") and "f1" not in best.prose[0], best.prose
    capsys.readouterr()
    got = wb.race("top_k", [1, 2, 4], strategies=["chunks"], metric="question_answer_similarity", batch=10)
    assert got[0] and capsys.readouterr().err == ""  # the run's log is not the notebook's output
    fig = wb.figure("question_answer_similarity")
    assert fig.layout.yaxis.title.text.startswith("question-answer similarity") and "<br>" in \
        fig.layout.yaxis.title.text and fig.layout.yaxis.automargin


def test_cost_at_scale_and_dollars_that_are_not_rounded_to_zero(tmp_path, server):
    """Items 9 and 20: cost_usd showed 0.000 [0.000, 0.000] where the store held $0.00015 a question; a point's cost
    on 10,000 questions, "unknown" where the model has no price, "0 (offline)" offline."""
    docs, q = plain_folder(tmp_path)
    priced = Workbench(str(docs), questions=str(q), workspace=str(tmp_path / "ws"), embedder="hash",
                       llm=(server, "local-extractive"), price=["local-extractive=0.5,1"], judge="none",
                       progress=False)
    priced.apply(["chunks"], send=True)
    s = priced.summary()
    usd = float(s[(s.metric == "cost_usd")]["mean"].iloc[0])
    assert 0 < usd < 0.001
    cell = priced.headline().set_index("strategy").loc["chunks", "cost_usd"]
    assert cell.startswith(f"${usd:.3g} [$"), cell
    t = priced.projection(10_000).set_index("strategy").loc["chunks"]
    assert t["dollars x 10,000"] == f"${usd * 10_000:,.2f}"
    ctx = float(s[(s.metric == "context_tokens")]["mean"].iloc[0])
    assert t["context_tokens x 10,000"] == int(round(ctx * 10_000))
    unpriced = Workbench(str(docs), questions=str(q), workspace=str(tmp_path / "ws"), embedder="hash",
                         llm=(server, "local-extractive"), judge="none", progress=False)
    unpriced.apply(["chunks"], send=True)
    assert unpriced.projection(500).loc[0, "dollars x 500"] == "unknown (no price)"
    offline = Workbench(str(docs), questions=str(q), workspace=str(tmp_path / "ws"), embedder="hash", progress=False)
    offline.apply(["chunks"])
    assert offline.projection(3).loc[0, "dollars x 3"] == "0 (offline)"
    with pytest.raises(ValueError, match="number of questions >= 1"):
        offline.projection(0)


def test_a_best_toml_of_a_folder_runs_from_another_folder(tmp_path, capsys, monkeypatch):
    """Item 12: a best TOML of a folder dataset with a questions file exited 2 from a new folder ("has no questions
    to score"): it held no questions path."""
    docs, q = plain_folder(tmp_path / "mine")
    monkeypatch.chdir(tmp_path / "mine")
    assert main(["run", "--dataset", "bees", "--questions", "questions.jsonl", "--embedder", "hash", "--workspace",
                 "ws", "--no-progress", "--no-report", "--strategies", "chunks", "--set", "chunks.top_k=1,2",
                 "--run-id", "O"]) == 0
    other = tmp_path / "other"
    other.mkdir()
    assert main(["best", "O", "--workspace", "ws", "--metric", "question_answer_similarity", "--out",
                 str(other / "best.toml")]) == 0
    assert f'questions = "{q}"' in (other / "best.toml").read_text()
    monkeypatch.chdir(other)
    capsys.readouterr()
    assert main(["run", "--config", "best.toml", "--embedder", "hash", "--no-progress", "--no-report"]) == 0
    assert re.search(r"run \S+ \(bees\): 3 items", capsys.readouterr().out)


def test_compare_reads_the_judges_metrics(tmp_path, server):
    """Item 15: Compare left out the judged metrics (66 rows, none llm_)."""
    from evals.analyze.gate import compare_runs
    from evals.store import ResultStore

    docs, q = plain_folder(tmp_path)
    for rid, k in (("A", "1"), ("B", "1,2")):
        assert main(["run", "--dataset", str(docs), "--questions", str(q), "--embedder", "hash", "--workspace",
                     str(tmp_path / "ws"), "--no-progress", "--no-report", "--strategies", "chunks", "--set",
                     f"chunks.top_k={k}", "--llm-base-url", server, "--llm-model", "local-extractive",
                     "--run-id", rid]) in (0, 7)
    with ResultStore(tmp_path / "ws" / "results.duckdb", read_only=True) as st:
        cmp = compare_runs(st, "A", "B")
    assert {"llm_faithfulness", "answer_relevance"} & set(cmp.metric), sorted(set(cmp.metric))


def test_the_example_notebook_comes_out_of_the_installation(tmp_path, capsys):
    """Item 11: nothing said how to get workbench.ipynb out of an installed wheel."""
    from rag.ingest.bundled import notebook

    assert main(["workbench", "--example-notebook", str(tmp_path)]) == 0
    out = tmp_path / "workbench.ipynb"
    assert out.read_bytes() == notebook("workbench.ipynb").read_bytes()
    assert main(["workbench", "--example-notebook", str(out)]) == 2
    assert "the file exists; pass --force" in capsys.readouterr().err
    link = tmp_path / "link.ipynb"
    target = tmp_path / "target.txt"
    target.write_text("keep")
    link.symlink_to(target)
    assert main(["workbench", "--example-notebook", str(link), "--force"]) == 0
    assert target.read_text() == "keep" and not link.is_symlink()  # the link replaced, never followed
    readme = (ROOT / "README.md").read_text()
    assert "## Jupyter" in readme and "--example-notebook" in readme and "ipykernel install" in readme


def test_a_squad2_session_embeds_nothing_its_vectors_ship(tmp_path):
    """Item 10: the page said "embedded 1,185 chunks (172.5 chunks/s)" for squad2, whose vectors ship; the CLI
    said 0. A folder's first open embeds its chunks, and says that many."""
    from evals.workbench import calls as interactive

    assert interactive.open_session("squad2", str(tmp_path / "ws"), "e5").embedded == 0
    docs, q = plain_folder(tmp_path)
    seen = []
    sess = interactive.open_session(str(docs), str(tmp_path / "ws"), "hash", questions=str(q),
                                    on_progress=lambda n, total: seen.append(n))
    assert sess.embedded == sum(seen) > 0
    assert interactive.open_session(str(docs), str(tmp_path / "ws"), "hash", questions=str(q)).embedded == 0



def _summary(points: dict) -> "pd.DataFrame":
    """A summary frame from {(strategy, point): (cost, mean, low, high)} (f1 and context_tokens)."""
    import pandas as pd

    rows = []
    for (strat, point), (cost, m, lo, hi) in points.items():
        rows += [{"strategy": strat, "point": point, "metric": "f1", "n_ok": 300, "mean": m, "low": lo, "high": hi},
                 {"strategy": strat, "point": point, "metric": "context_tokens", "n_ok": 300, "mean": cost,
                  "low": cost, "high": cost}]
    return pd.DataFrame(rows)


def test_markers_stay_visible_keep_their_shape_and_say_their_budget():
    """Item 14, from its repro: hybrid (238.7 tokens) hidden under two_phase_pages (236.5); the front's outline
    turning parent_child's cross black in the legend too; one rule for the front (300 questions, full_documents at
    8,705 tokens against chunks' 213 at the same f1: chunks is the front); sweep markers naming their top_k."""
    from evals.report.charts import quality_cost_frame, quality_cost_figure, strategy_symbol

    s = _summary({("chunks", "defaults"): (213.0, 0.700, 0.650, 0.750),
                  ("full_documents", "defaults"): (8705.0, 0.702, 0.660, 0.744),
                  ("hybrid", "defaults"): (238.7, 0.620, 0.570, 0.670),
                  ("two_phase_pages", "defaults"): (236.5, 0.640, 0.590, 0.690),
                  ("parent_child", "defaults"): (190.0, 0.590, 0.540, 0.640)})
    fig = quality_cost_figure(s, "f1")
    by = {t.name: t for t in fig.data}
    drawn = [t.name for t in fig.data]
    first, later = sorted(["hybrid", "two_phase_pages"], key=drawn.index)
    assert list(by[later].marker.size)[0] < list(by[first].marker.size)[0]  # the one on top is smaller: both show
    # parent_child is the cheapest, so on the front; its cross keeps its colour and no outline, in the legend too
    pc = by["parent_child"]
    assert pc.marker.symbol == strategy_symbol("parent_child") == "cross" and pc.marker.line.width == 0
    assert 190.0 in list(by["Pareto front"].x) and by["Pareto front"].marker.symbol == "circle-open"
    df = quality_cost_frame(s, "f1").set_index("strategy")
    # one rule: chunks' interval lies above parent_child's (cheaper), so its extra 23 tokens buy f1: front;
    # full_documents is within noise of chunks at 40 times the tokens: tied, never front, and never un-outlined
    assert df.loc["chunks", "pareto"] and not df.loc["full_documents", "pareto"] and df.loc["full_documents", "tie"]
    assert not df.loc["hybrid", "pareto"] and not df.loc["two_phase_pages", "pareto"]
    # every score equal: the cheapest alone is the front, the rest tied with it (the same rule, not a second one)
    eq = quality_cost_frame(_summary({("chunks", "defaults"): (213.0, 1.0, 1.0, 1.0),
                                      ("full_documents", "defaults"): (8705.0, 1.0, 1.0, 1.0)}), "f1")
    assert list(eq["pareto"]) == [True, False] and list(eq["tie"]) == [False, True]
    # a sweep's markers say their top_k on the plot, not on hover only
    sweep = quality_cost_figure(_summary({("chunks", f"top_k={k}"): (100.0 * k, 0.5 + k / 100, 0.4, 0.7)
                                          for k in (2, 4, 8)}), "f1")
    tr = next(t for t in sweep.data if t.name == "chunks")
    assert "text" in tr.mode and list(tr.text) == ["k=2", "k=4", "k=8"]


def test_the_quality_list_marks_a_stand_in_and_all_columns_offers_only_columns_with_values(tmp_path):
    """Item 13, from its repro (offline, plain questions): the quality list showed question_answer_similarity without
    its stand-in mark once it had values; "all columns" offered 14 more columns and added none; a point with no
    value vanished from the chart and its legend while the caption said "every point scores 1.000"."""
    from evals.analyze.summary import HEADLINE, headline_table
    from evals.workbench import page
    from evals.report.charts import quality_cost_figure

    docs, q = plain_folder(tmp_path)
    wb = Workbench(str(docs), questions=str(q), workspace=str(tmp_path / "ws"), embedder="hash", progress=False)
    wb.apply()
    s = wb.summary()
    opts, shown, _ = page.metric_choices(s, "f1")
    label = next(lab for lab, m in opts.items() if m == "question_answer_similarity")
    assert "question_answer_similarity" in page.metrics_with_values(s)  # it has values here ...
    assert label == "question_answer_similarity" + page.STANDIN_MARK, label  # ... and is still marked
    assert opts[shown] != "question_answer_similarity"  # never the fallback
    order = page.headline_order(s, HEADLINE)
    table, dropped, more = page.headline_columns(s, headline_table, order, False)
    assert dropped and all(m not in table.columns for m in dropped)  # n/a on every row: named, not shown
    full, _, none_more = page.headline_columns(s, headline_table, order, True)
    # what the toggle offers is exactly what it adds: columns with a value
    assert set(full.columns) - set(table.columns) == set(more) and none_more == []
    assert not set(more) & set(dropped)
    # a point with no value on the charted metric is named under the title, not silently gone
    gone = s[~((s.strategy == "full_documents") & (s.metric == "question_answer_similarity"))]
    fig = quality_cost_figure(gone, "question_answer_similarity")
    assert "full_documents" not in [t.name for t in fig.data]
    assert "not drawn, no question_answer_similarity value: full_documents · " in fig.layout.title.text
    assert "every point scores" not in fig.layout.title.text


def test_the_index_plan_after_its_run_counts_what_a_second_press_sends_and_says_what_hierarchy_ignores(tmp_path,
                                                                                                       server):
    """Item 17, from its repro: after the index sweep ran, its plan still said "up to N answer / M judge call(s)"
    while a second press sent 0; the hierarchy row showed chunk_tokens 64 (a setting hierarchy ignores) and
    "built: no" after the run. Against a real counting 127.0.0.1 model server, with its judge."""
    from evals.workbench import calls as interactive
    from evals.workbench import index_sweep as ix

    docs, q = plain_folder(tmp_path)
    ws, db = str(tmp_path / "ws"), str(tmp_path / "r.duckdb")
    wb = interactive.workbench_args(["--llm-base-url", server, "--llm-model", "local-extractive"], environ={})
    base = interactive.open_session(str(docs), ws, "hash", questions=str(q))
    sess = interactive.session_for_answerer({}, base, f"LLM: {wb.llm.model}", wb.llm, {}, wb.judge)
    points = interactive.points_from_budgets(["chunks"], {})
    axes = ix.form_axes({"chunker": "tokens,hierarchy", "chunk_tokens": "64"})
    before = ix.plan_index_sweep(sess, ws, axes, points, 3)
    rows = before.table.set_index("chunker")
    assert rows.loc["hierarchy", "chunk_tokens"].startswith("not read (")  # never shown as if it applied
    assert rows.loc["tokens", "chunk_tokens"] == "64"
    assert before.exact is None and "up to 6 answer call(s)" in before.line("local-extractive")
    sent = len(Handler.bodies)
    ix.run_index_sweep(sess, db, ws, axes, points, 3)
    assert len(Handler.bodies) > sent  # the run asked the server
    after = ix.plan_index_sweep(sess, ws, axes, points, 3)
    assert set(after.table["built"].str[:3]) == {"yes"}, after.table  # hierarchy's twin index counts as built
    assert after.exact is not None and after.exact.new_calls == 0 and after.exact.judge_calls == 0
    line = after.line("local-extractive")
    assert "0 answer call(s)" in line and "up to" not in line.split("judge")[0], line
    sent = len(Handler.bodies)
    ix.run_index_sweep(sess, db, ws, axes, points, 3)  # the second press: what the line said, nothing
    assert len(Handler.bodies) == sent


def test_after_generate_the_page_says_what_it_waits_for_and_drops_results_of_other_questions(tmp_path):
    """Item 16: after Generate the line said "The page evaluates them now" while the page waited for its Send; the
    old questions' sweep and race charts stayed on screen (the page keys them by the questions they were drawn on);
    the budget form kept no applied value (the page's notebook keeps them in a dict its form is built from)."""
    from evals.workbench import calls as interactive
    from evals.workbench import generating, page

    llm_line = generating.done_line("12 questions written to q.jsonl", "q.jsonl", True)
    assert "nothing is answered until you press Send" in llm_line and "evaluates them now" not in llm_line
    assert "evaluates them now" in generating.done_line("12 questions", "q.jsonl", False)
    docs, q = plain_folder(tmp_path)
    sess = interactive.open_session(str(docs), str(tmp_path / "ws"), "hash", questions=str(q))
    kept = (page.questions_key(sess), "the old sweep chart")
    assert page.kept_output(kept, sess) == "the old sweep chart"
    q2 = tmp_path / "generated.jsonl"
    q2.write_text(json.dumps({"question": "Who keeps the brood warm?"}) + "\n")
    other = interactive.open_session(str(docs), str(tmp_path / "ws"), "hash", questions=str(q2))
    assert page.kept_output(kept, other) is None  # drawn on other questions: not shown
    source = (ROOT / "notebooks" / "workbench.py").read_text()
    assert "budget_memory.update(budgets.value)" in source and '_kept("chunks__top_k", 8)' in source


def test_the_browser_benchs_model_answers_each_judge_in_its_schema_and_the_bench_counts_the_verdicts(tmp_path):
    """Item 19: `ragwb bench --only browser` timed a cached LLM Apply whose every judge score was a parse error (its
    model answered judge prompts in prose). Its own handler on 127.0.0.1, the page's judges, the bundled set."""
    import threading
    from http.server import ThreadingHTTPServer

    from evals.bench.browser import _EchoHandler, judged_values

    srv = ThreadingHTTPServer(("127.0.0.1", 0), _EchoHandler)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    try:
        url = f"http://127.0.0.1:{srv.server_address[1]}/v1"
        got = judged_values("squad2", tmp_path / "ws", "hash", 4, url)
    finally:
        srv.shutdown()
    assert got.get("ok", 0) > 0, got
    bad = {k: v for k, v in got.items() if k not in ("ok", "n/a")}
    assert not bad, got  # no parse_error, no error: the judges read every verdict


def test_the_page_and_the_object_call_one_facade_and_the_old_door_holds_no_code():
    """Item 22: the page imported `evals.interactive` (a 328-line list of re-exports) while the object imported the
    same calls: one room now, `evals/workbench/`, whose `calls` both use; `from evals import interactive` still
    works as a door onto it."""
    import ast

    from evals import interactive
    from evals.interactive import page as old_page
    from evals.workbench import calls, page

    nb = (ROOT / "notebooks" / "workbench.py").read_text()
    assert "from evals.workbench import calls as interactive" in nb and "evals.interactive" not in nb
    obj = (ROOT / "evals" / "workbench" / "object.py").read_text()
    assert "from . import calls as interactive" in obj and "evals.interactive" not in obj
    assert interactive.open_session is calls.open_session and old_page is page
    door = ROOT / "evals" / "interactive" / "__init__.py"
    tree = ast.parse(door.read_text())
    assert not [n for n in tree.body if isinstance(n, (ast.FunctionDef, ast.ClassDef))]  # no code of its own
    assert len(door.read_text().splitlines()) < 25
    loose = [p.name for p in (ROOT / "evals").glob("*.py")]
    assert len(loose) <= 6, loose


SLIDERS = ("(() => { const all = (r) => [...r.querySelectorAll('*')].flatMap(e => e.shadowRoot ? [e, ...all(e.shadowRoot)]"
           " : [e]); return all(document).filter(e => e.getAttribute && e.getAttribute('role') === 'slider'); })()")


@pytest.mark.parametrize("send", [False, True], ids=["waits-for-send", "with-send"])
def test_after_generate_in_chromium_the_budgets_stay_old_charts_go_and_the_line_says_it_waits(browser, tmp_path,
                                                                                               server, send):
    """Item 16 from its repro, in Chromium: a folder with plain questions and an LLM answerer. After a budget is
    applied and a sweep drawn, Generate writes new questions: the budget form keeps the applied top_k (it reset to its
    default), the line says what the page does next (it said "The page evaluates them now" while the page waited for
    its Send), and once the new questions are evaluated (--send) the old questions' sweep chart is not shown (it
    stayed)."""
    import shutil

    from test_as_written import DATA, _serve, open_page
    from test_seventh_sweep import _stop

    docs, ws = tmp_path / "handbook", tmp_path / "ws"
    shutil.copytree(DATA / "handbook", docs)
    proc, url = _serve(["--dataset", str(docs), "--questions", str(DATA / "plain.jsonl"), "--embedder", "hash",
                        "--workspace", str(ws), "--llm-base-url", server, "--llm-model", "local-extractive"]
                       + (["--send"] if send else []))
    try:
        page, errors = open_page(browser, url)
        page.wait_for_selector("text=questions (of 8)", timeout=120000)
        slider = page.locator("[role=slider]").nth(1)  # chunks top_k (the questions slider is the first)
        slider.wait_for(timeout=60000)
        slider.focus()
        for _ in range(5):
            page.keyboard.press("ArrowLeft")  # 8 -> 3
        page.get_by_text("Apply budgets").click()
        if not send:
            page.wait_for_selector("text=Nothing sent yet", timeout=60000)
            page.get_by_role("button", name=re.compile(r"^Send (up to )?[1-9]\d* call\(s\)$")).first.click()
        page.wait_for_selector("text=/chunks · top_k=3/", timeout=120000)
        page.get_by_role("button", name=re.compile(r"^Sweep")).first.click()
        page.wait_for_selector("text=/sweeping top_k = /", timeout=120000)  # the old questions' curve
        page.get_by_placeholder("model name").fill("questioner")
        page.get_by_role("button", name="Count the cost").click()
        page.wait_for_selector("text=/Generate: [1-9]\\d* passage\\(s\\) to ask about/", timeout=120000)
        page.get_by_role("button", name=re.compile(r"^Send [1-9]\d* call\(s\)$")).last.click()
        said = page.locator("text=/Generated: /").first
        said.wait_for(timeout=120000)
        text = said.inner_text()
        if send:
            assert "the page evaluates them now" in text and "until you press Send" not in text, text
        else:
            assert "nothing is answered until you press Send" in text and "evaluates them now" not in text, text
        # the page reloads the dataset with the new questions (the questions slider counts them, not 8) and counts
        # the Apply's calls for them: by then the budget form was built again (marimo updates the sliders in place,
        # so reading them before proves nothing)
        page.wait_for_selector("text=/questions \\(of (?!8\\))\\d+\\)/", timeout=120000)
        if send:  # evaluated at once: the sweep row is drawn again, for these questions (nothing swept yet)
            page.wait_for_selector("text=Press Sweep to draw the curve", timeout=120000)
            assert page.locator("text=/sweeping top_k = /").count() == 0  # the old questions' curve is not shown
        else:
            page.wait_for_selector("text=Nothing sent yet", timeout=120000)
        top_k = page.evaluate("() => " + SLIDERS + "[1].getAttribute('aria-valuenow')")
        assert top_k == "3", top_k  # the applied budget stays (it reset to 8)
        assert errors == [], errors
        page.close()
    finally:
        _stop(proc)
