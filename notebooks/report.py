import marimo

__generated_with = "0.25.2"
app = marimo.App(width="full", app_title="RAG Workbench report", html_head_file="head.html")


@app.cell
def _():
    import argparse
    import sys

    import marimo as mo

    from evals.reports import report_sections
    from evals.store import ResultStore

    parser = argparse.ArgumentParser(description="Static report of a stored RAG Workbench run (or two compared).")
    parser.add_argument("--db", default="results/results.duckdb", help="DuckDB results file")
    parser.add_argument("--run", default="latest", help="run id, unique prefix or 'latest'")
    parser.add_argument("--compare", default=None, help="a second run id to compare against (paired deltas)")
    args, _unknown = parser.parse_known_args(sys.argv[1:])
    return ResultStore, args, mo, report_sections


@app.cell
def _(ResultStore, args, report_sections):
    with ResultStore(args.db, read_only=True) as _st:
        run_id = _st.resolve_run(args.run)
        other = _st.resolve_run(args.compare) if args.compare else None
        sections = report_sections(_st, run_id, other)
    return (sections,)


@app.cell
def _(mo, sections):
    mo.md(f"# RAG Workbench report: run `{sections['run_id']}`\n\n{sections['header_md']}")
    return


@app.cell
def _(mo, sections):
    _num = sections["summary_numeric"]
    mo.vstack([mo.md("## Summary (means over questions; the 95% intervals are in the static "
                     "report and `ragwb show`)"),
               mo.ui.table(_num, selection=None, page_size=50, freeze_columns_left=["strategy", "point"],
                           format_mapping={c: "{:.3f}" for c in _num.columns if _num[c].dtype.kind == "f"})])
    return


@app.cell
def _(mo, sections):
    mo.vstack([mo.md("## Quality vs token cost (black outline: Pareto front; grey: tied with it)")]
              + [mo.ui.plotly(f) for f in sections["figures"]])
    return


@app.cell
def _(mo, sections):
    mo.vstack([mo.md("## F1 by strategy, question type and language"),
               mo.ui.table(sections["breakdown"], selection=None, page_size=50)])
    return


@app.cell
def _(mo, sections):
    _cmp = sections.get("comparison")
    mo.vstack([mo.md("## Compared runs (paired bootstrap deltas)"),
               mo.ui.table(_cmp, selection=None, freeze_columns_left=["strategy", "point", "metric"],
                           freeze_columns_right=["verdict"])]
              ) if _cmp is not None and len(_cmp) else mo.md("")
    return


@app.cell
def _(mo, sections):
    _m = sections["matrix"]
    _pts = _m.attrs.get("points", []) if len(_m) else []
    mo.vstack([mo.md("## Quality per 1,000 prompt tokens (each quality metric; 95% bootstrap interval of the ratio)"),
               mo.ui.table(sections["per_1k"], selection=None),
               mo.md(f"## Each point against {sections['paired_against']} (paired on the questions both scored)"),
               mo.ui.table(sections["paired"], selection=None) if len(sections["paired"]) else mo.md(""),
               mo.md("## Question x point matrix (F1; sortable, filterable, downloadable)"),
               mo.ui.table(_m, selection=None, page_size=15, freeze_columns_left=["question_id"] if len(_m) else None,
                           format_mapping={p: "{:.3f}" for p in _pts})]) if len(_m) else mo.md("")
    return


@app.cell
def _(mo, sections):
    # corpus text and answers are escaped by the library: shown as text, never executed
    mo.vstack([mo.md("## Worst questions with their contexts"), mo.Html(sections["worst_html"])])
    return


if __name__ == "__main__":
    app.run()
