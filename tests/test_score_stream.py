"""Issue 54, item 8: ``ragwb score`` streams a log of any size. Records are read a row at a time, scored and
committed a batch at a time (a kill -9 loses at most the batch in flight and ``--resume`` scores the rest, each
record once), and a cell over the cap is refused naming its row before it is held. The million-row figures are
the bench's (`ragwb bench --only score-stream`), not a timed test."""
import csv
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import duckdb
import pytest

from evals.cli import main
from rag.answer.logged import iter_logged

REPO = Path(__file__).resolve().parents[1]
METRICS = ["--metrics", "answer,citation,cost"]


def _log(path: Path, rows: int, big_row: int | None = None, big: int = 0) -> Path:
    with open(path, "w", newline="") as fh:
        w = csv.DictWriter(fh, ["question_id", "question", "answer", "contexts"])
        w.writeheader()
        for i in range(rows):
            ctx = f"Record {i} says the river {i % 7} floods in spring."
            if i + 1 == big_row:  # rows are records, counted from 1 (a CSV's header is not one)
                ctx += " x" * big
            w.writerow({"question_id": f"q{i}", "question": f"What does record {i} say?",
                        "answer": f"The river {i % 7} floods in spring [1].", "contexts": json.dumps([ctx])})
    return path


def test_a_log_is_read_a_row_at_a_time(tmp_path):
    # three good rows, then one that is not JSON: the good ones come out before the bad one is read
    f = tmp_path / "log.jsonl"
    good = [json.dumps({"question": f"q{i}?", "contexts": ["c"], "answer": "a"}) for i in range(3)]
    f.write_text("\n".join(good + ["not json"]) + "\n")
    vocab, recs = iter_logged(f)
    assert vocab == "workbench" and [next(recs).question for _ in range(3)] == ["q0?", "q1?", "q2?"]
    with pytest.raises(ValueError, match=r"log.jsonl:4: not valid JSON"):
        next(recs)
    c = _log(tmp_path / "log.csv", 3)
    with open(c, "a") as fh:
        fh.write("q9,,an answer,[]\n")  # no question: named when it is reached
    vocab, recs = iter_logged(c)
    assert [next(recs).row for _ in range(3)] == [1, 2, 3]
    with pytest.raises(ValueError, match=r"row 4: column 'question' must be a non-empty text"):
        next(recs)


@pytest.mark.parametrize("fmt", ["csv", "jsonl"])
def test_a_cell_over_the_cap_is_refused_naming_its_row_and_stores_nothing(tmp_path, capsys, fmt):
    f = _log(tmp_path / "log.csv", 5, big_row=3, big=400_000)  # an 800,000-character context in row 3
    if fmt == "jsonl":
        csv.field_size_limit(10**7)
        with open(f, newline="") as fh:
            recs = list(csv.DictReader(fh))
        f = tmp_path / "log.jsonl"
        f.write_text("".join(json.dumps({**r, "contexts": json.loads(r["contexts"])}) + "\n" for r in recs))
    ws = tmp_path / "ws"
    assert main(["score", str(f), "--workspace", str(ws), "--no-report", "--no-progress", "--max-cell-mb", "0.5",
                 *METRICS]) == 2
    err = capsys.readouterr().err
    where = "log.csv: row 3: a field over the cap of 500,000 characters" if fmt == "csv" else \
        "log.jsonl:3: a line over the cap of 500,000 bytes"
    assert where in err and "--max-cell-mb" in err and "Traceback" not in err, err
    assert not (ws / "results.duckdb").exists()
    # under the default cap (16 MB) the same file is scored whole
    assert main(["score", str(f), "--workspace", str(ws), "--no-report", "--no-progress", *METRICS,
                 "--run-id", "OK"]) == 0
    con = duckdb.connect(str(ws / "results.duckdb"), read_only=True)
    assert con.execute("SELECT count(*) FROM results WHERE run_id='OK'").fetchone()[0] == 5
    con.close()


def _count(db: Path, run_id: str) -> int | None:
    try:
        con = duckdb.connect(str(db), read_only=True)
    except duckdb.Error:
        return None  # the writer holds the file: a batch is being committed
    try:
        return con.execute("SELECT count(*) FROM results WHERE run_id = ?", [run_id]).fetchone()[0]
    except duckdb.Error:
        return None
    finally:
        con.close()


def _table(db: Path, sql: str, *args):
    con = duckdb.connect(str(db), read_only=True)
    try:
        return con.execute(sql, list(args)).fetchall()
    finally:
        con.close()


def kill_score_when_stored(argv: list, db: Path, run_id: str, at_least: int) -> None:
    """Run ``ragwb ARGV --run-id RUN_ID`` in a child and SIGKILL it once ``at_least`` records are stored (a condition,
    not a duration: the child commits batch after batch)."""
    child = subprocess.Popen([sys.executable, "-c", "import sys; from evals.cli import main; sys.exit(main(sys.argv[1:]))",
                              *argv, "--run-id", run_id], cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline and child.poll() is None:
        seen = _count(db, run_id) if db.exists() else None
        if seen and seen >= at_least:
            break
        time.sleep(0.02)
    assert child.poll() is None, f"the child ended before it could be killed: {child.communicate()}"
    os.kill(child.pid, signal.SIGKILL)
    child.wait()


def test_a_killed_score_loses_at_most_a_batch_and_resumes_each_record_once(tmp_path, capsys):
    log = _log(tmp_path / "log.csv", 12_000)  # a kill at 3 batches leaves 9 (a million rows: the bench)
    ws = tmp_path / "ws"
    db = ws / "results.duckdb"
    argv = ["score", str(log), "--workspace", str(ws), "--no-progress", "--no-report", *METRICS, "--batch", "1000"]
    kill_score_when_stored(argv, db, "K", 3000)
    kept = _table(db, "SELECT count(*), count(DISTINCT question_id) FROM results WHERE run_id='K'")[0]
    assert kept[0] >= 3000 and kept[0] % 1000 == 0 and kept[0] == kept[1] < 12_000  # whole batches, each once
    assert _table(db, "SELECT status FROM runs WHERE run_id='K'") == [("running",)]
    # a changed file is not the run's: refused before anything is stored
    other = _log(tmp_path / "other.csv", 12_001)
    capsys.readouterr()
    assert main(["score", str(other), "--workspace", str(ws), "--no-progress", "--resume", "K"]) == 2
    assert "is not the file the run scored" in capsys.readouterr().err
    # a flag that asks for something else than the run was started with is refused, not ignored
    assert main(["score", str(log), "--workspace", str(ws), "--no-progress", "--resume", "K", "--metrics", "cost"]) == 2
    assert "--metrics" in capsys.readouterr().err
    # the resume scores the rest, keeps --no-report (no report written) and stores each record once
    assert main(["score", str(log), "--workspace", str(ws), "--no-progress", "--resume", "K"]) == 0
    out = capsys.readouterr().out
    assert f"({kept[0]:,} stored before the resume)" in out
    assert not (ws / "reports").exists()
    assert _table(db, "SELECT count(*), count(DISTINCT question_id) FROM results WHERE run_id='K'")[0] == (12_000, 12_000)
    assert _table(db, "SELECT status FROM runs WHERE run_id='K'") == [("finished",)]
    # the same scores as a run that was never killed
    assert main([*argv, "--run-id", "C"]) == 0
    per = "SELECT metric, status, count(*), round(sum(value), 6) FROM scores WHERE run_id = ? GROUP BY 1, 2 ORDER BY 1, 2"
    assert _table(db, per, "K") == _table(db, per, "C")
    capsys.readouterr()
    assert main(["score", str(log), "--workspace", str(ws), "--no-progress", "--resume", "K"]) == 2
    assert "the run is finished; nothing to resume" in capsys.readouterr().err


def test_a_duplicate_late_in_the_file_stores_nothing(tmp_path, capsys):
    log = _log(tmp_path / "log.csv", 2_500)
    with open(log, "a", newline="") as fh:
        csv.writer(fh).writerow(["q7", "again?", "a", "[]"])
    ws = tmp_path / "ws"
    assert main(["score", str(log), "--workspace", str(ws), "--no-progress", "--no-report", *METRICS,
                 "--batch", "1000"]) == 2
    assert "row 2501: question 'q7' appears twice" in capsys.readouterr().err
    assert not (ws / "results.duckdb").exists()
