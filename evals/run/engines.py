"""Execution engines for runs: where the items of a run are evaluated (``ragwb run --engine NAME``).

* ``local`` (default): in this process, shard after shard.
* ``ray``: shards (``SHARD_QUESTIONS`` questions x every grid point; whole conversations) go to a pool
  of Ray actors. Each actor builds the run's parts once (retriever over the shared LanceDB workspace,
  answerer, scorers, judges) and returns rows; only the driver writes DuckDB, in the same batches
  as a local run, so resume and statuses behave the same. A shard whose actor dies is sent again
  (the actor restarts); the driver keeps the first copy of every item, so no row is lost or doubled.
  LLM calls from every actor go through one named limiter actor: at most ``--concurrency`` calls in
  flight in the whole cluster, and a 429 seen by one actor pauses them all.

The ingest half (parse -> chunk -> embed -> write) is in ``rag/index/engines.py``; docs/scale.md.
"""
from __future__ import annotations

import dataclasses
import time
from typing import Callable, Iterator

from rag.index.engines import ensure_ray, get_engine

from .items import RunJob, ask_system, build_parts, evaluate_shard, system_tasks

RUN_ENGINES: dict[str, Callable[..., "RunEngine"]] = {}


def register_run_engine(name: str):
    def deco(cls):
        RUN_ENGINES[name] = cls
        cls.name = name
        return cls
    return deco


def get_run_engine(name: "str | RunEngine" = "local", address: str | None = None, **kw) -> "RunEngine":
    if isinstance(name, RunEngine):
        return name
    if name not in RUN_ENGINES:
        raise KeyError(f"unknown engine {name!r}; valid: {', '.join(RUN_ENGINES)}")
    return RUN_ENGINES[name](address=address, **kw)


class RunEngine:
    name = "base"

    def __init__(self, address: str | None = None, **_):
        self.address = address
        self._stats: dict = {}

    def ingest_engine(self):
        """The ingest engine of the same name (rag/index/engines.py)."""
        return get_engine("local")

    def evaluate(self, job: RunJob) -> Iterator[tuple]:
        raise NotImplementedError

    def llm_stats(self) -> dict:
        return dict(self._stats)

    def plugin_stats(self) -> dict:
        """The plugin worker process of this engine's run (plugin_worker.py): starts, kills, boot seconds."""
        parts = getattr(self, "_parts", None)
        w = parts[1].evaluator.worker if parts else None
        return ({"starts": w.starts, "kills": w.kills, "boot_s": round(w.boot_s, 2), "wait_s": round(w.wait_s, 3)}
                if w and w.starts else {})

    def describe(self) -> str:
        return self.name


def with_plugin_worker(parts, job: RunJob):
    """Under a time limit a plugin's shape runs in a worker process that can be stopped at it (plugin_worker.py):
    one per engine worker, started at the first plugin item, so a run without one pays nothing."""
    if job.cfg.plugin_timeout:
        from .plugin_worker import PluginWorker

        parts.evaluator.worker = PluginWorker(job.cfg, job.workspace, job.index)
    return parts


def _add_stats(total: dict, clients) -> None:
    for c in clients:
        for k, v in dataclasses.asdict(c.stats).items():
            total[k] = total.get(k, 0) + v


@register_run_engine("local")
class LocalRunEngine(RunEngine):
    def evaluate(self, job: RunJob):
        from rag.index.workspace import Workspace

        # a raced run calls this once per batch: its parts (index reader, answerer, clients) are built once
        key = (id(job.cfg), job.workspace, job.index)
        cached = getattr(self, "_parts", None)
        parts = cached[1] if cached is not None and cached[0] == key else with_plugin_worker(
            build_parts(job.cfg, Workspace(job.workspace), job.index), job)
        self._parts = (key, parts, job.cfg)  # (the cfg is held so its id is not reused)
        ex, prefetched = None, None
        try:
            if job.cfg.systems:
                # every service request of the run is queued at once (each client's limit bounds what is in
                # flight): the service never waits while a shard is scored and committed (issue 44, 17)
                from concurrent.futures import ThreadPoolExecutor

                # one thread per request a service may have in flight: no thread waits on a client's slot while a
                # later task could be sent (requests then leave in question order)
                ex = ThreadPoolExecutor(max_workers=sum(x.max_concurrency for x in job.cfg.systems),
                                        thread_name_prefix="ragwb-system")
                prefetched = {(t[0].qid, t[1], t[2]): ex.submit(ask_system, parts.evaluator, t)
                              for shard in job.shards for t in system_tasks(job, shard, job.done)}
            for shard in job.shards:
                yield from evaluate_shard(parts, job, shard, prefetched=prefetched)
        finally:
            if ex is not None:  # an interrupted run sends nothing more
                ex.shutdown(wait=False, cancel_futures=True)
            # the clients' counts are cumulative: a reused parts adds only what this call made
            now: dict = {}
            _add_stats(now, parts.clients())
            was = getattr(self, "_counted", (None, {}))
            base = was[1] if was[0] is parts else {}
            for k, v in now.items():
                self._stats[k] = self._stats.get(k, 0) + v - base.get(k, 0)
            self._counted = (parts, now)


# ------------------------------------------------------------------------------------------- Ray

class _ClusterLimiter:
    """Ray actor (async): one semaphore and one backoff deadline for every worker in the cluster."""

    def __init__(self, n: int):
        import asyncio

        self.sem = asyncio.Semaphore(max(1, n))
        self.until = 0.0
        self.inflight = self.peak = 0

    async def acquire(self) -> None:
        import asyncio

        await self.sem.acquire()
        while (wait := self.until - time.monotonic()) > 0:
            await asyncio.sleep(min(wait, 1.0))
        self.inflight += 1
        self.peak = max(self.peak, self.inflight)

    def release(self) -> None:
        self.inflight -= 1
        self.sem.release()

    def pause(self, seconds: float) -> None:
        self.until = max(self.until, time.monotonic() + seconds)

    def peak_inflight(self) -> int:
        return self.peak


class RayLimiter:
    """The ``rag.llm.client.Limiter`` interface backed by a ``_ClusterLimiter`` actor."""

    def __init__(self, handle):
        self.handle = handle

    def slot(self):
        import contextlib

        import ray

        @contextlib.contextmanager
        def cm():
            ray.get(self.handle.acquire.remote())
            try:
                yield
            finally:
                self.handle.release.remote()
        return cm()

    def pause(self, seconds: float) -> None:
        self.handle.pause.remote(seconds)


class _RunWorker:
    """Ray actor: builds the run's parts once, then evaluates shards and returns plain rows."""

    def __init__(self, job: RunJob, limiters: dict):
        from rag.index.workspace import Workspace

        self.job = job
        self.parts = with_plugin_worker(build_parts(job.cfg, Workspace(job.workspace), job.index, lambda kind, c:
                                                    RayLimiter(limiters[kind]) if kind in limiters else None), job)

    def ping(self) -> bool:
        return True

    def shard(self, shard: list, done: set) -> tuple[list, dict]:
        before = {}
        _add_stats(before, self.parts.clients())
        out = [(qid, name, pid, rep, row, {m: (s.value, s.status, s.detail) for m, s in scores.items()})
               for qid, name, pid, rep, row, scores in evaluate_shard(self.parts, self.job, shard, done)]
        after = {}
        _add_stats(after, self.parts.clients())
        return out, {k: after[k] - before.get(k, 0) for k in after}


@register_run_engine("ray")
class RayRunEngine(RunEngine):
    """Shards to a pool of Ray actors; the driver commits rows. ``workers`` = 0: one per CPU."""

    def __init__(self, address: str | None = None, num_cpus: int | None = None, workers: int = 0,
                 max_attempts: int = 4, **_):
        super().__init__(address)
        self.num_cpus, self.workers, self.max_attempts = num_cpus, workers, max_attempts
        self.actors: list = []
        self.retried = 0
        self.limiters: dict = {}
        self._n = 0
        self.peak_llm = 0  # most LLM calls in flight at once across the cluster (after a run)

    def ingest_engine(self):
        return get_engine("ray", self.address, num_cpus=self.num_cpus)

    def describe(self) -> str:
        s = f"ray ({self._n} worker(s)"
        if self.retried:
            s += f", {self.retried} shard(s) sent again after a worker died"
        return s + ")"

    def evaluate(self, job: RunJob):
        from evals.score.metrics import Score

        ray = ensure_ray(self.address, self.num_cpus)
        n = self.workers or max(1, int(ray.cluster_resources().get("CPU", 1)))
        self._n = n
        run_tag = f"{int(time.time() * 1000)}-{id(self) % 10000}"
        for kind, c in (("llm", job.cfg.llm), ("judge", job.cfg.judge)):
            if c is not None:
                self.limiters[kind] = ray.remote(num_cpus=0)(_ClusterLimiter).options(
                    name=f"ragwb-limiter-{kind}-{run_tag}", max_concurrency=1000).remote(c.max_concurrency)
        worker_cls = ray.remote(num_cpus=1, max_restarts=-1)(_RunWorker)
        # light job for the actors: they need the questions of their shards only (sent with each shard)
        light = dataclasses.replace(job, questions=[], shards=[], done=set())
        self.actors = [worker_cls.options(name=f"ragwb-run-worker-{run_tag}-{i}").remote(light, self.limiters)
                       for i in range(n)]
        done_of: dict = {}  # question id -> its stored items: each shard is sent only its own
        for k in job.done:
            done_of.setdefault(k[2], set()).add(k)
        pending: dict = {}  # object ref -> (shard index, attempt, actor index)
        todo = list(range(len(job.shards)))
        next_actor = 0

        def submit(si: int, attempt: int, ai: int | None = None):
            nonlocal next_actor
            if ai is None:
                ai, next_actor = next_actor % n, next_actor + 1
            shard = job.shards[si]
            done = set().union(*(done_of.get(q.qid, ()) for q in shard))
            pending[self.actors[ai].shard.remote(shard, done)] = (si, attempt, ai)

        try:
            for _ in range(min(len(todo), 2 * n)):  # two shards queued per actor keeps every CPU busy
                submit(todo.pop(0), 1)
            while pending:
                ready, _ = ray.wait(list(pending), num_returns=1)
                ref = ready[0]
                si, attempt, ai = pending.pop(ref)
                try:
                    rows, stats = ray.get(ref)
                except (ray.exceptions.RayActorError, ray.exceptions.ActorUnavailableError) as e:
                    # the actor died (killed, OOM, node lost): it restarts; the shard goes again
                    if attempt >= self.max_attempts:
                        raise RuntimeError(f"shard {si} failed {attempt} times; last: {type(e).__name__}: "
                                           f"{str(e)[:200]}") from None
                    self.retried += 1
                    submit(si, attempt + 1, (ai + 1) % n)
                    continue
                for k, v in stats.items():
                    self._stats[k] = self._stats.get(k, 0) + v
                for qid, name, pid, rep, row, scores in rows:
                    yield qid, name, pid, rep, row, {m: Score(*v) for m, v in scores.items()}
                if todo:
                    submit(todo.pop(0), 1)
        finally:
            if "llm" in self.limiters:
                try:
                    self.peak_llm = ray.get(self.limiters["llm"].peak_inflight.remote(), timeout=10)
                except Exception:
                    pass
            for a in self.actors + list(self.limiters.values()):
                try:
                    ray.kill(a)
                except Exception:
                    pass
