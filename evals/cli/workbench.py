"""``ragwb workbench``: the marimo page, opened from wherever rag-workbench is installed (a wheel, pipx, a
checkout). It takes the page's own flags (``--dataset``, ``--llm-base-url``...: the ones that followed ``--`` after
``marimo run notebooks/workbench.py``), checks them before a server starts, binds 127.0.0.1 and prints the URL.
``--edit`` opens marimo's reactive editor on a copy of the notebook written where the user can edit it
(site-packages may be read-only)."""
from __future__ import annotations

import os
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
    copy already there when the user has changed it (never overwritten). (path, whether it was written now).
    Nothing is written through a link (issue 82): a folder or file there that is a symbolic link is refused with one
    line naming it, and each file is written new beside its name and swapped in."""
    from rag.ingest.bundled import notebook
    from rag.safeio import refuse_links, write_no_follow

    refuse_links(folder)
    folder.mkdir(parents=True, exist_ok=True)
    refuse_links(folder, *(folder / n for n in (*EDIT_FILES, "pyproject.toml")))
    target = folder / "workbench.py"
    shipped = notebook("workbench.py")
    if target.exists() and target.read_bytes() != shipped.read_bytes():
        return target, False
    for name in EDIT_FILES:
        write_no_follow(folder / name, notebook(name).read_bytes())
    settings = folder / "pyproject.toml"
    if not settings.exists():  # marimo reads [tool.marimo] from the pyproject.toml nearest the notebook
        write_no_follow(settings, b"# written by `ragwb workbench --edit`: the workbench runs on open in marimo's "
                                  b"editor\n[tool.marimo.runtime]\nauto_instantiate = true\n")
    return target, True


def is_loopback(host: str) -> bool:
    """Whether ``host`` binds this machine's loopback only (127.0.0.0/8, ::1, localhost): what other machines cannot
    reach. 0.0.0.0, ::, a LAN address or any other name is not."""
    import ipaddress

    if host.strip().lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def check_port(host: str, port: int) -> None:
    """ValueError (one line, exit 2) for a port outside 1..65535 or one another server holds, before any URL is
    printed: a busy port once printed the other server's URL as the workbench's own."""
    import socket

    if not 1 <= port <= 65535:
        raise ValueError(f"--port {port} is not a port (1..65535; leave it out for a free one)")
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as s:
        try:
            s.bind((host.strip("[]"), port))
        except OSError as e:
            raise ValueError(f"port {port} on {host} is in use or cannot be bound ({e.strerror or e}): pick "
                             "another --port, or leave it out for a free one") from None


def marimo_command(mode: str, notebook: Path, host: str, port: int, headless: bool, argv: list[str]) -> list[str]:
    cmd = [sys.executable, "-m", "marimo", mode, str(notebook), "--host", host, "--port", str(port)]
    if headless:
        cmd.append("--headless")
    if mode == "edit":
        # the editor runs any code its websocket is sent: it keeps marimo's token, which the workbench makes and hands
        # over on the server's stdin (never on its command line, which every account on the machine can read in
        # /proc); 127.0.0.1 alone is no guard, since another local account reaches loopback too (issue 82)
        cmd += ["--token", "--token-password-file", "-"]
    return cmd + ["--", *argv]


def write_example(path: str, force: bool) -> int:
    """``ragwb workbench --example-notebook FILE``: the Jupyter example (workbench.ipynb) from this installation
    written to FILE, to open in the user's own JupyterLab (README, "Jupyter"); an existing file or a link is
    refused without --force (and a link is replaced, never followed)."""
    from rag.ingest.bundled import notebook
    from rag.safeio import write_whole

    out = Path(path)
    if out.is_dir():
        out = out / "workbench.ipynb"
    if (out.exists() or out.is_symlink()) and not force:
        raise ValueError(f"--example-notebook {out}: the file exists; pass --force to replace it, or another path")
    if not out.parent.is_dir():
        raise ValueError(f"--example-notebook {out}: the folder {out.parent} does not exist")
    write_whole(out, notebook("workbench.ipynb").read_bytes())
    print(f"ragwb workbench: wrote {out} (open it in Jupyter with a kernel that has rag-workbench: README, Jupyter)")
    return 0


def cmd_workbench(a) -> int:
    if a.example_notebook:
        return write_example(a.example_notebook, a.force)
    from evals.bench.browser import free_port, wait_http
    from evals.workbench.datasets import workbench_args, workbench_parser
    from rag.ingest.bundled import notebook

    argv = page_argv(a, workbench_parser(add_help=False))
    checked = workbench_args(argv)  # a bad flag is one line here, before any server starts
    if checked.error:
        raise ValueError(checked.error.removeprefix("workbench: "))
    from evals.workbench.datasets import resolve_dataset

    resolve_dataset(checked.args.dataset, checked.args.workspace)  # an unknown set: one line, no server
    if a.edit and not is_loopback(a.host) and not a.allow_remote_edit:
        raise ValueError(f"--edit on --host {a.host} would open an editor that runs code to other machines: refused "
                         "(add --allow-remote-edit to mean it; the editor still asks for its token)")
    if a.port is not None:
        check_port(a.host, a.port)
    port = a.port or free_port()
    if not is_loopback(a.host):
        print(f"ragwb workbench: warning: serving on {a.host}: other machines that reach it can open the "
              + ("editor with its token" if a.edit else "page and read this workspace's data (no token in run mode)"),
              file=sys.stderr)
    nb = notebook("workbench.py")
    mode = "run"
    cwd = None
    token = None
    if a.edit:
        import secrets

        token = secrets.token_urlsafe(24)
        nb, written = edit_copy(Path(a.edit_dir or Path(checked.args.workspace) / "notebooks").absolute())
        nb = nb.absolute()  # marimo runs in the copy's folder: a relative path would name a folder under it
        mode = "edit"
        print(f"ragwb workbench: editing {nb}" + ("" if written else " (your changed copy, kept: delete it for the "
                                                                     "shipped one)"))
        cwd = str(nb.parent)  # marimo reads the run-on-open setting from the pyproject.toml beside the copy
        argv = with_absolute_store(
            [x if not _is_relative_path(x) else str(Path(x).resolve()) for x in argv], checked.args)
    env = {**os.environ, "MARIMO_SKIP_UPDATE_CHECK": "1"}  # nothing leaves 127.0.0.1: no version check either
    _stop_on_sigterm()  # a service manager's or a test's terminate stops the server too, never leaves it running
    proc = subprocess.Popen(marimo_command(mode, nb, a.host, port, a.headless, argv), env=env, cwd=cwd,
                            stdin=subprocess.PIPE if token else None)
    if token:
        proc.stdin.write(token.encode() + b"\n")
        proc.stdin.close()
    host = a.host if a.host not in ("0.0.0.0", "::") else "127.0.0.1"
    url = f"http://{'[' + host + ']' if ':' in host and not host.startswith('[') else host}:{port}/"
    if token:
        url += f"?access_token={token}"  # the one URL that opens the editor; marimo then keeps a session cookie
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


def with_absolute_store(argv: list[str], args) -> list[str]:
    """The page's --workspace and --db as absolute paths (given or not, existing or not): the editor runs in its
    copy's folder, where a relative "results" would be a second, empty workspace beside the copy (issue 83)."""
    out = list(argv)
    for flag, value in (("--workspace", args.workspace), ("--db", getattr(args, "db", None))):
        if value is None:
            continue
        absolute = str(Path(value).absolute())
        for i, x in enumerate(out):
            if x == flag and i + 1 < len(out):
                out[i + 1] = absolute
                break
            if x.startswith(flag + "="):
                out[i] = f"{flag}={absolute}"
                break
        else:
            out += [flag, absolute]
    return out


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
    s.add_argument("--port", type=int, default=None, help="port, 1..65535 and free (default: a free one)")
    s.add_argument("--host", default="127.0.0.1", help="address to bind (default 127.0.0.1: this machine only; "
                                                       "another address warns, and --edit refuses it)")
    s.add_argument("--headless", action="store_true", help="do not open a browser")
    s.add_argument("--edit", action="store_true",
                   help="open marimo's reactive editor on a copy of the notebook you can change (it says where); "
                        "the editor keeps a token: open the URL printed, which carries it")
    s.add_argument("--allow-remote-edit", action="store_true",
                   help="let --edit bind a non-loopback --host (the editor runs code: it still asks for its token)")
    s.add_argument("--edit-dir", default=None, help="where --edit writes its copy (default: WORKSPACE/notebooks)")
    s.add_argument("--example-notebook", default=None, metavar="FILE",
                   help="write the Jupyter example notebook (workbench.ipynb) from this installation to FILE (or into "
                        "a folder) and exit: open it in your own JupyterLab (README, Jupyter)")
    s.add_argument("--force", action="store_true", help="--example-notebook may replace an existing file")
    s.add_argument("--wait", type=float, default=120.0, help="seconds to wait for the server to answer (120)")
    s.set_defaults(fn=cmd_workbench)
