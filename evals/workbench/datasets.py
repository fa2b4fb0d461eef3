"""What the workbench opens: its command line (the flags of ``ragwb run`` that make sense in a page, or the same
settings from the environment) and the datasets a workspace holds (bundled sets first, then every folder
ingested into it). A wrong flag or an unknown dataset is a message the page shows, never a blank page."""
from __future__ import annotations

import argparse
import os
from dataclasses import dataclass, field
from pathlib import Path

# the page's flags live in a light module: `ragwb` builds its `workbench` subcommand from them on every command,
# and importing this package (pandas, the runner) cost every `ragwb search` ~0.5 s (issue 74)
from evals.cli.page_flags import ENV, workbench_parser  # noqa: F401 (re-exported)


@dataclass
class WorkbenchArgs:
    args: argparse.Namespace
    error: str = ""  # a flag that could not be read: the page shows it in one cell
    llm: object = None  # rag.llm.client.LLMConfig when an LLM answerer is configured
    judge: object = None  # the judge's LLMConfig: the answering endpoint and model by default (--judge none: None)
    prices: dict = field(default_factory=dict)  # --price / RAGWB_PRICE: model -> [input, output] $ per 1M tokens
    systems: tuple = ()  # rag.answer.systems.SystemConfig of each --system
    notes: list = field(default_factory=list)


def workbench_args(argv: list[str], environ: dict | None = None) -> WorkbenchArgs:
    """The workbench's settings from its command line (after marimo's ``--``) and the environment. Never exits:
    an unknown flag or a bad value is returned as ``error`` for the page to show."""
    env = os.environ if environ is None else environ
    p = workbench_parser()
    try:
        args, unknown = p.parse_known_args(argv)
    except (argparse.ArgumentError, SystemExit) as e:  # a bad value: the defaults, and the message
        return WorkbenchArgs(p.parse_args([]), f"workbench: {e}")
    out = WorkbenchArgs(args)
    if unknown:
        out.error = f"workbench: unknown argument(s) {' '.join(unknown)}; valid: " + ", ".join(
            sorted(o for a in p._actions for o in a.option_strings if o.startswith("--")))
    args.db = args.db or str(Path(args.workspace) / "results.duckdb")
    for key, var in ENV.items():
        if getattr(args, key) is None and env.get(var):
            setattr(args, key, env[var])
            out.notes.append(f"{key.replace('_', '-')} from {var}")
    args.llm_key_env = args.llm_key_env or "OPENAI_API_KEY"
    try:
        if args.llm_model and not args.llm_base_url:
            raise ValueError("--llm-model needs --llm-base-url (the endpoint serving it)")
        if args.llm_base_url:
            if not args.llm_model:
                raise ValueError("--llm-base-url needs --llm-model")
            from rag.llm.client import LLMConfig

            out.llm = LLMConfig(args.llm_base_url, args.llm_model, args.llm_key_env, args.temperature,
                                args.max_tokens, args.timeout, args.retries, max_concurrency=args.concurrency,
                                context_window=args.context_window or 0)
        out.judge = page_judge(args, out.llm)
        from rag.llm.client import env_prices, parse_prices

        out.prices = parse_prices(env_prices(env) + list(args.price or []))
        if args.system:
            from rag.answer.systems import parse_system_args

            out.systems = tuple(parse_system_args(args.system, [], args.timeout, args.retries, args.concurrency))
    except (ValueError, KeyError) as e:
        out.error = out.error or f"workbench: {e.args[0] if e.args else e}"
    return out


def page_judge(args, llm):
    """The page's judge, as ``ragwb run`` picks it: --judge-base-url/--judge-model, else the answering endpoint and
    model, else none (offline nothing is judged); --judge none turns it off."""
    from rag.llm.client import LLMConfig

    if args.judge == "none":
        if args.judge_base_url or args.judge_model:
            raise ValueError("--judge none turns the judge off: drop --judge-base-url / --judge-model")
        return None
    if bool(args.judge_base_url) != bool(args.judge_model):
        raise ValueError("--judge-base-url and --judge-model go together (without them the LLM answerer's model judges)")
    if args.judge_base_url:
        return LLMConfig(args.judge_base_url, args.judge_model, args.judge_key_env or args.llm_key_env, 0.0,
                         args.judge_max_tokens, args.timeout, args.retries, max_concurrency=args.concurrency)
    if llm is None:
        return None
    return LLMConfig(llm.base_url, llm.model, llm.api_key_env, 0.0, args.judge_max_tokens, args.timeout, args.retries,
                     max_concurrency=args.concurrency)


def workspace_datasets(workspace: str) -> dict[str, str]:
    """label -> dataset spec of everything the workbench can open here: the bundled sets first (conversation
    sets among them), then every folder ingested into this workspace that still exists (its name and path)."""
    from rag.index.workspace import Workspace
    from rag.ingest.corpora import BUNDLED

    out = {name: name for name in BUNDLED}
    # the folder -> name table Workspace.dataset_name keeps (read without opening the workspace's LanceDB)
    folders = Workspace._read_json(Path(workspace) / "dataset_names.json")
    for path, name in sorted(folders.items(), key=lambda kv: kv[1]):
        if Path(path).is_dir():
            out[f"{name} ({path})"] = path
    return out


def resolve_dataset(spec: str, workspace: str) -> str:
    """A bundled name, a folder path, or the name of a folder this workspace holds -> what to open. Anything
    else is an error naming the valid values."""
    from rag.ingest.corpora import BUNDLED

    spec = (spec or "").strip()
    if spec in BUNDLED or (spec and Path(spec).is_dir()):
        return spec
    known = workspace_datasets(workspace)
    by_name = {label.split(" (", 1)[0]: path for label, path in known.items() if path not in BUNDLED}
    if spec in by_name:
        return by_name[spec]
    if spec and Path(spec).exists():
        raise ValueError(f"dataset {spec!r} is a file, not a folder: give the folder holding your documents "
                         "(and --questions FILE for its questions)")
    raise ValueError(f"unknown dataset {spec!r}; valid: {', '.join(list(BUNDLED) + list(by_name))}, or a folder path")
