"""Issue 64, outside input, fifth sweep: each item as a user hits it (CLI and page paths, real files, a real
127.0.0.1 server, real kills), each test failing on the code before its fix."""
import csv
import io
import time
from pathlib import Path

import pytest

from evals.cli import main
from test_score_stream import _log, _table, kill_score_when_stored


def test_a_killed_score_against_a_gold_set_resumes(tmp_path, capsys):
    """Item 1: `ragwb score FILE --dataset squad2 --resume RUN` crashed with "RunConfig.__init__() got an unexpected
    keyword argument 'logged'"; every score from the page has a dataset."""
    log = _log(tmp_path / "log.csv", 1500)
    ws = tmp_path / "ws"
    db = ws / "results.duckdb"
    argv = ["score", str(log), "--dataset", "squad2", "--embedder", "hash", "--workspace", str(ws), "--no-progress",
            "--no-report", "--metrics", "answer,citation,cost", "--batch", "250"]
    kill_score_when_stored(argv, db, "K", 500)
    kept = _table(db, "SELECT count(*) FROM results WHERE run_id='K'")[0][0]
    assert 500 <= kept < 1500 and kept % 250 == 0  # whole batches
    capsys.readouterr()
    assert main(["score", str(log), "--workspace", str(ws), "--no-progress", "--resume", "K"]) == 0
    assert _table(db, "SELECT count(*), count(DISTINCT question_id) FROM results WHERE run_id='K'")[0] == (1500, 1500)
    # the log's contexts are in no squad2 document: the CLI says how many, on its line and as a warning naming rows
    said = capsys.readouterr()
    rest = 1500 - kept
    assert f"; {rest:,} of {rest:,} context(s) found in no document of squad2" in said.out
    assert f"warning: {rest:,} of {rest:,} context(s) were found in no document of squad2" in said.err
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


def test_best_out_refuses_to_overwrite_and_never_follows_a_link(tmp_path, capsys):
    """Item 7: `ragwb best --out PATH` overwrote an existing file silently and wrote through a symlink."""
    ws = tmp_path / "ws"
    assert main(["run", "--dataset", "xquad-en", "--limit", "6", "--embedder", "hash", "--strategies", "chunks",
                 "--set", "chunks.top_k=2,4", "--workspace", str(ws), "--no-progress", "--no-report",
                 "--run-id", "B"]) == 0
    mine = tmp_path / "notes.toml"
    mine.write_text("my own notes\n")
    target = tmp_path / "system.conf"
    target.write_text("precious\n")
    link = tmp_path / "link.toml"
    link.symlink_to(target)
    capsys.readouterr()
    for path in (mine, link):
        assert main(["best", "B", "--metric", "evidence_recall", "--workspace", str(ws), "--out", str(path)]) == 2
        assert "--force" in capsys.readouterr().err
    assert mine.read_text() == "my own notes\n" and target.read_text() == "precious\n"
    # --force replaces the link itself, never the file it points at
    assert main(["best", "B", "--metric", "evidence_recall", "--workspace", str(ws), "--out", str(link),
                 "--force"]) == 0
    assert not link.is_symlink() and "[index]" in link.read_text() and target.read_text() == "precious\n"
    fresh = tmp_path / "best.toml"
    assert main(["best", "B", "--metric", "evidence_recall", "--workspace", str(ws), "--out", str(fresh)]) == 0
    assert fresh.is_file() and not list(tmp_path.glob("*.tmp"))


def test_file_names_with_terminal_escapes_are_printed_escaped(tmp_path, capsys):
    """Item 8: escape sequences in file names reached the terminal raw in ingest's "slowest files" and "skipped"
    lines (a window title change, a screen clear, text hidden by a bidi override)."""
    docs = tmp_path / "docs"
    docs.mkdir()
    evil = ["title\x1b]0;pwned\x07.md", "clear\x1b[2J.txt", "gpj.\u202eexe.md", "broken\x1b[8m.pdf"]
    for name in evil[:3]:
        (docs / name).write_text("# Notes\n\nThe harbour opens at eight.\n")
    (docs / evil[3]).write_bytes(b"%PDF-1.7 not a pdf")
    assert main(["ingest", str(docs), "--embedder", "hash", "--workspace", str(tmp_path / "ws"),
                 "--no-progress"]) == 0
    out = capsys.readouterr()
    said = out.out + out.err
    assert "\x1b" not in said and "\x07" not in said and "\u202e" not in said
    assert "\\x1b]0;pwned\\x07" in said and "\\x1b[8m.pdf" in said and "\\u202e" in said


@pytest.mark.parametrize("shape", ["plain", "stars"])
def test_a_long_gitignore_is_matched_whole_in_pieces(shape, tmp_path, capsys):
    """Item 3: past about 1,000 lines RE2 failed with "failed to compile Set" and a traceback (5,000 plain lines,
    119 KB, far under the 1 MB cap; or 700 star lines): the folder could be neither ingested nor run."""
    docs = tmp_path / "docs"
    docs.mkdir()
    for name in ("keep.md", "drop.txt", "keep.txt", "note_4999.md"):
        (docs / name).write_text(f"# {name}\n\nThe harbour opens at eight.\n")
    many = ([f"note_{i}.md" for i in range(5000)] if shape == "plain" else
            [f"*a*b*c*d*e*f*g*h*{i}" for i in range(700)])
    # git's rule across the pieces: the last matching line decides, a '!' far below included
    (docs / ".gitignore").write_text("\n".join(["*.txt"] + many + ["!keep.txt"]) + "\n")
    assert main(["ingest", str(docs), "--embedder", "hash", "--workspace", str(tmp_path / "ws"),
                 "--no-progress"]) == 0
    out = capsys.readouterr()
    assert "Traceback" not in out.err and "failed to compile" not in out.out + out.err
    from rag.index.workspace import Workspace

    ws = Workspace(tmp_path / "ws")
    kept = set()
    for m in ws.indexes():
        kept |= {Path(x).name for x in ws.table(m["index"], "documents").to_arrow().column("source_path").to_pylist()}
    assert kept == ({"keep.md", "keep.txt"} if shape == "plain" else {"keep.md", "keep.txt", "note_4999.md"})


def exported_pool(tmp_path, questions: list[dict]):
    """A one-file folder, a run of ``questions`` on it (run id Q), its judging pool exported: (ws, pool, rows)."""
    import json

    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "a.md").write_text("# Harbour\n\nThe harbour office opens at eight and closes at five.\n")
    q = tmp_path / "q.jsonl"
    q.write_text("".join(json.dumps(x) + "\n" for x in questions))
    ws = tmp_path / "ws"
    assert main(["run", "--dataset", str(docs), "--questions", str(q), "--embedder", "hash", "--workspace", str(ws),
                 "--strategies", "chunks", "--no-progress", "--no-report", "--run-id", "Q"]) == 0
    pool = tmp_path / "pool.csv"
    assert main(["judge", "Q", "--workspace", str(ws), "--export", str(pool)]) == 0
    return ws, pool, list(csv.DictReader(open(pool, newline="", encoding="utf-8")))


def grade_every_row(pool, rows: list[dict], grade: str) -> None:
    """A grader's pass over an exported pool: every row given ``grade``, the file written back as CSV."""
    for r in rows:
        r["grade"] = grade
    with open(pool, "w", newline="", encoding="utf-8") as f:
        w = csv.DictWriter(f, list(rows[0]))
        w.writeheader()
        w.writerows(rows)


def test_a_question_id_that_starts_with_a_quote_round_trips_through_the_pool(tmp_path, capsys):
    """Item 9: an id `'-5` was exported as is and `--import` stripped its quote, so the untouched pool could not be
    imported and nothing was stored."""
    import duckdb

    from evals.csvout import escape_cell, unescape_cell

    for v in ["'-5", "-5", "'abc", "'", "''=x", "=1+1", "plain", "'=2"]:
        assert unescape_cell(escape_cell(v)) == v, v
    ws, pool, rows = exported_pool(tmp_path, [{"id": "'-5", "question": "When does the harbour office open?"}])
    assert rows and all(r["question_id"] == "''-5" for r in rows)  # escaped once more, never ambiguous
    grade_every_row(pool, rows, "3")
    capsys.readouterr()
    assert main(["judge", "Q", "--workspace", str(ws), "--import", str(pool), "--judge-name", "ana"]) == 0
    con = duckdb.connect(str(ws / "results.duckdb"), read_only=True)
    got = con.execute("SELECT DISTINCT question_id FROM judgments").fetchall()
    con.close()
    assert got == [("'-5",)]


def test_a_plugin_file_without_py_loads_as_python_and_a_bad_one_is_named(tmp_path, capsys):
    """Item 12: a plugin file without `.py` gave "'NoneType' object has no attribute 'loader'"."""
    from plugin_files import chunks_plugin

    src = chunks_plugin(tmp_path / "mine.py", "NoSuffix", "no_suffix_shape")
    plain = tmp_path / "mine_plugin"
    plain.write_text(src.read_text())
    ws = tmp_path / "ws"
    assert main(["run", "--dataset", "xquad-en", "--limit", "2", "--embedder", "hash", "--workspace", str(ws),
                 "--no-progress", "--no-report", "--plugins", str(plain), "--strategies", "no_suffix_shape"]) == 0
    junk = tmp_path / "notes.txt"
    junk.write_text("this is not python (\n")
    capsys.readouterr()
    assert main(["run", "--dataset", "xquad-en", "--limit", "2", "--embedder", "hash", "--workspace", str(ws),
                 "--no-progress", "--no-report", "--plugins", str(junk)]) == 2
    err = capsys.readouterr().err
    assert f"plugin {junk}" in err and "SyntaxError" in err and "loader" not in err


def test_a_bad_byte_is_named_at_its_row_and_a_giant_line_is_refused_unread(tmp_path, capsys):
    """Items 12 and 5: a CSV with a bad byte in row 2 was reported "near row 1"; the cell cap did not bound a CSV
    line (a 1 GB one-line CSV took 2.2 GB)."""
    import resource

    bad = tmp_path / "bad.csv"
    bad.write_bytes(b"question,answer,contexts\nq1,fine,ctx one\nq2,bad \xff byte,ctx two\nq3,ok,ctx three\n")
    ws = ["--workspace", str(tmp_path / "ws"), "--no-progress", "--no-report"]
    assert main(["score", str(bad), *ws]) == 2
    err = capsys.readouterr().err
    assert "line 3 (row 2): not UTF-8 text" in err and "0xff" in err and "near row 1" not in err
    giant = tmp_path / "giant.csv"
    with open(giant, "wb") as f:  # one 60 MB line, far past the bound of a 1 MB cell cap
        f.write(b"question,answer,contexts\n")
        f.write(b"q1,x," + b"y" * (60 << 20) + b"\n")
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    assert main(["score", str(giant), *ws, "--max-cell-mb", "1"]) == 2
    err = capsys.readouterr().err
    assert "line 2 (row 1): longer than" in err and "--max-cell-mb" in err
    grew_mb = (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before) / 1024
    assert grew_mb < 40, grew_mb  # refused after a bounded read, never held whole


def test_a_grid_past_its_stated_size_is_refused_first_with_its_point_count(tmp_path, capsys):
    """Item 5: a sweep axis of top_k = 1..100000 grew to 4.2 GB before the first commit, then a traceback."""
    toml = tmp_path / "sweep.toml"
    toml.write_text("[run]\ndatasets = [\"xquad-en\"]\n\n[strategies.chunks]\ntop_k = ["
                    + ", ".join(str(i) for i in range(1, 100_001)) + "]\n")
    assert main(["run", "--config", str(toml), "--embedder", "hash", "--workspace", str(tmp_path / "ws"),
                 "--no-progress", "--no-report"]) == 2
    err = capsys.readouterr().err
    # (the other default strategies are a point each)
    assert "the grid has 100,004 points (chunks 100,000, " in err and "over the 10,000 a run takes" in err
    assert "Traceback" not in err
    db = tmp_path / "ws" / "results.duckdb"
    assert not db.exists() or _table(db, "SELECT count(*) FROM runs") == [(0,)]  # no run row: nothing stored


def test_a_key_echoed_cut_short_or_in_mixed_case_hex_is_stored_nowhere(tmp_path, monkeypatch):
    """Item 6: a key the server itself cut (29 of its 32 characters), and one echoed as %XX with mixed-case hex
    digits, survived the scrub into answer_error, the export and the report."""
    from openai_server import start

    from rag.llm.urls import scrub

    key = "live9fA2kQ7mZp4Xw8Lr3Tn6Vb1CdEfG"  # 32 characters, not key-shaped (no sk- prefix to give it away)
    slashy = "ab/cd/ef/gh/ij/kl/mn/op"  # no run of 16 between its escapes: only the hex rule can find it
    assert "ab" not in scrub("x " + "".join(f"%{b:02x}" if i % 2 else f"%{b:02X}"
                                            for i, b in enumerate(slashy.encode())), [slashy]).split("x ")[1]
    srv, url = start()
    try:
        monkeypatch.setenv("RAGWB_T_KEY", key)
        ws = tmp_path / "ws"
        assert main(["run", "--dataset", "squad2", "--limit", "2", "--embedder", "hash", "--strategies", "chunks",
                     "--workspace", str(ws), "--no-progress", "--run-id", "E", "--llm-base-url", url,
                     "--llm-model", "fault-echo-mangled", "--llm-key-env", "RAGWB_T_KEY", "--retries", "0",
                     "--judge", "none"]) == 6  # every answer failed: said by the exit status
        assert main(["export", "E", "--format", "csv", "--out", str(tmp_path / "x"), "--workspace", str(ws)]) == 0
    finally:
        srv.shutdown()
    errs = [r[0] for r in _table(ws / "results.duckdb", "SELECT answer_error FROM results")]
    assert errs and all("bad key" in e for e in errs)  # the echo arrived, scrubbed
    stored = " ".join(errs) + "".join(p.read_text() for p in (tmp_path / "x").glob("*.csv")) + "".join(
        p.read_text() for p in (ws / "reports").glob("*.html"))
    for i in range(len(key) - 15):  # no run of 16 characters of the key, in any case of its hex spelling
        assert key[i:i + 16] not in stored
    hexed = "".join(f"%{b:02x}" for b in key.encode())
    assert hexed[:48] not in stored.lower()


def test_the_embeddings_client_keeps_the_runs_deadline_and_retries(tmp_path, capsys):
    """Item 11: the embeddings client ignored --timeout: a fixed 60 s and 6 tries came to 383 s for one trickling
    batch. It keeps the LLM client's deadline (headers and body) and its --retries."""
    from openai_server import Handler, start

    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "a.md").write_text("# Harbour\n\nThe harbour office opens at eight.\n")
    (tmp_path / "q.jsonl").write_text('{"question": "When does the office open?"}\n')
    srv, url = start()
    calls = Handler.calls
    try:
        t0 = time.monotonic()
        rc = main(["run", "--dataset", str(docs), "--questions", str(tmp_path / "q.jsonl"), "--embedder", "openai",
                   "--embed-base-url", url, "--embed-model", "emb-trickle", "--workspace", str(tmp_path / "ws"),
                   "--no-progress", "--no-report", "--timeout", "1", "--retries", "1"])
        took = time.monotonic() - t0
    finally:
        srv.shutdown()
    assert rc == 2 and "Traceback" not in capsys.readouterr().err
    assert Handler.calls - calls == 2  # one try and the one retry asked for, never six
    assert took < 45, took  # two 1-second deadlines and their backoff; was 383 s (a loaded machine's margin)


def test_transfer_encoding_gzip_is_named_not_a_connection_error(tmp_path):
    """Item 12: `Transfer-Encoding: gzip` on the LLM path surfaced only as "Connection error."."""
    from openai_server import start

    srv, url = start()
    try:
        ws = tmp_path / "ws"
        assert main(["run", "--dataset", "squad2", "--limit", "1", "--embedder", "hash", "--strategies", "chunks",
                     "--workspace", str(ws), "--no-progress", "--no-report", "--run-id", "T", "--llm-base-url", url,
                     "--llm-model", "te-gzip", "--retries", "0", "--judge", "none"]) == 6
    finally:
        srv.shutdown()
    (err,) = _table(ws / "results.duckdb", "SELECT answer_error FROM results WHERE run_id = 'T'")[0]
    assert "Transfer-Encoding" in err and err != "APIConnectionError: Connection error."


def test_a_plugin_that_raises_keyboardinterrupt_fails_its_item_and_the_run_goes_on(tmp_path, capsys):
    """Item 10: a plugin raising KeyboardInterrupt ended the whole run (exit 130, 13 of 45 items, `interrupted`)."""
    from plugin_files import chunks_plugin

    plug = chunks_plugin(tmp_path / "kbd.py", "Kbd", "kbd_shape", first="""
        if len(Kbd.seen) == 3:
            raise KeyboardInterrupt
    """)
    ws = tmp_path / "ws"
    for timeout in ("60", "0"):  # in its worker process, and in this process on a thread of its own
        rid = f"K{timeout}"
        assert main(["run", "--dataset", "xquad-en", "--limit", "15", "--embedder", "hash", "--workspace", str(ws),
                     "--no-progress", "--no-report", "--plugins", str(plug), "--strategies", "kbd_shape",
                     "--plugin-timeout", timeout, "--run-id", rid]) == 0
        rows = _table(ws / "results.duckdb", "SELECT answer_status, answer_error FROM results WHERE run_id = ?", rid)
        assert len(rows) == 15 and _table(ws / "results.duckdb", "SELECT status FROM runs WHERE run_id = ?",
                                          rid) == [("finished",)]
        failed = [e for s, e in rows if s == "error"]
        assert len(failed) == 1 and "KeyboardInterrupt" in failed[0], rows


def test_a_questions_file_past_its_caps_is_refused_named_before_it_is_held(tmp_path, capsys, monkeypatch):
    """Item 5: question files were read whole (1 GB sparse took 2.2 GB, 1.67M lines 3 GB)."""
    import resource

    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "a.md").write_text("# Harbour\n\nThe harbour office opens at eight.\n")
    huge = tmp_path / "huge.jsonl"
    with open(huge, "wb") as f:  # a sparse 1 GB file: nothing on disk, everything if read
        f.truncate(1 << 30)
    ws = ["--embedder", "hash", "--workspace", str(tmp_path / "ws"), "--no-progress", "--no-report"]
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    assert main(["run", "--dataset", str(docs), "--questions", str(huge), *ws]) == 2
    err = capsys.readouterr().err
    assert "1,073,741,824 bytes, over the" in err and "Traceback" not in err
    assert (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before) / 1024 < 100  # never read
    many = tmp_path / "many.jsonl"
    many.write_text("".join(f'{{"id": "q{i}", "question": "When does office {i} open?"}}\n' for i in range(12)))
    monkeypatch.setenv("RAGWB_MAX_QUESTIONS", "10")
    assert main(["run", "--dataset", str(docs), "--questions", str(many), *ws]) == 2
    err = capsys.readouterr().err
    assert f"{many}:11: more than 10 questions (RAGWB_MAX_QUESTIONS)" in err


def test_a_lone_surrogate_is_a_named_bad_row_and_the_score_finishes(tmp_path, capsys):
    """Item 4: a lone surrogate in a logged record passed the check, then failed with an error naming no file, row
    or column, after 20,000 of 25,001 records were committed; the run was left incomplete and --resume failed too."""
    import json

    log = tmp_path / "log.jsonl"
    with open(log, "w", encoding="utf-8") as f:
        for i in range(1, 1502):
            answer = "Paris \\ud800 is odd" if i == 1001 else f"Answer {i}."
            f.write('{"question": "Question %d?", "answer": "%s", "contexts": ["Context %d."]}\n' % (i, answer, i))
    ws = tmp_path / "ws"
    assert main(["score", str(log), "--workspace", str(ws), "--no-progress", "--metrics", "answer,citation,cost",
                 "--batch", "250", "--run-id", "S"]) == 0
    captured = capsys.readouterr()
    assert "1 bad row(s) skipped, the rest scored: row 1001: column 'answer': text with a lone surrogate" in \
        captured.err
    db = ws / "results.duckdb"
    assert _table(db, "SELECT count(*) FROM results WHERE run_id = 'S'") == [(1500,)]
    assert _table(db, "SELECT status FROM runs WHERE run_id = 'S'") == [("finished",)]
    assert main(["show", "S", "--workspace", str(ws)]) == 0
    assert "1 bad logged row(s) skipped: row 1001" in capsys.readouterr().out
    assert json.loads(_table(db, "SELECT summary FROM runs WHERE run_id = 'S'")[0][0])["bad_row_count"] == 1


def test_the_pages_csv_downloads_escape_formula_cells():
    """Item 2: the page's table downloads (marimo's CSV) wrote `+cmd|' /C calc'!A0` as is. The page's tables now
    download through the project's writer (tests/test_as_written.py clicks it in Chromium)."""
    import pandas as pd

    from evals.workbench.page import csv_bytes

    raw = csv_bytes(pd.DataFrame({"question_id": ["q1", "-5"], "answer": ["+cmd|' /C calc'!A0", "ok\r=1+1"],
                                  "value": [1.0, float("nan")]})).decode()
    rows = list(csv.reader(io.StringIO(raw, newline="")))
    assert rows[1] == ["q1", "'+cmd|' /C calc'!A0", "1.0"] and rows[2][0] == "'-5" and rows[2][1] == "ok\r=1+1"


def test_a_trailing_comma_in_a_questions_line_is_named(tmp_path, capsys):
    """Issue 63, item 10: a trailing comma in a questions line was reported as "Extra data: line 1 column 87"."""
    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "a.md").write_text("# Harbour\n\nThe harbour office opens at eight.\n")
    q = tmp_path / "q.jsonl"
    q.write_text('{"question": "When does the office open?"},\n{"question": "Who runs it?", "answers": ["Ann"],}\n'
                 '{"question": "Where is it?"}\n')
    assert main(["ingest", str(docs), "--questions", str(q), "--embedder", "hash", "--workspace", str(tmp_path / "ws"),
                 "--no-progress"]) == 0
    out = capsys.readouterr().out
    assert ":1: " in out and "a trailing comma after the closing brace" in out
    assert ":2: " in out and "a trailing comma before a closing brace or bracket" in out
