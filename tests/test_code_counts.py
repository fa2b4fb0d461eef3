"""Issue 55, item 4: the ingest summary counts what was left out apart from what was kept with a warning, and a run's
time leaves out waiting for another process's hold of the workspace (said apart)."""
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_the_summary_counts_skipped_files_apart_from_files_kept_with_a_warning(tmp_path):
    from rag.index.embedders import EmbedderConfig
    from rag.index.workspace import IndexConfig, Workspace

    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "a.md").write_text("# A\n\nkept text.\n")
    (docs / "bad.txt").write_bytes(b"\xff\xfe not utf-8 \x00\x01")  # left out
    (docs / ".gitignore").write_text("\\\n*.log\n")  # a line git skips: a warning, the file's other lines apply
    ws, cfg = Workspace(tmp_path / "ws"), IndexConfig(embedder=EmbedderConfig("hash"))
    text = ws.ingest(ws.load(str(docs), None, cfg), cfg).render()
    assert "  skipped 1:" in text and "bad.txt" in text.split("  skipped 1:")[1].split("kept with a warning")[0]
    assert "  kept with a warning 1:" in text and ".gitignore" in text.split("kept with a warning 1:")[1]


def test_a_runs_time_leaves_out_waiting_for_the_workspace_lock(tmp_path):
    docs, ws = tmp_path / "docs", tmp_path / "ws"
    docs.mkdir()
    ws.mkdir()
    (docs / "a.md").write_text("# A\n\nInvoices are sent monthly.\n")
    (tmp_path / "q.jsonl").write_text('{"question": "When are invoices sent?"}\n')
    held, release = tmp_path / "held", tmp_path / "release"
    holder = subprocess.Popen([sys.executable, "-c", (
        "import pathlib, time\nfrom filelock import FileLock\n"
        f"l = FileLock({str(ws / '.write.lock')!r}); l.acquire()\n"
        f"pathlib.Path({str(held)!r}).touch()\n"
        f"deadline = time.time() + 120\nwhile not pathlib.Path({str(release)!r}).exists() and time.time() < deadline:\n"
        "    time.sleep(0.05)\nl.release()\n")])
    try:
        while not held.exists():  # the other process holds the workspace before the run starts
            assert holder.poll() is None
            time.sleep(0.05)
        run = subprocess.Popen([sys.executable, "-m", "evals.cli", "run", "--dataset", str(docs), "--questions",
                                str(tmp_path / "q.jsonl"), "--embedder", "hash", "--workspace", str(ws), "--wait",
                                "120", "--no-progress", "--no-report", "--strategies", "chunks"],
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=ROOT)
        for line in run.stderr:  # the run says it waits: then the holder lets go
            if line.startswith("waiting up to"):
                time.sleep(0.5)
                release.touch()
                break
        out, err = run.communicate(timeout=300)
        assert run.returncode == 0, err[-2000:]
        assert "more waiting for the workspace lock (not counted)" in out, out
    finally:
        release.touch()
        holder.wait(timeout=60)
