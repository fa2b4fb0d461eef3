"""Outside input, seventh sweep (issue 82), items 4-8, each from its repro: parse workers that outlive their ingest
(real signals to a real `ragwb ingest`), settings and judge flags without bounds, the grid cap's ways round it, and
an e5 cache that gave wrong vectors silently (real damage to a copy of the built cache). Items 1-3 and 9-11 are in
tests/test_seventh_sweep.py (a file apiece keeps the suite's two workers evenly loaded)."""
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from test_seventh_sweep import _docs

# --- Items 4 and 5: parse workers die with their ingest, have a memory bound, and every setting has a range -------

from test_pdf_parsing import _workers_of  # noqa: E402 (the parse workers of a process, zombies left out)


def _alive(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat[stat.rindex(")") + 2] != "Z"


@pytest.mark.parametrize("sig", ["SIGTERM", "SIGINT", "SIGKILL"])
def test_a_worker_dies_within_a_second_of_its_ingest(sig, tmp_path):
    """Item 4: after SIGTERM of `ragwb ingest` at 3.5 s its worker lived 22 s more and printed a BrokenPipeError
    traceback; after SIGKILL it lived on with parent 1. Here the worker is busy on a PDF pdfium needs ~10 s for;
    the ingest gets the signal alone (not its process group); its worker is gone within 1 s, and nothing prints a
    traceback."""
    import signal as _signal

    from pdfgen import make_heavy_pdf

    docs = tmp_path / "docs"
    docs.mkdir()
    make_heavy_pdf(docs / "heavy.pdf", 20)
    (docs / "b.md").write_text("# B\n\nDepot eight.\n")
    proc = subprocess.Popen([sys.executable, "-m", "evals.cli", "ingest", str(docs), "--workspace",
                             str(tmp_path / "ws"), "--embedder", "hash", "--no-progress"], cwd=tmp_path,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)
    try:
        deadline = time.monotonic() + 120
        workers: list[int] = []
        while not workers:
            assert proc.poll() is None and time.monotonic() < deadline, proc.communicate()
            workers = _workers_of(proc.pid)
            time.sleep(0.05)
        time.sleep(1.0)  # the worker is inside pdfium now
        assert all(_alive(w) for w in workers)
        os.kill(proc.pid, getattr(_signal, sig))
        sent = time.monotonic()
        while any(_alive(w) for w in workers) and time.monotonic() - sent < 5:
            time.sleep(0.02)
        gone_after = time.monotonic() - sent
        out, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert not any(_alive(w) for w in workers)
    assert gone_after < 1.0, f"the worker lived {gone_after:.2f} s after the ingest's {sig}"
    assert "Traceback" not in err and "BrokenPipeError" not in err, err[-2000:]
    if sig == "SIGINT":
        assert proc.returncode == 130 and "ragwb ingest: interrupted" in err, (proc.returncode, err[-2000:])


def test_a_file_past_the_workers_memory_bound_is_skipped_and_named(tmp_path, monkeypatch):
    """Item 4: a one-page 200 MB stream peaked at 3.8 GB resident in its worker. With RAGWB_PARSE_MEMORY_MB=400 a
    page that needs ~1 GB is skipped, the bound named; the rest of the folder is read."""
    from pdfgen import make_heavy_pdf
    from rag.ingest.folders import load_folder

    docs = tmp_path / "docs"
    docs.mkdir()
    make_heavy_pdf(docs / "heavy.pdf", 10)
    (docs / "b.md").write_text("# B\n\nDepot eight.\n")
    monkeypatch.setenv("RAGWB_PARSE_MEMORY_MB", "400")
    ds = load_folder(docs)
    assert [d.doc_id for d in ds.documents] == ["b.md"]
    [skip] = ds.skipped
    assert Path(skip.path).name == "heavy.pdf" and "memory bound (400 MB, RAGWB_PARSE_MEMORY_MB)" in skip.reason


@pytest.mark.parametrize("name,value", [("RAGWB_PARSE_TIMEOUT", "0"), ("RAGWB_PARSE_TIMEOUT", "1e-9"),
                                        ("RAGWB_PARSE_TIMEOUT", "1e300"), ("RAGWB_PARSE_TIMEOUT", "nan"),
                                        ("RAGWB_PARSE_WORKERS", "-1"), ("RAGWB_PARSE_WORKERS", "two"),
                                        ("RAGWB_PARSE_MEMORY_MB", "1"), ("RAGWB_PARSE_MEMORY_MB", "1e12")])
def test_a_parse_setting_out_of_range_is_one_line_before_any_file(name, value, tmp_path):
    """Item 5: RAGWB_PARSE_TIMEOUT=0 or 1e-9 skipped every PDF as "died reading this file twice"; 1e300 gave
    OverflowError tracebacks from threads. Each is one line naming the variable, exit 2, and no file parsed."""
    from pdfgen import make_pdf

    docs = tmp_path / "docs"
    docs.mkdir()
    make_pdf(docs / "a.pdf", [["Depot seven stores 12 crates."]])
    got = subprocess.run([sys.executable, "-m", "evals.cli", "ingest", str(docs), "--workspace", str(tmp_path / "ws"),
                          "--embedder", "hash", "--no-progress"], cwd=tmp_path, capture_output=True, text=True,
                         timeout=300, env={**os.environ, name: value})
    assert got.returncode == 2, (got.returncode, got.stderr[-2000:])
    assert got.stderr.count("\n") == 1 and f"{name}={value!r}" in got.stderr and "Traceback" not in got.stderr, \
        got.stderr
    assert not (tmp_path / "ws" / "cache" / "parsed").exists() or not any((tmp_path / "ws" / "cache" /
                                                                          "parsed").rglob("*.json"))


def test_a_worker_count_past_twice_the_cores_is_capped_and_said(tmp_path, monkeypatch, capsys):
    """Item 5: RAGWB_PARSE_WORKERS=10000 started 60 workers for 60 tiny PDFs on 2 cores (192.6 s against 1.2 s)."""
    from pdfgen import make_pdf
    from rag.ingest.parse_pool import parse_workers

    files = []
    for i in range(12):
        files.append((make_pdf(tmp_path / f"{i}.pdf", [[f"Page {i}."]]), f"{i}.pdf"))
    monkeypatch.setenv("RAGWB_PARSE_WORKERS", "10000")
    workers, todo = parse_workers(files, None)
    cores = os.cpu_count()
    assert workers == min(2 * cores, 12) and len(todo) == 12
    err = capsys.readouterr().err
    assert f"RAGWB_PARSE_WORKERS=10000 capped at {2 * cores}" in err


# --- Item 6: judge flags with ranges; the cost line names every juror ---------------------------------------------

@pytest.mark.parametrize("flags,said", [
    (["--judge-repeats", "1000000"], "--judge-repeats: must be 1..20, got 1000000 (each repeat is one more judge call"),
    (["--judge-repeats", "21"], "--judge-repeats: must be 1..20, got 21"),
    (["--jury", ","], "--jury ',': a jury's juror names must be model names, got an empty one"),
    (["--jury", "a,,b"], "--jury 'a,,b': a jury's juror names must be model names, got an empty one"),
    (["--jury", "a,a"], "--jury 'a,a': a juror is named twice in the jury: a"),
    (["--jury", ",".join(f"model-{i}" for i in range(50))], "a jury has 2..8 juror models, got 50"),
])
def test_judge_flags_out_of_range_are_refused_before_any_call(flags, said, tmp_path):
    """Item 6: --judge-repeats 1000000 was accepted (4,000 requests in 25 s), --jury , ran without a jury, a 50-model
    jury was named by its first model alone. Each is refused, exit 2, before any request leaves."""
    from openai_server import Handler, start

    srv, url = start()
    try:
        before = Handler.calls
        got = subprocess.run([sys.executable, "-m", "evals.cli", "run", "--dataset", str(_docs(tmp_path)),
                              "--embedder", "hash", "--workspace", str(tmp_path / "ws"), "--llm-base-url", url,
                              "--llm-model", "local-extractive", "--no-progress", "--no-report", "--yes", *flags],
                             cwd=tmp_path, capture_output=True, text=True, timeout=300)
        assert got.returncode == 2 and said in got.stderr, (got.returncode, got.stderr[-2000:])
        assert Handler.calls == before
    finally:
        srv.shutdown()


def test_the_cost_line_names_every_juror(tmp_path):
    """Item 6: `--jury` with 50 models named only `model-0` in the cost line. A jury of three is named whole, and
    each of the three is asked."""
    import json as _json

    from openai_server import Handler, start

    docs = _docs(tmp_path)
    q = tmp_path / "q.jsonl"
    q.write_text(_json.dumps({"question": "What is Alpha?", "answers": ["the first letter"]}) + "\n")
    srv, url = start()
    try:
        n0 = len(Handler.bodies)
        got = subprocess.run([sys.executable, "-m", "evals.cli", "run", "--dataset", str(docs), "--questions", str(q),
                              "--embedder", "hash", "--workspace", str(tmp_path / "ws"), "--llm-base-url", url,
                              "--llm-model", "local-extractive", "--strategies", "chunks", "--no-progress",
                              "--no-report", "--yes", "--jury", "juror-a,juror-b,juror-c", "--judges",
                              "llm_faithfulness"], cwd=tmp_path, capture_output=True, text=True, timeout=300)
        asked = {_json.loads(b).get("model") for b in Handler.bodies[n0:]}
    finally:
        srv.shutdown()
    assert got.returncode == 0, got.stderr[-2000:]
    assert "a jury of 3 (juror-a, juror-b, juror-c; up to 1 each)" in got.stdout, got.stdout
    assert {"juror-a", "juror-b", "juror-c"} <= asked, asked


# --- Item 7: one cap for every axis, on every surface ------------------------------------------------------------

def test_memory_and_query_mode_axes_count_under_the_grids_one_cap(tmp_path, capsys):
    """Item 7: --memory window --query-mode (3 modes) --set memory.window_turns=1,...,4000 ran 12,000 points and
    exited 0. Now the count is index configs x budget points x memory points x query modes, refused in one line
    before any work (no run row, no store)."""
    from evals.cli import main

    turns = ",".join(str(i) for i in range(1, 4001))
    assert main(["run", "--dataset", "mtrag-govt", "--strategies", "chunks", "--memory", "window", "--query-mode",
                 "last_turn,history_concat,gold_rewrite", "--set", f"memory.window_turns={turns}", "--limit", "1",
                 "--workspace", str(tmp_path / "ws"), "--embedder", "hash", "--no-progress", "--no-report"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "the grid has 12,000 points" in err and "4,000 memory point(s) x 3 query mode(s)" \
        in err, err
    db = tmp_path / "ws" / "results.duckdb"
    if db.exists():  # the store may be opened first; no run was started in it
        import duckdb

        con = duckdb.connect(str(db), read_only=True)
        assert con.execute("SELECT count(*) FROM runs").fetchone()[0] == 0
        con.close()


def test_the_library_sweep_and_the_pages_sweep_points_count_under_the_same_cap(tmp_path):
    """Item 7: Workbench.sweep("top_k", range(1, 12001), strategies=["chunks", "hybrid"]) evaluated 24,000 points
    (214 s, 2.0 GB); sweep_points, which the page's Sweep and Race call, had no cap."""
    from evals.workbench.sweeps import sweep_points
    from evals.workbench import Workbench

    with pytest.raises(ValueError, match=r"the grid has 24,000 points \(2 strategies x 12,000 value\(s\) of top_k\), "
                                         r"over the 10,000"):
        sweep_points(["chunks", "hybrid"], "top_k", ",".join(map(str, range(1, 12001))), {})
    wb = Workbench(str(_docs(tmp_path)), embedder="hash", workspace=str(tmp_path / "ws"), progress=False)
    with pytest.raises(ValueError, match="the grid has 24,000 points"):
        wb.sweep("top_k", range(1, 12001), strategies=["chunks", "hybrid"])
    assert wb.last is None or not getattr(wb.last, "points", None) or len(wb.last.points) < 24000
    assert sweep_points(["chunks"], "top_k", "2,4", {})  # a sweep under the cap still runs


# --- Item 8: the e5 cache can never give wrong vectors silently ---------------------------------------------------

TEXTS = ["The harbour office opens at eight.", "Varroa mites are counted with a sugar roll."]


@pytest.fixture
def e5_copy(tmp_path, monkeypatch):
    """A copy of this machine's built e5 cache under a RAGWB_CACHE of the test's own (a build is ~10 s; the damage
    and its finding are what is tested), and the reference vectors of TEXTS from the intact cache."""
    import shutil

    from rag.index import e5_onnx

    ref = e5_onnx.engine().embed(TEXTS, False)
    built = e5_onnx.model_file().parent
    monkeypatch.setenv("RAGWB_CACHE", str(tmp_path / "cache"))
    shutil.copytree(built, e5_onnx.cache_dir() / built.name, ignore=shutil.ignore_patterns("*.lock"))
    folder = e5_onnx.model_file().parent
    assert folder == e5_onnx.cache_dir() / built.name
    return folder, ref


def _cos(a, b):
    import numpy as np

    return (a * b).sum(1) / np.linalg.norm(a, axis=1) / np.linalg.norm(b, axis=1)


def test_one_bit_flips_anywhere_in_the_model_fail_its_check(e5_copy):
    """Item 8: 30 one-bit flips between the sampled blocks of e5-small.int8.onnx left check() with nothing to report,
    and every vector came out NaN. Every byte of the model is hashed now: the flips are found."""
    import random

    from rag.index.e5_cache import check

    folder, _ = e5_copy
    model = folder / "e5-small.int8.onnx"
    data = bytearray(model.read_bytes())
    rng = random.Random(82)
    for _ in range(30):  # offsets a sampled digest never read: inside the gaps between its 18 blocks of 64 KB
        k = rng.randrange(17)
        gap_start = k * (len(data) - (1 << 16)) // 17 + (1 << 16)
        data[gap_start + rng.randrange(1 << 12)] ^= 1 << rng.randrange(8)
    model.write_bytes(bytes(data))
    # found by the check every load makes (a failed check is rebuilt, said: tests/test_sixth_sweep.py rebuilds each
    # kind of damage end to end; the suite's time is spent once there)
    assert any(x.startswith("e5-small.int8.onnx: its content changed") for x in check(folder)), check(folder)


def test_a_changed_word_table_row_never_enters_a_vector(e5_copy, capsys):
    """Item 8: two rows of word.npy changed between the sampled blocks: no message, cosine 0.932 to a clean cache.
    Each row is checked against its CRC the first time it is gathered: the embed that would use a changed row fails
    naming it, and the next start rebuilds the cache, said, and embeds as the reference."""
    import numpy as np

    from rag.index import e5_onnx
    from rag.index.e5_cache import DamagedCache, check

    folder, ref = e5_copy
    from rag.index.e5_cache import BLOCK, SAMPLES

    eng = e5_onnx.Engine()
    size = (folder / "word.npy").stat().st_size
    row = eng.words.shape[1] * 4
    head = size - eng.words.shape[0] * row
    blocks = [min(size - BLOCK, k * (size - BLOCK) // (SAMPLES + 1)) for k in range(SAMPLES + 2)]
    unsampled = [i for i in sorted(set(eng.ids(TEXTS[1], False)) - {eng.bos, eng.eos})
                 if not any(b < head + (i + 1) * row and head + i * row < b + BLOCK for b in blocks)]
    ids = unsampled[:2]  # rows no sampled block reads: the digest cannot tell
    assert len(ids) == 2
    words = np.load(folder / "word.npy", mmap_mode="r+")
    words[ids] = words[ids] * 1.5  # two rows scaled: the same size, outside the sampled blocks or not
    words.flush()
    del words
    assert check(folder) == []  # the sampled digest passes: the rows are what is checked
    eng = e5_onnx.Engine()
    eng.embed([TEXTS[0]], False)  # rows this text does not use are fine
    with pytest.raises(DamagedCache, match=rf"row {ids[0]:,} of the word table in .* changed since it was built"):
        eng.embed([TEXTS[1]], False)
    assert check(folder)[0].startswith("no manifest")  # marked: the next load rebuilds it
    eng = e5_onnx.Engine()
    assert "failed its check (no manifest" in capsys.readouterr().err  # rebuilt, said
    assert _cos(eng.embed(TEXTS, False), ref).min() > 0.999


def test_a_canary_that_is_not_a_finite_number_fails(e5_copy, capsys):
    """Item 8: the canary's cosine was NaN and `nan < 0.9999` is False, so the cache loaded. A NaN canary fails the
    check like a low one: rebuilt, said."""
    import json as _json

    from rag.index import e5_onnx

    folder, ref = e5_copy
    man = _json.loads((folder / "manifest.json").read_text())
    man["canary"] = [float("nan")] * len(man["canary"])
    (folder / "manifest.json").write_text(_json.dumps(man))  # Python writes NaN; the manifest's digests still match
    eng = e5_onnx.Engine()
    err = capsys.readouterr().err
    assert "its canary embeds at cosine nan" in err and "rebuilding it" in err, err
    assert _cos(eng.embed(TEXTS, False), ref).min() > 0.999


def _read_only(folder: Path):
    """``folder`` made unwritable for this process (root too): a read-only bind mount, else the immutable flag;
    returns how to undo it, or None where neither is possible here."""
    if os.geteuid() != 0:
        os.chmod(folder, 0o555)
        return lambda: os.chmod(folder, 0o755)
    if subprocess.run(["mount", "--bind", str(folder), str(folder)], capture_output=True).returncode == 0:
        if subprocess.run(["mount", "-o", "remount,ro,bind", str(folder)], capture_output=True).returncode == 0:
            return lambda: subprocess.run(["umount", str(folder)], check=True)
        subprocess.run(["umount", str(folder)])
    if subprocess.run(["chattr", "+i", str(folder)], capture_output=True).returncode == 0:
        return lambda: subprocess.run(["chattr", "-i", str(folder)], check=True)
    return None


def test_a_damaged_cache_that_cannot_be_written_is_rebuilt_in_a_temporary_folder(e5_copy, tmp_path):
    """Item 8: a damaged cache in a read-only folder gave only `Permission denied: ...e5-small.int8.onnx.lock`, with
    no fallback. It is rebuilt in a temporary folder, said once, and embeds as the reference (a fresh process)."""
    folder, ref = e5_copy
    scores = folder / "scores.npy"
    scores.write_bytes(scores.read_bytes()[::-1])  # damaged: the check says so
    undo = _read_only(folder)
    if undo is None:
        pytest.skip("no way to make a folder read-only for this account here (not root, no mount, no chattr)")
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    try:
        got = subprocess.run([sys.executable, "-c", "from rag.index import e5_onnx; import numpy as np, sys, json; "
                              f"v = e5_onnx.Engine().embed({TEXTS!r}, False); print(json.dumps(v.tolist()))"],
                             capture_output=True, text=True, timeout=600,
                             env={**os.environ, "RAGWB_CACHE": os.environ["RAGWB_CACHE"], "TMPDIR": str(tmp)})
    finally:
        undo()
    assert got.returncode == 0, got.stderr[-2000:]
    said = [x for x in got.stderr.splitlines() if "cannot be written" in x]
    assert len(said) == 1 and "scores.npy: its content changed" in said[0] and str(tmp) in said[0], got.stderr
    import numpy as np

    assert _cos(np.array(json.loads(got.stdout)), ref).min() > 0.999
