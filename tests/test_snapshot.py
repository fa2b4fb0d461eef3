"""Issue 74 item 3: a cold ``ragwb search`` reads an exact index from its snapshot (rag/index/snapshot.py: Arrow IPC
files stamped by the Lance manifests, CRC-checked) without importing pylance or pandas, answers exactly as the
LanceDB read does, and never answers from a snapshot that is not of the tables as they are now."""
import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np

from evals.cli import main
from rag.index import reader as reader_mod
from rag.index import snapshot
from rag.index.workspace import Workspace

# a fresh process, as a user types it: what it printed, and which heavy modules it imported
PROBE = ("import sys; from evals.cli import main; rc = main(sys.argv[1:]); "
         "print('MODULES', sorted(m for m in ('lance', 'lancedb', 'pandas') if m in sys.modules)); sys.exit(rc)")


def _search(ws: Path, folder: Path, query: str) -> tuple[str, list]:
    p = subprocess.run([sys.executable, "-c", PROBE, "search", query, "--dataset", str(folder), "--workspace",
                        str(ws), "--embedder", "hash", "--show", "3"], capture_output=True, text=True, timeout=120,
                       env={**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1])})
    assert p.returncode == 0, p.stderr
    body, _, mods = p.stdout.rpartition("MODULES ")
    return body, json.loads(mods.replace("'", '"'))


def _folder(tmp_path: Path) -> Path:
    d = tmp_path / "notes"
    d.mkdir()
    (d / "bees.md").write_text("# Bees\n\nVarroa mites are counted with a sugar roll in late summer.\n\n"
                               "## Winter\n\nA colony clusters around the queen when it is cold.\n")
    (d / "harbour.md").write_text("# Harbour\n\nThe harbour office opens at eight and closes at noon on Sundays.\n")
    (d / "plain.txt").write_text("Tide tables are printed every month by the port authority.\n" * 5)
    return d


def _fresh_reader(ws: Workspace, index: str):
    reader_mod._readers.clear()
    return reader_mod.open_index(ws, index)


def _snapshot_files(ws: Path) -> list[str]:
    d = ws / "cache" / "snapshots"
    return sorted(p.name for p in d.iterdir()) if d.is_dir() else []


def test_a_cold_search_maps_the_snapshot_without_pylance_and_answers_as_lancedb(tmp_path):
    folder, ws = _folder(tmp_path), tmp_path / "ws"
    assert main(["ingest", str(folder), "--workspace", str(ws), "--embedder", "hash", "--no-progress"]) == 0
    files = _snapshot_files(ws)  # the ingest left the snapshot: the first cold search is quick too
    assert len(files) == 5 and sum(f.endswith(".done") for f in files) == 1, files
    fast, mods = _search(ws, folder, "when is the harbour office open")
    assert mods == [], f"a cold search imported {mods}"
    assert "harbour.md" in fast.splitlines()[1], fast
    # the same search read from LanceDB (no snapshot): the same lines, and pylance was what it read
    for f in files:
        (ws / "cache" / "snapshots" / f).unlink()
    slow, mods = _search(ws, folder, "when is the harbour office open")
    assert slow == fast and "lance" in mods
    assert len(_snapshot_files(ws)) == 5  # ... and that reader wrote the snapshot again for the next process
    # the readers themselves: every column, the vectors and the rows by id, equal
    w = Workspace(ws)
    index = w.indexes()[0]["index"]
    from_snap = _fresh_reader(w, index)
    assert isinstance(from_snap.table, reader_mod._ChunksTable) and from_snap.table._t is None  # LanceDB unopened
    for f in _snapshot_files(ws):
        (ws / "cache" / "snapshots" / f).unlink()
    from_lance = _fresh_reader(w, index)
    assert not isinstance(from_lance.table, reader_mod._ChunksTable)
    for name in ("chunk_ids", "doc_ids", "page_ids", "texts", "parent_ids", "languages", "bm25_texts",
                 "documents", "pages", "parents"):
        assert getattr(from_snap, name) == getattr(from_lance, name), name
    for name in ("chunk_index", "starts", "ends", "n_tokens", "vectors"):
        a, b = getattr(from_snap, name), getattr(from_lance, name)
        assert a.dtype == b.dtype and np.array_equal(a, b), name
    assert from_snap.config == from_lance.config and from_snap.version == from_lance.version


def test_a_changed_or_damaged_snapshot_is_never_read_as_the_index(tmp_path):
    folder, ws = _folder(tmp_path), tmp_path / "ws"
    assert main(["ingest", str(folder), "--workspace", str(ws), "--embedder", "hash", "--no-progress"]) == 0
    before = _snapshot_files(ws)
    # the folder changes and is ingested again: the tables' manifests change, so the old snapshot is no longer
    # theirs; the new one replaces it, and a search finds the new text
    (folder / "harbour.md").write_text("The ferry to the lighthouse island leaves at nine.\n")
    assert main(["ingest", str(folder), "--workspace", str(ws), "--embedder", "hash", "--no-progress"]) == 0
    after = _snapshot_files(ws)
    assert len(after) == 5 and not set(after) & set(before), (before, after)
    out, mods = _search(ws, folder, "ferry to the lighthouse island")
    assert mods == [] and "ferry to the lighthouse" in out
    # a LanceDB write that is not an ingest (a compaction here): the stamp moves, the snapshot is passed over
    w = Workspace(ws)
    index = w.indexes()[0]["index"]
    st = snapshot.stamp(w, index)
    w.table(index, "documents").optimize()
    assert snapshot.stamp(w, index) != st and snapshot.load(w, index, snapshot.stamp(w, index)) is None
    assert snapshot.refresh(w, index)  # written again for the tables as they are now
    st = snapshot.stamp(w, index)
    assert snapshot.load(w, index, st) is not None
    # damaged files: a float of a vector changed (the size kept), a truncated file, a file of another index
    chunks = ws / "cache" / "snapshots" / f"{index}.{st}.chunks.arrow"
    pristine = chunks.read_bytes()
    v = np.asarray(_fresh_reader(w, index).vectors[0], np.float32)
    j = min(int(np.argmax(np.abs(v))), len(v) - 4)
    at = pristine.index(v[j:j + 4].tobytes())  # where the first vector's largest values are stored
    changed = pristine[:at] + np.float32(v[j] + 1).tobytes() + pristine[at + 4:]
    chunks.write_bytes(changed)
    assert snapshot.load(w, index, st) is None
    chunks.write_bytes(pristine[:len(pristine) // 2])
    assert snapshot.load(w, index, st) is None
    chunks.write_bytes(pristine)
    assert snapshot.load(w, index, st) is not None
    done = ws / "cache" / "snapshots" / f"{index}.{st}.done"
    other = f"other__00000000.{st}"
    for f in _snapshot_files(ws):  # a copy under another index's name: its files say whose they are
        (ws / "cache" / "snapshots" / f.replace(f"{index}.{st}", other)).write_bytes(
            (ws / "cache" / "snapshots" / f).read_bytes())
    assert snapshot.load(w, "other__00000000", st) is None
    # the LanceDB folder deleted and the index built again from other files: the same number of commits gives the
    # same manifest names, but never the same stamp (their times and inodes differ)
    import shutil

    names_before = sorted(p.name for p in (w.dataset_path(f"{index}__chunks") / "_versions").iterdir())
    shutil.rmtree(ws / "lancedb")
    (folder / "harbour.md").write_text("The lighthouse keeper rings the fog bell at dusk.\n")
    assert main(["ingest", str(folder), "--workspace", str(ws), "--embedder", "hash", "--no-progress"]) == 0
    rebuilt = Workspace(ws)
    assert snapshot.stamp(rebuilt, index) != st
    again, _ = _search(ws, folder, "who rings the fog bell")
    assert "fog bell" in again and "ferry" not in again, (names_before, again)
    fog_names = sorted(p.name for p in (w.dataset_path(f"{index}__chunks") / "_versions").iterdir())
    shutil.rmtree(ws / "lancedb")
    (folder / "harbour.md").write_text("The ferry to the lighthouse island leaves at nine.\n")
    assert main(["ingest", str(folder), "--workspace", str(ws), "--embedder", "hash", "--no-progress"]) == 0
    assert sorted(p.name for p in (w.dataset_path(f"{index}__chunks") / "_versions").iterdir()) == fog_names
    ferry, mods = _search(ws, folder, "ferry to the lighthouse island")
    assert mods == [] and ferry == out  # this build's snapshot, not the fog bell build's of the same names
    st = snapshot.stamp(rebuilt, index)
    chunks = ws / "cache" / "snapshots" / f"{index}.{st}.chunks.arrow"
    done = ws / "cache" / "snapshots" / f"{index}.{st}.done"
    pristine = chunks.read_bytes()
    at = pristine.index(v[j:j + 4].tobytes())
    changed = pristine[:at] + np.float32(v[j] + 1).tobytes() + pristine[at + 4:]
    # a search over a damaged snapshot answers from LanceDB, the same as before, and mends it
    chunks.write_bytes(changed)
    damaged, mods = _search(ws, folder, "ferry to the lighthouse island")
    assert damaged == out and "lance" in mods
    assert snapshot.load(w, index, st) is not None and done.is_file()
