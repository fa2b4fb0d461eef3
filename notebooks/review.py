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
    parser.add_argument("--out", default=None, help="where the accepted set goes (default: QUESTIONS.accepted.jsonl; "
                        "never the generated file itself)")
    args, _unknown = parser.parse_known_args(sys.argv[1:])
    try:
        out_path, setup_error = str(generate.review_paths(args.questions, args.out)), ""
    except ValueError as _e:
        out_path, setup_error = None, _e.args[0]
    return args, generate, mo, out_path, setup_error


@app.cell
def _(args, generate, mo, out_path, setup_error):
    from rag.safeio import md_code as _code, md_text as _esc  # names as text, never Markdown (issue 82)

    mo.stop(bool(setup_error), mo.callout(mo.md(f"**Not opened:** {_esc(setup_error)}"), kind="danger"))
    from pathlib import Path as _Path

    rows = generate.read_generated(args.questions)
    # a second Save (or a reopened review) starts from the last accepted file: its kept rows and rewrites
    _kept, _edits, _who = ([r["id"] for r in rows], {}, "")
    if _Path(out_path).is_file():
        _kept, _edits, _who = generate.resume_review(rows, generate.read_generated(out_path))
    get_edits, set_edits = mo.state({str(k): v for k, v in _edits.items()})
    # the ticked rows, kept across the table's redraws (a kept rewrite redraws it with the new text)
    get_ticked, set_ticked = mo.state({str(k) for k in _kept})
    resumed_from = (out_path, len(_kept), _who) if _Path(out_path).is_file() else None
    return get_edits, get_ticked, resumed_from, rows, set_edits, set_ticked


@app.cell
def _(generate, get_edits, get_ticked, mo, rows, set_ticked):
    # the table shows each kept rewrite in place of the generated text (the saved file has it too)
    _edits = get_edits()
    _shown = [{**r, "question": _edits.get(str(r["id"]), r["question"])} for r in rows]
    _ticked = get_ticked()
    table = mo.ui.table(generate.review_frame(_shown), selection="multi",
                        initial_selection=[i for i, r in enumerate(rows) if str(r["id"]) in _ticked],
                        on_change=lambda v: set_ticked({str(x) for x in v["id"]}),
                        page_size=50, label="Selected rows are kept (all are, until you untick them)")
    return (table,)


@app.cell
def _(mo, rows):
    pick = mo.ui.dropdown([str(r["id"]) for r in rows], value=str(rows[0]["id"]) if rows else None,
                          label="question to rewrite")
    return (pick,)


@app.cell
def _(generate, get_edits, mo, pick, rows, set_edits):
    _by_id = {str(r["id"]): r for r in rows}
    _now = get_edits().get(pick.value) or (_by_id[pick.value]["question"] if pick.value else "")
    rewrite = mo.ui.text_area(value=_now, label="question text", full_width=True)
    apply_edit = mo.ui.button(label="Keep this rewrite", on_click=lambda _: set_edits(
        lambda e: {**e, pick.value: rewrite.value}))
    # the passage the question was written from, so a reviewer judges it against its source
    _passage = generate.passage_text(_by_id[pick.value]) if pick.value else ""
    passage_view = mo.Html("<details open><summary>passage</summary><pre style='white-space:pre-wrap;max-height:16em;"
                           "overflow:auto'>" + __import__("html").escape(_passage or "(not stored with this question)")
                           + "</pre></details>")
    return apply_edit, passage_view, rewrite


@app.cell
def _(mo):
    reviewer = mo.ui.text(label="reviewer", placeholder="your name")
    save = mo.ui.run_button(label="Save accepted")
    return reviewer, save


@app.cell
def _(apply_edit, generate, get_edits, mo, out_path, passage_view, pick, resumed_from, reviewer, rewrite, rows, save,
      table):
    from rag.safeio import md_code as _code, md_text as _esc  # names as text, never Markdown (issue 82)

    _edits = get_edits()
    _orig = next((r["question"] for r in rows if str(r["id"]) == pick.value), "")
    _typed = generate.pending_edit(_edits, pick.value, rewrite.value, _orig) != _edits
    mo.vstack([mo.md(f"**{len(rows)} generated questions.** Untick what to drop, rewrite what reads badly, then save: "
                     f"the accepted set goes to {_code(out_path)} with who "
                     "reviewed it and when "
                     f"({len(_edits)} rewrite(s) so far)."
                     + (f" Started from the last accepted file ({resumed_from[1]} kept by "
                        f"{_esc(resumed_from[2] or 'an unnamed reviewer')})."
                        if resumed_from else "")),
               table, mo.hstack([pick, apply_edit], justify="start"), passage_view, rewrite,
               mo.md(f"<small>typed for {_esc(pick.value)}, not kept yet: Save keeps it "
                     "too</small>") if _typed
               else mo.md(""),
               mo.hstack([reviewer, save], justify="start")])
    return


@app.cell
def _(generate, get_edits, mo, out_path, pick, reviewer, rewrite, rows, save, table):
    from rag.safeio import md_code as _code, md_text as _esc  # names as text, never Markdown (issue 82)

    mo.stop(not save.value)
    try:
        _kept = [r["id"] for r in rows if str(r["id"]) in set(table.value["id"].astype(str))]
        _by_str = {str(r["id"]): r["id"] for r in rows}
        # a rewrite typed in the box but not kept with its button is saved too, and said (never dropped)
        _orig = next((r["question"] for r in rows if str(r["id"]) == pick.value), "")
        _all = generate.pending_edit(get_edits(), pick.value, rewrite.value, _orig)
        _typed = len(_all) != len(get_edits()) or _all != get_edits()
        _acc = generate.apply_review(rows, _kept, {_by_str[k]: v for k, v in _all.items()}, reviewer.value)
        generate.write_jsonl(_acc, out_path)
        _msg = mo.md(f"Saved **{len(_acc)} of {len(rows)}** questions "
                     f"({sum(r['metadata']['review']['edited'] for r in _acc)} rewritten) to "
                     f"{_code(out_path)}"
                     + (f", including the rewrite of {_esc(pick.value)} typed but "
                        "not kept." if _typed else "."))
    except ValueError as _e:
        _msg = mo.callout(mo.md(f"**Not saved:** {_esc(_e.args[0])}"), kind="danger")
    _msg
    return


if __name__ == "__main__":
    app.run()
