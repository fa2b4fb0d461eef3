"""A run's items on their way to the store: kept in memory until a commit, committed every ``flush_seconds``
(readers see progress; a kill loses at most that) or every ``flush_every`` items, each item once (a shard retried
after its worker died may repeat items: the first is kept), with a progress bar and, after the first commit, a
warning when every answer so far failed the same way."""
from __future__ import annotations

import sys
import time

from rag.llm.urls import redact_url


class Committer:
    def __init__(self, store, run_id: str, cfg, planned: int, done: set, summary, bar, progress: bool,
                 flush_every: int, flush_seconds: float, on_flush=None):
        self.store, self.run_id, self.cfg, self.planned, self.summary, self.bar = store, run_id, cfg, planned, summary, bar
        self._said = None  # the committed count the headless log printed last
        self.progress, self.flush_every, self.flush_seconds, self.on_flush = progress, flush_every, flush_seconds, on_flush
        self.done, self.written = done, set(done)
        self.pending_r: list[dict] = []
        self.pending_s: list[dict] = []
        self.last_flush = time.monotonic()
        self.warned = False
        # the last wave: as many items as can be in flight at once (a service's or an LLM's concurrency)
        self.stretch = max([x.max_concurrency for x in cfg.systems] + [c.max_concurrency for c in (cfg.llm,) if c]
                           + [1])

    def add(self, qid: str, name: str, pid: str, rep: int, row: dict, scores: dict) -> None:
        key = (name, pid, qid, rep)
        if key in self.written:  # a shard retried after its worker died may repeat items: keep the first
            return
        self.written.add(key)
        row["run_id"] = self.run_id
        self.pending_r.append(row)
        for metric, sc in scores.items():
            self.pending_s.append({"run_id": self.run_id, "strategy": name, "point_id": pid, "question_id": qid,
                                   "repeat": rep, "metric": metric, "value": sc.value, "status": sc.status,
                                   "detail": sc.detail})
        # commit a batch every second (readers see progress; a kill loses at most that) or every flush_every
        # items; each commit opens and closes the store, so not every few items
        left = self.planned - len(self.done) - self.summary.items - len(self.pending_r)
        if 0 < left <= self.stretch and self.store._con is None and not self.cfg.race:
            # the last wave is in flight: commit what is pending and open the store for the end now (~30 ms
            # each), while the service works, so after the last reply only that wave is written
            # (issue 44, 17: the tail after the last reply was ~0.1 s, 4% of a 2.5 s run)
            self.flush()
            self.store.con  # noqa: B018
        elif len(self.pending_r) >= self.flush_every or time.monotonic() - self.last_flush >= self.flush_seconds:
            self.flush()

    def flush(self) -> None:
        self._warn_early_failures()
        self.last_flush = time.monotonic()
        self.store.write_items(self.pending_r, self.pending_s)
        self.bar.update(len(self.pending_r))
        self.summary.items += len(self.pending_r)
        self.pending_r.clear()
        self.pending_s.clear()
        if self.on_flush:
            self.on_flush(self.summary.items)
        done = self.summary.items + self.summary.skipped_done
        # headless (CI) log: one line per commit that moved the count (the closing flush of an empty batch said
        # "committed 30/30" a second time)
        if not self.progress and self.summary.items and done != self._said:
            self._said = done
            print(f"[run {self.run_id}] committed {done}/{self.planned} items", file=sys.stderr, flush=True)

    def _warn_early_failures(self) -> None:
        """After the first commit: when every answer so far failed the same way, say what to change now, not
        after an hour of timeouts (docs/llm.md has settings for llama.cpp, vLLM, Ollama)."""
        cfg, pending = self.cfg, self.pending_r
        if self.warned or not cfg.llm or not pending:
            return
        self.warned = True
        st = {r["answer_status"] for r in pending}
        if st == {"timeout"}:
            print(f"warning: the first {len(pending)} answers from {redact_url(cfg.llm.base_url)} all timed out "
                  f"after {cfg.llm.timeout:g} s with --concurrency {cfg.llm.max_concurrency}: a server that answers "
                  "one request at a time (llama.cpp, Ollama) needs --concurrency 1, and a slow model a longer "
                  "--timeout (docs/llm.md)", file=sys.stderr)
        elif st <= {"error", "rate_limited", "parse_error"} and "ok" not in st:
            err = next((r["answer_error"] for r in pending if r["answer_error"]), "")
            print(f"warning: the first {len(pending)} answers from {redact_url(cfg.llm.base_url)} all failed "
                  f"({', '.join(sorted(st))}): {err[:200]}", file=sys.stderr)
