"""``ragwb run`` and ``ragwb score``: evaluate strategies x budgets (or a system's logged outputs) into the store."""
from __future__ import annotations

import os
import sys
from pathlib import Path

from .common import (URL_SECRETS, YES_HELP, add_index_args, at_least, between, confirm_spend, engine_address,
                     index_config, non_negative_float, number_above, parse_sets, positive_float, race_config, run_id_arg, share_arg,
                     temperature_arg)
from rag.llm.client import env_prices, parse_prices  # noqa: F401 (shared with the workbench)

from .report import finish_report_notebook, start_report_notebook
from .judging import failed_judges, jury_models  # the run's judge checks
from evals.run.config import JUDGE_REPEATS_MAX, JUDGE_REPEATS_WHY


from .sweep_file import RUN_KEYS, SWEEP_SECTIONS, load_sweep  # noqa: F401,E402  (the sweep TOML)


def memory_grid(names: str | None, axes: dict) -> dict:
    """--memory a,b and --set memory.PARAM=V1,V2 -> {policy: {}, "*": {PARAM: [V1, V2]}} ({} = every policy)."""
    from rag.answer.memory import get_memory

    chosen = [get_memory(x.strip()).name for x in (names or "").split(",") if x.strip()]
    if not chosen and not axes:
        return {}
    if not chosen:
        from evals.run.conversations import DEFAULT_MEMORY
        chosen = list(DEFAULT_MEMORY)
    grid = {m: {} for m in chosen}
    if axes:
        grid["*"] = axes
    return grid


MAIN_JOB_LIMIT = 200  # questions per bundled set when `ragwb run` is called bare (the main job)


def refuse_empty_plugins(specs) -> None:
    """A plugin file that registers no strategy was probably meant to (a missing decorator): loud."""
    from rag.strategies.plugins import ORIGIN

    for spec in specs:
        key = str(Path(spec).resolve()) if Path(spec).is_file() else str(spec)
        if not any(v == key for v in ORIGIN.values()):
            raise ValueError(f"plugin {spec} registers no strategy (a class decorated with @register_strategy, "
                             "docs/your-system.md); nothing of it would run")


def refuse_ignored_run_flags(a) -> None:
    """Flags that would do nothing in this combination are refused, never silently ignored."""
    if a.dataset is not None and any(not str(d).strip() for d in a.dataset):
        raise ValueError("--dataset '' names no dataset (give a bundled set's name or a folder; 'all' runs every "
                         "bundled set)")
    if a.llm_model and not a.llm_base_url:
        raise ValueError("--llm-model needs --llm-base-url (the endpoint serving it); without it the run would use "
                         "the offline answerer")
    twice = sorted({j for j in a.judges or () if list(a.judges).count(j) > 1})
    if twice:  # a repeated name is one judge: counted and sent once (it was counted twice and sent once)
        print(f"notice: --judges names {', '.join(twice)} more than once: one judge each", file=sys.stderr)
    if a.judge_model and not a.judge_base_url:
        raise ValueError("--judge-model needs --judge-base-url; without it no judge would run")
    if getattr(a, "judge", "auto") == "none" and (a.judge_base_url or a.judges):
        raise ValueError("--judge none turns the LLM judge off: drop --judge-base-url / --judges, or --judge none")
    if a.judge_base_url and any(j.startswith("ragas") for j in (a.judges or [])):
        from evals.score.judges import check_ragas

        check_ragas()  # before any run row or call: which extra is missing


def cmd_run(a) -> int:
    from rag.ingest.corpora import BUNDLED, MAIN_JOB_SETS

    from evals.run.runner import RunConfig, SpendDeclined, run_evaluation
    from evals.score.judges import DEFAULT_LLM_JUDGES

    import time

    t_start = time.perf_counter()
    from rag.ingest.corpora import dataset_spec
    from rag.strategies import load_plugins, plugin_hashes

    refuse_ignored_run_flags(a)
    if a.max_response_mb is not None:  # every client of this process (and the workers it starts) reads it
        os.environ["RAGWB_MAX_RESPONSE_MB"] = f"{a.max_response_mb:g}"
    # a remote embedder keeps the LLM client's deadline and retries (not its own fixed 60 s x 6 tries)
    os.environ["RAGWB_EMBED_TIMEOUT"], os.environ["RAGWB_EMBED_RETRIES"] = f"{a.timeout:g}", str(a.retries)
    load_plugins(a.plugins or [])  # before anything names a strategy: --set and the sweep may use them
    refuse_empty_plugins(a.plugins or [])
    sweep = load_sweep(a.config) if a.config else {}
    run_sec = sweep.get("run", {})
    main_job = not (a.dataset or run_sec.get("datasets") or a.resume)
    datasets = a.dataset or run_sec.get("datasets") or (["squad2"] if a.resume else list(MAIN_JOB_SETS))
    if isinstance(datasets, str):
        datasets = [datasets]
    if datasets == ["all"]:
        datasets = list(BUNDLED)
    grid = dict(sweep.get("strategies", {}))
    cli_axes = parse_sets(a.set or [])
    memory = memory_grid(a.memory, cli_axes.pop("memory", {}))
    # index axes: --set index.PARAM=V1,V2 and the sweep file's [index] table (the flag wins per setting)
    from evals.run.index_grid import check_axes, fold_fixed

    index_grid = check_axes({**sweep.get("index", {}), **cli_axes.pop("index", {})})
    base_index = index_config(a) if not a.resume else None
    query_modes = tuple(x.strip() for x in (a.query_mode or "").split(",") if x.strip())
    if query_modes:
        from rag.answer.memory import get_query_mode
        for m in query_modes:
            get_query_mode(m)
    for k, v in cli_axes.items():
        grid.setdefault(k, {}).update(v)
    grid, systems = chosen_grid(a, sweep, run_sec, grid, cli_axes)
    llm, judge, prompt = endpoints(a)
    answerer = a.answerer or run_sec.get("answerer") or ("openai" if llm else "extractive")
    limit = a.limit if a.limit is not None else int(run_sec.get("limit", 0))
    if main_job and a.limit is None and "limit" not in run_sec:
        limit = MAIN_JOB_LIMIT  # the two-command main job stays quick; said aloud, never silent
        print(f"main job: every bundled set ({', '.join(datasets)}), every strategy, the first {limit} questions of "
              "each set (--limit N for more; --dataset NAME for one whole set)", file=sys.stderr)
    repeats = a.repeats if a.repeats is not None else int(run_sec.get("repeats", 1))
    race = race_config(a, systems)
    from evals.run.confirm import confirm_config

    if a.resume and (a.confirm is not None or a.confirm_metric or a.confirm_seed is not None):
        raise ValueError("--confirm with --resume: a run keeps the confirm part it started with (drop --confirm*)")
    confirm = confirm_config(a.confirm, a.confirm_seed, a.confirm_metric, race)
    refuse_chance_judge(a, (race or {}).get("metric") or (confirm or {}).get("metric"), judge)
    status, declined = 0, 0
    run_ids, done_runs = [], []
    from evals.run.engines import get_run_engine

    engine = get_run_engine(a.engine, engine_address(a))
    for ds in ([None] if a.resume else datasets):
        keep = run_sec.get("index_in_points") or ()
        index, axes = (fold_fixed(base_index, index_grid, [keep] if isinstance(keep, str) else keep)
                       if base_index is not None else (index_config(a), {}))
        cfg = RunConfig(dataset=dataset_spec(ds or "squad2"), questions_file=_absolute(a.questions or run_sec.get("questions")),
                        index=index, grid=grid,
                        answerer=answerer, answerer_params={"threshold": a.threshold} if answerer == "extractive" else {},
                        prices=parse_prices(env_prices() + (a.price or []), run_sec.get("prices", {}) | sweep.get("prices", {})),
                        llm=llm, judge=judge, judges=tuple(dict.fromkeys(a.judges or (DEFAULT_LLM_JUDGES if judge else ()))), scorers=tuple(a.scorers or ()),
                        repeats=repeats, limit=limit, memory=memory, query_modes=query_modes,
                        insert_fillers=a.insert_fillers, vector_index=a.vector_index, use_cache=not a.no_cache,
                        fit_context=a.fit_context, systems=systems, prompt=prompt, plugin_timeout=a.plugin_timeout,
                        race=race, index_grid=axes, judge_repeats=a.judge_repeats, jury=jury_models(a, judge),
                        jury_rule=a.jury_rule, confirm=confirm,
                        plugins=plugin_hashes(list(a.plugins or []) + list(run_sec.get("plugins") or [])))
        if a.show_prompt:
            from evals.run.prompts_preview import show_prompts

            show_prompts(cfg, a.workspace)
            continue
        try:
            summ = run_evaluation(cfg, a.workspace, a.db, run_id=a.run_id if len(datasets) == 1 else None,
                                  resume=a.resume, progress=not a.no_progress,
                                  allow_changed_corpus=a.allow_changed_corpus, lock_wait=a.wait,
                                  follow_symlinks=a.follow_symlinks, engine=engine, embed_concurrency=a.concurrency,
                                  options={"report": not a.no_report},
                                  confirm_spend=lambda spend: confirm_spend("ragwb run", spend, a.yes))
        except SpendDeclined as e:  # the user said no at the cost line: nothing stored or sent
            print(f"ragwb run: {e}")
            declined += 1
            continue
        print(summ.render())
        if summ.incomplete:  # stored items differ from the plan: said, and the exit status says it too
            status = 5
        failed = failed_answers(a, summ.run_id)
        if failed:  # every answer failed, or more than the cap: the exit status says so (CI must not pass)
            print(f"ragwb run: error: {failed}", file=sys.stderr)
            status = status or 6
        if cfg.judge is not None and failed_judges(a, summ.run_id):  # evals/cli/judging.py  # a judge that parses nothing is never quiet
            status = status or 7
        run_ids.append(summ.run_id)
        done_runs.append((summ.run_id, summ.items))
    if declined and not run_ids:  # every cost line declined: nothing ran, so no "finished" and no reports folder
        return DECLINED
    status = write_reports(a, run_ids, status)
    n_items = sum(items for _, items in done_runs)
    print(f"finished {len(run_ids)} run(s), {n_items} items, in {time.perf_counter() - t_start:.1f}s wall time"
          + (f"; reports in {Path(a.workspace) / 'reports'}" if not a.no_report and run_ids else ""))
    return status


def _absolute(path: str | None) -> str | None:
    """A questions file as an absolute path: the stored run (and the TOML `ragwb best` writes of it) names it
    wherever it is read from (issue 83)."""
    return str(Path(path).absolute()) if path else None


DECLINED = 1  # the exit status of a run whose cost line was answered no: nothing sent, nothing stored


def refuse_chance_judge(a, decides: str | None, judge) -> None:
    """A race or a confirm part deciding on an LLM-judged metric whose judge agrees with people at chance (its stored
    figure) is refused without --trust-judge: such values rank nothing (issue 85)."""
    if not decides or judge is None or a.trust_judge:
        return
    from evals.analyze.judge_health import chance_judged
    from evals.score.judges import DEFAULT_LLM_JUDGES

    names = tuple(dict.fromkeys(a.judges or DEFAULT_LLM_JUDGES))
    why = chance_judged({"config": {"judge": judge.public(), "judges": list(names), "judge_repeats": a.judge_repeats,
                                    "jury": list(jury_models(a, judge) or ())}}, a.workspace).get(decides)
    if why:
        raise ValueError(f"--race/--confirm-metric {decides}: {why}")


def chosen_grid(a, sweep: dict, run_sec: dict, grid: dict, cli_axes: dict) -> tuple[dict, tuple]:
    """The run's grid (the chosen strategies, every one a --set axis or the sweep file names, --where on each) and
    the deployed systems measured beside them."""
    from rag.strategies import default_strategies, get_strategy

    chosen = a.strategies or run_sec.get("strategies")
    if isinstance(chosen, str):
        chosen = [x.strip() for x in chosen.split(",") if x.strip()]
    from rag.answer.systems import parse_system_args

    systems = tuple(parse_system_args(a.system or [], a.system_map or [], a.timeout, a.retries, a.concurrency))
    if chosen == ["none"]:  # only the deployed systems (--system), no reference shapes
        if not systems:
            raise ValueError("--strategies none leaves nothing to run: add --system NAME=URL")
        chosen, strategies = [], []
    else:
        strategies = [get_strategy(x).name for x in chosen] if chosen else default_strategies()
    # the chosen strategies, plus any that a --set axis names
    named = [x for x in cli_axes if x not in strategies]
    # ... and every strategy the sweep file configures: a configured strategy is never silently left out
    named += [x for x in sweep.get("strategies", {}) if x not in strategies + named]
    grid = {s: grid.get(s, {}) for s in strategies + named}
    if a.where:  # one chunk filter for every strategy of the run (it shows in each point's label)
        from rag.index.code_order import parse_where

        parse_where(a.where)
        clash = [s for s in grid if "where" in grid[s]]
        if clash:
            raise ValueError(f"--where and a `where` axis for {', '.join(clash)}: give one of them")
        grid = {s: {**g, "where": [a.where]} for s, g in grid.items()}
    return grid, systems


def endpoints(a) -> tuple:
    """(answer LLM, judge LLM, prompt template) from the flags; each needs its model (a resume restores it)."""
    from rag.llm.client import LLMConfig

    llm = None
    if a.llm_base_url:
        if not a.llm_model and not a.resume:  # resuming: the URL only restores the run's credentials
            raise ValueError("--llm-base-url needs --llm-model")
        llm = LLMConfig(a.llm_base_url, a.llm_model or "", a.llm_key_env, a.temperature, a.max_tokens, a.timeout,
                        a.retries, max_concurrency=a.concurrency, context_window=a.context_window or 0)
    elif a.context_window or a.fit_context:
        raise ValueError(f"{'--context-window' if a.context_window else '--fit-context'} is about an LLM answerer's "
                         "window: pass --llm-base-url and --llm-model too")
    prompt = None
    if a.prompt:
        from rag.answer.prompts import load_prompt

        prompt = load_prompt(a.prompt).to_dict()
    judge = None
    if a.judge_base_url:
        if not a.judge_model and not a.resume:
            raise ValueError("--judge-base-url needs --judge-model")
        judge = LLMConfig(a.judge_base_url, a.judge_model or "", a.judge_key_env, 0.0, a.judge_max_tokens, a.timeout,
                          a.retries, max_concurrency=a.concurrency, response_format=a.judge_format)
    elif llm is not None and getattr(a, "judge", "auto") == "auto" and not a.resume:
        # a judge by default wherever an LLM is configured: the answering endpoint and model (--judge none: off)
        judge = LLMConfig(llm.base_url, llm.model, llm.api_key_env, 0.0, a.judge_max_tokens, a.timeout, a.retries,
                          max_concurrency=a.concurrency, response_format=a.judge_format)
    if judge is not None and getattr(a, "judge_repeats", 1) > 1:  # repeats are samples, not one reply read N times
        from dataclasses import replace

        from evals.score.judges import JUDGE_REPEAT_TEMPERATURE  # --judge-repeats samples the judge

        judge = replace(judge, temperature=JUDGE_REPEAT_TEMPERATURE)
    if getattr(a, "judge_repeats", 1) > 1 and judge is None and not a.resume:
        raise ValueError("--judge-repeats needs a judge: an LLM answerer (--llm-base-url) or --judge-base-url")
    return llm, judge, prompt




def write_reports(a, run_ids: list, status: int) -> int:
    """The HTML report of each run (and the notebook report when asked); a failure is said and sets the exit
    status, never hidden (the results are stored either way). A resume keeps the run's --no-report."""
    if a.resume and not a.no_report and run_ids:  # a resume does as the run was asked: --no-report stays
        from evals.store import ResultStore

        with ResultStore(a.db or Path(a.workspace) / "results.duckdb", read_only=True) as st:
            if st.run(run_ids[0]).get("options", {}).get("report") is False:
                print(f"no report: run {run_ids[0]} was started with --no-report", file=sys.stderr)
                a.no_report = True
    if not a.no_report:
        from evals.report.html import write_report
        db = a.db or Path(a.workspace) / "results.duckdb"
        exports = []
        for rid in run_ids:
            try:
                print(f"report: {write_report(rid, db=db, out_dir=Path(a.workspace) / 'reports')}  "
                      "(self-contained: the one to send; it opens from disk with no network and no Python)")
                if a.notebook_report:  # the notebook exports run side by side (each a marimo kernel of its own)
                    exports.append((rid, start_report_notebook(rid, db, Path(a.workspace) / "reports")))
            except Exception as e:  # the results are stored; a report failure must say so, not hide it
                print(f"report for {rid} failed: {type(e).__name__}: {e}", file=sys.stderr)
                status = 4
        for rid, job in exports:
            try:
                nb = finish_report_notebook(job)
                if nb:
                    print(f"notebook report: {nb}  (offline: python -m evals.report.serve {nb})")
            except Exception as e:
                print(f"notebook report for {rid} failed: {type(e).__name__}: {e}", file=sys.stderr)
                status = 4
    return status


def failed_answers(a, run_id: str) -> str:
    """'' when the run's answers are healthy, else a summary of their statuses: every answer failed, or
    more than --max-failure-rate of them (docs/llm.md)."""
    from evals.store import ResultStore

    with ResultStore(a.db or Path(a.workspace) / "results.duckdb", read_only=True) as st:
        rows = st.con.execute("SELECT answer_status, count(*) FROM results WHERE run_id = ? GROUP BY 1 ORDER BY 2 DESC",
                              [run_id]).fetchall()
    total = sum(n for _, n in rows)
    bad = {s: n for s, n in rows if s != "ok"}
    nbad = sum(bad.values())
    if not total or not nbad or (nbad < total and nbad / total <= a.max_failure_rate):
        return ""
    what = "every answer failed" if nbad == total else f"{nbad / total:.0%} of answers failed (cap {a.max_failure_rate:.0%})"
    return (f"run {run_id}: {what}: {nbad} of {total} items ("
            + ", ".join(f"{s}={n}" for s, n in bad.items()) + "); the items and their errors are stored "
            f"(ragwb show {run_id}; ragwb export {run_id})")


def cmd_score(a) -> int:
    from evals.run.logged import score_logged, scored_line

    res = score_logged(a.file, a.workspace, a.db, a.dataset, a.questions, a.name, a.run_id,
                       index_config(a) if a.dataset else None, progress=not a.no_progress,
                       metrics=[m.strip() for x in (a.metrics or []) for m in x.split(",") if m.strip()] or None,
                       sample=a.sample, seed=a.seed, resume=a.resume, batch=a.batch, max_cell_mb=a.max_cell_mb,
                       options={"no_report": a.no_report})
    print(scored_line(res, a.file))
    if not (a.no_report or res["options"].get("no_report")):  # a resume does as the run was asked
        from evals.report.html import write_report
        print(f"report: {write_report(res['run_id'], db=a.db or Path(a.workspace) / 'results.duckdb', out_dir=Path(a.workspace) / 'reports')}")
    return 0


def add_run(sub) -> None:
    s = sub.add_parser("run", help="evaluate strategies and budget grids; store every item in DuckDB",
                       description="Evaluate strategies x budget points x questions offline (or with an LLM) and "
                       "write per-question results and scores to DuckDB, then an HTML report. With no arguments "
                       "it runs every bundled set with every strategy at its shipped defaults.")
    s.add_argument("--dataset", action="append", help="dataset to run (repeatable; 'all' = every bundled set)")
    s.add_argument("--questions", default=None, help="JSONL gold questions for a folder dataset")
    s.add_argument("--strategies", default=None, help="comma-separated strategy names (default: all)")
    s.add_argument("--plugins", nargs="*", default=None, metavar="FILE",
                   help="your own strategies: Python files or modules with @register_strategy classes "
                        "(docs/your-system.md); their sha256 is recorded with the run")
    s.add_argument("--system", action="append", metavar="NAME=URL",
                   help="a deployed RAG service measured beside the strategies (repeatable: v1=..., v2=...); it gets "
                        "POST {question, question_id, history} and returns {answer, contexts, usage} "
                        "(docs/your-system.md); --strategies none runs only the systems")
    s.add_argument("--system-map", action="append", metavar="NAME=FILE",
                   help="a TOML/JSON mapping of a system's request and response fields, headers from environment "
                        "variables (docs/your-system.md)")
    s.add_argument("--set", action="append", metavar="STRATEGY.PARAM=V1,V2",
                   help="a budget axis of the grid, e.g. chunks.top_k=4,8,16 (repeatable)")
    s.add_argument("--where", default="", metavar="FIELD=GLOB",
                   help="every strategy searches only chunks whose kind, symbol, file or language match, e.g. "
                        "kind=method or 'file=src/*.py;symbol=Parser.*' (per strategy: --set chunks.where=...)")
    s.add_argument("--config", default=None, help="TOML sweep file ([run] and [strategies.NAME] tables)")
    s.add_argument("--limit", type=at_least(1, " (omit --limit for all questions)"), default=None,
                   help="only the first N questions (N >= 1; omit for all)")
    s.add_argument("--repeats", type=at_least(1), default=None, help="repeat each item k times, k >= 1 (judge/answer "
                   "noise; the LLM cache is keyed on the repeat index; default 1)")
    s.add_argument("--answerer", default=None, choices=["extractive", "openai"],
                   help="extractive (offline default) or openai (needs --llm-base-url)")
    s.add_argument("--threshold", type=share_arg, default=0.35,
                   help="extractive: support below this gives the fallback (a share, 0..1; 0.35)")
    s.add_argument("--scorers", nargs="*", default=None, help="scorer families (default: all; see `ragwb metrics`)")
    s.add_argument("--memory", default=None, metavar="P1,P2",
                   help="conversational sets: memory policies to compare (none, full_history, window, "
                        "retrieved_turns, recent_summaries; default all); their budgets with "
                        "--set memory.window_turns=2,4 (see `ragwb memory`)")
    s.add_argument("--query-mode", default=None, metavar="M1,M2",
                   help="conversational sets: retrieval query modes: last_turn (default), history_concat, "
                        "rewrite (needs an LLM), gold_rewrite (oracle)")
    s.add_argument("--insert-fillers", type=non_negative_float, default=0.0, metavar="RATE",
                   help="conversational sets: insert seeded filler turns ('thanks', 'ok') after each turn with "
                        "this probability, to measure retrieval bypass (default 0)")
    add_llm_args(s)
    s.add_argument("--plugin-timeout", type=non_negative_float, default=60.0, metavar="SECONDS",
                   help="time limit of a strategy plugin for one item: plugins run in a worker process that is "
                        "killed past it (the item fails with that reason, the run goes on); default 60; 0 = no limit, "
                        "in this process (docs/your-system.md)")
    s.add_argument("--max-response-mb", type=positive_float, default=None, metavar="MB",
                   help="cap on one response body from an LLM, judge, embeddings endpoint or --system service; a "
                        "bigger one fails its item and is stored nowhere (default 8, or RAGWB_MAX_RESPONSE_MB)")
    s.add_argument("--show-prompt", action="store_true",
                   help="dry run: render the prompt of the first question for each point (your --prompt, the "
                        "context each shape packs, token counts) and exit; calls nothing, stores nothing")
    r = s.add_argument_group("racing the grid (docs/sweeps.md)")
    r.add_argument("--race", default=None, metavar="METRIC",
                   help="race the budget points on METRIC: questions in a seeded order, batch by batch; a point leaves "
                        "when its paired difference to the leader is below 0 with an anytime-valid 95%% interval "
                        "(asymptotic confidence sequence, Bonferroni over rivals); each point stores the questions it "
                        "answered and why it left")
    r.add_argument("--race-batch", type=at_least(10), default=None, metavar="N", help="questions per look (50)")
    r.add_argument("--race-alpha", type=share_arg, default=None, metavar="A",
                   help="error level of the race, split over the leader's rivals (0.05)")
    r.add_argument("--race-cost", type=share_arg, default=None, metavar="TOLERANCE",
                   help="keep the quality/cost Pareto front: a point also leaves when a cheaper one (context tokens) "
                        "is at least as good within TOLERANCE (e.g. 0.02)")
    r.add_argument("--race-seed", type=int, default=None, help="seed of the question order (0)")
    r.add_argument("--trust-judge", action="store_true",
                   help="race (or confirm) on an LLM-judged metric even when its judge's stored agreement with people "
                        "is at chance (refused by default: such values do not rank points)")
    c = s.add_argument_group("confirm questions (docs/sweeps.md, Confirm questions)")
    c.add_argument("--confirm", default=None, metavar="SHARE|N",
                   help="set aside a share (0 < SHARE < 1) or N questions by a seeded hash of the question id; the "
                        "grid or race tunes on the rest, then the point it picks (each point of the front with "
                        "--race-cost) is evaluated on these: show, best, the report and the page print its tune "
                        "score, its confirm score and the gap (optimism)")
    c.add_argument("--confirm-metric", default=None, metavar="METRIC",
                   help="the metric the pick is made on (default: --race's metric, else f1)")
    c.add_argument("--confirm-seed", type=int, default=None, help="seed of the confirm hash (0)")
    s.add_argument("--resume", default=None, metavar="RUN", help="continue a run that stopped")
    s.add_argument("--allow-changed-corpus", action="store_true",
                   help="--resume even though documents changed since the run started (default: refuse, naming them)")
    s.add_argument("--run-id", default=None, type=run_id_arg,
                   help="id for the new run (default: time + random); must not exist yet")
    s.add_argument("--db", default=None, help="DuckDB file (default: WORKSPACE/results.duckdb)")
    s.add_argument("--no-report", action="store_true", help="skip writing the HTML report")
    s.add_argument("--notebook-report", action="store_true",
                   help="also export notebooks/report.py as report-RUN.marimo.html (its frontend loads from marimo's "
                        "CDN: offline, view it with `python -m evals.report.serve FILE`; the static report is the "
                        "one to send)")
    add_index_args(s)
    s.set_defaults(fn=cmd_run)


def add_llm_args(s) -> None:
    """The answer LLM, its prompt and limits, the judge, prices and the failure cap (docs/llm.md)."""
    s.add_argument("--llm-base-url", default=None,
                   help="OpenAI-compatible base URL, e.g. http://127.0.0.1:8080/v1" + URL_SECRETS)
    s.add_argument("--llm-model", default=None, help="model name at that endpoint")
    s.add_argument("--llm-key-env", default="OPENAI_API_KEY", help="environment variable holding the API key")
    s.add_argument("--prompt", default=None, metavar="FILE",
                   help="your prompt for the LLM answerer: a text file (the user message, with {question} and "
                        "{context}, optionally {history}) or TOML with user, system ({fallback}) and fallback (the "
                        "abstention sentence); stored with the run by sha256 (docs/your-system.md)")
    s.add_argument("--temperature", type=temperature_arg, default=0.0,
                   help="sampling temperature of the answer model, 0..2 (0)")
    s.add_argument("--max-tokens", type=at_least(1), default=256, help="max completion tokens per answer (256)")
    s.add_argument("--timeout", type=positive_float, default=60.0, help="per-call timeout in seconds (> 0; 60)")
    s.add_argument("--retries", type=at_least(0), default=3,
                   help="retries on 429/5xx/timeouts, >= 0 (exponential backoff; 3)")
    s.add_argument("--concurrency", type=at_least(1), default=4,
                   help="max concurrent LLM calls, service requests and (index sweeps) embeddings requests to a "
                        "remote embedder, >= 1 (4)")
    s.add_argument("--context-window", type=at_least(1), default=None, metavar="TOKENS",
                   help="the answer model's context window; a prompt + --max-tokens that cannot fit is stored as "
                        "status context_overflow before any call (default: what the endpoint's /models reports, "
                        "else unchecked)")
    s.add_argument("--fit-context", action="store_true",
                   help="instead of context_overflow, re-pack an overflowing context to fit the window with the "
                        "point's own overflow policy (truncate or drop the last block); the item's counters say so")
    s.add_argument("--no-cache", action="store_true", help="do not use the LLM response cache")
    s.add_argument("--judge", default="auto", choices=["auto", "none"],
                   help="auto (default): with --llm-base-url the answering endpoint and model also judge (faithfulness, "
                        "answer relevance, context sufficiency) unless --judge-base-url names another judge; none: "
                        "no LLM judge (offline scorers only). Its calls are in the cost line")
    s.add_argument("--judge-base-url", default=None, help="OpenAI-compatible endpoint of an LLM judge (default: the "
                   "--llm-base-url endpoint; costs money)" + URL_SECRETS)
    s.add_argument("--judge-model", default=None, help="judge model name (default: --llm-model)")
    s.add_argument("--judge-key-env", default="OPENAI_API_KEY", help="environment variable holding the judge's key")
    s.add_argument("--judge-max-tokens", type=at_least(1), default=1024, help="max tokens per judge call")
    s.add_argument("--judge-format", default="", choices=["", "auto", "json_schema", "json_object", "text"],
                   help="the form each judge asks its reply schema in: json_schema (OpenAI, vLLM, Ollama, llama.cpp's "
                        "server), json_object with the schema (llama-cpp-python's server), text (no schema). Default "
                        "(auto): json_schema, and a server that refuses a form is asked in the next, once; the form "
                        "that worked is remembered per endpoint (docs/llm.md)")
    s.add_argument("--judge-repeats", type=between(1, JUDGE_REPEATS_MAX, f" ({JUDGE_REPEATS_WHY})"), default=1,
                   metavar="N",
                   help="ask each judge N times an item (1..20), sampled at temperature 0.7 (each repeat cached by its "
                        "index): the run prints each judge's flip rate and the value is the repeats' mean (default 1)")
    s.add_argument("--jury", default="", metavar="M1,M2",
                   help="a jury of 2..8 models: each judge asked of each of them at the judge endpoint "
                        "(--judge-base-url, else the "
                        "answering endpoint), combined by --jury-rule; every juror's verdict kept, each pair's kappa "
                        "printed (docs/llm.md)")
    s.add_argument("--jury-rule", default="mean", choices=["mean", "majority"], help="how a jury combines (mean)")
    s.add_argument("--judges", nargs="*", default=None,
                   help="judges to run: llm_faithfulness, llm_answer_relevance, llm_context_sufficiency (the "
                        "default three), ragas_faithfulness, ragas_context_recall, ragas_answer_accuracy (the ragas "
                        "extra); a ragas judgment waits at most "
                        "--timeout x (--retries + 1) x 2 + 5 s (485 s at the defaults) before it is a timeout")
    s.add_argument("--yes", action="store_true", help=YES_HELP + " (an LLM answerer, judges, services)")
    s.add_argument("--price", action="append", metavar="MODEL=IN,OUT",
                   help="price of a model in dollars per million input and output tokens (repeatable; a [prices] "
                        "table in --config works too, and RAGWB_PRICE='MODEL=IN,OUT;...'); built-in table: "
                        "rag/llm/client.py PRICES; a model with none is 'price unknown', never $0")
    s.add_argument("--max-judge-failures", type=share_arg, default=0.5, metavar="SHARE",
                   help="exit 7 when an LLM judge failed (parse errors, timeouts, errors) on more than this share of "
                        "the items it was asked about (default 0.5), or on every one; a fifth or more is warned")
    s.add_argument("--max-failure-rate", type=share_arg, default=0.5, metavar="SHARE",
                   help="exit 6 when more than this share of a run's answers failed (timeouts, errors, context "
                        "overflow; default 0.5), or when every answer failed")


def add_score(sub) -> None:
    s = sub.add_parser("score", help="score a system's logged outputs (JSONL/CSV/parquet) and store them as a run",
                       description="Score logged records of your RAG system: ragas columns (user_input, "
                       "retrieved_contexts, response, reference) or the workbench's (question_id, question, contexts, "
                       "answer, prompt_tokens, completion_tokens, latency_ms). With --dataset they join the gold set by "
                       "question id, else by exact question text, and every metric applies; without, the "
                       "reference-free metrics (docs/your-system.md).")
    s.add_argument("file", help="the logged records (.jsonl, .csv, .parquet)")
    s.add_argument("--dataset", default=None, help="gold set to join (bundled name or folder; ingested if needed)")
    s.add_argument("--questions", default=None, help="JSONL gold questions for a folder dataset")
    s.add_argument("--name", default=None, help="the system's name in the store (default: logged; the file name is kept in the run config)")
    s.add_argument("--metrics", nargs="*", default=None, metavar="NAME",
                   help="score only these metrics or families (e.g. answer,retrieval,citations; default every one; "
                        "cost is always scored). Without faithfulness no text is embedded: fast on any log size")
    s.add_argument("--sample", type=at_least(1), default=None, metavar="N",
                   help="score the costly offline support scorer (faithfulness, citation_support) on a seeded "
                        "sample of N records, every other metric on all; the rest are not_applicable with the "
                        "reason, so intervals say n=N")
    s.add_argument("--seed", type=int, default=None, help="seed of --sample (0)")
    s.add_argument("--run-id", default=None, type=run_id_arg, help="id for the new run")
    s.add_argument("--resume", default=None, metavar="RUN",
                   help="score the rest of a run of this FILE that stopped (each batch is committed on its own, "
                        "so a kill loses at most one); the file must be unchanged (sha256)")
    s.add_argument("--batch", type=at_least(1), default=10_000, metavar="N",
                   help="records scored and committed together (10,000): memory follows the batch, not the file")
    s.add_argument("--max-cell-mb", type=number_above(0, True), default=16, metavar="MB",
                   help="refuse a cell (a JSONL line) larger than this, naming its row (16)")
    s.add_argument("--db", default=None, help="DuckDB file (default: WORKSPACE/results.duckdb)")
    s.add_argument("--no-report", action="store_true", help="skip writing the HTML report")
    add_index_args(s)
    s.set_defaults(fn=cmd_score)
