import marimo

__generated_with = "0.25.2"
app = marimo.App(width="full", app_title="RAG Workbench")


@app.cell
def _():
    import argparse
    import sys

    import marimo as mo

    from evals import interactive
    from evals.charts import quality_cost_figure
    from evals.summary import HEADLINE, headline_table, summarize_scores
    from rag.corpora import BUNDLED
    from rag.strategies import STRATEGIES

    parser = argparse.ArgumentParser(description="RAG Workbench: tune context budgets and compare strategies.")
    parser.add_argument("--workspace", default="results", help="workspace folder (LanceDB index, caches)")
    parser.add_argument("--db", default="results/results.duckdb", help="DuckDB results of stored runs")
    parser.add_argument("--dataset", default="squad2", choices=list(BUNDLED), help="bundled dataset")
    parser.add_argument("--limit", type=int, default=50, help="questions evaluated interactively")
    parser.add_argument("--embedder", default="e5", help="embedder of the index (e5, use, hash)")
    args, _unknown = parser.parse_known_args(sys.argv[1:])
    return (BUNDLED, HEADLINE, STRATEGIES, args, headline_table, interactive, mo, quality_cost_figure,
            summarize_scores)


@app.cell
def _(BUNDLED, STRATEGIES, args, mo):
    dataset = mo.ui.dropdown(list(BUNDLED), value=args.dataset, label="dataset")
    strategies = mo.ui.multiselect(list(STRATEGIES), value=list(STRATEGIES), label="strategies")
    limit = mo.ui.slider(10, 500, step=10, value=max(10, min(500, args.limit)), label="questions", show_value=True)
    mo.hstack([dataset, strategies, limit], justify="start")
    return dataset, limit, strategies


@app.cell
def _(mo):
    # budgets are batched in a form: moving sliders costs nothing until "Apply"
    budgets = mo.md(
        """
        **Budgets**: each strategy's own, starting at its shipped values; only the values you change are sent.

        chunks: top_k {chunks__top_k} · hybrid: top_k {hybrid__top_k} alpha {hybrid__alpha}
        fusion {hybrid__fusion} · full_documents: top_k {full_documents__top_k}
        max_total_chars {full_documents__max_total_chars}

        two_phase_pages: top_chunks {two_phase_pages__top_chunks} top_pages {two_phase_pages__top_pages} ·
        parent_child: top_k {parent_child__top_k} max_parents {parent_child__max_parents}

        every strategy: max_context_tokens {max_context_tokens} (0 = no limit) overflow {overflow}
        """
    ).batch(
        chunks__top_k=mo.ui.slider(1, 30, value=8, show_value=True),
        hybrid__top_k=mo.ui.slider(1, 30, value=8, show_value=True),
        hybrid__alpha=mo.ui.slider(0.0, 1.0, step=0.05, value=0.8, show_value=True),
        hybrid__fusion=mo.ui.dropdown(["weighted", "rrf"], value="weighted"),
        full_documents__top_k=mo.ui.slider(1, 30, value=8, show_value=True),
        full_documents__max_total_chars=mo.ui.slider(2000, 80000, step=2000, value=80000, show_value=True),
        two_phase_pages__top_chunks=mo.ui.slider(0, 20, value=5, show_value=True),
        two_phase_pages__top_pages=mo.ui.slider(1, 10, value=5, show_value=True),
        parent_child__top_k=mo.ui.slider(1, 60, value=20, show_value=True),
        parent_child__max_parents=mo.ui.slider(1, 10, value=4, show_value=True),
        max_context_tokens=mo.ui.slider(0, 8000, step=250, value=0, show_value=True),
        overflow=mo.ui.dropdown(["truncate", "drop"], value="truncate"),
    ).form(submit_button_label="Apply budgets")
    budgets
    return (budgets,)


@app.cell
def _(args, dataset, interactive, mo):
    with mo.status.spinner(title=f"Loading {dataset.value} (ingest runs once; later loads embed nothing)"):
        session = interactive.open_session(dataset.value, args.workspace, args.embedder)
    return (session,)


@app.cell
def _(budgets, interactive, limit, mo, session, strategies, summarize_scores):
    _points = interactive.points_from_budgets(strategies.value, budgets.value or {})
    with mo.status.spinner(title="Evaluating (cached candidates: only packing, answering and scoring re-run)"):
        scores = interactive.evaluate_points(session, _points, limit.value)
        summary = summarize_scores(scores)
    return scores, summary


@app.cell
def _(mo):
    quality = mo.ui.dropdown(["f1", "em", "faithfulness", "citation_precision", "citation_recall", "evidence_recall",
                              "abstention_accuracy", "doc_ndcg@10"], value="f1", label="quality metric")
    cost = mo.ui.dropdown(["context_tokens", "prompt_tokens", "cost_usd"], value="context_tokens", label="cost")
    mo.hstack([quality, cost], justify="start")
    return cost, quality


@app.cell
def _(HEADLINE, cost, headline_table, mo, quality, quality_cost_figure, summary):
    mo.vstack([
        mo.ui.plotly(quality_cost_figure(summary, quality.value, cost.value)),
        mo.ui.table(headline_table(summary, HEADLINE), selection=None),
    ]) if len(summary) else mo.md("Pick at least one strategy.")
    return


@app.cell
def _(limit, mo, session, strategies):
    _qs = session.dataset.questions[: limit.value]
    pick_q = mo.ui.dropdown({f"{q.qid}: {q.text[:70]}": q.qid for q in _qs},
                            value=f"{_qs[0].qid}: {_qs[0].text[:70]}" if _qs else None, label="question")
    pick_s = mo.ui.dropdown(list(strategies.value), value=(list(strategies.value) or [None])[0], label="strategy")
    mo.vstack([mo.md("## Drill-down"), mo.hstack([pick_q, pick_s], justify="start")])
    return pick_q, pick_s


@app.cell
def _(interactive, mo, pick_q, pick_s, scores, session):
    _hit = [k for k in session.items if k[0] == pick_s.value and k[2] == pick_q.value] if pick_q.value else []
    _q = next((q for q in session.dataset.questions if q.qid == pick_q.value), None)
    # corpus text and answers are escaped by the library: shown as text, never executed
    (mo.Html(interactive.drilldown_html(_q, *session.items[_hit[-1]])) if _hit and _q is not None
     else mo.md("Evaluate a strategy to see its items."))
    return


@app.cell
def _(args, interactive, mo):
    runs = interactive.list_runs(args.db)
    _ids = list(runs["run_id"]) if len(runs) else []
    base_run = mo.ui.dropdown(_ids, value=_ids[1] if len(_ids) > 1 else None, label="baseline run")
    cand_run = mo.ui.dropdown(_ids, value=_ids[0] if _ids else None, label="candidate run")
    mo.vstack([mo.md("## Compare two stored runs (paired bootstrap deltas)"), mo.hstack([base_run, cand_run])])
    return base_run, cand_run


@app.cell
def _(args, base_run, cand_run, interactive, mo):
    (mo.ui.table(interactive.compare_stored_runs(args.db, base_run.value, cand_run.value), selection=None)
     if base_run.value and cand_run.value else mo.md("Two stored runs are needed (`ragwb run`)."))
    return


@app.cell
def _(mo):
    judge_button = mo.ui.run_button(label="Score faithfulness with the LLM judge (costs money)")
    mo.vstack([mo.md("## LLM-judged scoring"), judge_button])
    return (judge_button,)


@app.cell
def _(args, judge_button, mo, pick_s, session):
    mo.stop(not judge_button.value, mo.md("Nothing is sent to a judge until you press the button."))
    from evals.judges import get_judge, judge_config_from_env
    from rag.llm import LLMClient

    _cfg = judge_config_from_env()
    mo.stop(_cfg is None, mo.md("Set `RAGWB_JUDGE_BASE_URL` and `RAGWB_JUDGE_MODEL` (and the key's variable "
                                "in `RAGWB_JUDGE_KEY_ENV`) to enable the judge."))
    _judge = get_judge("llm_faithfulness", LLMClient(_cfg, f"{args.workspace}/cache/llm.sqlite"))
    _rows = []
    for (_s, _label, _qid), (_row, _sc) in session.items.items():
        if _s != pick_s.value:
            continue
        import json as _json
        _q = next(q for q in session.dataset.questions if q.qid == _qid)
        _r = _judge.score(_q.text, _row["answer"], [b["text"] for b in _json.loads(_row["blocks"])])
        _rows.append({"question_id": _qid, "judge_faithfulness": _r.value, "status": _r.status})
    mo.ui.table(_rows, selection=None)
    return


@app.cell
def _(interactive, mo, session):
    # conversational sets (mtrag-govt, mtrag-clapnq): step through a conversation, policy by policy
    from rag.memory import MEMORY_POLICIES

    _ids = interactive.conversation_ids(session)
    conv_pick = mo.ui.dropdown(_ids, value=_ids[0] if _ids else None, label="conversation")
    conv_turn = mo.ui.slider(1, 12, value=3, label="turn", show_value=True)
    conv_policies = mo.ui.multiselect(list(MEMORY_POLICIES), value=["full_history", "window", "retrieved_turns"],
                                      label="memory policies")
    mo.vstack([mo.md("### Conversation memory"), mo.hstack([conv_pick, conv_turn, conv_policies], justify="start")]
              ) if _ids else mo.md("")
    return conv_pick, conv_policies, conv_turn


@app.cell
def _(conv_pick, conv_policies, conv_turn, interactive, mo, session):
    mo.Html(interactive.conversation_turn_html(session, conv_pick.value, conv_turn.value, conv_policies.value)
            ) if conv_pick.value else mo.md("")
    return


if __name__ == "__main__":
    app.run()
