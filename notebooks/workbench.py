import marimo

__generated_with = "0.25.2"
app = marimo.App(width="full", app_title="RAG Workbench", html_head_file="head.html")


@app.cell
def _():
    import sys

    import marimo as mo
    import pandas as pd

    from evals.workbench import calls as interactive
    from evals.analyze import explore
    from evals.workbench import page
    from evals.report.charts import quality_cost_figure
    from evals.analyze.summary import HEADLINE, headline_table, summarize_scores
    from rag.strategies import default_strategies

    # the flags of `ragwb run` that make sense in a page (or RAGWB_LLM_* variables); a bad one is shown, not exited
    wb = interactive.workbench_args(sys.argv[1:])
    args = wb.args
    from rag.strategies import load_plugins

    load_plugins(args.plugins)  # the user's shapes join the strategy list beside the five
    STRATEGIES = default_strategies()  # plugins in; routed and escalate are opt-in (not slider shapes)
    SYSTEMS = [x.name for x in wb.systems]  # deployed services (--system NAME=URL): points beside the shapes
    return (HEADLINE, STRATEGIES, SYSTEMS, args, explore, headline_table, interactive, mo, page, pd,
            quality_cost_figure, summarize_scores, wb)


@app.cell
def _(args, interactive, mo, page, wb):
    # bundled sets first, then every folder this workspace holds; --dataset PATH opens a folder not ingested yet
    datasets = interactive.workspace_datasets(args.workspace)
    try:
        _spec = interactive.resolve_dataset(args.dataset, args.workspace)
        dataset_error = wb.error
    except ValueError as _e:
        _spec, dataset_error = None, wb.error or f"workbench: {_e.args[0]}"
    if dataset_error:
        # a mistyped flag evaluates nothing, exactly as an unknown dataset: one red cell, the page waits (a script
        # or an export, where nobody can pick, ends with the line and exit code 2)
        page.exit_headless(dataset_error)
        _spec = None
    if _spec and _spec not in datasets.values():
        from pathlib import Path as _P

        datasets = {**datasets, f"{_P(_spec).name} ({_P(_spec).resolve()})": _spec}
    # an unknown --dataset selects nothing: the page waits for a pick from the list instead of loading another set
    _first = next((k for k, v in datasets.items() if v == _spec), None)
    dataset_pick = mo.ui.dropdown(datasets, value=_first, label="dataset")
    (mo.callout(mo.md(f"**{page.esc(dataset_error)}**"), kind="danger") if dataset_error else mo.md(""))
    return dataset_error, dataset_pick


@app.cell
def _(STRATEGIES, SYSTEMS, dataset_pick, mo, wb):
    dataset = dataset_pick  # .value: the spec (a bundled name or a folder path)
    strategies = mo.ui.multiselect(list(STRATEGIES) + SYSTEMS, value=list(STRATEGIES) + SYSTEMS, label="strategies")
    _answerers = ["offline (extractive)"] + ([f"LLM: {wb.llm.model}"] if wb.llm else [])
    answerer = mo.ui.dropdown(_answerers, value=_answerers[-1], label="answerer")
    # the judge beside the answerer: the page's own flags chose it (the answering model by default); off here too
    _judges = ([f"{wb.judge.model} judges" + (" (the answering model)" if wb.llm and wb.judge.model == wb.llm.model
                                             and wb.judge.base_url == wb.llm.base_url else ""), "no judge"]
               if wb.judge else ["no judge (offline: nothing is sent)"])
    judge_pick = mo.ui.dropdown(_judges, value=_judges[0], label="judge")
    mo.vstack([mo.hstack([dataset_pick, strategies, answerer, judge_pick], justify="start", wrap=True),
               mo.md("<small>An LLM answerer: `--llm-base-url URL --llm-model M` after `--`, or RAGWB_LLM_BASE_URL "
                     "and RAGWB_LLM_MODEL (docs/llm.md); its price: `--price MODEL=IN,OUT` or RAGWB_PRICE."
                     "</small>") if not wb.llm else mo.md("")])
    return answerer, dataset, judge_pick, strategies


@app.cell
def _(args, dataset, interactive, mo):
    mo.stop(dataset.value is None, mo.md("Pick a dataset above to load it."))
    # a long first ingest (a set whose vectors are not shipped for this embedder) says what it costs first, at the
    # rate this machine measured (slowed for its load now), and waits for the button (shown by the next cell)
    ingest_cost = interactive.ingest_cost(dataset.value, args.workspace, args.embedder)
    ingest_go = mo.ui.run_button(label=f"Embed {ingest_cost['chunks']:,} chunks now")
    return ingest_cost, ingest_go


@app.cell
def _(args, mo):
    # the questions file the page evaluates: --questions, then the file a Generate just wrote (no browser reload)
    get_qfile, set_qfile = mo.state(args.questions)
    return get_qfile, set_qfile


@app.cell
def _(args, dataset, get_qfile, ingest_cost, ingest_go, interactive, mo, page, wb):
    # the Embed callout is this cell's output while it waits; the loaded set replaces it (it never stays behind)
    mo.stop(ingest_cost["seconds"] > 60 and not ingest_go.value,
            mo.callout(mo.vstack([mo.md(
                f"**{page.esc(dataset.value)}** needs {ingest_cost['chunks']:,} chunks embedded with "
                f"{page.esc(args.embedder)} first: "
                f"about {ingest_cost['seconds'] / 60:.0f} min at {ingest_cost['rate']:,.1f} chunks/s "
                f"({ingest_cost['source']}; once: later loads embed nothing). In `marimo edit` the stop button "
                "interrupts it; an interrupted ingest resumes where it stopped."), ingest_go]), kind="warn"))
    # a set not ingested yet shows a progress bar with its own rate in chunks/s and the time left
    _bar, _rate = {}, page.EmbedRate(args.workspace, args.embedder)

    def _embedded(n, total):
        if "cm" not in _bar:
            _bar["cm"] = mo.status.progress_bar(total=total,
                                                title=f"Ingesting {page.esc(dataset.value)}: embedding chunks",
                                                subtitle="once per dataset and embedder; later loads embed nothing",
                                                show_rate=False, show_eta=False, remove_on_exit=True)
            _bar["bar"] = _bar["cm"].__enter__()
        _bar["bar"].update(increment=n, subtitle=_rate.add(n, total))

    with mo.status.spinner(title=f"Loading {page.esc(dataset.value)}"):
        try:
            base_session = interactive.open_session(dataset.value, args.workspace, args.embedder,
                                                    on_progress=_embedded, questions=get_qfile(),
                                                    systems=wb.systems)
        finally:
            if "cm" in _bar:
                _bar["cm"].__exit__(None, None, None)
    if base_session.embedded:  # the next estimate on this machine starts from this rate (vectors embedded now)
        _rate.done = base_session.embedded
        _rate.keep()
    answerer_sessions = {}  # one session per answerer, kept: switching back costs nothing
    _n = len(base_session.dataset.questions)
    # shown beside the questions slider (one row: the first screen reaches the chart's points at 1440x1000)
    # a folder's name: terminal escapes shown (issue 73), HTML and Markdown shown as text, never rendered (issue 82)
    loaded_line = (f"Loaded **{page.esc(base_session.dataset.name)}**: {len(base_session.dataset.documents):,} "
                   f"documents, {_n:,} question(s)" + (
                       # the chunks embedded now, as the CLI counts them: shipped or cached vectors are not embedded
                       f"; embedded {base_session.embedded:,} chunks ({_rate.line()})" if base_session.embedded
                       else ""))
    return answerer_sessions, base_session, loaded_line


@app.cell
def _(answerer, answerer_sessions, base_session, interactive, judge_pick, wb):
    session = interactive.session_for_answerer(answerer_sessions, base_session, answerer.value, wb.llm, wb.prices,
                                               wb.judge if judge_pick.value.endswith(("judges", "model)")) else None)
    return (session,)


@app.cell
def _(args, base_session, loaded_line, mo):
    # the questions slider runs over this dataset's own questions (never "50" on an 11-question folder)
    _n = len(base_session.dataset.questions)
    _top = max(2, min(500, _n))
    # steps of 10 on a large set, unless --limit asks for fewer than 10 (--limit 5 on a 322-question set was an error)
    _start = 1 if _top <= 50 or args.limit < 10 else 10
    limit = mo.ui.slider(_start, _top, step=1 if _start == 1 else 10,
                         value=max(_start, min(_top, args.limit, _n or 1)), label=f"questions (of {_n})",
                         show_value=True, debounce=True, disabled=_n <= 1)
    mo.hstack([mo.md(loaded_line), limit if _n else mo.md("")], justify="start", gap=2, align="center")
    return (limit,)


@app.cell
def _():
    # the last applied budgets: a plain dict, never a state (nothing re-runs when it changes), read when the form is
    # built again (new questions after Generate, another dataset), so the form keeps them (issue 83, item 16)
    budget_memory = {}
    return (budget_memory,)


@app.cell
def _(base_session, budget_memory, interactive, mo):
    # budgets are batched in a form: moving sliders costs nothing until "Apply"; the code-index budgets only where
    # the corpus holds source files (on a Markdown folder they would change nothing)
    _code = any(d.code_language for d in base_session.dataset.documents)

    def _kept(name, default):  # the last applied value of a budget, else its shipped one
        return budget_memory.get(name, default)
    _code_line = ("""
        code indexes: code_block_chars {code_block_chars} (0 = whole) code_cut {code_cut} ·
        exact names first {exact_names} · stubs {stubs} · imports {imports} · where {where} ·
        hybrid's BM25 stopwords {hybrid__bm25_stopwords} (auto: dropped on code)
        """ if _code else "")
    _code_ui = dict(
        # code budgets (docs/strategies.md, Code corpora); "shipped" leaves each strategy its own default
        code_block_chars=mo.ui.slider(0, 4000, step=250, value=_kept("code_block_chars", 1000), show_value=True),
        code_cut=mo.ui.dropdown(["comments", "top"], value=_kept("code_cut", "comments")),
        exact_names=mo.ui.checkbox(value=_kept("exact_names", True)),
        stubs=mo.ui.dropdown(["last", "keep"], value=_kept("stubs", "last")),
        imports=mo.ui.dropdown([interactive.SHIPPED, "last", "keep"], value=_kept("imports", interactive.SHIPPED)),
        where=mo.ui.text(value=_kept("where", ""), placeholder="kind=method;file=src/*.py"),
        hybrid__bm25_stopwords=mo.ui.dropdown(["auto", "drop", "keep"], value=_kept("hybrid__bm25_stopwords", "auto")),
    ) if _code else {}
    budgets = mo.md(
        """
        **Budgets** (each strategy's own, from its shipped values) · chunks: top_k {chunks__top_k} · hybrid: top_k {hybrid__top_k} alpha {hybrid__alpha}
        fusion {hybrid__fusion} · full_documents: top_k {full_documents__top_k}
        max_total_chars {full_documents__max_total_chars}

        two_phase_pages: top_chunks {two_phase_pages__top_chunks} top_pages {two_phase_pages__top_pages} ·
        parent_child: top_k {parent_child__top_k} max_parents {parent_child__max_parents}

        every strategy: max_context_tokens {max_context_tokens} (0 = no limit) overflow {overflow}
        """ + _code_line
    ).batch(
        chunks__top_k=mo.ui.slider(1, 30, value=_kept("chunks__top_k", 8), show_value=True),
        hybrid__top_k=mo.ui.slider(1, 30, value=_kept("hybrid__top_k", 8), show_value=True),
        hybrid__alpha=mo.ui.slider(0.0, 1.0, step=0.05, value=_kept("hybrid__alpha", 0.8), show_value=True),
        hybrid__fusion=mo.ui.dropdown(["weighted", "rrf"], value=_kept("hybrid__fusion", "weighted")),
        full_documents__top_k=mo.ui.slider(1, 30, value=_kept("full_documents__top_k", 8), show_value=True),
        full_documents__max_total_chars=mo.ui.slider(2000, 80000, step=2000, value=_kept("full_documents__max_total_chars", 80000), show_value=True),
        two_phase_pages__top_chunks=mo.ui.slider(0, 20, value=_kept("two_phase_pages__top_chunks", 5), show_value=True),
        two_phase_pages__top_pages=mo.ui.slider(1, 10, value=_kept("two_phase_pages__top_pages", 5), show_value=True),
        parent_child__top_k=mo.ui.slider(1, 60, value=_kept("parent_child__top_k", 20), show_value=True),
        parent_child__max_parents=mo.ui.slider(1, 10, value=_kept("parent_child__max_parents", 4), show_value=True),
        max_context_tokens=mo.ui.slider(0, 8000, step=250, value=_kept("max_context_tokens", 0), show_value=True),
        overflow=mo.ui.dropdown(["truncate", "drop"], value=_kept("overflow", "truncate")),
        **_code_ui,
    ).form(submit_button_label="Apply budgets")
    # what the form starts from stands until its first Apply (kept budgets apply as shown, not the defaults)
    budget_start = {k: v for k, v in budget_memory.items() if k in budgets.element.elements}
    budgets
    return budget_start, budgets


@app.cell
def _(budget_memory, budget_start, budgets):
    budget_values = budgets.value or budget_start  # the budgets every Apply, Sweep, Race and search uses
    if budgets.value:
        budget_memory.update(budgets.value)
    return (budget_values,)


@app.cell
def _(mo):
    # summaries of earlier applied budgets: drawn as faded points under the current ones
    get_history, set_history = mo.state([])
    # bumped after every send: each cost line is counted again (what is cached now is free)
    get_sent, set_sent = mo.state(0)
    return get_history, get_sent, set_history, set_sent


@app.cell
def _(SYSTEMS, budget_values, get_sent, interactive, limit, mo, page, session, strategies):
    get_sent()  # noqa: B018  (after a send the line counts again: what was sent is cached now)
    _none = not session.dataset.questions
    if _none:  # a folder with no questions: searchable below; nothing to answer (a script or an export ends here)
        page.exit_headless("workbench: " + page.no_questions_message(session, markdown=False))
    mo.stop(_none, mo.callout(mo.md(page.no_questions_message(session)), kind="info"))
    # before an Apply sends anything: the calls, prompt tokens and dollars it would cost, and what is cached
    applied_points = interactive.points_from_budgets(strategies.value, budget_values, systems=SYSTEMS)
    plan = interactive.answer_plan(session, applied_points, limit.value)
    _model = session.client.cfg.model if session.client is not None else ""
    # the judge's calls (the answering model judges by default) are in the same line and the same Send
    send_go = mo.ui.run_button(label=f"Send {'up to ' if plan.judge_bound else ''}"
                                     f"{plan.calls + plan.service_requests:,} call(s)")
    needs_ok = plan.calls + plan.service_requests > 0
    # offline nothing waits for a Send: the line says what this Apply does, true before and after it ran
    _line = (plan.line(_model) if needs_ok or session.client is not None or not plan.items else
             f"this Apply evaluates {plan.items:,} new item(s) offline (nothing is sent); the rest are in this session")
    plan_line = f"**{page.esc(session.answerer_label)}**: {page.esc(_line)}" + (
        " " + page.esc("; ".join(plan.notes)) if plan.notes else "")
    # a line that waits for Send stands here with its button; one that needs nothing sits beside the chart's
    # metric (one row less above the chart at 1440x1000: issue 72)
    mo.vstack([mo.md(plan_line), send_go]) if needs_ok else mo.md("")
    return applied_points, needs_ok, plan, plan_line, send_go


@app.cell
def _(applied_points, args, dataset, interactive, limit, mo, needs_ok, plan, send_go, session, set_history,
      set_sent, summarize_scores):
    mo.stop(needs_ok and not (send_go.value or args.send),
            mo.md("Nothing sent yet: press *Send* above to answer the new items (the cost line says what it costs)."))
    # a progress bar per item; the notebook's stop (marimo edit) keeps every item already answered
    try:
        with mo.status.progress_bar(total=max(plan.items, 1), title="Evaluating",
                                    subtitle="cached candidates: only packing, answering and scoring re-run",
                                    show_rate=True, show_eta=True, remove_on_exit=True) as _bar:
            scores = interactive.evaluate_points(session, applied_points, limit.value,
                                                 on_item=lambda n: _bar.update(increment=n))
            summary = interactive.summarize_session(session, scores)
    except KeyboardInterrupt:  # Stop in `marimo edit`: what was answered is kept, said without a traceback
        mo.stop(True, mo.callout(mo.md(f"Stopped. {len(session.items):,} item(s) answered so far are kept: press "
                                       "*Apply budgets* (or *Send*) to go on from there."), kind="warn"))
    if needs_ok:
        set_sent(lambda n: n + 1)  # the cost line above counts again (now from the response cache)
    # earlier budgets belong to this dataset, answerer and question set: another set's points are not history
    history_key = (dataset.value, session.answerer_label, limit.value)
    set_history(lambda h: (h + [(history_key, summary)])[-40:])
    # the per-question frame, for pandas users: `rows` (one row per question x point x metric)
    rows = scores
    return history_key, rows, scores, summary


@app.cell
def _(mo):
    # (grades so far, the passage graded last), bumped by every grade: the judged metrics and the picker follow
    get_graded, set_graded = mo.state((0, None))
    get_said, set_said = mo.state("")
    return get_graded, get_said, set_graded, set_said


@app.cell
def _(args, get_graded, interactive, scores, session):
    get_graded()  # noqa: B018  (a new grade changes the judged metrics)
    # judged_ndcg@10, judged_recall@10, judged_precision@5 and judged@10 from the grades stored now (as `ragwb show`)
    judged_scores = interactive.session_judged_scores(args.db, session, scores)
    return (judged_scores,)


@app.cell
def _(mo):
    # the metric the user picked last: kept while it has values here (a default that has none moves, and says why)
    get_quality_pick, set_quality_pick = mo.state("f1")
    return get_quality_pick, set_quality_pick


@app.cell
def _(args, get_quality_pick, mo, needs_ok, page, plan_line, session, set_quality_pick, summary):
    # a judge at chance ranks nothing: its metric is marked and never the one the chart falls back to (issue 85)
    _opts, _shown, quality_note = page.metric_choices(summary, get_quality_pick(),
                                                      page.applicable_metrics(session, page.QUALITY_CHOICES),
                                                      chance=page.chance_metrics(session, args.workspace))
    quality = mo.ui.dropdown(_opts, value=_shown, label="quality metric", on_change=set_quality_pick)
    cost = mo.ui.dropdown(["context_tokens", "prompt_tokens", "cost_usd"], value="context_tokens", label="cost")
    # why the chart shows another metric (or none) is said under the chart, so the points stay on the first screen
    mo.hstack([quality, cost] + ([] if needs_ok else [mo.md(f"<small>{plan_line}</small>")]),
              justify="start", align="center", wrap=True)
    return cost, quality, quality_note


@app.cell
def _(mo):
    headline_all = mo.ui.checkbox(label="all columns")  # kept across Applies (its own cell)
    return (headline_all,)


@app.cell
def _(HEADLINE, cost, get_history, headline_all, headline_table, history_key, judge_notes, mo, page, pd, quality,
      quality_cost_figure, quality_note, summary):
    _hist = [s for k, s in get_history()[:-1] if k == history_key]
    # the answer-side metrics an LLM answer is scored on join the headline (faithfulness and citations against
    # token cost: what the budgets trade); judged first, the columns past the fourth behind *all columns*
    _table, _dropped, _more = page.headline_columns(summary, headline_table, page.headline_order(summary, HEADLINE),
                                                    headline_all.value)
    _fig = quality_cost_figure(summary, quality.value, cost.value, pd.concat(_hist, ignore_index=True) if _hist else None)
    _fig.update_layout(height=_fig.layout.height - 80, margin_b=60)  # the points on the first screen at 1440x1000
    mo.vstack([
        page.plotly(_fig),
        mo.md(quality_note) if quality_note else mo.md(""),
        mo.ui.table(show_download=False, show_column_summaries=False, data=page.labelled(_table), selection=None, freeze_columns_left=["strategy", "point"]),
        mo.md("<small>not shown (n/a on every row): " + page.esc(page.not_shown_line(_dropped)) + "</small>")
        if _dropped else mo.md(""),
        # the toggle only where it adds a column with a value (or to take them away again)
        mo.hstack([headline_all, mo.md(f"<small>{len(_more)} more column(s): {page.esc(', '.join(_more))}</small>")
                   if _more else mo.md("")], justify="start") if _more or headline_all.value else mo.md(""),
    ] + [mo.md(f"<small>judge: {page.esc(_l)}</small>") for _l in judge_notes]
      + [mo.md(f"<small>{_c}</small>") for _c in page.chart_captions(bool(_hist), summary, quality.value)]
    ) if len(summary) else mo.md("Pick at least one strategy.")
    return


@app.cell
def _(args, get_agreed, interactive, mo, page, scores, session):
    # how far to trust each judged column (`ragwb agreement`'s stored figure), and why points lose: sufficiency x
    # outcome per point (a stacked bar, as the report's)
    get_agreed()  # noqa: B018  (the judge's agreement measured on this page: its figure shows at once)
    judge_notes = interactive.judge_lines(session, args.workspace, scores)

    def _why_points_lose():  # drawn when scrolled to (mo.lazy): an Apply does not wait for a chart below the fold
        _bar = page.sufficiency_bar(scores)
        return mo.vstack([page.plotly(_bar), mo.md(
            "<small>Sufficient: the packed context held what the question needs (gold evidence offline, else the "
            "LLM autorater). Wrong with a sufficient context: the model ignored it; answered with an insufficient "
            "one: a hallucination risk (docs/metrics.md).</small>")]) if _bar is not None else mo.md("")

    mo.vstack([mo.md("### Why points lose: context sufficiency x answer outcome"), mo.lazy(_why_points_lose)]
              ) if page.has_sufficiency(scores) else mo.md("")
    return (judge_notes,)


@app.cell
def _(applied_points, interactive, mo):
    # what each point on the chart is: the applied budgets and their changes since the shipped defaults
    mo.ui.table(show_download=False, show_column_summaries=False, data=interactive.applied_budgets_table(applied_points),
                selection=None, label="applied budgets (each point's label names its changed budgets)")
    return


@app.cell
def _(mo):
    # bumped by every save: the stored-run dropdowns re-read the store, so a run just saved can be compared
    get_saved, set_saved = mo.state(0)
    return get_saved, set_saved


@app.cell
def _(mo, page, session):
    # no questions: no button that would do nothing; the line says what Save, Sweep and Race need
    save_id = mo.ui.text(label="run id (optional)", placeholder="wb-...")
    save_go = mo.ui.run_button(label="Save as run")
    (mo.hstack([save_go, save_id, mo.md("<small>stores the applied budgets' items (nothing is evaluated again), "
                                       "so `ragwb runs`, `show`, the report and the gate see them</small>")],
               justify="start") if session.dataset.questions else
     mo.md(f"<small>*Save as run*, *Sweep* and *Race* need questions: {page.needs_questions(session)}</small>"))
    return save_go, save_id


@app.cell
def _(applied_points, args, interactive, limit, mo, page, save_go, save_id, session, set_saved):
    # not tied to the scores: a press while an Apply waits for its Send runs and says what it needs (never a
    # button that shows and stores nothing)
    mo.stop(not save_go.value)
    try:
        _rid, _rep, _why = interactive.save_with_report(session, args.db, applied_points, limit.value, args.workspace,
                                                        save_id.value.strip() or None)
        set_saved(lambda n: n + 1)  # every stored-run dropdown re-reads the store at once
        _more = ([mo.download(_rep.read_bytes(), filename=_rep.name, mimetype="text/html",
                              label=f"Open the report of {page.esc(_rid)}")] if _rep else
                 [mo.callout(mo.md(f"The report was not written: {page.esc(_why)}"), kind="warn")])
        _where = f" ({page.esc(_rep)})" if _rep else ""
        _out = mo.vstack([mo.callout(mo.md(f"Saved run **{page.esc(_rid)}**{_where}: it is in the stored-run lists "
                                           f"below; {page.md_code(f'ragwb show {_rid}')}, "
                                           f"{page.md_code(f'ragwb gate --baseline ... --candidate {_rid}')}."),
                                     kind="success")] + _more)
    except (ValueError, KeyError) as _e:
        _out = mo.callout(mo.md(f"**Not saved:** {page.esc(_e.args[0] if _e.args else _e)}"), kind="danger")
    _out
    return


@app.cell
def _(mo, session):
    # the controls never read the scores, so an Apply keeps every tick, search, field, metric and sort as it was
    _fields = sorted({k for q in session.dataset.questions for k in (q.metadata or {})})
    f_disagree = mo.ui.checkbox(label="strategies disagree")
    f_fail = mo.ui.checkbox(label="any failure status")
    f_unans = mo.ui.checkbox(label="unanswerable")
    f_field = mo.ui.dropdown(["(none)"] + _fields, value="(none)", label="field")
    f_value = mo.ui.text(label="equals", placeholder="value")
    f_search = mo.ui.text(label="search", placeholder="question text or id")
    f_worse = mo.ui.checkbox(label="B worse than A (the paired comparison's points)")
    return f_disagree, f_fail, f_field, f_search, f_unans, f_value, f_worse


@app.cell
def _(mo):
    get_cell_metric, set_cell_metric = mo.state(None)  # the matrix metric the user picked (None: follow the chart)
    return get_cell_metric, set_cell_metric


@app.cell
def _(f_disagree, f_fail, f_field, f_search, f_unans, f_value, f_worse, get_cell_metric, judged_scores, mo, page,
      quality, session, set_cell_metric, summary):
    from evals.score.metrics import METRICS as _METRICS

    # the cell metric: the user's pick, else the chart's metric (one that has values here); n/a ones are marked
    # (judged metrics have values once a passage is graded)
    _judged = set(judged_scores[judged_scores.status == "ok"].metric) if len(judged_scores) else set()
    _opts, _shown, _ = page.metric_choices(summary, get_cell_metric() or quality.value,
                                           page.applicable_metrics(session, sorted(_METRICS)), _judged)
    m_metric = mo.ui.dropdown(_opts, value=_shown, label="cell metric", on_change=set_cell_metric)
    mo.vstack([mo.md("## Question x point matrix (click a cell to open it below)"),
               mo.hstack([m_metric, f_disagree, f_fail, f_unans, f_worse, f_field, f_value, f_search],
                         justify="start", wrap=True)])
    return (m_metric,)


@app.cell
def _(explore, f_disagree, f_fail, f_field, f_search, f_unans, f_value, f_worse, judged_scores, m_metric, mo,
      page, pair_a, pair_b, scores, session):
    # the judged metrics are computed from the grades stored now, beside the item scores; the points first (after
    # the id and a shortened question: whole on hover and in the drill-down), n/a cells empty, 3 decimals
    matrix, _shown, _pts, _total = page.matrix_view(scores, judged_scores, session.dataset.questions, m_metric.value, {
        "disagree": f_disagree.value, "failures": f_fail.value, "unanswerable": f_unans.value,
        "field": None if f_field.value == "(none)" else f_field.value, "value": f_value.value,
        "search": f_search.value, "worse": (pair_a.value, pair_b.value) if f_worse.value else None})
    matrix_table = mo.ui.table(
        # an Arrow table: marimo styles each cell of the page 4x faster than from pandas (0.23 -> 0.06 s an Apply)
        page.arrow(_shown), show_download=False, show_column_summaries=False, selection="single-cell", page_size=12, freeze_columns_left=["question_id"] if len(_shown) else None,
        hover_template=lambda _r, _c, _v: page.full_question(matrix, _r) if _c == "question" else None,
        style_cell=lambda _row, _col, _v: ({"backgroundColor": explore.cell_colour(float(_v)), "maxWidth": "7em"}
                                          if _col in _pts and _v not in ("", None) else
                                          {"maxWidth": "7em"} if _col in _pts else {}),
        label=f"{len(matrix)} of {_total} questions") if len(_shown) else mo.md("No question matches the filters.")
    mo.vstack([matrix_table, page.csv_download(matrix, "matrix.csv", "Download the matrix as CSV")]) if len(_shown) \
        else matrix_table
    return matrix, matrix_table


@app.cell
def _(mo):
    # what the drill-down showed last: an Apply keeps the question and moves each side to its new point
    get_pick, set_pick = mo.state({})
    return get_pick, set_pick


@app.cell
def _(explore, get_pick, matrix, matrix_table, mo, scores, set_pick):
    _pts = explore.points_of(scores)
    _cell = (getattr(matrix_table, "value", None) or [None])[0]
    _qids = list(matrix["question_id"]) if len(matrix) else []
    _c = explore.drilldown_choice(matrix, _pts, _cell, get_pick())
    set_pick(_c)

    def _keep(key):
        return lambda v: set_pick(lambda p: {**p, key: v})

    pick_q = mo.ui.dropdown(_qids, value=_c["q"], label="question", on_change=_keep("q"))
    pick_a = mo.ui.dropdown(_pts, value=_c["a"], label="point A", on_change=_keep("a"))
    pick_b = mo.ui.dropdown(["(none)"] + _pts, value=_c["b"], label="point B (side by side)", on_change=_keep("b"))
    mo.vstack([mo.md("## Drill-down: the applied budgets, one question, one or two points"),
               mo.hstack([pick_q, pick_a, pick_b], justify="start")])
    return pick_a, pick_b, pick_q


@app.cell
def _(interactive, mo, pick_a, pick_b, pick_q, scores, session):
    scores  # noqa: B018  (re-render whenever the applied budgets change: never a stale drill-down)
    # corpus text and answers are escaped by the library: shown as text, never executed
    (mo.Html(interactive.side_by_side_html(session, pick_q.value, pick_a.value,
                                           None if pick_b.value == "(none)" else pick_b.value))
     if pick_q.value and pick_a.value else
     mo.md("No question matches the matrix filters: clear the search or a filter." if len(scores)
           else "Pick at least one strategy and press *Apply budgets* to see its items."))
    return


@app.cell
def _(args, get_graded, interactive, mo, pick_a, pick_q, scores, session):
    scores  # noqa: B018  (the passages of the applied budgets)
    _last = get_graded()[1]  # after a grade the picker moves to the next ungraded passage
    passages = (interactive.gradable_passages(session, pick_a.value, pick_q.value)
                if pick_q.value and pick_a.value else [])
    _stored = interactive.stored_grades(args.db, session, pick_q.value) if passages else {}
    _labels = {f"[{p['rank']}] {p['source']}": i for i, p in enumerate(passages)}
    _next = interactive.next_ungraded(passages, _stored, _last)
    passage_pick = mo.ui.dropdown(_labels, value=next((k for k, v in _labels.items() if v == _next), None),
                                  label="passage")
    return passage_pick, passages


@app.cell
def _(mo):
    grader = mo.ui.text(label="your name", placeholder="ana (stored as human:ana)")
    return (grader,)


@app.cell
def _(args, grader, interactive, mo, passage_pick, passages, pick_q, session, set_graded, set_said):
    def _grade(g):
        def _click(_):
            _n, _msg = interactive.grade_click(args.db, session, pick_q.value, passages, passage_pick.value, g,
                                               grader.value)
            set_said(_msg)
            if _msg.startswith("stored"):
                set_graded(lambda st: (st[0] + 1, passage_pick.value))
            return _n, _msg
        return _click

    # keys 0-3 grade the passage picked above (the UMBRELA scale: docs/judgments.md)
    grade_buttons = mo.ui.array([mo.ui.button(label=interactive.GRADE_LABELS[_g], on_click=_grade(_g),
                                              keyboard_shortcut=str(_g)) for _g in range(4)])
    return (grade_buttons,)


@app.cell
def _(args, get_said, grade_buttons, grader, interactive, mo, page, passage_pick, passages, pick_q, session):
    _p = passages[passage_pick.value] if passages and passage_pick.value is not None else None
    # the buttons above the passage's text, so a grader reads down and presses a key
    (mo.vstack([mo.md("**Grade point A's passages** for this question (0 not relevant, 1 related, 2 partly answers, "
                      "3 answers; keys 0-3). Each grade is stored at once in the results store, keyed by question and "
                      "passage text, as `ragwb judge --import` stores them; the picker then moves to the next "
                      "ungraded passage, and the matrix's judged metrics follow."),
                mo.hstack([grader], justify="start"),
                # one box around the picker and the buttons: keys 0-3 grade while focus is on either (head.html)
                mo.Html(f"<div data-ragwb-grading='1'>{mo.hstack([passage_pick] + list(grade_buttons), justify='start')}"
                        "</div>"),
                mo.md(page.esc(get_said())),
                mo.Html("<pre style='white-space:pre-wrap;max-height:14em;overflow:auto'>"
                        + __import__("html").escape(_p["text"]) + "</pre>") if _p else mo.md(""),
                mo.Html(interactive.grading_table_html(args.db, session, pick_q.value, passages))])
     if passages else mo.md(""))
    return


@app.cell
def _(explore, mo, scores):
    _pts = explore.points_of(scores)
    pair_a = mo.ui.dropdown(_pts, value=_pts[0] if _pts else None, label="A")
    pair_b = mo.ui.dropdown(_pts, value=_pts[1] if len(_pts) > 1 else None, label="B")
    mo.vstack([mo.md("## Paired comparison inside this run (B - A, paired bootstrap over the same questions)"),
               mo.hstack([pair_a, pair_b], justify="start")])
    return pair_a, pair_b


@app.cell
def _(explore, mo, page, pair_a, pair_b, quality, scores):
    mo.stop(not (pair_a.value and pair_b.value and pair_a.value != pair_b.value),
            mo.md("Pick two different points."))
    # the metrics with a value here (an n/a metric pairs nothing), 1,000 resamples as the report's table; computed
    # when scrolled to (mo.lazy): an Apply does not wait for a table below the fold
    def _paired():
        _p = explore.paired_points(scores, pair_a.value, pair_b.value, page.paired_metrics(scores),
                                   first=quality.value, n_resamples=1000)
        _k = explore.quality_per_1k_tokens(scores, quality.value)
        return mo.vstack([
            mo.ui.table(show_download=False, show_column_summaries=False, data=_p, selection=None,
                        label=f"{page.esc(pair_b.value)} vs {page.esc(pair_a.value)}: delta with 95% interval; "
                        "better / worse when the interval excludes 0",
                        format_mapping={c: (lambda v: "" if v != v else f"{v:.3f}") for c in _p.columns
                                        if _p[c].dtype.kind == "f"}) if len(_p) else mo.md("No metric has paired questions."),
        ] + [mo.md(f"<small>{page.esc(_n)}</small>") for _n in explore.paired_notes(_p)] + [
            mo.md(f"**{page.esc(quality.value)} per 1,000 context tokens** (95% bootstrap interval of the ratio of "
                  "means)"),
            mo.ui.table(show_download=False, show_column_summaries=False, data=_k, selection=None,  # 3 decimals
                        format_mapping={c: "{:.3f}" for c in _k.columns if _k[c].dtype.kind == "f" and c != "n"}),
        ])

    mo.lazy(_paired)
    return


@app.cell
def _(mo):
    # cost at scale (issue 83): what each applied point would cost on N questions, N typed
    project_n = mo.ui.number(start=1, stop=100_000_000, step=1, value=10_000, label="questions at scale")
    return (project_n,)


@app.cell
def _(mo, page, project_n, session, summary):
    _t = page.cost_projection(summary, int(project_n.value), session.client is not None)
    mo.vstack([mo.md("## Cost at scale: each applied point's mean tokens and dollars a question, times N (a "
                     "projection of these questions' means; dollars *unknown* where the model has no price)"),
               project_n, mo.ui.table(show_download=False, show_column_summaries=False, data=_t, selection=None)])
    return


@app.cell
def _(mo):
    oracle_tol = mo.ui.slider(0.0, 0.5, step=0.05, value=0.0, label="tolerance", show_value=True, debounce=True)
    return (oracle_tol,)


@app.cell
def _(cost, mo, oracle_tol, page, quality, scores):
    from evals.analyze.routing import oracle_bound as _oracle_bound

    def _oracle():  # computed when scrolled to (mo.lazy): an Apply does not wait for a table below the fold
        try:
            _t, _info = _oracle_bound(scores, quality.value, cost.value, oracle_tol.value)
            return mo.vstack([mo.md(f"{page.esc(_info['summary'])}. "
                                    f"{page.md_code(f'ragwb route RUN --metric {quality.value}')} learns a router "
                                    "from a stored run and measures it out of fold (docs/routing.md)."),
                              mo.ui.table(show_download=False, show_column_summaries=False, data=_t.round(3),
                                          selection=None)])
        except ValueError as _e:
            return mo.md(f"No oracle: {page.esc(_e)}")

    mo.vstack([mo.md("## How much could routing save at most? (per question the cheapest point within the "
                     "tolerance of the best)"), oracle_tol, mo.lazy(_oracle)])
    return


@app.cell
def _(STRATEGIES, mo):
    curve_strategy = mo.ui.multiselect(list(STRATEGIES), value=["chunks"], label="strategies (overlaid)")
    curve_param = mo.ui.text(value="top_k", label="budget")
    curve_values = mo.ui.text(value="2,4,8,16", label="values")
    # confirm questions (docs/sweeps.md): a share set aside; the pick is scored on them after the grid
    confirm_share = mo.ui.number(start=0, stop=0.9, step=0.05, value=0, label="confirm share (0: off)")
    mo.vstack([mo.md("## Budget curve: sweep one budget from the applied budgets (re-packs from cached "
                     "candidates), or race it as a stored run (points leave as batches land: docs/sweeps.md). "
                     "A confirm share sets questions aside: the grid tunes on the rest and the point it picks is "
                     "scored on them (a stored run)"),
               mo.hstack([curve_strategy, curve_param, curve_values, confirm_share], justify="start")])
    return confirm_share, curve_param, curve_strategy, curve_values


@app.cell
def _(budget_values, confirm_share, curve_param, curve_strategy, curve_values, get_sent, interactive, limit,
      mo, page, session):
    get_sent()  # noqa: B018  (counted again after every send)
    mo.stop(not session.dataset.questions, mo.md(f"Sweep and Race need questions: {page.needs_questions(session)}"))
    # what a Sweep would send, before it sends anything: the same line as Apply's, then the buttons
    try:
        sweep_points = interactive.sweep_points(curve_strategy.value, curve_param.value, curve_values.value,
                                                budget_values)
        sweep_plan = interactive.answer_plan_kept(session, sweep_points, limit.value, get_sent())
        _line, _said = sweep_plan.line(session.client.cfg.model if session.client is not None else ""), None
        if confirm_share.value:  # the grid on the tune part and the pick on the rest: never more than this
            interactive.confirm_part(confirm_share.value, "f1")  # a share the run would refuse is said here
            _line += (f"; with {confirm_share.value:g} of the questions set aside to confirm the pick: a stored "
                      "run, at most these calls")
    except (ValueError, KeyError) as _e:  # a wrong budget name or value is said here, naming the valid ones
        sweep_points, sweep_plan, _said = [], None, _e.args[0] if _e.args else str(_e)
    _calls = (sweep_plan.calls + sweep_plan.service_requests) if sweep_plan else 0  # judge calls included
    _up = "up to " if sweep_plan is not None and sweep_plan.judge_bound else ""
    curve_go = mo.ui.run_button(label=f"Sweep ({_up}{_calls:,} new call(s))" if _calls else "Sweep",
                                disabled=sweep_plan is None)
    race_go = mo.ui.run_button(label="Race these budgets" + (f" (up to {_calls:,} call(s))" if _calls else ""),
                               disabled=sweep_plan is None)
    mo.vstack([mo.md(f"**Sweep / race, {page.esc(session.answerer_label)}**: {page.esc(_line)}")
               if sweep_plan is not None else
               mo.callout(mo.md(f"**Sweep not possible:** {page.esc(_said)}"), kind="danger"),
               mo.hstack([curve_go, race_go], justify="start")])
    return curve_go, race_go, sweep_plan, sweep_points


@app.cell
def _(mo):
    # the last curve drawn: it stays on screen when the cost line is counted again after its send
    get_curve, set_curve = mo.state(None)
    return get_curve, set_curve


@app.cell
def _(args, budget_values, confirm_share, curve_go, curve_param, curve_strategy, curve_values, get_curve,
      interactive, limit, mo, page, quality, quality_cost_figure, session, set_curve, set_saved, set_sent,
      summarize_scores, sweep_plan, sweep_points, wb):
    # a curve drawn on other questions (before Generate loaded new ones) is not this page's any more
    mo.stop(not curve_go.value, page.kept_output(get_curve(), session) or mo.md("Press Sweep to draw the curve (the line above says what it "
                                                     "sends first)."))
    _title = (f"{quality.value} vs context tokens: {', '.join(curve_strategy.value)} sweeping "
              f"{curve_param.value.strip()} = {curve_values.value} (other budgets as applied)")
    if confirm_share.value:  # a stored run: the grid on the tune part, the pick scored on the confirm part
        try:
            _rid = interactive.sweep_stored(session, args.db, args.workspace, curve_strategy.value, curve_param.value,
                                            curve_values.value, budget_values, limit.value, quality.value,
                                            confirm_share.value, prices=wb.prices)
            _pick = interactive.pick_of(args.db, _rid, quality.value)
            _out = mo.vstack([mo.md(f"Swept and stored as **{page.esc(_rid)}** "
                                    f"({page.md_code(f'ragwb show {_rid}')})" + "".join(
                                        f"  \n{page.esc(_x)}" for _x in (_pick or {}).get("lines", []))),
                              page.plotly(quality_cost_figure(interactive.stored_summary(args.db, _rid),
                                                              quality.value, "context_tokens",
                                                              title=f"sweep {_rid}: {_title}", picked=_pick))])
            set_saved(lambda n: n + 1)
        except (ValueError, KeyError) as _e:
            _out = mo.callout(mo.md(f"**Sweep not run:** {page.esc(_e.args[0] if _e.args else _e)}"), kind="danger")
    else:
        _sc = interactive.evaluate_points(session, sweep_points, limit.value)
        _out = page.plotly(quality_cost_figure(summarize_scores(_sc), quality.value, "context_tokens", title=_title))
    set_curve((page.questions_key(session), _out))
    if sweep_plan.calls + sweep_plan.service_requests:
        set_sent(lambda n: n + 1)  # every cost line counts again: what was sent is cached now
    _out
    return


@app.cell
def _(mo):
    # the last race's result: it stays on screen when the cost line and the stored-run lists are counted again
    get_race, set_race = mo.state(None)
    return get_race, set_race


@app.cell
def _(args, budget_values, confirm_share, curve_param, curve_strategy, curve_values, get_race, interactive, limit, mo,
      page, quality, quality_cost_figure, race_go, session, set_race, set_saved, set_sent, sweep_plan, wb):
    mo.stop(not race_go.value, page.kept_output(get_race(), session) or mo.md(""))
    # the live leaderboard: replaced after every batch while the race runs; the run is stored like any other
    def _look(seen, alive, exits):
        mo.output.replace(mo.vstack([mo.md(f"**Racing on {page.esc(quality.value)}**: {seen} questions so far, "
                                           f"{len(alive)} point(s) in the race"),
                                     mo.ui.table(show_download=False, show_column_summaries=False, data=interactive.race_leaderboard(seen, alive, exits), selection=None)]))

    try:
        _rid = interactive.race_budgets(session, args.db, args.workspace, curve_strategy.value, curve_param.value,
                                        curve_values.value, budget_values, limit.value, quality.value,
                                        on_look=_look, prices=wb.prices, confirm=confirm_share.value)
        _line, _board = interactive.race_result(args.db, _rid)
        # the curve of every point raced (a point raced out is drawn on the questions it was scored on), who left
        # and when, and the share of the grid's items spent
        _out = mo.vstack([mo.md(_line), mo.ui.table(show_download=False, show_column_summaries=False, data=_board, selection=None),
                          page.plotly(quality_cost_figure(
                              interactive.stored_summary(args.db, _rid), quality.value, "context_tokens",
                              title=f"race {_rid}: {quality.value} vs context tokens, {', '.join(curve_strategy.value)} "
                                    f"racing {curve_param.value.strip()} = {curve_values.value}"))])
    except (ValueError, KeyError) as _e:
        _rid, _out = None, mo.callout(mo.md(f"**Race not run:** {page.esc(_e.args[0] if _e.args else _e)}"),
                                      kind="danger")
    set_race((page.questions_key(session), _out))  # kept before the store and the cost line are counted again (they re-run this cell's inputs)
    if _rid:
        set_saved(lambda n: n + 1)
        if sweep_plan.calls + sweep_plan.service_requests:
            set_sent(lambda n: n + 1)
    _out
    return


@app.cell
def _(mo, session):
    # index settings as budgets: the values to compare, each config built once (docs/sweeps.md, Index axes)
    from rag.index.embedders import EMBEDDERS as _EMB

    _c = session.retriever.reader.config
    _embedders = sorted({x for x in _EMB if x not in ("openai", "st")} | {_c.embedder.name})
    index_form = mo.md(
        """
        **Index**: values to compare, comma-separated (e.g. chunk tokens `64,128,256`); each config is built once
        and priced before anything is embedded. chunker {chunker} · chunk tokens {chunk_tokens} · overlap {overlap}
        · leaf min {leaf_min} · leaf max {leaf_max} · parent max {parent_max} · embedder {embedder}
        """
    ).batch(
        chunker=mo.ui.text(value=_c.chunking.chunker), chunk_tokens=mo.ui.text(value=str(_c.chunking.chunk_tokens)),
        overlap=mo.ui.text(value=str(_c.chunking.overlap)), leaf_min=mo.ui.text(value=str(_c.chunking.leaf_min)),
        leaf_max=mo.ui.text(value=str(_c.chunking.leaf_max)),
        parent_max=mo.ui.text(value=str(_c.chunking.parent_max)),
        embedder=mo.ui.multiselect(_embedders, value=[_c.embedder.name]),
    ).form(submit_button_label="Plan the index sweep")
    mo.vstack([mo.md("## Index: chunk size, chunker and embedder as budgets (the applied budgets on every config)"),
               index_form])
    return (index_form,)


@app.cell
def _(mo):
    # the last index sweep's result: it stays when the chart's metric or the plan is counted again (its run is stored)
    get_index_result, set_index_result = mo.state(None)
    return get_index_result, set_index_result


@app.cell
def _(applied_points, args, get_saved, index_form, limit, mo, page, session):
    get_saved()  # noqa: B018  (counted again after a sweep is stored: its configs are built now, its texts cached)
    mo.stop(index_form.value is None, mo.md("Nothing is embedded until you plan the sweep and press its button."))
    from evals.workbench import index_sweep as _ix

    try:
        index_axes = _ix.form_axes(index_form.value)
        index_plan = _ix.plan_index_sweep(session, args.workspace, index_axes, applied_points, limit.value)
        _err = None
    except ValueError as _e:  # an unknown chunker or embedder, a value of the wrong kind: named, nothing run
        index_axes, index_plan, _err = {}, None, _e.args[0] if _e.args else str(_e)
    mo.stop(_err is not None, mo.callout(mo.md(f"**Index sweep not possible:** {page.esc(_err)}"), kind="danger"))
    _model = session.client.cfg.model if session.client is not None else ""
    index_go = mo.ui.run_button(label=(f"Embed {index_plan.chunks:,} chunks and run (about "
                                       f"{index_plan.seconds / 60:.1f} min)") if index_plan.chunks
                                else "Run the index sweep" + (
                                    f" ({index_plan.exact.new_calls + index_plan.exact.judge_calls:,} new call(s))"
                                    if index_plan.exact is not None else ""))
    mo.vstack([mo.md(f"**{page.esc(session.answerer_label)}**: {page.esc(index_plan.line(_model))}"),
               mo.ui.table(show_download=False, show_column_summaries=False, data=index_plan.table, selection=None, label="index configs (applied-index table)"), index_go])
    return index_axes, index_go


@app.cell
def _(applied_points, args, get_index_result, index_axes, index_go, interactive, limit, mo, page, quality,
      quality_cost_figure, session, set_index_result, set_saved, set_sent, wb):
    mo.stop(not index_go.value, page.kept_output(get_index_result(), session) or mo.md(""))
    from evals.workbench import index_sweep as _ix

    try:
        with mo.status.spinner(title="Building the index configs, then answering and judging"):
            _rid = _ix.run_index_sweep(session, args.db, args.workspace, index_axes, applied_points, limit.value,
                                       wb.prices)
        _out = mo.vstack([mo.md(f"Stored as run **{page.esc(_rid)}**: {page.md_code(f'ragwb show {_rid}')}; the best "
                                f"config to paste: {page.md_code(f'ragwb best {_rid} --metric {quality.value}')}."),
                          page.plotly(quality_cost_figure(interactive.stored_summary(args.db, _rid), quality.value,
                                                           title=f"{quality.value} vs context tokens: every index "
                                                                 f"config (run {_rid})"))])
    except (ValueError, KeyError) as _e:
        _rid, _out = None, mo.callout(mo.md(f"**Index sweep not run:** {page.esc(_e.args[0] if _e.args else _e)}"),
                                      kind="danger")
    # kept before the plan is counted again (built now, nothing left to embed)
    set_index_result((page.questions_key(session), _out))
    if _rid:
        set_saved(lambda n: n + 1)
        if session.client is not None:
            set_sent(lambda n: n + 1)  # every cost line counts again: what was sent is cached now
    _out
    return


@app.cell
def _(mo, page, rows):
    mo.vstack([mo.md("## Data out\n\nThe CSV buttons write through the project's CSV writer (a cell that starts like "
                     "a formula is escaped, as `ragwb export` writes it; the tables' own export is off). In your own code: "
                     "`from evals.workbench.calls import open_session, evaluate_points; rows = "
                     "evaluate_points(open_session('squad2'), [('chunks', {'top_k': 4})])` (a pandas DataFrame, one "
                     "row per question x point x metric), or `ragwb export RUN --format parquet` for a stored run."),
               # 3 decimals, n/a cells empty (never NaN or 16-digit floats); the first rows only (30,000 rows at 300
               # questions cost every Apply their trip to the browser): the CSV button writes them all
               mo.ui.table(show_download=False, show_column_summaries=False, data=rows.head(page.ROWS_SHOWN),
                           selection=None, page_size=10,
                           label=(f"rows (per-question scores): the first {page.ROWS_SHOWN:,} of {len(rows):,}; the "
                                  "CSV has every row" if len(rows) > page.ROWS_SHOWN else "rows (per-question scores)"),
                           format_mapping={"value": lambda v: "" if v != v else f"{v:.3f}"}),
               page.csv_download(rows, "rows.csv", "Download rows as CSV")])
    return


@app.cell
def _(mo):
    # the stored-run choices, kept when a save re-reads the store (a Save as run never resets them)
    get_runpick, set_runpick = mo.state({})
    return get_runpick, set_runpick


@app.cell
def _(args, get_runpick, get_saved, interactive, mo, page, session, set_runpick):
    get_saved()  # re-read after a save (Save as run, a stored sweep)
    runs = interactive.list_runs(args.db)
    # the stored runs of the dataset picked at the top (a comparison across datasets means nothing); a folder's
    # runs are stored under its workspace name, not its path
    _ids = list(runs[runs["dataset"] == session.dataset.name]["run_id"]) if len(runs) else []
    _was = get_runpick()

    def _pick(key, default):
        return _was[key] if _was.get(key) in _ids else default

    def _keep(key):
        return lambda v: set_runpick(lambda p: {**p, key: v})

    base_run = mo.ui.dropdown(_ids, value=_pick("base", _ids[1] if len(_ids) > 1 else None), label="baseline run",
                              on_change=_keep("base"))
    cand_run = mo.ui.dropdown(_ids, value=_pick("cand", _ids[0] if _ids else None), label="candidate run",
                              on_change=_keep("cand"))
    sweep_run = mo.ui.dropdown(_ids, value=_pick("sweep", _ids[0] if _ids else None), label="stored sweep",
                               on_change=_keep("sweep"))
    mo.vstack([mo.md(f"## Stored runs of {page.esc(session.dataset.name)}: budget curves of a sweep, and two runs "
                     "compared "
                     "(paired bootstrap deltas, points matched by parameters)"),
               mo.hstack([sweep_run, base_run, cand_run], justify="start")])
    return base_run, cand_run, sweep_run


@app.cell
def _(args, interactive, mo, page, quality, quality_cost_figure, sweep_run):
    # the best point's hover says what to expect of it on new questions and how sure the pick is (issue 81)
    (page.plotly(quality_cost_figure(interactive.stored_summary(args.db, sweep_run.value), quality.value,
                                      title=f"stored run {sweep_run.value}: {quality.value} vs context tokens",
                                      picked=interactive.pick_of(args.db, sweep_run.value, quality.value)))
     if sweep_run.value else mo.md(""))
    return


@app.cell
def _(mo):
    best_go = mo.ui.run_button(label="Best config of the stored sweep (TOML to paste)")
    return (best_go,)


@app.cell
def _(args, best_go, interactive, mo, page, quality, sweep_run):
    # `ragwb best RUN --metric M`: the best point, the runner-up it beat (or the ties), its config as TOML
    # no stored run: no button that would do nothing, the line says what it needs
    mo.stop(not sweep_run.value, mo.md("*Best config* needs a stored run of this dataset: *Save as run*, *Race these "
                                       "budgets* or an index sweep stores one (or `ragwb run`)."))
    mo.stop(not best_go.value, best_go)
    try:
        # the prose apart; each TOML block pastes whole into `ragwb run --config` (marimo's Copy button on the
        # block, kept visible and the lines wrapped by head.html; and a download)
        _prose, _tomls = interactive.best_config(args.db, sweep_run.value, quality.value)
        _out = mo.vstack([mo.md("  \n".join(page.esc(_x) for _x in _prose))] + [
            _x for _k, _t in enumerate(_tomls, 1) for _x in (
                mo.md(page.md_fence(_t.rstrip(), "toml")),
                mo.download(_t.encode(), filename=f"best-{sweep_run.value}-{_k}.toml", mimetype="application/toml",
                            label="Download it as a file (ragwb run --config FILE)"))])
    except ValueError as _e:  # the metric n/a on every point of that run: said, never a traceback
        _out = mo.callout(mo.md(f"**No best point:** {page.esc(_e.args[0] if _e.args else _e)}"), kind="warn")
    mo.vstack([best_go, _out])
    return


@app.cell
def _(base_run, mo):
    compare_go = mo.ui.run_button(label="Compare the two runs")
    _n = len(base_run.options)  # a comparison needs two stored runs: with fewer, the line says so (no dead button)
    compare_go if _n >= 2 else mo.md(f"Comparing needs two stored runs of this dataset ({_n} stored): *Save as run* "
                                      "or *Race these budgets* store one.")
    return (compare_go,)


@app.cell
def _(args, base_run, cand_run, compare_go, interactive, mo, page):
    # only when asked (never on the path of Apply); linear in the rows; the notebook's stop button interrupts it
    mo.stop(not compare_go.value, mo.md("Pick two runs and press *Compare the two runs*." if len(base_run.options) >= 2
                                        else ""))
    _said = None
    with mo.status.spinner(title=f"Comparing {page.esc(cand_run.value)} against {page.esc(base_run.value)}"):
        try:
            _cmp = interactive.compare_stored_runs(args.db, base_run.value, cand_run.value) if (
                base_run.value and cand_run.value) else None
        except ValueError as _e:  # the same run twice, a run with no point in common: said, never a traceback
            _cmp, _said = None, _e.args[0]
    mo.stop(_said is not None, mo.callout(mo.md(f"**Not compared:** {page.esc(_said)}"), kind="warn"))
    (mo.vstack([mo.md(interactive.coverage_line(_cmp)),
                mo.ui.table(show_download=False, show_column_summaries=False, data=_cmp, selection=None, freeze_columns_left=["strategy", "point", "metric"],
                            freeze_columns_right=["verdict"],
                            # rounded as everywhere else (was 842.66666666666660000)
                            format_mapping={c: "{:.3f}" for c in _cmp.columns if _cmp[c].dtype.kind == "f"})])
     if _cmp is not None and len(_cmp) else mo.md(
         # two runs were picked but share no point: said as that, never "two runs are needed" (issue 83)
         f"**Not compared:** {page.esc(base_run.value)} and {page.esc(cand_run.value)} share no budget point "
         "(points are matched by their parameters): pick two runs with a point in common. "
         + interactive.coverage_line(_cmp) if _cmp is not None else
         "Two stored runs of the dataset picked above are needed (`ragwb run`), with budget points in common."))
    return


@app.cell
def _(mo):
    # `ragwb score FILE` in the page: what your system already answered, scored beside the strategies
    logged_form = mo.md(
        "## Score a logged file: your system's outputs (`ragwb score FILE`)\n\n"
        "A `.jsonl`, `.csv` or `.parquet` file of what your system answered (`question`, `contexts`, `answer`, or "
        "ragas's `user_input`, `retrieved_contexts`, `response`: docs/your-system.md), joined to this dataset's "
        "questions by id or text, scored offline and stored as a run (nothing is sent anywhere).\n\n"
        "{path} {name} {metrics}").batch(
        path=mo.ui.text(placeholder="prod_log.jsonl", label="file", full_width=True),
        name=mo.ui.text(placeholder="logged", label="system name"),
        metrics=mo.ui.text(placeholder="all, or answer,citation,cost", label="metrics"),
    ).form(submit_button_label="Score the file", clear_on_submit=False)
    logged_form
    return (logged_form,)


@app.cell
def _(args, interactive, logged_form, mo, page, session, set_saved):
    _v = logged_form.value
    mo.stop(not _v or session is None, mo.md(""))
    _said, _bar = None, {}

    def _stored(n, total):  # a bar once the check pass has read every record (it knows the total then)
        if "cm" not in _bar:
            _bar["cm"] = mo.status.progress_bar(total=total, title=f"Scoring {page.esc(_v['path'])}",
                                                subtitle="records stored",
                                                show_rate=True, show_eta=True, remove_on_exit=True)
            _bar["bar"] = _bar["cm"].__enter__()
        _bar["bar"].update(increment=n)

    with mo.status.spinner(title=f"Checking every record of {page.esc(_v['path'])}, then scoring"):
        try:
            _rid, _line, _report, _why = interactive.score_logged_file(
                session, args.workspace, args.db, _v["path"], _v["name"], _v["metrics"], args.questions,
                on_progress=_stored)
        except ValueError as _e:  # a bad row, a missing column, an unknown metric: named, nothing stored
            _said = _e.args[0] if _e.args else str(_e)
        finally:
            if "cm" in _bar:
                _bar["cm"].__exit__(None, None, None)
    mo.stop(_said is not None, mo.callout(mo.md(f"**Not scored:** {page.esc(_said)}"), kind="danger"))
    set_saved(lambda n: n + 1)  # the run joins every stored-run list at once
    mo.callout(mo.md(f"**Stored**: {page.esc(_line)}. " + (f"Report: {page.md_code(_report)}" if _report else
                                                          f"No report: {page.esc(_why)}")
                     + f"; {page.md_code(f'ragwb show {_rid}')}, or pick it above as a baseline or candidate run."),
               kind="success")
    return


@app.cell
def _(args, mo, session, wb):
    # `ragwb generate` in the page: an LLM writes gold questions from this dataset's passages (evidence by
    # construction); the form only counts the cost, the Send button below spends
    from evals.workbench import generating

    gen_form = mo.md(
        "## Generate gold questions with an LLM (`ragwb generate`)\n\n"
        "Passages sampled from this dataset (seeded, stratified by document); the LLM writes a question and a short "
        "answer for each, and a question is kept only where its answer is found in its passage (that span is its "
        "evidence; docs/generate.md). Counting the cost sends nothing.\n\n"
        "{n} {types} {model} {seed} {language} {max_overlap}\n\n{out}").batch(
        n=mo.ui.number(start=1, stop=2000, value=50, label="questions"),
        types=mo.ui.multiselect(["single", "multi", "unanswerable"], value=["single"], label="types"),
        model=mo.ui.text(value=wb.llm.model if wb.llm else "", placeholder="model name", label="model"),
        seed=mo.ui.number(start=0, stop=10**9, value=0, label="seed"),
        # as `ragwb generate --language` and `--max-overlap`: auto = each passage's own language; 0 = keep, flag
        language=mo.ui.text(value="auto", label="language"),
        max_overlap=mo.ui.number(start=0, stop=100, value=0, label="max words copied (0 = keep)"),
        out=mo.ui.text(value=str(generating.default_out(session, args.workspace)) if session is not None else "",
                       label="write to", full_width=True),
    ).form(submit_button_label="Count the cost", clear_on_submit=False)
    (gen_form if wb.llm is not None else mo.md(
        "## Generate gold questions with an LLM (`ragwb generate`)\n\nNeeds an LLM endpoint: open the page with "
        "`-- --llm-base-url URL --llm-model M` (a local llama.cpp server works: docs/llm.md), or run "
        "`ragwb generate` (docs/generate.md)."))
    return gen_form, generating


@app.cell
def _(mo):
    # what the last Send wrote (or why nothing was): shown under the line counted again after it
    get_gen_done, set_gen_done = mo.state(None)
    return get_gen_done, set_gen_done


@app.cell
def _(gen_form, generating, get_gen_done, mo, page, session, wb):
    _done = get_gen_done()  # counted again after every Send: what was just sent is in the response cache now
    # what the last Send wrote stays said after the page reloads the dataset with it (the form starts empty then)
    mo.stop(wb.llm is None or session is None or not gen_form.value,
            mo.callout(mo.md(_done[1]), kind="success" if _done[0] else "danger") if _done else mo.md(""))
    _v, _said = gen_form.value, None
    try:
        gen_client = generating.generator_client(session, wb.llm, _v["model"], wb.prices)
        gen_plan = generating.generate_plan(session, gen_client, int(_v["n"]), _v["types"], int(_v["seed"]),
                                            _v["out"], _v["language"])
    except ValueError as _e:  # no type picked, a folder as the file: said, nothing counted or sent
        _said = _e.args[0] if _e.args else str(_e)
    mo.stop(_said is not None, mo.callout(mo.md(f"**Cannot generate:** {page.esc(_said)}"), kind="danger"))
    gen_go = mo.ui.run_button(label=(f"Send {gen_plan.new_calls:,} call(s)" if gen_plan.new_calls else
                                     "Write them from the response cache (0 new calls)"), disabled=not gen_plan.jobs)
    mo.vstack([mo.md(f"**Generate:** {page.esc(gen_plan.line())}. Nothing is sent until you press the button."),
               gen_go]
              + ([mo.callout(mo.md(_done[1]), kind="success" if _done[0] else "danger")] if _done else []))
    return gen_client, gen_go, gen_plan


@app.cell
def _(args, gen_client, gen_form, gen_go, gen_plan, generating, mo, page, session, set_gen_done, set_qfile):
    mo.stop(not gen_go.value, mo.md(""))
    _v = gen_form.value
    with mo.status.progress_bar(total=gen_plan.jobs, title=f"Asking {page.esc(gen_client.cfg.model)} for questions",
                                show_rate=True, show_eta=True, remove_on_exit=True) as _bar:
        try:
            _path, _line = generating.generate_for_page(session, gen_client, int(_v["n"]), _v["types"],
                                                        int(_v["seed"]), gen_plan.out, progress=_bar,
                                                        language=_v["language"], max_overlap=int(_v["max_overlap"]))
            # with an LLM answerer the Apply waits for its Send, unless the page was opened with --send
            _done = (True, generating.done_line(_line, _path, session.client is not None and not args.send))
        except ValueError as _e:  # every reply dropped or failed: nothing written, the file keeps what it held
            _done = (False, f"**Nothing written:** {page.esc(_e.args[0] if _e.args else _e)}")
    set_gen_done(_done)  # the line above is counted again and shows this under it
    if _done[0]:
        set_qfile(str(_path))  # the dataset reloads with them: the page goes on evaluating, no browser reload
    return


@app.cell
def _(mo):
    # bumped when the judge's agreement is stored: every judge line on the page (the headline's, this section's)
    # and this section's cost line are counted again; the last measurement's message stays
    get_agreed, set_agreed = mo.state(0)
    get_agreement_said, set_agreement_said = mo.state(None)
    return get_agreed, get_agreement_said, set_agreed, set_agreement_said


@app.cell
def _(args, get_agreed, interactive, mo, page, session):
    get_agreed()  # noqa: B018  (a stored figure: its lines and the calls left are counted again)
    # how far to trust the judge: its agreement with human labels, measured behind its own cost line and Send
    agreement_plan = interactive.agreement_plan(session, args.workspace)
    agreement_go = mo.ui.run_button(label=f"Send {agreement_plan['calls']:,} judge call(s)")
    _align = page.judge_alignment_table(session, args.workspace)  # each judge on its own labels
    mo.vstack([mo.md("## How far to trust the judge"), mo.md(agreement_plan["line"])]
              + [mo.md(f"judge: {page.esc(_l)}") for _l in interactive.judge_lines(session, args.workspace)]
              + ([mo.ui.table(_align, selection=None, show_download=False, show_column_summaries=False,
                              label="alignment with labels (ragwb agreement): kappa, confusion, calibration")]
                 if _align is not None else [])
              + [agreement_go if agreement_plan["calls"] else mo.md("")])
    return agreement_go, agreement_plan


@app.cell
def _(agreement_go, agreement_plan, args, get_agreement_said, interactive, mo, page, session, set_agreed,
      set_agreement_said):
    mo.stop(not agreement_go.value or not agreement_plan["calls"], get_agreement_said() or mo.md(""))
    with mo.status.spinner(title=f"Measuring the judge on labelled claims ({agreement_plan['calls']:,} calls)"):
        try:
            _said = mo.callout(mo.md("**Stored:** " + page.esc(interactive.measure_agreement(session, args.workspace))),
                               kind="success")
            _ok = True
        except ValueError as _e:
            _said, _ok = mo.callout(mo.md(f"**Not measured:** {page.esc(_e.args[0] if _e.args else _e)}"),
                                    kind="danger"), False
    set_agreement_said(_said)
    if _ok:
        set_agreed(lambda n: n + 1)  # the judge lines above and under the headline show the stored figure now
    _said
    return


@app.cell
def _(interactive, mo, session):
    # conversational sets (mtrag-govt, mtrag-clapnq): step through a conversation, policy by policy
    from rag.answer.memory import MEMORY_POLICIES

    _ids = interactive.conversation_ids(session)
    conv_pick = mo.ui.dropdown(_ids, value=_ids[0] if _ids else None, label="conversation")
    conv_policies = mo.ui.multiselect(list(MEMORY_POLICIES), value=["full_history", "window", "retrieved_turns"],
                                      label="memory policies")
    mo.vstack([mo.md("### Conversation memory"), mo.hstack([conv_pick, conv_policies], justify="start")]
              ) if _ids else mo.md("")
    return conv_pick, conv_policies


@app.cell
def _(conv_pick, interactive, mo, session):
    # the slider runs over this conversation's own turns; it evaluates on release, not at every step
    _n = interactive.conversation_length(session, conv_pick.value) if conv_pick.value else 0
    conv_turn = mo.ui.slider(1, max(_n, 1), value=min(3, max(_n, 1)), label=f"turn (of {_n})", show_value=True,
                             debounce=True, disabled=_n <= 1)
    conv_turn if _n else mo.md("")
    return (conv_turn,)


@app.cell
def _(conv_pick, conv_policies, conv_turn, interactive, mo, session):
    mo.Html(interactive.conversation_turn_html(session, conv_pick.value, conv_turn.value, conv_policies.value)
            ) if conv_pick.value else mo.md("")
    return


@app.cell
def _(STRATEGIES, base_session, mo):
    # a look at retrieval with no run stored (`ragwb search`): the blocks one strategy returns for one query; the
    # placeholder names a definition only on a corpus with source files, and the box is wide enough to show it
    _code = any(d.code_language for d in base_session.dataset.documents)
    look_form = mo.md("**Search** {query} through {strategy}").batch(
        query=mo.ui.text(placeholder="a question, or a name like Command.get_help" if _code else "a question",
                         full_width=True),
        strategy=mo.ui.dropdown(list(STRATEGIES), value="hybrid" if "hybrid" in STRATEGIES else list(STRATEGIES)[0]),
    ).form(submit_button_label="Search")
    look_form
    return (look_form,)


@app.cell
def _(budget_values, interactive, look_form, mo, session):
    _v = look_form.value or {}
    mo.ui.table(show_download=False, show_column_summaries=False, data=interactive.search_frame(session, _v["query"], _v["strategy"], budget_values), selection=None,
                page_size=10) if _v.get("query") and session is not None else mo.md("")
    return


if __name__ == "__main__":
    app.run()
