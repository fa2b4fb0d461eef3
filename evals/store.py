"""The DuckDB results store. Schema documented in docs/store.md.

runs      one row per run (config JSON + hash, git commit, package versions, status)
questions the gold questions of each dataset
results   one row per run x strategy x budget point x question x repeat: blocks, answer,
          citations, token counts and per-stage latency
scores    one row per result x metric: value and status (kept apart from aggregates)
aggregates (view) per run x strategy x point x metric: n, n_ok, mean over ok rows

Rows are written in transactions (a result and all its scores together), so a run
killed at any point holds only whole items and ``--resume`` finishes it exactly.
"""
from __future__ import annotations

from .schema import RESULT_COLUMNS, SCHEMA, SCORE_COLUMNS, migrate
import json
import re
import time
from contextlib import contextmanager
from pathlib import Path

import duckdb
import pandas as pd

from rag.errors import env_number

DEFAULT_DB = Path("results") / "results.duckdb"


def _questions_frame(questions) -> pd.DataFrame:
    return pd.DataFrame([{"question_id": q.qid, "text": q.text, "answerable": q.answerable,
                          "qtype": q.qtype, "language": q.language, "answers": json.dumps(q.answers, ensure_ascii=False),
                          "evidence": json.dumps([e.__dict__ for e in q.evidence], ensure_ascii=False),
                          "metadata": json.dumps(getattr(q, "metadata", {}) or {}, ensure_ascii=False, default=str)}
                         for q in questions],
                        columns=["question_id", "text", "answerable", "qtype", "language", "answers", "evidence",
                                 "metadata"])


def make_folder(path: Path, what: str) -> None:
    """mkdir -p with one clear line when a file stands in the way or the folder cannot be made."""
    try:
        path.mkdir(parents=True, exist_ok=True)
    except FileExistsError:
        raise NotADirectoryError(f"{path}: a file stands where {what} should be; pass another path") from None
    except OSError as e:
        raise PermissionError(f"{path}: cannot create {what} ({e.strerror})") from None


class RunNotFound(KeyError):
    pass


class StoreBusy(RuntimeError):
    """The store stayed locked by another process for longer than the wait."""


class RunBusy(RuntimeError):
    """Another live process is writing this run (a second --resume): refused before any call."""


def run_lock_path(db: str | Path, run_id: str) -> Path:
    """The lock a run's writer holds while it evaluates: beside the results database, one per run."""
    db = Path(db)
    return db.parent / "locks" / f"{db.name}.run-{run_id}.lock"


@contextmanager
def run_writer(db: str | Path, run_id: str, resume_cmd: str = "ragwb run --resume"):
    """Hold the run's writer lock for the whole evaluation: one writer per run, so two resumers of one
    run never pay for the same items twice (the second is told at once, before any call). An OS lock:
    a writer killed with -9 releases it, so its run reads as interrupted and resumes."""
    import os
    import sys

    from filelock import FileLock, Timeout

    path = run_lock_path(db, run_id)
    make_folder(path.parent, "the run locks' folder")
    lock = FileLock(str(path), is_singleton=False)
    note = path.with_suffix(".json")
    try:
        lock.acquire(timeout=0)
    except Timeout:
        try:
            who = describe_pid(json.loads(note.read_text())["pid"])
        except (OSError, ValueError, KeyError, TypeError):
            who = "another process"
        raise RunBusy(f"run {run_id} is being written by {who}; one writer per run: wait for it to end (or stop "
                      f"it), then `{resume_cmd} {run_id}`") from None
    from rag.llm.urls import redact_argv

    try:
        # who holds the run, for a second writer's message: the pid and the command, its URLs redacted and
        # secrets scrubbed (the note is a file others can read); removed when the run ends
        note.write_text(json.dumps({"pid": os.getpid(), "argv": redact_argv(sys.argv[:20])}))
        yield
    finally:
        note.unlink(missing_ok=True)
        # the empty .lock stays: unlinking an OS lock file while another process opens it would split the lock
        lock.release()


def run_has_writer(db: str | Path, run_id: str) -> bool:
    """Whether a live process holds the run's writer lock (a 'running' run without one was interrupted)."""
    from filelock import FileLock, Timeout

    path = run_lock_path(db, run_id)
    if not path.exists():
        return False
    lock = FileLock(str(path), is_singleton=False)
    try:
        lock.acquire(timeout=0)
    except Timeout:
        return True
    lock.release()
    return False


class StoreUnreadable(RuntimeError):
    """The results file is not a DuckDB database this version can open (corrupt, truncated, a folder)."""


def default_wait() -> float:
    return env_number("RAGWB_DB_WAIT", 120.0)


def describe_pid(pid: str | int) -> str:
    """'process 123 (ragwb show latest)': who holds a lock, from /proc when this system has it."""
    try:
        cmd = " ".join(Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace").split())
    except OSError:
        cmd = ""
    if len(cmd) > 120:  # the program and the end of its arguments say what it is (ragwb show latest)
        cmd = cmd[:40] + " ... " + cmd[-75:]
    return f"process {pid}" + (f" ({cmd})" if cmd else "")


def connect_with_retry(path: Path, read_only: bool, wait: float | None = None) -> duckdb.DuckDBPyConnection:
    """Open the DuckDB file, waiting while another process holds its lock. DuckDB lets one process
    write *or* any number read; every holder here keeps it only for one batch or one query.
    A file that is not a readable database is one error naming it, never a traceback."""
    wait = default_wait() if wait is None else wait
    if path.is_dir():
        raise StoreUnreadable(f"{path} is a folder, not a results database; point --db at a file "
                              "(or move the folder aside)")
    deadline = time.monotonic() + wait
    delay = 0.01
    while True:
        try:
            return duckdb.connect(str(path), read_only=read_only)
        except duckdb.IOException as e:
            msg = str(e)
            if "lock" not in msg.lower():
                raise _unreadable(path, e) from None
            if time.monotonic() >= deadline:
                pid = re.search(r"PID (\d+)", msg)
                who = describe_pid(pid.group(1)) if pid else "another process"
                raise StoreBusy(f"{path} is locked by {who}; waited {wait:.0f}s "
                                "(set RAGWB_DB_WAIT to wait longer)") from None
            time.sleep(delay)
            delay = min(delay * 2, 0.25)
        except duckdb.Error as e:  # corrupt, truncated, checksum-broken, or another program's file
            raise _unreadable(path, e) from None


def _unreadable(path: Path, e: Exception) -> StoreUnreadable:
    if isinstance(e, duckdb.IOException) and ("Permission" in str(e) or "Read-only" in str(e)):
        return StoreUnreadable(f"{path}: cannot open the results database for writing ({str(e).splitlines()[0][:160]}); "
                               "check the folder's permissions or point --db elsewhere")
    first = str(e).strip().splitlines()[0][:200] if str(e).strip() else type(e).__name__
    return StoreUnreadable(f"{path} is not a readable results database ({type(e).__name__}: {first}); it may be "
                           "damaged: move it aside (e.g. mv it to .bak) and re-run, or point --db at another file")


DEFAULT_WAIT = None  # read from RAGWB_DB_WAIT when a store opens (a bad value is an error naming it)


class ResultStore:
    """The results database. Writers never hold it open between batches: each write opens the
    file, commits one transaction and closes it, so readers (``ragwb show``, the notebooks, a CI
    job) see every committed batch while a run is in progress (docs/store.md, "Concurrency")."""

    def __init__(self, path: str | Path = DEFAULT_DB, read_only: bool = False, wait: float | None = DEFAULT_WAIT):
        self.path = Path(path)
        self.read_only, self.wait = read_only, (default_wait() if wait is None else wait)
        self._con: duckdb.DuckDBPyConnection | None = None
        if not read_only:
            make_folder(self.path.parent, "the results database's folder")
            with self.session() as con:
                try:
                    con.execute(SCHEMA)
                    migrate(con)
                except duckdb.Error as e:
                    raise _unreadable(self.path, e) from None
        elif not self.path.exists():
            raise FileNotFoundError(f"{self.path}: no results database (run `ragwb run` first)")
        else:
            with self.session() as con:  # a damaged file fails here, as one line, not inside a query
                try:
                    con.execute("SELECT count(*) FROM runs").fetchone()
                except duckdb.CatalogException:
                    raise StoreUnreadable(f"{self.path} is a DuckDB file but not a ragwb results database "
                                          "(no runs table); point --db at results.duckdb") from None
                except duckdb.Error as e:
                    raise _unreadable(self.path, e) from None

    @property
    def con(self) -> duckdb.DuckDBPyConnection:
        """A connection held until ``close()``: for short-lived readers (one CLI command, one report)."""
        if self._con is None:
            self._con = connect_with_retry(self.path, self.read_only, self.wait)
        return self._con

    @contextmanager
    def session(self):
        """A connection for one unit of work: the held one if open, else opened and closed around it."""
        if self._con is not None:
            yield self._con
            return
        con = connect_with_retry(self.path, self.read_only, self.wait)
        try:
            yield con
        finally:
            con.close()

    def close(self):
        if self._con is not None:
            self._con.close()
            self._con = None

    def __enter__(self):
        return self

    def __exit__(self, *a):
        self.close()

    @contextmanager
    def transaction(self):
        with self.session() as con:
            con.execute("BEGIN TRANSACTION")
            try:
                yield con
            except BaseException:
                con.execute("ROLLBACK")
                raise
            else:
                con.execute("COMMIT")

    # ------------------------------------------------------------------ runs
    def create_run(self, run_id: str, row: dict, questions=None) -> None:
        """The run row and its gold questions as they are now, in one transaction."""
        with self.transaction() as con:
            self._insert_run(con, run_id, row, questions)

    def _insert_run(self, con, run_id: str, row: dict, questions) -> None:
        if con.execute("SELECT 1 FROM runs WHERE run_id = ?", [run_id]).fetchone():
            raise ValueError(f"run id {run_id!r} already exists in {self.path}; pick another --run-id "
                             f"or continue it with --resume {run_id}")
        con.execute(
            "INSERT INTO runs (run_id, created_at, status, git_commit, dataset, index_name, config, config_hash, "
            "versions, planned, corpus, options, index_built) VALUES (?, now(), 'running', ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
            [run_id, row.get("git_commit"), row["dataset"], row.get("index_name"), json.dumps(row["config"]),
             row["config_hash"], json.dumps(row.get("versions", {})), row.get("planned", 0),
             json.dumps(row.get("corpus", {})), json.dumps(row.get("options", {})),
             json.dumps(row["index_built"]) if row.get("index_built") else None])
        self._insert_run_questions(con, run_id, questions)

    @staticmethod
    def _insert_run_questions(con, run_id: str, questions) -> None:
        qdf = _questions_frame(questions or [])
        if len(qdf):
            con.register("_rq", qdf)
            con.execute(f"INSERT INTO run_questions (run_id, {', '.join(qdf.columns)}) "
                        f"SELECT ?, {', '.join(qdf.columns)} FROM _rq", [run_id])
            con.unregister("_rq")

    def store_finished_run(self, run_id: str, row: dict, questions, results: list[dict], scores: list[dict],
                           summary: dict) -> None:
        """A run whose items already exist (Save as run, ``ragwb score``): run row, gold, items and the
        finished status in one transaction, so a failure leaves nothing stored half."""
        with self.transaction() as con:
            self._insert_run(con, run_id, row, questions)
            self._insert_items(con, results, scores)
            con.execute("UPDATE runs SET status='finished', finished_at=now(), summary=? WHERE run_id=?",
                        [json.dumps(summary), run_id])

    def finish_run(self, run_id: str, summary: dict) -> None:
        with self.session() as con:
            con.execute("UPDATE runs SET status='finished', finished_at=now(), summary=? WHERE run_id=?",
                        [json.dumps(summary), run_id])

    def mark_incomplete(self, run_id: str, summary: dict) -> None:
        with self.session() as con:
            con.execute("UPDATE runs SET status='incomplete', finished_at=now(), summary=? WHERE run_id=?",
                        [json.dumps(summary), run_id])

    def count_items(self, run_id: str) -> int:
        with self.session() as con:
            return int(con.execute("SELECT count(*) FROM results WHERE run_id = ?", [run_id]).fetchone()[0])

    def run_questions(self, run_id: str) -> pd.DataFrame:
        """The gold questions of a run as they were when it started (older runs: the dataset's)."""
        with self.session() as con:
            return con.execute("SELECT * FROM run_gold WHERE run_id = ?", [run_id]).df()

    def run(self, run_id: str) -> dict:
        with self.session() as con:
            df = con.execute("SELECT * FROM runs WHERE run_id = ?", [run_id]).df()
            if df.empty:
                known = con.execute("SELECT run_id FROM runs ORDER BY created_at DESC LIMIT 10").fetchall()
                raise RunNotFound(f"no run {run_id!r} in {self.path}; recent runs: "
                                  f"{', '.join(r[0] for r in known) or 'none'}")
        r = df.iloc[0].to_dict()
        r["config"] = json.loads(r["config"]) if r["config"] else {}
        r["corpus"] = json.loads(r["corpus"]) if r.get("corpus") else {}
        r["options"] = json.loads(r["options"]) if isinstance(r.get("options"), str) and r["options"] else {}
        r["index_built"] = (json.loads(r["index_built"]) if isinstance(r.get("index_built"), str)
                            and r["index_built"] else {})  # runs stored before it: {} (gate reads the config)
        return r

    def resolve_run(self, ref: str) -> str:
        """A run id, a unique prefix of one, or 'latest'."""
        with self.session() as con:
            if ref == "latest":
                row = con.execute("SELECT run_id FROM runs ORDER BY created_at DESC LIMIT 1").fetchone()
                if not row:
                    raise RunNotFound(f"no runs in {self.path}")
                return row[0]
            rows = [r[0] for r in con.execute("SELECT run_id FROM runs WHERE starts_with(run_id, ?)",
                                              [ref]).fetchall()]
        if len(rows) == 1:
            return rows[0]
        if ref in rows:
            return ref
        if len(rows) > 1:
            raise RunNotFound(f"run prefix {ref!r} is ambiguous: it matches {len(rows)} runs: {', '.join(rows[:20])}"
                              f"{' ...' if len(rows) > 20 else ''}; give more of the id")
        self.run(ref)  # raises with the recent ids
        raise RunNotFound(f"no run {ref!r}")

    def runs(self) -> pd.DataFrame:
        """Every run, newest first; a 'running' run whose writer is gone (killed, crashed, Ctrl-C) reads
        'interrupted' (the stored status is left as it was: a reader never rewrites a run)."""
        with self.session() as con:
            df = con.execute(
                "SELECT r.run_id, r.created_at, r.status, r.dataset, r.git_commit, r.planned, "
                "(SELECT count(*) FROM results x WHERE x.run_id = r.run_id) AS done, "
                "json_extract_string(r.config, '$.plugins') AS plugins "
                "FROM runs r ORDER BY r.created_at DESC").df()
        if len(df):
            df["status"] = [("interrupted" if not run_has_writer(self.path, rid) else st) if st == "running" else st
                            for rid, st in zip(df["run_id"], df["status"])]
        return df

    # ------------------------------------------------------------------ rows
    def upsert_questions(self, dataset: str, questions) -> None:
        """The dataset's current gold questions (each run keeps its own copy: ``run_questions``)."""
        df = _questions_frame(questions)
        if df.empty:
            return
        df.insert(0, "dataset", dataset)
        with self.transaction() as con:
            con.register("_q", df)
            con.execute(f"INSERT OR REPLACE INTO questions ({', '.join(df.columns)}) "
                        f"SELECT {', '.join(df.columns)} FROM _q")
            con.unregister("_q")

    def done_keys(self, run_id: str) -> set[tuple]:
        with self.session() as con:
            return set(con.execute("SELECT strategy, point_id, question_id, repeat FROM results WHERE run_id = ?",
                                   [run_id]).fetchall())

    def write_scored_batch(self, run_id: str, questions, results: list[dict], scores: list[dict]) -> None:
        """One transaction: a batch of scored records (``ragwb score``) with the questions they answer, so a
        kill loses at most the batch in flight."""
        with self.transaction() as con:
            self._insert_run_questions(con, run_id, questions)
            self._insert_items(con, results, scores)

    def write_items(self, results: list[dict], scores: list[dict]) -> None:
        """One transaction: results and their scores land together or not at all."""
        if not results:
            return
        with self.transaction() as con:
            self._insert_items(con, results, scores)

    @staticmethod
    def _insert_items(con, results: list[dict], scores: list[dict]) -> None:
        if not results:
            return
        rdf = pd.DataFrame(results, columns=RESULT_COLUMNS)
        sdf = pd.DataFrame(scores, columns=SCORE_COLUMNS)
        sdf["value"] = sdf["value"].astype("float64")
        con.register("_r", rdf)
        con.execute(f"INSERT INTO results ({', '.join(RESULT_COLUMNS)}) SELECT * FROM _r")
        con.unregister("_r")
        if len(sdf):
            con.register("_s", sdf)
            con.execute(f"INSERT INTO scores ({', '.join(SCORE_COLUMNS)}) SELECT * FROM _s")
            con.unregister("_s")

    def confirm_questions(self, run_id: str, con=None) -> list | None:
        """The run's confirm questions (evals/run/confirm.py), as it stored them when it started; None: it has none."""
        if con is None:
            with self.session() as c:
                return self.confirm_questions(run_id, c)
        rows = con.execute("SELECT options FROM runs WHERE run_id = ?", [run_id]).fetchall()
        row = rows[0] if rows else None
        opts = json.loads(row[0]) if row and isinstance(row[0], str) and row[0] else {}
        ids = opts.get("confirm_questions")
        return [str(x) for x in ids] if isinstance(ids, list) else None

    def _part(self, con, run_id: str, part: str, col: str) -> str:
        """The SQL condition that keeps a run's ``part`` of its questions: "tune" (every reader's default: a run
        with confirm questions summarises, compares and gates on the questions its grid saw), "confirm" or "all"."""
        if part not in ("tune", "confirm", "all"):
            raise ValueError(f"part must be tune, confirm or all, got {part!r}")
        ids = None if part == "all" else self.confirm_questions(run_id, con)
        if ids is None:
            return "false" if part == "confirm" else "true"
        con.register("_cq", pd.DataFrame({"question_id": ids}, dtype=str))
        return f"{col} {'NOT ' if part == 'tune' else ''}IN (SELECT question_id FROM _cq)"

    def scores(self, run_id: str, part: str = "tune") -> pd.DataFrame:
        with self.session() as con:
            cond = self._part(con, run_id, part, "s.question_id")
            return con.execute("SELECT s.*, r.point_label FROM scores s JOIN results r USING "
                               f"(run_id, strategy, point_id, question_id, repeat) WHERE s.run_id = ? AND {cond}",
                               [run_id]).df()

    JUDGMENT_COLUMNS = ["question_key", "passage_key", "judge", "grade", "question_id", "question", "text", "status",
                        "detail", "source"]

    def add_judgments(self, rows: list[dict], source: str) -> int:
        """Store grades in one transaction (all or none); a judge's new grade of a pair replaces its old one."""
        if not rows:
            return 0
        df = pd.DataFrame([{**r, "source": source} for r in rows], columns=self.JUDGMENT_COLUMNS)
        df["grade"] = df["grade"].astype("Int64")
        with self.transaction() as con:
            con.register("_j", df)
            con.execute(f"INSERT OR REPLACE INTO judgments ({', '.join(self.JUDGMENT_COLUMNS)}, judged_at) "
                        f"SELECT {', '.join(self.JUDGMENT_COLUMNS)}, now() FROM _j")
            con.unregister("_j")
        return len(df)

    def judgments(self, question_keys=None) -> pd.DataFrame:
        """Every judgment, or those of these questions (by question key)."""
        with self.session() as con:
            if not con.execute("SELECT count(*) FROM information_schema.tables WHERE table_name = 'judgments'"
                               ).fetchall()[0][0]:  # a store written before judgments existed, opened read-only
                return pd.DataFrame(columns=self.JUDGMENT_COLUMNS + ["judged_at"])
            if question_keys is None:
                return con.execute("SELECT * FROM judgments").df()
            con.register("_k", pd.DataFrame({"question_key": sorted(question_keys)}, dtype=str))
            try:
                return con.execute("SELECT j.* FROM judgments j JOIN _k USING (question_key)").df()
            finally:
                con.unregister("_k")

    def results(self, run_id: str, part: str = "tune") -> pd.DataFrame:
        with self.session() as con:
            cond = self._part(con, run_id, part, "question_id")
            return con.execute(f"SELECT * FROM results WHERE run_id = ? AND {cond} ORDER BY strategy, point_id, "
                               "question_id, repeat", [run_id]).df()

    def questions(self, dataset: str) -> pd.DataFrame:
        with self.session() as con:
            return con.execute("SELECT * FROM questions WHERE dataset = ?", [dataset]).df()

    def export(self, run_id: str, out: str | Path, fmt: str = "parquet") -> list[Path]:
        """Write results and scores of a run. Paths never go into SQL: the rows are fetched with a
        bound parameter and written by pyarrow / pandas (any quote or space in ``out`` is fine)."""
        out = Path(out)
        make_folder(out, "the export folder")
        written = []
        for table, order in (("results", "strategy, point_id, question_id, repeat"),
                             ("scores", "strategy, point_id, question_id, repeat, metric")):
            p = out / f"{run_id}_{table}.{fmt}"
            with self.session() as con:
                df = con.execute(f"SELECT * FROM {table} WHERE run_id = ? ORDER BY {order}", [run_id]).df()
            if fmt == "parquet":
                df.to_parquet(p, index=False)
            else:  # logged answers and ids come from outside: every text cell escaped (evals/csvout.py)
                from .csvout import write_csv

                write_csv(df, p)
            written.append(p)
        return written
