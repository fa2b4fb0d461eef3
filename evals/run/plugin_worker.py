"""A plugin's shape runs in a worker process that can be stopped (issue 54, item 7).

A thread cannot stop Python code that holds the GIL in one C call: ``re.match(r"(a|aa)*c", "a" * 40)`` in a plugin
under ``--plugin-timeout 2`` ran 24 s and froze the whole run. So under a time limit every plugin item is
evaluated in a worker process that rebuilds the run's retriever and plugins from the run's config (one per
evaluator: per run in this process, per Ray actor), and the caller waits at most the limit: past it the worker is
killed and the item fails with the reason; the next plugin item starts a fresh worker. A worker that dies (a
segfault, ``os._exit``) fails its item the same way.

The caller sends its request with pickle (its own data to its own child); the worker answers with JSON only, so
nothing the user's code produced is ever unpickled here. The context is checked in the worker
(``checked_context``: types, token counts, the budget) before it is written.
"""
from __future__ import annotations

import collections
import json
import threading
import time

from rag.strategies.plugins import PluginFailure

MAX_REPLY_BYTES = 256 * 2**20  # one item's context as JSON: a plugin's reply is outside input, bounded like a service's
BOOT_LIMIT_S = 300.0  # a worker builds the run's index reader and loads the plugins once: never the item's time


class PluginWorker:
    """One worker process for one evaluator. ``submit`` sends a shard's plugin items at once (the worker answers
    them in order while this process answers and scores: the two overlap); ``call`` returns one item's context,
    from a reply already read or by waiting for it at most the time limit. Thread-safe."""

    def __init__(self, cfg, workspace: str, index: str):
        self.recipe = (cfg, str(workspace), index)
        self.proc = self.conn = self.out = None
        self.lock = threading.Lock()
        self.pending: collections.deque = collections.deque()  # items sent, replies not read yet (in order)
        self.ready: dict = {}  # item -> [replies read ahead of their call]
        self.starts, self.kills, self.boot_s = 0, 0, 0.0
        self.wait_s = 0.0  # time this process waited for a reply (the worker not ahead of it)

    def _start(self) -> None:
        # a fresh interpreter (never a fork of a process that holds LanceDB's and BLAS's threads), started as a
        # plain command, not with multiprocessing's spawn: that runs the caller's __main__ again (a notebook run
        # as a script would run twice). Two pipes of its own; its stdout and stderr stay the caller's
        import os
        import subprocess
        import sys
        from multiprocessing.connection import Connection

        req_r, req_w = os.pipe()
        rep_r, rep_w = os.pipe()
        env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in sys.path if p)}
        t = time.perf_counter()
        self.proc = subprocess.Popen([sys.executable, "-c", f"from evals.run.plugin_worker import main; "
                                      f"main({req_r}, {rep_w})"], pass_fds=(req_r, rep_w), env=env,
                                     stdin=subprocess.DEVNULL)
        os.close(req_r)
        os.close(rep_w)
        self.conn, self.out = Connection(rep_r, writable=False), Connection(req_w, readable=False)
        self.starts += 1
        self.out.send(self.recipe)
        if not self.conn.poll(BOOT_LIMIT_S):
            self.stop(at_limit=False)
            raise PluginFailure(f"its worker process did not start within {BOOT_LIMIT_S:g} s")
        try:
            reply = json.loads(self.conn.recv_bytes())
        except (EOFError, OSError):
            reply = {"error": f"it exited with code {self.proc.poll()}"}
        self.boot_s += time.perf_counter() - t
        if "error" in reply:
            self.stop(at_limit=False)
            raise PluginFailure(f"its worker process could not start: {reply['error']}")

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def stop(self, at_limit: bool = True) -> None:
        if self.alive():
            self.proc.kill()
            self.kills += at_limit
        if self.proc is not None:
            try:
                self.proc.wait(5)
            except Exception:  # noqa: BLE001 - a process that will not die is left to the OS
                pass
        for c in (self.conn, self.out):
            if c is not None:
                c.close()
        self.proc = self.conn = self.out = None

    def _send(self, items: list) -> None:
        if not self.alive():
            self.stop(at_limit=False)
            self._start()
        self.out.send(items)  # one message: the worker reads it whole before it writes a reply
        self.pending.extend(items)

    def _next(self, seconds: float) -> dict:
        """The reply of the oldest item in flight, waited for at most ``seconds``; past them (or when the worker
        dies) the worker is stopped, the items behind it are sent to a fresh one, and PluginFailure is raised."""
        why = None
        t = time.perf_counter()
        got = self.conn.poll(seconds)
        self.wait_s += time.perf_counter() - t
        if not got:
            why = (f"took longer than its time limit of {seconds:g} s (--plugin-timeout); its worker process was "
                   "stopped and is started again for the next item")
        else:
            try:
                reply = json.loads(self.conn.recv_bytes(MAX_REPLY_BYTES))
            except (EOFError, OSError) as e:  # a message over maxlength is OSError("bad message length")
                why = (f"returned a context over {MAX_REPLY_BYTES:,} bytes as JSON; its worker process was stopped"
                       if "bad message length" in str(e) and self.alive() else
                       f"its worker process died (exit code {self.proc.wait(5)}); it is started again for the next item")
        if why is None:
            self.pending.popleft()
            return reply
        self.stop()  # the only way to stop code that holds the GIL
        rest = list(self.pending)[1:]
        self.pending.clear()
        if rest:
            self._send(rest)
        raise PluginFailure(why)

    def submit(self, items: list) -> None:
        """Send ``items`` [(query, strategy, params)] ahead of their calls (a shard's plugin items, in order)."""
        if not items:
            return
        with self.lock:
            self.ready.clear()  # replies of items no call asked for (an earlier shard's): never kept
            if self.pending:  # items sent that no call will ask for: the worker may be writing their replies,
                # and a batch sent now could meet it blocked on a full pipe; a fresh worker is the safe way on
                self.stop(at_limit=False)
                self.pending.clear()
            self._send(items)

    def call(self, query: str, name: str, p, seconds: float):
        """(context, retrieve_ms, pack_ms) of one item, or PluginFailure within ``seconds`` of waiting for it."""
        key = (query, name, p)
        with self.lock:
            reply = self._take(key, seconds)
        if "error" in reply:
            raise PluginFailure(reply["error"])
        if reply.get("interrupt"):
            raise KeyboardInterrupt
        from rag.strategies import Block, Context

        strategy, params, counters, blocks = reply["context"]
        return (Context(strategy, params, [Block(n, text, group, tuple(d), tuple(pg), tuple(c), tuple(map(tuple, sp)),
                                                 nt, sc, tr) for n, text, group, d, pg, c, sp, nt, sc, tr in blocks],
                        counters), reply["retrieve_ms"], reply["pack_ms"])

    def _take(self, key, seconds: float) -> dict:
        if self.ready.get(key):
            return self.ready[key].pop(0)
        if key not in self.pending:
            self._send([key])
        while True:
            head = self.pending[0]
            try:
                reply = self._next(seconds)
            except PluginFailure:
                if head == key:
                    raise
                continue  # another item's failure (its own call will send it again); ours was sent again
            if head == key:
                return reply
            self.ready.setdefault(head, []).append(reply)  # read ahead: another thread's item

    def __del__(self):
        try:
            self.stop(at_limit=False)
        except Exception:  # noqa: BLE001 - interpreter shutdown
            pass


def _evaluator(cfg, workspace: str, index: str):
    """What an item's retrieval needs, built in the worker: the run's plugins, retriever (with the run's LLM
    client: a shape may call ``r.llm``) and, when contexts are fitted to the model's window, the answerer."""
    from rag.index.retrieval import Retriever
    from rag.index.workspace import Workspace
    from rag.llm.client import LLMClient

    from .items import ItemEvaluator, build_answerer, load_run_plugins

    from rag.strategies import load_plugins

    load_run_plugins(cfg)
    load_plugins((), entry_points=True)  # installed plugins, as the CLI loads them
    ws = Workspace(workspace)
    llm = LLMClient(cfg.llm, ws.root / "cache" / "llm.sqlite", use_cache=cfg.use_cache) if cfg.llm else None
    r = Retriever(ws, index, llm=llm)
    answerer = build_answerer(cfg, r, llm) if cfg.fit_context else None
    from rag.tokens import count_tokens

    count_tokens("loads the tokenizer", r.reader.config.chunking.encoding)  # at the start, not in the first item
    return ItemEvaluator(r, answerer, {}, fit_context=cfg.fit_context, plugin_timeout=0)


def main(req_fd: int, rep_fd: int) -> None:
    """The worker process's entry (``python -c``): its two pipes, then the recipe, then serve."""
    from multiprocessing.connection import Connection

    inp, conn = Connection(req_fd, writable=False), Connection(rep_fd, readable=False)
    # (no PR_SET_PDEATHSIG: it fires when the *thread* that started the worker ends, and a run starts it from
    # whichever thread asks first; a worker whose run is gone ends at its next read, on the closed pipe)
    try:
        recipe = inp.recv()
    except (EOFError, OSError):
        return
    serve(inp, conn, *recipe)


def serve(inp, conn, cfg, workspace: str, index: str) -> None:
    """The worker's loop: build once, then answer each batch of (query, strategy, params) items in order, one JSON
    reply per item, until the pipe closes."""
    import signal

    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C in a terminal reaches the whole group: it is the run's
    try:
        ev = _evaluator(cfg, workspace, index)
    except BaseException as e:  # noqa: BLE001 - told to the caller as one line
        conn.send_bytes(json.dumps({"error": f"{type(e).__name__}: {e}"}).encode())
        return
    conn.send_bytes(b'{"ready": true}')
    enc = ev.r.reader.config.chunking.encoding
    while True:
        try:
            items = inp.recv()
        except (EOFError, OSError):
            return
        warm(ev.r, items)
        for query, name, p in items:
            conn.send_bytes(_answer(ev, query, name, p, enc))


def warm(r, items: list) -> None:
    """One batched query embedding per search key of a batch, as the runner does for built-in points."""
    from rag.strategies import get_strategy

    by_key: dict = {}
    for query, name, p in items:
        try:
            key = p.search_key(get_strategy(name).needed(p))
        except Exception:  # noqa: BLE001 - the item itself reports what is wrong with its shape
            continue
        by_key.setdefault(key, []).append(query)
    for key, queries in by_key.items():
        if len(queries) > 1:
            try:
                r.warm(queries, key)
            except Exception:  # noqa: BLE001 - each item searches on its own then, and fails with its reason
                pass


def _answer(ev, query: str, name: str, p, enc: str) -> bytes:
    from rag.strategies.plugins import checked_context

    from .items import plugin_failure

    try:
        ctx, retrieve_ms, pack_ms = ev._retrieve(query, name, p)
        ctx = checked_context(ctx, name, p, enc)
        # positional, not keyed: decoding is this item's whole cost in the caller
        blocks = [(int(b.n), b.text, b.group, b.doc_ids, b.page_ids, b.chunk_ids, b.spans, b.n_tokens, float(b.score),
                   bool(b.truncated)) for b in ctx.blocks]
        return json.dumps({"context": (ctx.strategy, ctx.params, ctx.counters, blocks), "retrieve_ms": retrieve_ms,
                           "pack_ms": pack_ms}, default=str).encode()
    except BaseException as e:  # noqa: BLE001 - the item's error (sys.exit, a plugin's own KeyboardInterrupt: the
        # worker ignores SIGINT, so a real Ctrl-C never raises here), never the worker's end
        return json.dumps({"error": plugin_failure(name, e).removeprefix(f"strategy {name} ")}).encode()
