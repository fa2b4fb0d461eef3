"""Time to the first chart on a folder of PDFs (issue 74): ``ragwb ingest FOLDER`` then ``ragwb run`` (its HTML
report is the first chart), each a fresh process as a user types them, parse and embed split, with the load they ran
under. The folder is written here: the bundled SQuAD and MTRAG passages laid out as PDF pages (distinct text, so
the embedding cache saves nothing; the bundled filings copied would be embedded once), about ``chunks`` chunks at
the default chunking, in PDFs of about 50 pages like a filing."""
from __future__ import annotations

import json
import re
import sys
import time
from pathlib import Path

from rag.index.rates import LoadSampler

from .beside import beside_now, run_timed
from .pdfs import make_pdf, text_pages

TOKENS_A_CHUNK = 112  # the default chunking's stride (128 tokens, 16 overlap)


def write_folder(folder: Path, chunks: int = 5000, pages_a_pdf: int = 50) -> dict:
    from rag.ingest.corpora import load_bundled
    from rag.tokens import count_tokens

    folder.mkdir(parents=True, exist_ok=True)
    want = chunks * TOKENS_A_CHUNK
    squad = load_bundled("squad2")
    texts, tokens = [], 0
    for name in ("squad2", "mtrag-govt", "mtrag-clapnq"):
        ds = squad if name == "squad2" else load_bundled(name)
        for d in ds.documents:
            if tokens >= want:
                break
            texts.append(f"{d.title}\n{d.text}")
            tokens += count_tokens(d.text)
    pages: list[list[str]] = []
    for t in texts:
        pages.extend(text_pages(t))
    pdfs = 0
    for i in range(0, len(pages), pages_a_pdf):
        make_pdf(folder / f"volume-{i // pages_a_pdf:03d}.pdf", pages[i:i + pages_a_pdf])
        pdfs += 1
    q = folder.parent / "questions.jsonl"
    q.write_text("".join(json.dumps({"id": x.qid, "question": x.text}) + "\n" for x in squad.questions[:40]))
    return {"pdfs": pdfs, "pages": len(pages), "tokens": tokens, "questions": str(q)}


def _ragwb(*args: str) -> tuple[float, str]:
    t = time.perf_counter()
    p = run_timed([sys.executable, "-m", "evals.cli", *args, "--no-progress"])
    if p.returncode:
        raise RuntimeError(f"ragwb {args[0]} failed ({p.returncode}): {p.stderr[-2000:]}")
    return time.perf_counter() - t, p.stdout + p.stderr


def first_chart_figure(root: Path, chunks: int = 5000) -> dict:
    folder, ws = root / "pdfs", root / "ws"
    made = write_folder(folder, chunks)
    with LoadSampler(2.0) as load, LoadSampler(1.0, read=beside_now) as beside:
        ingest_s, out = _ragwb("ingest", str(folder), "--questions", made["questions"], "--workspace", str(ws))
        run_s, _ = _ragwb("run", "--dataset", str(folder), "--workspace", str(ws))
    m = re.search(r"parsed (\d+) file\(s\) in ([\d.]+)s; embedded (\d+) chunks .*? in ([\d.]+)s", out)
    n = re.search(r"chunks (\d+)", out)
    fig = {**made, "chunks": int(n.group(1)) if n else None, "ingest_s": ingest_s, "run_s": run_s,
           "first_chart_s": ingest_s + run_s,
           "load_avg_1m": load.mean, "load_low": load.low, "load_high": load.high,
           # quiet: nothing else ran beside it (the commands' own threads are not a neighbour)
           "beside_mean": beside.mean, "beside_high": beside.high, "quiet": beside.mean < 0.5,
           "target": "< 60 s quiet (2 cores)"}
    if m:
        fig.update(parse_s=float(m.group(2)), embedded=int(m.group(3)), embed_s=float(m.group(4)))
    return fig


def render(fig: dict) -> list[str]:
    if "first_chart_s" not in fig:
        return [f"first chart: {fig}"]
    label = (f"load {fig['load_avg_1m']:.1f}"
             + (f", {fig['beside_mean']:.1f} task(s) running beside it" if "beside_mean" in fig else "")
             + (", quiet" if fig["quiet"] else ""))
    return [f"first chart on {fig['pdfs']} PDFs ({fig['pages']} pages, {fig['chunks']} chunks; {label}): "
            f"{fig['first_chart_s']:.1f} s = ingest {fig['ingest_s']:.1f} s (parse {fig.get('parse_s', float('nan')):.1f} s, "
            f"embed {fig.get('embed_s', float('nan')):.1f} s for {fig.get('embedded', '?')} chunks) + run and report "
            f"{fig['run_s']:.1f} s (target {fig['target']})"]
