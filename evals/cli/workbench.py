"""``ragwb workbench``: the marimo page, opened from wherever rag-workbench is installed (a wheel, pipx, a
checkout). It takes the page's own flags (``--dataset``, ``--llm-base-url``...: the ones that followed ``--`` after
``marimo run notebooks/workbench.py``), checks them before a server starts, binds 127.0.0.1 and prints the URL.
``--edit`` opens marimo's reactive editor on a copy of the notebook written where the user can edit it
(site-packages may be read-only)."""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

EDIT_FILES = ("workbench.py", "head.html")


def page_argv(ns, parser) -> list[str]:
    """The page's flags that were given, back as a command line (each action of the page's parser whose value is
    not its default), so the page reads them with its own parser."""
    out: list[str] = []
    for act in parser._actions:
        if not act.option_strings or act.dest == "help":
            continue
        value = getattr(ns, act.dest, act.default)
        if value == act.default:
            continue
        flag = next(o for o in act.option_strings if o.startswith("--"))
        if act.nargs == 0:  # store_true
            out.append(flag)
        elif isinstance(value, list):
            if act.nargs in ("*", "+"):
                out += [flag, *map(str, value)]
            else:  # append
                for v in value:
                    out += [flag, str(v)]
        else:
            out += [flag, str(value)]
    return out


def edit_copy(folder: Path) -> tuple[Path, bool]:
    """The notebook copied into ``folder`` (with its head.html and the marimo setting that runs it on open), or the
    copy already there when the user has changed it (never overwritten). (path, whether it was written now)."""
    from rag.ingest.bundled import notebook

    folder.mkdir(parents=True, exist_ok=True)
    target = folder / "workbench.py"
    shipped = notebook("workbench.py")
    if target.exists() and target.read_bytes() != shipped.read_bytes():
        return target, False
    for name in EDIT_FILES:
        shutil.copyfile(notebook(name), folder / name)
    settings = folder / "pyproject.toml"
    if not settings.exists():  # marimo reads [tool.marimo] from the pyproject.toml nearest the notebook
        settings.write_text("# written by `ragwb workbench --edit`: the workbench runs on open in marimo's editor\n"
                            "[tool.marimo.runtime]\nauto_instantiate = true\n")
    return target, True


def marimo_command(mode: str, notebook: Path, host: str, port: int, headless: bool, argv: list[str]) -> list[str]:
    cmd = [sys.executable, "-m", "marimo", mode, str(notebook), "--host", host, "--port", str(port)]
    if headless:
        cmd.append("--headless")
    if mode == "edit":
        cmd.append("--no-token")  # bound to 127.0.0.1 by default; the URL printed is the one to open
    return cmd + ["--", *argv]


def cmd_workbench(a) -> int:
    from evals.bench.browser import free_port, wait_http
    from evals.interactive.datasets import workbench_args, workbench_parser
    from rag.ingest.bundled import notebook

    argv = page_argv(a, workbench_parser(add_help=False))
    checked = workbench_args(argv)  # a bad flag is one line here, before any server starts
    if checked.error:
        raise ValueError(checked.error.removeprefix("workbench: "))
    from evals.interactive.datasets import resolve_dataset

    resolve_dataset(checked.args.dataset, checked.args.workspace)  # an unknown set: one line, no server
    port = a.port or free_port()
    nb = notebook("workbench.py")
    mode = "run"
    cwd = None
    if a.edit:
        nb, written = edit_copy(Path(a.edit_dir or Path(checked.args.workspace) / "notebooks"))
        mode = "edit"
        print(f"ragwb workbench: editing {nb}" + ("" if written else " (your changed copy, kept: delete it for the "
                                                                     "shipped one)"))
        cwd = str(nb.parent)  # marimo reads the run-on-open setting from the pyproject.toml beside the copy
        argv = [x if not _is_relative_path(x) else str(Path(x).resolve()) for x in argv]
    env = {**os.environ, "MARIMO_SKIP_UPDATE_CHECK": "1"}  # nothing leaves 127.0.0.1: no version check either
    _stop_on_sigterm()  # a service manager's or a test's terminate stops the server too, never leaves it running
    proc = subprocess.Popen(marimo_command(mode, nb, a.host, port, a.headless, argv), env=env, cwd=cwd)
    url = f"http://{a.host if a.host not in ('0.0.0.0', '::') else '127.0.0.1'}:{port}/"
    try:
        deadline = time.time() + a.wait
        while proc.poll() is None:
            try:
                wait_http(url, seconds=min(2.0, max(0.1, deadline - time.time())))
                print(f"ragwb workbench: {url}  ({'editor' if a.edit else 'app'}; Ctrl-C stops it)", flush=True)
                break
            except OSError:
                if time.time() > deadline:
                    print(f"ragwb workbench: error: no answer on {url} after {a.wait:.0f} s", file=sys.stderr)
                    proc.terminate()
                    return 1
        return proc.wait()
    except KeyboardInterrupt:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
        return 130


def _stop_on_sigterm() -> None:
    import signal

    def stop(signum, frame):
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, stop)


def _is_relative_path(x: str) -> bool:
    """A page argument that names an existing relative path (a folder, a questions file): the editor runs beside
    its copy, so it gets the absolute path."""
    return not x.startswith("-") and not os.path.isabs(x) and os.path.exists(x)


def add_workbench(sub) -> None:
    from evals.cli.page_flags import workbench_parser

    s = sub.add_parser("workbench", parents=[workbench_parser(add_help=False)],
                       help="open the workbench page (marimo) on 127.0.0.1; the page's flags as they are",
                       description="Open the RAG Workbench page from this installation. The page's flags "
                                   "(--dataset, --questions, --llm-base-url, ...) go as they are; the server binds "
                                   "127.0.0.1 and prints its URL.")
    s.add_argument("--port", type=int, default=0, help="port (default: a free one)")
    s.add_argument("--host", default="127.0.0.1", help="address to bind (default 127.0.0.1: this machine only)")
    s.add_argument("--headless", action="store_true", help="do not open a browser")
    s.add_argument("--edit", action="store_true",
                   help="open marimo's reactive editor on a copy of the notebook you can change (it says where)")
    s.add_argument("--edit-dir", default=None, help="where --edit writes its copy (default: WORKSPACE/notebooks)")
    s.add_argument("--wait", type=float, default=120.0, help="seconds to wait for the server to answer (120)")
    s.set_defaults(fn=cmd_workbench)
