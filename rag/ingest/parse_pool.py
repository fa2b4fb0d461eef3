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
    parse_settings()  # a setting out of its range is one error naming it, before any file is parsed
    if any(path.suffix.lower() == ".pdf" for path, _ in files):
        pdf_parser()  # an unknown RAGWB_PDF_PARSER is an error before any file, never every PDF skipped
    docs, skipped, seconds = [], [], {}
    bar = None
    if progress and len(files) > 1:
        from tqdm import tqdm
        from rag.safeio import printable  # "parsing FOLDER": a folder's terminal escapes shown, never sent

        bar = tqdm(total=len(files), desc=printable(desc), unit="file", file=sys.stderr, leave=False,
                   dynamic_ncols=True)
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
    asked = parse_settings()["workers"]
    if asked is not None:
        workers = asked
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
    settings = parse_settings()
    limit, memory_mb = settings["timeout"], settings["memory_mb"]
    live: set = set()  # every worker started and not yet reaped: killed if this call ends early (Ctrl-C, an error)
    stopping = threading.Event()

    def work():
        proc = None
        while not stopping.is_set():
            try:
                path, doc_id = jobs.get_nowait()
            except queue.Empty:
                break
            for _ in range(2):
                if stopping.is_set():
                    return
                if proc is None:
                    proc = _start(memory_mb)
                    live.add(proc)
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
                live.discard(proc)
                proc = None
                bound = f"the worker's memory bound ({memory_mb:,} MB, RAGWB_PARSE_MEMORY_MB)"
                why = (f"took over {limit:g} s (RAGWB_PARSE_TIMEOUT)" if fired else
                       # pdfium's failed allocation is an uncaught std::bad_alloc: abort()
                       f"aborted (SIGABRT), as a parser does when it cannot allocate: its parse needs more than "
                       f"{bound}, or the parser crashed" if code == -6 else
                       f"exit code {code}: a crash in the PDF or document parser, past {bound}, or a worker that "
                       "cannot start: its error is printed above")
                result = (None, Skipped(str(path), f"the parser's process died reading this file twice ({why})"),
                          0.0)
            with lock:
                out[str(path)] = result
                if bar:
                    bar.update(1)
        if proc is not None:
            proc.stdin.close()
            proc.wait()
            live.discard(proc)

    # a thread that fails (a worker that cannot be started at all) leaves its files out: parse_files then parses
    # them in its own process, so nothing is lost either way
    threads = [threading.Thread(target=work, daemon=True) for _ in range(workers)]
    try:
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    finally:  # Ctrl-C (or an error): no worker outlives the ingest, and none is started after this
        stopping.set()
        for proc in list(live):
            try:
                proc.kill()
            except OSError:
                pass
    return out


TIMEOUT_RANGE = (1.0, 86400.0)  # a second to a day: below it every PDF "dies twice", above it nothing is capped
MEMORY_MIN_MB = 128  # Python and pdfium start in ~60 MB; below this no file parses
_CAPPED_SAID: set = set()


def _ram_mb() -> int:
    try:
        return int(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") // 2**20)
    except (ValueError, OSError, AttributeError):
        return 8192


def parse_settings() -> dict:
    """The parse pool's settings from the environment, each checked against its range (issue 82): a value outside
    it is a ValueError naming the variable (one line from ``ragwb``), raised before any file is parsed.

    - ``RAGWB_PARSE_WORKERS``: 0 (every file in this process) .. 2 x cores; more is capped there, said once (10,000
      asked started 60 workers for 60 tiny PDFs on 2 cores: 192 s where the default took 1.2 s). None when unset.
    - ``RAGWB_PARSE_TIMEOUT``: seconds a worker may spend on one file, 1 .. 86,400 (default 600).
    - ``RAGWB_PARSE_MEMORY_MB``: each worker's address-space bound, 128 MB .. the machine's memory (default a
      quarter of it): a file that needs more is skipped, named, and never takes the machine's memory."""
    cores = os.cpu_count() or 1
    out: dict = {"workers": None}
    raw = os.environ.get("RAGWB_PARSE_WORKERS", "").strip()
    if raw:
        if not raw.isdigit():
            raise ValueError(f"RAGWB_PARSE_WORKERS={raw!r} is not a worker count (a whole number, 0: none; at most "
                             f"{2 * cores}, twice this machine's {cores} cores)")
        out["workers"] = int(raw)
        if out["workers"] > 2 * cores:
            if raw not in _CAPPED_SAID:
                _CAPPED_SAID.add(raw)
                print(f"ragwb: RAGWB_PARSE_WORKERS={raw} capped at {2 * cores} (twice this machine's {cores} cores: "
                      "more workers only wait for the same cores)", file=sys.stderr)
            out["workers"] = 2 * cores
    out["timeout"] = _ranged("RAGWB_PARSE_TIMEOUT", 600.0, *TIMEOUT_RANGE, "seconds a file")
    ram = _ram_mb()
    out["memory_mb"] = int(_ranged("RAGWB_PARSE_MEMORY_MB", max(MEMORY_MIN_MB, ram // 4), MEMORY_MIN_MB, ram,
                                   "MB a worker"))
    return out


def _ranged(name: str, default: float, low: float, high: float, unit: str) -> float:
    raw = os.environ.get(name, "").strip()
    if not raw:
        return default
    try:
        v = float(raw)
    except ValueError:
        v = float("nan")
    if not (low <= v <= high):  # NaN, inf and 1e300 fail here too
        raise ValueError(f"{name}={raw!r} is out of range: {low:g} .. {high:g} {unit} (default {default:g})")
    return v


def parse_timeout() -> float:
    """Seconds a worker may spend on one file (``RAGWB_PARSE_TIMEOUT``, 1 s .. 1 day, default 600): a hostile PDF
    that hangs its parser is killed, the file skipped and named, the rest parsed."""
    return parse_settings()["timeout"]


def _start(memory_mb: int) -> subprocess.Popen:
    env = dict(os.environ)
    env["RAGWB_PARSE_PARENT"] = str(os.getpid())  # the worker exits once this process is gone
    env["RAGWB_PARSE_MEMORY_MB"] = str(memory_mb)
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


def _die_with_parent() -> None:
    """The worker never outlives its ingest (issue 82: after a SIGKILL of the ingest a worker on a hostile PDF lived
    on with parent 1). Linux kills it the moment its parent goes (PR_SET_PDEATHSIG); a watchdog thread checks the
    parent twice a second elsewhere and for the instant before the signal was set. SIGINT and SIGTERM end it at once
    with no traceback (a terminal's Ctrl-C reaches the whole process group)."""
    import signal

    parent = int(os.environ.get("RAGWB_PARSE_PARENT") or os.getppid())
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: os._exit(1))
    if sys.platform.startswith("linux"):
        try:
            import ctypes

            ctypes.CDLL(None, use_errno=True).prctl(1, int(signal.SIGKILL), 0, 0, 0)  # PR_SET_PDEATHSIG
        except (OSError, AttributeError):
            pass
    if os.getppid() != parent:
        os._exit(1)

    def watch():
        import time

        while os.getppid() == parent:
            time.sleep(0.5)
        os._exit(1)

    threading.Thread(target=watch, daemon=True).start()


def _bound_memory() -> int:
    """The worker's address space capped at RAGWB_PARSE_MEMORY_MB (set by the parent): a PDF whose parse would take
    gigabytes fails in its worker, never the machine. Returns the bound in MB (0: none could be set)."""
    try:
        import resource

        mb = int(os.environ.get("RAGWB_PARSE_MEMORY_MB") or 0)
        if mb > 0:
            resource.setrlimit(resource.RLIMIT_AS, (mb * 2**20, mb * 2**20))
        return mb
    except (ImportError, ValueError, OSError):
        return 0


def _serve() -> None:
    _die_with_parent()
    memory_mb = _bound_memory()
    channel = os.fdopen(os.dup(1), "w", encoding="utf-8")
    sys.stdout = sys.stderr  # anything a parser prints goes to stderr, never into the answers
    for line in sys.stdin:
        job = json.loads(line)
        cache = ParseCache(job["root"], job["shipped"]) if job["cached"] else None
        try:
            doc, skip, secs = parse_one(Path(job["path"]), job["doc_id"], job["language"], cache)
        except MemoryError:  # raised outside the reader's own catch (its error text could not be made)
            doc, skip, secs = None, Skipped(job["path"], "MemoryError"), 0.0
        if skip is not None and skip.reason.startswith("MemoryError"):  # the bound, named, not Python's word for it
            skip = Skipped(skip.path, f"its parse needs more than the worker's memory bound ({memory_mb:,} MB, "
                                      "RAGWB_PARSE_MEMORY_MB)")
        try:
            channel.write(json.dumps({"doc": doc_to_dict(doc) if doc else None,
                                      "skip": dataclasses.asdict(skip) if skip else None, "seconds": secs},
                                     ensure_ascii=False) + "\n")
            channel.flush()
        except (BrokenPipeError, OSError):  # the ingest is gone: nobody to answer, nothing to say
            os._exit(0)


if __name__ == "__main__":
    _serve()
