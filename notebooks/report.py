import marimo

__generated_with = "0.25.2"
app = marimo.App(width="full", app_title="RAG Workbench report", html_head_file="head.html")


@app.cell
def _():
    import argparse
    import sys

    import marimo as mo

    from evals.report.html import plain_table_html, report_sections
    from evals.store import ResultStore

    parser = argparse.ArgumentParser(description="Static report of a stored RAG Workbench run (or two compared).")
    parser.add_argument("--db", default="results/results.duckdb", help="DuckDB results file")
    parser.add_argument("--run", default="latest", help="run id, unique prefix or 'latest'")
    parser.add_argument("--compare", default=None, help="a second run id to compare against (paired deltas)")
    args, _unknown = parser.parse_known_args(sys.argv[1:])
    return ResultStore, args, mo, plain_table_html, report_sections


@app.cell
def _(ResultStore, args, report_sections):
    with ResultStore(args.db, read_only=True) as _st:
        run_id = _st.resolve_run(args.run)
        other = _st.resolve_run(args.compare) if args.compare else None
        sections = report_sections(_st, run_id, other)
    return (sections,)


@app.cell
def _(mo, sections):
    from rag.safeio import html_text as _h

    # HTML built from escaped parts (the header is the static report's own escaped HTML): a run id or a folder name
    # is shown as written, never read as Markdown or markup (issue 82)
    mo.Html(f"<h1>RAG Workbench report: run <code>{_h(sections['run_id'])}</code></h1>"
            f"<p>{sections['header_md']}</p>")
    return


@app.cell
def _(mo, plain_table_html, sections):
    # plain tables: an exported page has no kernel, so marimo's table could neither sort nor page (it warned
    # "Cell ID ... cannot be found" for each); the static report is the one that sorts
    mo.vstack([mo.md("## Summary (means with 95% bootstrap intervals over questions)"),
               mo.Html(plain_table_html(sections["summary"]))])
    return


@app.cell
def _(mo, sections):
    mo.vstack([mo.md("## Quality vs token cost (black outline: Pareto front; grey: tied with it)")]
              # config given: no lookup of plotly's default renderer (1.4 s of imports before the first chart)
              + [mo.ui.plotly(f, config={}) for f in sections["figures"]])
    return


@app.cell
def _(mo, plain_table_html, sections):
    mo.vstack([mo.md("## F1 by strategy, question type and language"),
               mo.Html(plain_table_html(sections["breakdown"]))])
    return


@app.cell
def _(mo, plain_table_html, sections):
    _cmp = sections.get("comparison")
    mo.vstack([mo.md("## Compared runs (paired bootstrap deltas)"),
               mo.Html(plain_table_html(_cmp))]
              ) if _cmp is not None and len(_cmp) else mo.md("")
    return


@app.cell
def _(mo, plain_table_html, sections):
    from rag.safeio import md_text

    _m = sections["matrix"]
    mo.vstack([mo.md("## Quality per 1,000 prompt tokens (each quality metric; 95% bootstrap interval of the ratio)"),
               mo.Html(plain_table_html(sections["per_1k"])),
               mo.md(f"## Each point against {md_text(sections['paired_against'])} (paired on the questions both "
                     "scored)"),
               mo.Html(plain_table_html(sections["paired"])) if len(sections["paired"]) else mo.md(""),
               mo.md("## Question x point matrix (F1; the static report `report-RUN.html` sorts it)"),
               mo.Html(plain_table_html(_m))]) if len(_m) else mo.md("")
    return


@app.cell
def _(mo, sections):
    # corpus text and answers are escaped by the library: shown as text, never executed
    mo.vstack([mo.md("## Worst questions with their contexts"), mo.Html(sections["worst_html"])])
    return


if __name__ == "__main__":
    app.run()
