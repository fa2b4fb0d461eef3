import marimo

__generated_with = "0.25.2"
app = marimo.App(width="full", app_title="RAG Workbench: review generated questions")


@app.cell
def _():
    import argparse
    import sys

    import marimo as mo

    from evals import generate

    parser = argparse.ArgumentParser(description="Review generated questions (docs/generate.md): keep, edit, drop.")
    parser.add_argument("--questions", default="gold.jsonl", help="the generated JSONL (ragwb generate --out)")
    parser.add_argument("--out", default=None, help="where the accepted set goes (default: QUESTIONS.accepted.jsonl)")
    args, _unknown = parser.parse_known_args(sys.argv[1:])
    out_path = args.out or args.questions.removesuffix(".jsonl") + ".accepted.jsonl"
    return args, generate, mo, out_path


@app.cell
def _(args, generate, mo):
    rows = generate.read_generated(args.questions)
    table = mo.ui.table(generate.review_frame(rows), selection="multi", initial_selection=list(range(len(rows))),
                        page_size=50, label="Selected rows are kept (all are, until you untick them)")
    get_edits, set_edits = mo.state({})
    return get_edits, rows, set_edits, table


@app.cell
def _(mo, rows):
    pick = mo.ui.dropdown([str(r["id"]) for r in rows], value=str(rows[0]["id"]) if rows else None,
                          label="question to rewrite")
    return (pick,)


@app.cell
def _(get_edits, mo, pick, rows, set_edits):
    _by_id = {str(r["id"]): r for r in rows}
    _now = get_edits().get(pick.value) or (_by_id[pick.value]["question"] if pick.value else "")
    rewrite = mo.ui.text_area(value=_now, label="question text", full_width=True)
    apply_edit = mo.ui.button(label="Keep this rewrite", on_click=lambda _: set_edits(
        lambda e: {**e, pick.value: rewrite.value}))
    return apply_edit, rewrite


@app.cell
def _(mo):
    reviewer = mo.ui.text(label="reviewer", placeholder="your name")
    save = mo.ui.run_button(label="Save accepted")
    return reviewer, save


@app.cell
def _(apply_edit, get_edits, mo, out_path, pick, reviewer, rewrite, rows, save, table):
    _edits = get_edits()
    mo.vstack([mo.md(f"**{len(rows)} generated questions.** Untick what to drop, rewrite what reads badly, then save: "
                     f"the accepted set goes to `{out_path}` with who reviewed it and when "
                     f"({len(_edits)} rewrite(s) so far)."),
               table, mo.hstack([pick, apply_edit], justify="start"), rewrite,
               mo.hstack([reviewer, save], justify="start")])
    return


@app.cell
def _(generate, get_edits, mo, out_path, reviewer, rows, save, table):
    mo.stop(not save.value)
    try:
        _kept = [r["id"] for r in rows if str(r["id"]) in set(table.value["id"].astype(str))]
        _by_str = {str(r["id"]): r["id"] for r in rows}
        _acc = generate.apply_review(rows, _kept, {_by_str[k]: v for k, v in get_edits().items()}, reviewer.value)
        generate.write_jsonl(_acc, out_path)
        _msg = mo.md(f"Saved **{len(_acc)} of {len(rows)}** questions "
                     f"({sum(r['metadata']['review']['edited'] for r in _acc)} rewritten) to `{out_path}`.")
    except ValueError as _e:
        _msg = mo.callout(mo.md(f"**Not saved:** {_e.args[0]}"), kind="danger")
    _msg
    return


if __name__ == "__main__":
    app.run()
