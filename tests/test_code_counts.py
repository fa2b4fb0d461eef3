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


def test_a_full_document_cut_short_says_so_and_earns_nothing_past_the_cut(tmp_path):
    """Issue 55, item 3: full_documents cut a file over max_total_chars to its start with "truncated": false and no
    marker. The block is now marked, the prompt and the drill-down say where it stops and how much it shows, and the
    symbol and evidence metrics credit only what was shown."""
    import json

    from evals.workbench.calls import evaluate_points, item_for, open_session, side_by_side_html
    from rag.answer.prompts import render_context
    from rag.strategies import Block

    repo = tmp_path / "proj"
    repo.mkdir()
    filler = "".join(f"def helper_{i}(x):\n    return x + {i}\n\n\n" for i in range(40))
    (repo / "m.py").write_text("def early(x):\n    \"\"\"Add one.\"\"\"\n    return x + 1\n\n\n" + filler
                               + "def late(x):\n    \"\"\"Double a number.\"\"\"\n    return 2 * x\n")
    q = tmp_path / "q.jsonl"
    q.write_text(json.dumps({"id": "late", "question": "Double a number.",
                             "evidence": [{"doc": "m.py", "symbol": "late"}]}) + "\n")
    sess = open_session(str(repo), str(tmp_path / "ws"), "hash", questions=str(q))
    scores = evaluate_points(sess, [("full_documents", {"max_total_chars": 400}),
                                    ("full_documents", {"max_total_chars": 80000})], 5)
    cut = scores[scores.point_label == "max_total_chars=400"].set_index("metric")
    whole = scores[scores.point_label == "max_total_chars=80000"].set_index("metric")
    assert cut.loc["symbol_recall@10", "value"] == 0.0 and whole.loc["symbol_recall@10", "value"] == 1.0
    assert cut.loc["evidence_recall", "value"] == 0.0 and whole.loc["evidence_recall", "value"] == 1.0
    row, _ = item_for(sess, "full_documents · max_total_chars=400", "late")
    blocks = [Block.from_dict(b) for b in json.loads(row["blocks"])]
    assert blocks[0].truncated and blocks[0].spans[0][2] <= 400
    assert "[... cut here: the block shows" in render_context(blocks)
    assert "cut here: the block shows" in side_by_side_html(sess, "late", "full_documents · max_total_chars=400")
    row, _ = item_for(sess, "full_documents · max_total_chars=80000", "late")
    assert not any(b["truncated"] for b in json.loads(row["blocks"]))


def test_a_doc_comment_piece_of_a_split_definition_is_never_packed_as_an_empty_fence(tmp_path):
    """Issue 55, item 1 (the block side): a definition split at its JSDoc left a comment-only piece that
    code_cut="comments" packed as a header over an empty code fence (14% of rxjs's blocks). Such a piece keeps its
    top instead: every block of the index shows lines."""
    import re

    from evals.workbench.calls import open_session, search_frame
    from rag.ingest.code.blocks import code_block_text
    from rag.strategies import look

    jsdoc = "/**\n" + "".join(f" * Line {i}: checks a boolean at subscription time and picks a source.\n"
                              for i in range(60)) + " */\n"
    text, ranges, _ = code_block_text(jsdoc, (5, 66), "typescript", "iif.ts", "iif", "function", 1000, "comments")
    fenced = text.split("```typescript\n", 1)[1].rsplit("\n```", 1)[0]
    assert fenced.strip() and ranges and ranges[0][1] > ranges[0][0]
    repo = tmp_path / "src"
    repo.mkdir()
    (repo / "iif.ts").write_text(jsdoc + "export function iif<T>(condition: () => boolean, a: T, b: T): T {\n"
                                 + "".join(f"  const v{i} = condition() ? a : b;\n" for i in range(40))
                                 + "  return condition() ? a : b;\n}\n")
    sess = open_session(str(repo), str(tmp_path / "ws"), "hash")
    ctx, _ = look(sess.retriever, "chunks", "Checks a boolean at subscription time", top_k=20)
    assert len(ctx.blocks) >= 2  # the definition was split
    for b in ctx.blocks:
        code = re.split(r"```typescript\n", b.text, maxsplit=1)[1].rsplit("\n```", 1)[0]
        assert code.strip(), b.text[:300]
    assert len(search_frame(sess, "Checks a boolean at subscription time", "chunks"))


def test_a_jsdoc_split_definition_shows_code_in_every_block_and_embeds_its_signature(tmp_path):
    """Issue 55, item 1 (the chunker side): the doc-only piece of a TypeScript definition split at its JSDoc shows,
    after its comment, the first line of the code it documents (its signature, with the span that says so), and
    embeds with that signature in its breadcrumb; a piece of one line joins its neighbour."""
    import re

    from rag.index.workspace import IndexConfig
    from rag.ingest.chunking import ChunkConfig, chunk_document
    from rag.ingest.folders import load_folder
    from evals.workbench.calls import open_session
    from rag.strategies import look

    jsdoc = "/**\n" + "".join(f" * Line {i}: checks a boolean at subscription time and picks one source.\n"
                              for i in range(60)) + " */\n"
    sig = "export function iif<T, F>(condition: () => boolean, trueResult: T, falseResult: F): T | F {\n"
    body = "".join(f"  const v{i} = condition() ? trueResult : falseResult;\n" for i in range(40))
    repo = tmp_path / "src"
    repo.mkdir()
    (repo / "iif.ts").write_text(jsdoc + sig + body + "  return condition() ? trueResult : falseResult;\n}\n")
    ds = load_folder(repo)
    chunks, _ = chunk_document(ds.documents[0], IndexConfig().chunking)
    doc_pieces = [c for c in chunks if not re.search(r"^(?!\s*(/\*\*|\*)).*\S", c.text, re.M)]
    assert doc_pieces and doc_pieces[0] is chunks[0], [c.text[:60] for c in chunks]  # 60 lines: over e5's window
    assert all(c.breadcrumb.endswith("· " + sig.strip()[:200]) for c in doc_pieces), doc_pieces[0].breadcrumb
    assert all(sum(1 for x in c.text.splitlines() if x.strip()) > 1 for c in chunks)  # no one-line piece
    sess = open_session(str(repo), str(tmp_path / "ws"), "hash")
    ctx, _ = look(sess.retriever, "chunks", "Checks a boolean at subscription time", top_k=20)
    assert len(ctx.blocks) == len(chunks) >= 2
    text = ds.documents[0].text
    for b in ctx.blocks:
        code = re.split(r"```typescript\n", b.text, maxsplit=1)[1].rsplit("\n```", 1)[0]
        assert any(x.strip() and not re.match(r"\s*(/\*\*|\*)", x) for x in code.splitlines()), b.text[:300]
        if b.chunk_ids[0] in {c.chunk_id for c in doc_pieces}:  # its comment, then the signature, each with its span
            assert code.rstrip().endswith(sig.strip()) and "first line of the code it documents" in b.text
            shown = [text[s:e] for _, s, e in b.spans]
            assert shown[-1] == sig.rstrip("\n") and shown[0].lstrip().startswith(("/**", "*"))
