"""Writes notebooks/workbench.ipynb, the Jupyter example (docs/jupyter.md): edit the cells here, run
`python scripts/build_example_notebook.py`, commit both. CI executes the notebook (tests/test_jupyter.py)."""
import json
from pathlib import Path

cells = []
def md(s): cells.append({"cell_type": "markdown", "metadata": {}, "source": s.strip("\n")})
def code(s): cells.append({"cell_type": "code", "metadata": {}, "execution_count": None, "outputs": [], "source": s.strip("\n")})
md("""
# RAG Workbench in Jupyter

The workbench page as a Python object: the same library calls the marimo page makes, so a frame, a figure or a
cost line here is the page's for the same budgets. It runs offline on a bundled set (top to bottom, no network, no
key), then on a folder of your own, then with an LLM and a judge.

`pip install 'rag-workbench[jupyter]'` (or, in a checkout, `pip install -e '.[jupyter]'`) brings the controls.
""")
code("""
import asyncio

# Jupyter runs every cell inside a running event loop: the workbench never calls asyncio.run under it
loop_running = asyncio.get_running_loop().is_running()
loop_running
""")
code("""
from evals.workbench import Workbench

wb = Workbench("squad2", limit=20)  # a bundled set: its vectors ship, so nothing is embedded
wb
""")
md("""
## Apply budgets

`apply` is the page's *Apply budgets*: only the budgets you name change (each strategy keeps its shipped
defaults otherwise). It returns the cost line first; offline nothing is sent, so it evaluates at once.
""")
code("""
wb.apply()  # the five strategies at their shipped defaults
""")
code("""
wb.apply(chunks__top_k=4, hybrid__alpha=0.5, max_context_tokens=1500)
""")
code("""
fig = wb.figure()  # quality vs context tokens; earlier applies faded, the Pareto front ringed
fig
""")
code("""
wb.headline()  # mean [95% interval] n=K per metric, as `ragwb show` prints it
""")
code("""
rows = wb.rows()  # one row per question and point, a column per metric
assert len(rows) == 20 * len(wb.strategies)
rows.head()
""")
code("""
wb.summary().head(8)  # per point and metric: mean, low, high (its 95% interval), n_ok
""")
code("""
wb.matrix().head(10)  # question x point on the chart's metric, with spread and failures
""")
code("""
wb.compare("chunks", "hybrid")  # paired per question: delta, 95% interval, verdict
""")
code("""
wb.sufficiency()  # why points lose: context sufficiency x answer outcome
""")
md("""
## Sweep, save, best

A sweep moves one budget from the applied ones; a saved run is what `ragwb show`, the report and the gate read.
""")
code("""
sweep = wb.sweep("top_k", [2, 4, 16], strategies=["chunks", "hybrid"])
sweep.figure()
""")
code("""
run_id = wb.save()
best = wb.best(run_id, metric="f1")
print(best.toml)  # `ragwb run --config best.toml` reproduces the point
""")
md("""
## Controls

The page's budget form as widgets: move a slider and press *Apply budgets*; the chart and the matrix redraw in
place. With an LLM the cost line and a *Send* button come first.
""")
code("""
wb.controls()
""")
md("""
## Your own folder

A folder of Markdown, text, PDF, Word, HTML or source files, and a questions file that may hold only questions
(`{"question": "..."}` a line: no ids, no answers). Answer metrics say n/a with the reason. Offline, plain questions
have no quality metric at all (no reference answers for f1, and the extractive answer copies its context, so
faithfulness says nothing): `mine.quality_metric()` says so, and the chart is empty with that reason in its title.
A stand-in that is not validated against people can be drawn by name; an LLM answerer (below), or answers and
evidence in the questions file, give the real metrics.
""")
code("""
import json, pathlib, tempfile

folder = pathlib.Path(tempfile.mkdtemp()) / "bees"
folder.mkdir()
(folder / "hive.md").write_text("# The hive\\n\\nA colony has one queen, a few hundred drones and thousands of "
                                "workers. Workers build wax comb and keep the brood warm.\\n")
(folder / "honey.md").write_text("# Honey\\n\\nBees make honey from nectar. A strong colony stores about 25 kg of "
                                 "honey for the winter.\\n")
questions = folder.parent / "questions.jsonl"
questions.write_text("\\n".join(json.dumps({"question": q}) for q in
                                ["How many queens does a colony have?", "What do bees make honey from?"]) + "\\n")

mine = Workbench(str(folder), questions=str(questions), workspace=str(folder.parent / "results"))
mine.apply()
mine.rows()
""")
code("""
print(mine.quality_metric()[1])  # why the chart has no quality axis here
mine.figure("question_answer_similarity")  # the stand-in, named as one on its axis
""")
md("""
## An LLM answerer and judge

Any OpenAI-compatible endpoint (OpenAI, vLLM, Ollama, llama.cpp's server). The answering model also judges
(faithfulness, answer relevance, context sufficiency) unless `judge="none"` or `judge=(URL, MODEL)` names another.
Every call that would spend returns its cost line first and sends only with `send=True`. This cell runs where
`RAGWB_LLM_BASE_URL` and `RAGWB_LLM_MODEL` are set.
""")
code("""
import os

URL, MODEL = os.environ.get("RAGWB_LLM_BASE_URL"), os.environ.get("RAGWB_LLM_MODEL")
if URL and MODEL:
    llm_wb = Workbench(str(folder), questions=str(questions), workspace=str(folder.parent / "results"),
                       llm=(URL, MODEL), price=[f"{MODEL}=0.15,0.6"])
    cost = llm_wb.apply()          # the cost line: nothing sent yet
    print(cost)
    llm_wb.apply(send=True)        # now it answers and judges
    display(llm_wb.headline())
    print(llm_wb.measure_judge())  # how far to trust the judge: its cost line first
else:
    print("set RAGWB_LLM_BASE_URL and RAGWB_LLM_MODEL to run this cell against your endpoint")
""")
nb = {"cells": cells, "metadata": {"kernelspec": {"display_name": "Python 3", "language": "python", "name": "python3"},
      "language_info": {"name": "python"}}, "nbformat": 4, "nbformat_minor": 5}
for i, c in enumerate(cells):
    c["id"] = f"cell-{i:02d}"
out = Path(__file__).resolve().parents[1] / "notebooks" / "workbench.ipynb"
out.write_text(json.dumps(nb, indent=1) + "\n")
