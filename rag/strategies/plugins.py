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

from .base import STRATEGIES

ENTRY_POINT_GROUP = "rag_workbench.plugins"
ORIGIN: dict[str, str] = {}  # strategy name -> the plugin that registered it
_LOADED: dict[str, str] = {}  # plugin (resolved path or module) -> sha256 of its source


class PluginError(ValueError):
    """A plugin that cannot be loaded: the message names its file and line."""


def _file_sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _outside_dirs() -> list[Path]:
    """Where installed code lives (the standard library, site-packages): never the user's own modules."""
    import site
    import sysconfig

    dirs = {sys.prefix, sys.base_prefix, sys.exec_prefix, *site.getsitepackages(), site.getusersitepackages()}
    dirs |= {v for k, v in sysconfig.get_paths().items() if k in ("stdlib", "platstdlib", "purelib", "platlib")}
    here = Path(__file__).resolve().parents[2]  # this package's own tree (rag/, evals/): not the plugin's code
    return [Path(d).resolve() for d in dirs if d] + [here / "rag", here / "evals"]


def _resolve_module(name: str, roots: list[Path]) -> Path | None:
    """The file of module ``name`` under one of ``roots`` (a.b -> a/b.py or a/b/__init__.py), found
    without importing anything."""
    parts = name.split(".") if name else []
    for root in roots:
        base = root.joinpath(*parts)
        for cand in (base.with_suffix(".py"), base / "__init__.py"):
            if cand.is_file():
                return cand.resolve()
    return None


def local_imports(path: Path) -> list[Path]:
    """The user's own modules a plugin file imports, directly or through each other (found by reading
    their import statements, never by running them): modules beside the plugin or on sys.path outside
    the standard library and installed packages. Their sources are part of the plugin's checksum, so an
    edit to a helper module is a changed plugin too."""
    import ast

    outside = _outside_dirs()

    def is_outside(f: Path) -> bool:
        return any(f.is_relative_to(d) for d in outside)

    roots = [path.resolve().parent] + [Path(x).resolve() for x in sys.path if x and Path(x).is_dir()
                                       and not is_outside(Path(x).resolve())]
    roots = list(dict.fromkeys(roots))
    me = path.resolve()
    seen: dict[Path, None] = {}
    todo = [me]

    def visit(f: Path | None) -> None:
        if f is not None and f != me and f not in seen and not is_outside(f):
            seen[f] = None
            todo.append(f)

    while todo:
        f = todo.pop()
        try:
            tree = ast.parse(f.read_bytes(), str(f))
        except (SyntaxError, ValueError, OSError, RecursionError):
            continue  # the import itself reports a broken file
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and node.level:  # relative: from the file's own package
                base = f.parent
                for _ in range(node.level - 1):
                    base = base.parent
                mod = node.module.split(".") if node.module else []
                for cand in [base.joinpath(*mod)] + [base.joinpath(*mod, a.name) for a in node.names]:
                    visit(_resolve_module("", [cand]))
                continue
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                names = [node.module] + [f"{node.module}.{a.name}" for a in node.names]
            else:
                continue
            for n in names:
                for i in range(1, n.count(".") + 2):  # a.b.c imports a, a.b and a.b.c
                    visit(_resolve_module(".".join(n.split(".")[:i]), roots))
    return sorted(seen)


def _sha(path: Path) -> str:
    """sha256 of a plugin file, and of the user's own modules it imports when there are any (their paths
    relative to the plugin and their bytes): a run measures one version of all of the user's code."""
    deps = local_imports(path)
    if not deps:
        return _file_sha(path)  # a single-file plugin: its file's own sha256 (as runs have always recorded)
    import os

    h = hashlib.sha256(path.read_bytes())
    for d in deps:  # relative paths: the same project in another folder has the same checksum
        h.update(b"\x00" + os.path.relpath(d, path.resolve().parent).encode() + b"\x00" + d.read_bytes())
    return h.hexdigest()


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
        if p.is_dir():  # said as what it is (it was "no such file"): a plugin is one file or a module
            raise PluginError(f"plugin {spec}: is a folder; give the plugin's .py file (--plugins FOLDER/my_plugin.py) "
                              "or an importable module name")
        if not p.is_file():
            raise PluginError(f"plugin {spec}: no such file")
        key, sha = str(p.resolve()), _sha(p)
        name = f"ragwb_plugin_{sha[:12]}_{p.stem}"
        # its folder is importable, as for `python plugin.py`: a helper beside it (part of its checksum) imports
        folder = str(p.resolve().parent)
        if folder not in sys.path:
            sys.path.insert(0, folder)
        try:
            from importlib.machinery import SourceFileLoader

            # read as Python source whatever its name ends with (spec_from_file_location has no loader for a file
            # without .py: "'NoneType' object has no attribute 'loader'")
            mod_spec = importlib.util.spec_from_loader(name, SourceFileLoader(name, str(p)))
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
        sha = _file_sha(Path(src)) if src else ""
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
            out[str(spec)] = _file_sha(Path(src)) if src else ""
    return out


def plugin_files(spec: str) -> list[str]:
    """The files a plugin's checksum covers (itself, then the user's modules it imports): for messages."""
    p = Path(str(spec))
    return [str(p), *map(str, local_imports(p))] if p.is_file() else [str(spec)]


# --------------------------------------------------------------------------- running a plugin's code

class PluginFailure(Exception):
    """A plugin's item failed in a way its own traceback does not name (a time limit, an exit, a wrong
    return value): the item's error, never the run's."""


class _Deadline(BaseException):
    """Raised inside a plugin's thread when its time is up (a BaseException: a plugin's own
    ``except Exception`` must not swallow it)."""


def call_with_time_limit(fn, seconds: float):
    """``fn()``, stopped after ``seconds`` (0 = no limit) with PluginFailure. The plugin runs on a daemon
    thread and the caller waits at most ``seconds``: past them the item fails at once, whatever the plugin
    is doing (a ``time.sleep(3600)`` included), and the deadline is raised inside that thread so a loop stops
    at its next Python instruction; a thread stuck in one C call is left behind (a daemon: it never holds the
    process at exit). ``sys.exit`` in a plugin is its item's error too, not the end of the run."""
    import ctypes
    import threading

    box: dict = {}

    def run():
        try:
            box["value"] = fn()
        except BaseException as e:  # noqa: BLE001 - handed to the caller's thread below
            box["error"] = e

    t = threading.Thread(target=run, daemon=True, name="ragwb-plugin")
    t.start()
    if not seconds:  # no limit: still on a thread of its own, so a KeyboardInterrupt it raises is told apart from a
        while t.is_alive():  # Ctrl-C (which comes to this, the main, thread, and interrupts the wait)
            t.join(0.2)
    t.join(seconds or None)
    if t.is_alive():
        ctypes.pythonapi.PyThreadState_SetAsyncExc(ctypes.c_ulong(t.ident), ctypes.py_object(_Deadline))
        raise PluginFailure(f"took longer than its time limit of {seconds:g} s (--plugin-timeout)")
    err = box.get("error")
    if isinstance(err, _Deadline):
        raise PluginFailure(f"took longer than its time limit of {seconds:g} s (--plugin-timeout)") from None
    if isinstance(err, SystemExit):
        raise PluginFailure(f"called sys.exit({err.code!r})") from None
    if isinstance(err, KeyboardInterrupt):  # raised on the plugin's own thread (Ctrl-C reaches the main thread)
        raise PluginFailure("raised KeyboardInterrupt (its own; Ctrl-C in the terminal stops the run)") from None
    if err is not None:
        raise err
    return box["value"]


def checked_context(ctx, name: str, p, encoding: str):
    """A plugin's Context made safe to score and send: its type checked (a dict, None or foreign items are
    the item's error, named), each block's tokens counted here on the text that is sent (a block's own
    ``n_tokens`` is a claim, not a count), and the point's ``max_context_tokens`` enforced by the shared
    overflow policy, as for every built-in shape. Counters say when a claim or the budget changed anything."""
    import dataclasses

    from rag.tokens import count_tokens_memo
    from .base import Block, Context
    from .packing import pack_blocks

    if not isinstance(ctx, Context):
        raise PluginFailure(f"returned {type(ctx).__name__}, not a Context (rag.extend.Context)")
    if not isinstance(ctx.blocks, list):
        raise PluginFailure(f"returned a Context whose blocks are {type(ctx.blocks).__name__}, not a list of Block")
    for i, b in enumerate(ctx.blocks):
        if not isinstance(b, Block):
            raise PluginFailure(f"returned a Context whose block {i} is {type(b).__name__}, not a Block "
                                "(rag.extend.Block)")
        if not isinstance(b.text, str):
            raise PluginFailure(f"returned block {i} whose text is {type(b.text).__name__}, not text")
    if not isinstance(ctx.counters, dict):
        ctx.counters = {"plugin_counters": str(ctx.counters)[:200]}
    claimed = sum(b.n_tokens if isinstance(b.n_tokens, int) else 0 for b in ctx.blocks)
    blocks = [dataclasses.replace(b, n_tokens=count_tokens_memo(b.text, encoding)) for b in ctx.blocks]
    counted = sum(b.n_tokens for b in blocks)
    counters = dict(ctx.counters)
    if claimed != counted:
        counters["claimed_tokens"] = claimed  # what the plugin said; context_tokens is what is sent
    budget = getattr(p, "max_context_tokens", 0)
    if budget and counted > budget:
        raw = [(b.text, b.group, tuple(b.doc_ids), tuple(b.page_ids), tuple(b.chunk_ids), tuple(b.spans), b.n_tokens,
                b.score) for b in blocks]
        blocks = pack_blocks(raw, p, encoding)
        counters["held_to_budget"] = {"tokens_before": counted, "max_context_tokens": budget}
    return Context(ctx.strategy, ctx.params, blocks, counters)
