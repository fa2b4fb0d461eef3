"""Files parsed in worker processes (``python -m rag.ingest.parse_pool``), one file at a time each, over pipes.

Not ``multiprocessing``: its spawn re-runs the caller's main module (a script or notebook without an
``if __name__ == "__main__"`` guard starts workers without end), and fork copies the e5 engine's running threads.
A worker that dies mid-file (killed, or a parser crashing on a hostile PDF) loses nothing: a new worker tries that
file once more and takes the rest; a file that kills two workers is skipped, named. Each worker writes the parse
cache itself (atomic entries); its stderr is the caller's, so a parser's warnings (and a worker's own failure to
start) are printed as they would be in one process."""
from __future__ import annotations

import dataclasses
import json
import os
import queue
import subprocess
import sys
import threading
from pathlib import Path

from rag.models import Document, Page, Skipped

from .readers import ParseCache, parse_one, pdf_parser


POOLED_SUFFIXES = (".pdf", ".docx", ".html", ".htm")  # the parses that cost: PDF text, markitdown
POOL_MIN_BYTES = 3_000_000  # less than this to parse, and a worker's start (~0.25 s: Python, pdfium) costs what it saves


def parse_files(files: list[tuple[Path, str]], language: str | None, cache: ParseCache | None,
                progress: bool, desc: str, engine=None) -> tuple[list[Document], list[Skipped], dict]:
    """Parse files into documents, one bad file never stopping the rest; per-file seconds. PDFs, DOCX and HTML
    not in the parse cache are parsed by worker processes (``parse_workers`` says how many). ``engine``
    (rag/index/engines.py) parses them elsewhere, e.g. in Ray tasks."""
    if engine is not None and engine.name != "local" and files:
        return engine.parse_files(files, language, cache)
    if any(path.suffix.lower() == ".pdf" for path, _ in files):
        pdf_parser()  # an unknown RAGWB_PDF_PARSER is an error before any file, never every PDF skipped
    docs, skipped, seconds = [], [], {}
    bar = None
    if progress and len(files) > 1:
        from tqdm import tqdm
        bar = tqdm(total=len(files), desc=desc, unit="file", file=sys.stderr, leave=False, dynamic_ncols=True)
    pooled = _parse_pooled(files, language, cache, bar)
    for path, doc_id in files:
        if str(path) in pooled:
            doc, skip, seconds[str(path)] = pooled[str(path)]
        else:
            doc, skip, seconds[str(path)] = parse_one(path, doc_id, language, cache)
            if bar:
                bar.update(1)
        if doc is not None:
            docs.append(doc)
        else:
            skipped.append(skip)
    if bar:
        bar.close()
    return docs, skipped, seconds


def parse_workers(files: list[tuple[Path, str]], cache: ParseCache | None) -> tuple[int, list[tuple[Path, str]]]:
    """(workers, the files they parse): the PDFs, DOCX and HTML files whose pages are not cached, by as many workers
    as cores are free now (at most one a file) when they are 3 MB or more; fewer bytes, and one worker for PDFs (pdfium
    is C: a crash on a hostile file takes a worker down, never the ingest) and none for DOCX and HTML alone (0: in this
    process). ``RAGWB_PARSE_WORKERS=N`` sets the count (0: every file in this process)."""
    todo, pdfs = [], False
    for path, doc_id in files:
        if path.suffix.lower() not in POOLED_SUFFIXES:
            continue
        try:
            if cache is not None and cache.has(cache.key(path)):
                continue
            todo.append((path, doc_id, path.stat().st_size))
            pdfs = pdfs or path.suffix.lower() == ".pdf"
        except (OSError, ValueError):
            continue  # unreadable, or an unknown parser asked for: parse_one names it
    asked = os.environ.get("RAGWB_PARSE_WORKERS", "").strip()
    if asked:
        if not asked.isdigit():
            raise ValueError(f"RAGWB_PARSE_WORKERS={asked!r} is not a worker count (a whole number, 0: none)")
        workers = int(asked)
    elif sum(size for *_, size in todo) < POOL_MIN_BYTES:
        workers = 1 if pdfs else 0
    else:
        from rag.ingest.cores import free_cores

        workers = free_cores()
    workers = min(workers, len(todo))
    return (workers, [(p, d) for p, d, _ in todo]) if workers else (0, [])


def _parse_pooled(files, language, cache, bar) -> dict:
    """{path: (document, skip, seconds)} for the files parse_workers gives a pool."""
    workers, todo = parse_workers(files, cache)
    if not workers:
        return {}
    if cache is not None:  # each was not in the cache when looked at: the workers' misses, counted here
        cache.misses += len(todo)
    return parse_in_workers(todo, language, cache, workers, bar)


def doc_to_dict(d: Document) -> dict:
    """A document as JSON-able fields (the workers' and Ray's wire form), without its code parse: a tree of objects
    that does not travel, parsed again where it is needed (``chunking.code_parse``)."""
    out = dataclasses.asdict(dataclasses.replace(d, code_parse=None))
    out.pop("code_parse")
    return out


def doc_from_dict(d: dict) -> Document:
    return Document(**{**d, "pages": [Page(**p) for p in d["pages"]]})


def parse_in_workers(todo: list[tuple[Path, str]], language: str | None, cache, workers: int, bar=None) -> dict:
    """{path: (document or None, skip or None, seconds)} for every file of ``todo``, parsed by ``workers``
    processes."""
    jobs: queue.Queue = queue.Queue()
    for path, doc_id in todo:
        jobs.put((path, doc_id))
    root = str(cache.root) if cache is not None and cache.root else None
    shipped = str(cache.shipped) if cache is not None else None
    out: dict = {}
    lock = threading.Lock()
    limit = parse_timeout()

    def work():
        proc = None
        while True:
            try:
                path, doc_id = jobs.get_nowait()
            except queue.Empty:
                break
            for _ in range(2):
                if proc is None:
                    proc = _start()
                fired: list = []
                timer = threading.Timer(limit, lambda p=proc: (fired.append(1), p.kill()))  # a hung parser: killed
                timer.start()
                result = _ask(proc, {"path": str(path), "doc_id": doc_id, "language": language, "root": root,
                                     "shipped": shipped, "cached": cache is not None})
                timer.cancel()
                if result is not None:
                    break
                # the worker died: killed from outside, past the time cap, or on this file; a new worker tries the
                # file once more, and a file that kills two workers is the culprit, skipped and named
                code = proc.wait()
                proc = None
                why = (f"took over {limit:g} s (RAGWB_PARSE_TIMEOUT)" if fired else
                       f"exit code {code}: a crash in the PDF or document parser, or a worker that cannot start: "
                       "its error is printed above")
                result = (None, Skipped(str(path), f"the parser's process died reading this file twice ({why})"),
                          0.0)
            with lock:
                out[str(path)] = result
                if bar:
                    bar.update(1)
        if proc is not None:
            proc.stdin.close()
            proc.wait()

    # a thread that fails (a worker that cannot be started at all) leaves its files out: parse_files then parses
    # them in its own process, so nothing is lost either way
    threads = [threading.Thread(target=work, daemon=True) for _ in range(workers)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return out


def parse_timeout() -> float:
    """Seconds a worker may spend on one file (``RAGWB_PARSE_TIMEOUT``, default 600): a hostile PDF that hangs its
    parser is stopped, the file skipped and named, the rest parsed."""
    from rag.errors import env_number

    return float(env_number("RAGWB_PARSE_TIMEOUT", 600.0))


def _start() -> subprocess.Popen:
    env = dict(os.environ)
    # the worker imports this package as the caller does (a checkout on sys.path, not installed, included)
    here = str(Path(__file__).resolve().parents[2])
    env["PYTHONPATH"] = here + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    return subprocess.Popen([sys.executable, "-m", "rag.ingest.parse_pool"], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, env=env, text=True, encoding="utf-8", bufsize=1)


def _ask(proc: subprocess.Popen, job: dict):
    try:
        proc.stdin.write(json.dumps(job, ensure_ascii=False) + "\n")
        proc.stdin.flush()
        line = proc.stdout.readline()
    except (BrokenPipeError, OSError):
        return None
    if not line.endswith("\n"):  # nothing, or a line cut short by the worker's death
        return None
    try:
        r = json.loads(line)
    except ValueError:
        return None
    doc = doc_from_dict(r["doc"]) if r["doc"] else None
    skip = Skipped(**r["skip"]) if r["skip"] else None
    return doc, skip, r["seconds"]


def _serve() -> None:
    channel = os.fdopen(os.dup(1), "w", encoding="utf-8")
    sys.stdout = sys.stderr  # anything a parser prints goes to stderr, never into the answers
    for line in sys.stdin:
        job = json.loads(line)
        cache = ParseCache(job["root"], job["shipped"]) if job["cached"] else None
        doc, skip, secs = parse_one(Path(job["path"]), job["doc_id"], job["language"], cache)
        channel.write(json.dumps({"doc": doc_to_dict(doc) if doc else None,
                                  "skip": dataclasses.asdict(skip) if skip else None, "seconds": secs},
                                 ensure_ascii=False) + "\n")
        channel.flush()


if __name__ == "__main__":
    _serve()
