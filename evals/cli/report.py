"""``ragwb report``: the HTML report of a run, and the marimo notebook export beside it."""
from __future__ import annotations

import sys
from pathlib import Path

from .common import add_store_args, open_store


def start_report_notebook(run_id: str, db, out_dir):
    """Start `marimo export html notebooks/report.py` for a run in the background (None when the
    notebooks folder is absent); ``finish_report_notebook`` waits for it."""
    import subprocess

    from rag.ingest.bundled import notebooks_root

    nb = notebooks_root() / "report.py"
    if not nb.exists():
        return None
    from evals.report.html import report_name

    out = Path(out_dir) / report_name(run_id).replace(".html", ".marimo.html")
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


def cmd_report(a) -> int:
    from evals.report.html import write_report

    with open_store(a) as st:
        rid = st.resolve_run(a.run)
        other = st.resolve_run(a.compare) if a.compare else None
    print(write_report(rid, db=a.db or Path(a.workspace) / "results.duckdb",
                       out_dir=Path(a.out) if a.out else Path(a.workspace) / "reports", compare=other))
    return 0


def add_report(sub) -> None:
    s = sub.add_parser("report", help="write the HTML report of a run (or of two runs compared)")
    s.add_argument("run", help="run id, unique prefix, or 'latest'")
    s.add_argument("--compare", default=None, help="a second run to compare against (paired deltas)")
    s.add_argument("--out", default=None, help="output folder (default: WORKSPACE/reports)")
    add_store_args(s)
    s.set_defaults(fn=cmd_report)
