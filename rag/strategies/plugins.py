"""Strategy plugins: a user's own shapes, registered exactly like the built-in ones.

A plugin is a Python file (``ragwb run --plugins my_strategies.py``, ``plugins = [...]`` in a sweep
file's ``[run]``), an importable module name, or an installed package's entry point in the group
``rag_workbench.plugins``. Importing it runs its ``@register_strategy`` classes. A plugin that fails
to import is one error naming its file and line, before any work. Each plugin's sha256 is recorded
with the run (a changed plugin is a different run config, visible in ``ragwb runs`` and comparisons).
"""
from __future__ import annotations

import hashlib
import importlib
import importlib.util
import sys
import traceback
from pathlib import Path

from . import STRATEGIES

ENTRY_POINT_GROUP = "rag_workbench.plugins"
ORIGIN: dict[str, str] = {}  # strategy name -> the plugin that registered it
_LOADED: dict[str, str] = {}  # plugin (resolved path or module) -> sha256 of its source


class PluginError(ValueError):
    """A plugin that cannot be loaded: the message names its file and line."""


def _sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _where(e: BaseException, path: str) -> str:
    """'FILE:LINE' of the innermost frame inside the plugin (else the plugin file)."""
    if isinstance(e, SyntaxError):
        return f"{e.filename or path}:{e.lineno}"
    frames = [f for f in traceback.extract_tb(e.__traceback__) if Path(f.filename).resolve() == Path(path).resolve()]
    return f"{path}:{frames[-1].lineno}" if frames else path


def _load_one(spec: str) -> tuple[str, str]:
    before = dict(STRATEGIES)
    p = Path(spec)
    if spec.endswith(".py") or p.exists():
        if not p.is_file():
            raise PluginError(f"plugin {spec}: no such file")
        key, sha = str(p.resolve()), _sha(p)
        name = f"ragwb_plugin_{sha[:12]}_{p.stem}"
        try:
            mod_spec = importlib.util.spec_from_file_location(name, p)
            mod = importlib.util.module_from_spec(mod_spec)
            sys.modules[name] = mod
            mod_spec.loader.exec_module(mod)
        except Exception as e:  # noqa: BLE001 - any failure of a user's file is one line naming it
            sys.modules.pop(name, None)
            msg = e.msg if isinstance(e, SyntaxError) else str(e)
            raise PluginError(f"plugin {_where(e, str(p))}: {type(e).__name__}: {msg}") from None
    else:
        try:
            mod = importlib.import_module(spec)
        except Exception as e:  # noqa: BLE001
            raise PluginError(f"plugin module {spec!r} cannot be imported: {type(e).__name__}: {e}") from None
        key = spec
        src = getattr(mod, "__file__", None)
        sha = _sha(Path(src)) if src else ""
    for n in STRATEGIES:
        if n in before and STRATEGIES[n] is not before[n] and ORIGIN.get(n) != key:
            STRATEGIES[n] = before[n]  # never replace a built-in or another plugin's shape
            raise PluginError(f"plugin {spec} registers strategy {n!r}, which already exists "
                              f"({ORIGIN.get(n, 'built in')}); pick another name")
        if n not in before or STRATEGIES[n] is not before[n]:
            ORIGIN[n] = key
    return key, sha


def load_plugins(specs=(), entry_points: bool = True) -> dict[str, str]:
    """Load plugin files or modules (and, unless told not to, the installed entry points); returns
    {plugin: sha256} of everything loaded so far. Loading the same file again re-registers its shapes."""
    for spec in specs or ():
        key, sha = _load_one(str(spec))
        _LOADED[key] = sha
    if entry_points:
        from importlib.metadata import entry_points as eps

        for ep in eps(group=ENTRY_POINT_GROUP):
            if ep.value in _LOADED:
                continue
            try:
                ep.load()
            except Exception as e:  # noqa: BLE001
                raise PluginError(f"plugin entry point {ep.name} ({ep.value}) cannot be loaded: "
                                  f"{type(e).__name__}: {e}") from None
            _LOADED[ep.value] = ""
    return dict(_LOADED)


def plugin_hashes(specs) -> dict[str, str]:
    """{resolved plugin file or module: sha256 of its source now}: what a run records and a resume checks."""
    out = {}
    for spec in specs or ():
        p = Path(str(spec))
        if p.is_file():
            out[str(p.resolve())] = _sha(p)
        else:
            mod = importlib.import_module(str(spec))
            src = getattr(mod, "__file__", None)
            out[str(spec)] = _sha(Path(src)) if src else ""
    return out
