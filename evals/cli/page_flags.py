"""The workbench page's flags (``notebooks/workbench.py -- FLAGS``), which ``ragwb workbench`` takes as they are:
a module of its own, light to import (argparse only), so every ``ragwb`` command can build its parser without
loading the page's package."""
from __future__ import annotations

import argparse

# the environment's names for what the flags say (a flag wins); docs/llm.md "In the workbench"
ENV = {"llm_base_url": "RAGWB_LLM_BASE_URL", "llm_model": "RAGWB_LLM_MODEL", "llm_key_env": "RAGWB_LLM_KEY_ENV"}


def workbench_parser(add_help: bool = True) -> argparse.ArgumentParser:
    """The page's flags; ``ragwb workbench`` takes them too (as a parent parser: ``add_help=False``)."""
    from evals.cli.common import at_least, positive_float, temperature_arg

    p = argparse.ArgumentParser(prog="workbench.py", exit_on_error=False, add_help=add_help,
                                description="RAG Workbench: tune context budgets and compare strategies.")
    p.add_argument("--workspace", default="results", help="workspace folder (LanceDB index, caches)")
    p.add_argument("--db", default=None, help="DuckDB results of stored runs (default: WORKSPACE/results.duckdb)")
    p.add_argument("--dataset", default="squad2",
                   help="a bundled set, a folder (documents or code; ingested on first open), or the name of a folder "
                        "this workspace holds")
    p.add_argument("--questions", default=None, help="JSONL gold questions for a folder dataset (remembered)")
    p.add_argument("--limit", type=at_least(1), default=50, help="questions evaluated interactively")
    p.add_argument("--embedder", default="e5", choices=["e5", "use", "hash"], help="embedder of the index")
    p.add_argument("--plugins", nargs="*", default=[], help="your own strategy files (docs/your-system.md)")
    p.add_argument("--system", action="append", default=[], metavar="NAME=URL",
                   help="a deployed RAG service shown as a point beside the shapes (docs/your-system.md)")
    p.add_argument("--llm-base-url", default=None, help=f"OpenAI-compatible base URL (or {ENV['llm_base_url']})")
    p.add_argument("--llm-model", default=None, help=f"model name at that endpoint (or {ENV['llm_model']})")
    p.add_argument("--llm-key-env", default=None,
                   help=f"environment variable holding the API key (or {ENV['llm_key_env']}; default OPENAI_API_KEY)")
    p.add_argument("--temperature", type=temperature_arg, default=0.0, help="sampling temperature (0)")
    p.add_argument("--max-tokens", type=at_least(1), default=256, help="max completion tokens per answer (256)")
    p.add_argument("--context-window", type=at_least(1), default=None, help="the answer model's context window")
    p.add_argument("--concurrency", type=at_least(1), default=4, help="max concurrent LLM calls (4)")
    p.add_argument("--timeout", type=positive_float, default=60.0, help="per-call timeout in seconds (60)")
    p.add_argument("--retries", type=at_least(0), default=3, help="retries on 429/5xx/timeouts (3)")
    p.add_argument("--judge", default="auto", choices=["auto", "none"],
                   help="auto (default): the LLM answerer's endpoint and model also judge every point (faithfulness, "
                        "answer relevance, context sufficiency), in the same cost line; none: no judge")
    p.add_argument("--judge-base-url", default=None, help="another OpenAI-compatible endpoint to judge with")
    p.add_argument("--judge-model", default=None, help="the judge model at --judge-base-url")
    p.add_argument("--judge-key-env", default=None, help="environment variable holding the judge's key (default: "
                   "the answerer's)")
    p.add_argument("--judge-max-tokens", type=at_least(1), default=1024, help="max tokens per judge reply (1024)")
    p.add_argument("--price", action="append", default=[], metavar="MODEL=IN,OUT",
                   help="price of a model in dollars per million input and output tokens, as `ragwb run --price` "
                        "(repeatable; or RAGWB_PRICE='MODEL=IN,OUT;...'); a model with none is 'price unknown'")
    p.add_argument("--send", action="store_true",
                   help="answer without waiting for the Send button (the cost line is still shown): for "
                        "`python workbench.py` and `marimo export html`, where nobody is there to press it")
    return p
