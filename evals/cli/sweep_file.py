"""`ragwb run --config FILE`: the sweep TOML read and checked (docs/sweeps.md): an unknown section, key, strategy or
parameter, or a value of the wrong type, is an error naming the file and the key (a typo must never run the
defaults)."""
from __future__ import annotations

import math
import tomllib
from pathlib import Path


SWEEP_SECTIONS = {"run", "strategies", "prices", "index"}

RUN_KEYS = {"datasets": "a list of dataset names", "strategies": "a list of strategy names",
            "answerer": "extractive or openai", "limit": "an integer >= 1", "repeats": "an integer >= 1",
            "prices": "a table MODEL = [input, output]", "plugins": "a list of strategy plugin files or modules",
            "index_in_points": "a list of [index] settings each point carries in its params (ragwb best writes it)",
            "questions": "the questions file of a folder dataset (a path; ragwb best writes it)"}


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
               or (k in ("datasets", "strategies", "plugins", "index_in_points") and not (isinstance(v, str) or
                                                             (isinstance(v, list) and all(isinstance(x, str) for x in v))))
               or (k == "answerer" and v not in ("extractive", "openai"))
               or (k == "questions" and (not isinstance(v, str) or not v.strip())))
        if bad:
            raise ValueError(f"{path}: [run] {k} must be {RUN_KEYS[k]}, got {v!r}")
    if run.get("plugins"):  # loaded before the strategy tables are checked: they may name a plugin's shapes
        from rag.strategies import load_plugins

        plugs = [run["plugins"]] if isinstance(run["plugins"], str) else run["plugins"]
        here = Path(path).parent
        run["plugins"] = [str(here / x) if (here / x).is_file() else x for x in plugs]
        load_plugins(run["plugins"])
    if "index" in d:  # index axes: chunker, chunk_tokens, overlap, leaf sizes, parent size, embedder
        from evals.run.index_grid import check_axes, fold_fixed

        if not isinstance(d["index"], dict):
            raise ValueError(f"{path}: [index] must be a table of SETTING = value or [values]")
        try:
            d["index"] = check_axes(d["index"])
        except ValueError as e:
            raise ValueError(f"{path}: [index] {e}") from None
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
