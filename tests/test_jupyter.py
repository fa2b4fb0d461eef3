"""The workbench where researchers work: the ``Workbench`` object (a bundled set, a folder of plain questions, an
LLM behind its cost line, inside a running event loop), the example notebook executed in a kernel (nbclient), and
in JupyterLab in Chromium a moved control redrawing the chart and the matrix."""
import asyncio
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pandas as pd
import plotly.graph_objects as go
import pytest

from evals.workbench import Applied, CostLine, Workbench

ROOT = Path(__file__).resolve().parents[1]
EXAMPLE = ROOT / "notebooks" / "workbench.ipynb"


@pytest.fixture(scope="module")
def squad(tmp_path_factory):
    ws = tmp_path_factory.mktemp("jwb") / "results"
    return Workbench("squad2", limit=12, workspace=str(ws), progress=False)


def plain_folder(root: Path) -> tuple[Path, Path]:
    """A folder of two Markdown files and a questions file with questions only (no ids, no answers)."""
    docs = root / "bees"
    docs.mkdir(parents=True)
    (docs / "hive.md").write_text("# The hive\n\nA colony has one queen and thousands of workers. Workers build wax "
                                  "comb and keep the brood warm.\n")
    (docs / "honey.md").write_text("# Honey\n\nBees make honey from nectar. A strong colony stores about 25 kg of "
                                   "honey for winter.\n")
    q = root / "questions.jsonl"
    q.write_text("".join(json.dumps({"question": t}) + "\n" for t in
                         ["How many queens does a colony have?", "What do bees make honey from?",
                          "How much honey does a colony store?"]))
    return docs, q


def test_a_bundled_set_gives_one_row_per_question_and_point_and_a_figure(squad):
    res = squad.apply()
    assert isinstance(res, Applied) and res.evaluated and res.cost.sent
    rows = squad.rows()
    assert len(rows) == 12 * len(squad.strategies)
    assert not rows.duplicated(["strategy", "point_label", "question_id"]).any()
    assert {"f1", "context_tokens", "evidence_recall"} <= set(rows.columns)
    # the wide frame holds the long frame's values: one cell checked against its source row
    long = squad.scores()
    one = long[(long.metric == "f1") & (long.strategy == "hybrid")].iloc[3]
    cell = rows[(rows.strategy == "hybrid") & (rows.question_id == one.question_id)]["f1"].iloc[0]
    assert cell == pytest.approx(one.value)
    fig = squad.figure()
    assert isinstance(fig, go.Figure) and len(fig.data) >= len(squad.strategies)
    summ = squad.summary()
    assert {"mean", "low", "high", "n_ok"} <= set(summ.columns)
    # a second apply: only the changed strategy is new; the first apply's points become the chart's history
    again = squad.apply(chunks__top_k=3)
    assert again.cost.text.endswith("12 new item(s)"), again.cost.text
    assert "top_k=3" in set(squad.rows().point_label)
    assert len(squad.history) == 1
    # earlier budgets: each once, and never a point drawn now (only chunks' shipped point is earlier here), however
    # often the same budgets are applied (the page's trace grew ~10 markers a point an Apply: issue 72)
    for _ in range(3):
        squad.apply(chunks__top_k=3)
        earlier = [t for t in squad.figure().data if t.name == "earlier budgets"]
        assert len(earlier) == 1 and list(earlier[0].text) == ["chunks · defaults"], earlier
    matrix = squad.matrix()
    assert len(matrix) == 12 and any("top_k=3" in c for c in matrix.columns)
    paired = squad.compare("chunks", "hybrid")
    assert {"delta", "low", "high", "verdict"} <= set(paired.columns) and len(paired)
    assert isinstance(squad.sufficiency(), pd.DataFrame) and len(squad.sufficiency()) == len(squad.strategies)


def test_names_that_do_not_exist_are_errors_naming_the_valid_ones(squad):
    with pytest.raises(ValueError, match="unknown strategy 'chunkz'; valid: chunks"):
        squad.apply(["chunkz"])
    with pytest.raises(ValueError, match="unknown budget 'chunks__topk'"):
        squad.apply(chunks__topk=3)
    with pytest.raises(ValueError, match="unknown argument"):
        Workbench("squad2", no_such_flag=1)
    with pytest.raises(ValueError, match="unknown dataset 'nope'"):
        Workbench("nope")


def test_sweep_save_and_best_speak_of_what_was_applied(squad):
    sweep = squad.sweep("top_k", [2, 4], strategies=["chunks"])
    assert sweep.evaluated and set(sweep.scores.point_label) == {"top_k=2", "top_k=4"}
    rid = squad.save()
    best = squad.best(rid, "f1")
    assert best.toml.count("[run]") == 1 and "ragwb best" in best.toml
    runs = squad.runs()
    assert rid in set(runs.run_id)


def test_a_folder_with_plain_questions(tmp_path):
    docs, q = plain_folder(tmp_path)
    wb = Workbench(str(docs), questions=str(q), workspace=str(tmp_path / "results"), embedder="hash",
                   progress=False)
    wb.apply()
    rows = wb.rows()
    assert len(rows) == 3 * len(wb.strategies)
    # plain questions offline: no quality metric is measured, and the chart says so; it never falls back to the
    # stand-in (question_answer_similarity), which is named as one and charted only when picked (issue 72)
    assert rows["f1"].isna().all()
    metric, note = wb.quality_metric()
    assert metric == "f1" and "No quality metric is measured" in note and "question_answer_similarity" in note
    assert "no point has a f1 value" in wb.figure().layout.title.text
    metric = "question_answer_similarity"
    assert rows[metric].notna().any() and wb.quality_metric(metric) == (metric, "")
    assert "stand-in, not validated" in wb.figure(metric).layout.yaxis.title.text
    # a saved run of a folder names it by its absolute path: its best TOML runs from any folder (issue 72)
    best = wb.best(wb.save(), metric)
    assert f'datasets = ["{docs.resolve()}"]' in best.toml, best.toml


@pytest.fixture()
def llm_server():
    sys.path.insert(0, str(Path(__file__).parent))
    from openai_server import Handler, start

    srv, url = start()
    Handler.calls = 0
    yield url, Handler
    srv.shutdown()


def test_an_llm_apply_says_its_cost_first_and_sends_only_when_told(tmp_path, llm_server):
    url, handler = llm_server
    docs, q = plain_folder(tmp_path)
    wb = Workbench(str(docs), questions=str(q), workspace=str(tmp_path / "results"), embedder="hash",
                   llm=(url, "extractive"), progress=False)
    cost = wb.apply(["chunks", "hybrid"])
    assert isinstance(cost, Applied) and not cost.evaluated and isinstance(cost.cost, CostLine)
    assert handler.calls == 0  # nothing sent before the word
    assert "answer call(s)" in cost.cost.text and "judge" in cost.cost.text and cost.cost.calls > 0
    assert "send=True" in str(cost.cost) and "Nothing sent" in cost.cost._repr_markdown_()
    with pytest.raises(RuntimeError, match="nothing applied yet"):
        wb.rows()
    done = wb.apply(["chunks", "hybrid"], send=True)
    assert done.evaluated and handler.calls >= 6  # 6 answers, then their judges
    sent = handler.calls
    assert wb.rows()["llm_faithfulness"].notna().any()
    again = wb.plan(["chunks", "hybrid"])
    assert again.calls == 0 and handler.calls == sent  # all cached now: nothing to ask


def test_it_works_inside_a_running_event_loop(tmp_path, llm_server):
    """Jupyter runs cells inside a running loop; asyncio.run under it fails (ragas #1118): the object never
    calls it, judges included."""
    url, handler = llm_server
    docs, q = plain_folder(tmp_path)

    async def cell():
        assert asyncio.get_running_loop().is_running()
        wb = Workbench(str(docs), questions=str(q), workspace=str(tmp_path / "results"), embedder="hash",
                       llm=(url, "extractive"), progress=False)
        return wb.apply(["chunks"], send=True), wb

    # in a thread of its own, as a kernel's loop is: this worker's main thread may already run Playwright's loop
    import threading

    got = {}
    t = threading.Thread(target=lambda: got.update(out=asyncio.run(cell())))
    t.start()
    t.join(timeout=300)
    res, wb = got["out"]
    assert res.evaluated and wb.rows()["llm_faithfulness"].notna().any()


def test_the_example_notebook_runs_top_to_bottom_in_a_kernel(tmp_path):
    import nbformat
    from nbclient import NotebookClient

    nb = nbformat.read(EXAMPLE, as_version=4)
    env_llm = {k: os.environ.pop(k) for k in ("RAGWB_LLM_BASE_URL", "RAGWB_LLM_MODEL") if k in os.environ}
    try:
        NotebookClient(nb, timeout=600, kernel_name="python3", resources={"metadata": {"path": str(tmp_path)}}
                       ).execute()
    finally:
        os.environ.update(env_llm)
    outputs = [o for c in nb.cells if c.cell_type == "code" for o in c.outputs]
    assert not [o for o in outputs if o.output_type == "error"]
    first = next(c for c in nb.cells if c.cell_type == "code")
    assert first.outputs[0]["data"]["text/plain"] == "True"  # the kernel's loop was running
    figures = [o for o in outputs if "application/vnd.plotly.v1+json" in o.get("data", {})]
    assert len(figures) >= 3
    widgets = [o for o in outputs if "VBox" in o.get("data", {}).get("text/plain", "")]
    assert widgets  # the controls
    assert (tmp_path / "results" / "results.duckdb").is_file()  # the workspace is results/ where it runs


def _jupyterlab(root: Path, port: int):
    # in a virtualenv that sees the base installation's packages (CI's, `.ci/run`), JupyterLab looks for the lab
    # extensions of those packages (ipywidgets' manager, plotly's renderer) under the virtualenv's prefix only: the
    # base prefix's data folder is named, as a user's environment with both installed in it would have them
    shared = [str(Path(p) / "share" / "jupyter") for p in dict.fromkeys([sys.prefix, sys.base_prefix])]
    env = {**os.environ, "JUPYTER_CONFIG_DIR": str(root / "cfg"), "JUPYTER_DATA_DIR": str(root / "data"),
           "JUPYTER_RUNTIME_DIR": str(root / "rt"), "JUPYTERLAB_SETTINGS_DIR": str(root / "settings"),
           "JUPYTERLAB_WORKSPACES_DIR": str(root / "lab-ws"),
           "JUPYTER_PATH": os.pathsep.join(shared + [x for x in [os.environ.get("JUPYTER_PATH")] if x])}
    return subprocess.Popen([sys.executable, "-m", "jupyterlab", "--no-browser", f"--port={port}", "--ip=127.0.0.1",
                             "--ServerApp.token=", "--ServerApp.password=", "--ServerApp.disable_check_xsrf=True",
                             f"--ServerApp.root_dir={root / 'work'}", "--LabApp.expose_app_in_browser=True",
                             "--ServerApp.allow_root=True"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env)


def test_in_jupyterlab_a_moved_control_redraws_the_chart_and_the_matrix(tmp_path, browser):
    from evals.bench.browser import free_port, wait_http

    work = tmp_path / "work"
    work.mkdir()
    shutil.copy(EXAMPLE, work / "workbench.ipynb")
    port = free_port()
    proc = _jupyterlab(tmp_path, port)
    try:
        wait_http(f"http://127.0.0.1:{port}/api", 120)
        page = browser.new_page(viewport={"width": 1440, "height": 1000})
        page.goto(f"http://127.0.0.1:{port}/lab/tree/workbench.ipynb")
        page.wait_for_function("window.jupyterapp && document.querySelector('.jp-Notebook')", timeout=120000)
        # the kernel starts, then every cell runs (Run > Run All Cells)
        page.wait_for_function("(() => { const w = window.jupyterapp.shell.currentWidget; return w && w.sessionContext"
                               " && w.sessionContext.session && w.sessionContext.session.kernel })()",
                               timeout=120000)
        page.evaluate("window.jupyterapp.commands.execute('notebook:run-all-cells')")
        controls = page.locator(".widget-vbox", has=page.locator("text=Apply budgets")).first
        controls.wait_for(timeout=240000)
        chart = controls.locator(".js-plotly-plot").first
        chart.wait_for(timeout=120000)
        matrix = controls.locator("table.dataframe").first
        matrix.wait_for(timeout=60000)
        assert "top_k=5" not in matrix.inner_html()
        before_chart = chart.evaluate("el => JSON.stringify(el.data.map(t => t.name))")
        # move the chunks top_k slider three steps left (8 -> 5) and Apply
        handle = controls.locator(".noUi-handle").first
        handle.focus()
        for _ in range(3):
            page.keyboard.press("ArrowLeft")
        controls.locator("button", has_text="Apply budgets").click()
        page.wait_for_function("(m) => m.innerHTML.includes('top_k=5')", arg=controls.element_handle(),
                               timeout=120000)
        new_chart = controls.locator(".js-plotly-plot").first
        new_chart.wait_for(timeout=60000)
        after_chart = new_chart.evaluate("el => JSON.stringify(el.data.map(t => (t.name || '') + ' ' + "
                                         "JSON.stringify(t.text || t.customdata || '')))")
        assert "top_k=5" in after_chart and after_chart != before_chart
        assert "top_k=5" in controls.locator("table.dataframe").first.inner_html()
        page.screenshot(path=str(tmp_path / "jupyterlab.png"), full_page=False)
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()


def test_the_data_teams_bring_messy_lines_said_and_no_questions_refused(tmp_path, capsys):
    """../shared/datasets/as_written's shapes: a messy questions file's left-out line is printed on open; a folder with
    no questions refuses an Apply with the page's words, never an empty frame."""
    docs, _ = plain_folder(tmp_path)
    q = tmp_path / "messy.jsonl"
    q.write_text(json.dumps({"question": "What do bees make honey from?"}) + "\n{not json\n"
                 + json.dumps({"question": "What do bees make honey from?"}) + "\n")
    wb = Workbench(str(docs), questions=str(q), workspace=str(tmp_path / "results"), embedder="hash", progress=False)
    out = capsys.readouterr().out
    assert f"{q} line 2" in out and "skipped" in out, out
    bare = tmp_path / "bare"
    bare.mkdir()
    (bare / "a.md").write_text("# A\n\nSome text about hives.\n")
    empty = Workbench(str(bare), workspace=str(tmp_path / "results2"), embedder="hash", progress=False)
    with pytest.raises(ValueError, match="no questions|has none"):
        empty.apply()
    assert len(wb.dataset.questions) >= 1
