"""Issue 64, outside input, fifth sweep: the items landed so far, each as a user hits it (CLI paths, real files, a
real kill)."""
import csv
import io
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from evals.cli import main
from test_score_stream import REPO, _count, _log, _table


def test_a_killed_score_against_a_gold_set_resumes(tmp_path, capsys):
    """Item 1: `ragwb score FILE --dataset squad2 --resume RUN` crashed with "RunConfig.__init__() got an unexpected
    keyword argument 'logged'"; every score from the page has a dataset."""
    log = _log(tmp_path / "log.csv", 1500)
    ws = tmp_path / "ws"
    db = ws / "results.duckdb"
    argv = ["score", str(log), "--dataset", "squad2", "--embedder", "hash", "--workspace", str(ws), "--no-progress",
            "--no-report", "--metrics", "answer,citation,cost", "--batch", "250"]
    child = subprocess.Popen([sys.executable, "-c", "import sys; from evals.cli import main; sys.exit(main(sys.argv[1:]))",
                              *argv, "--run-id", "K"], cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    deadline = time.monotonic() + 300  # a condition: the child commits batch after batch
    while time.monotonic() < deadline and child.poll() is None:
        seen = _count(db, "K") if db.exists() else None
        if seen and seen >= 500:
            break
        time.sleep(0.02)
    assert child.poll() is None, f"the child ended before it could be killed: {child.communicate()}"
    os.kill(child.pid, signal.SIGKILL)
    child.wait()
    kept = _table(db, "SELECT count(*) FROM results WHERE run_id='K'")[0][0]
    assert 500 <= kept < 1500 and kept % 250 == 0  # whole batches
    capsys.readouterr()
    assert main(["score", str(log), "--workspace", str(ws), "--no-progress", "--resume", "K"]) == 0
    assert _table(db, "SELECT count(*), count(DISTINCT question_id) FROM results WHERE run_id='K'")[0] == (1500, 1500)
    assert _table(db, "SELECT status FROM runs WHERE run_id='K'") == [("finished",)]


def test_a_bare_carriage_return_never_starts_a_row_in_a_csv(tmp_path):
    """Item 2: a cell holding a CR (no LF, comma or quote) was written unquoted: the row ended at the CR and the text
    after it started the next row as a live formula."""
    import pandas as pd

    from evals.csvout import write_csv

    out = tmp_path / "x.csv"
    write_csv(pd.DataFrame({"question_id": ["q1", "q2\r=2+2"], "answer": ["Paris.\r=1+1*cmd|' /C calc'!A0", "ok"]}),
              out)
    raw = out.read_bytes()
    rows = list(csv.reader(io.StringIO(raw.decode(), newline="")))
    assert len(rows) == 3 and rows[1][1].startswith("Paris.") and rows[2][0].startswith("q2")
    # the CR stays inside a quoted cell: the text after it is that cell's, never a row of its own
    assert b'"Paris.\r=1+1' in raw and b'"q2\r=2+2"' in raw
