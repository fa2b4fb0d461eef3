"""How fast this machine embeds: the rate an ingest measured last, per embedder, kept in the workspace
(``cache/embed_rates.json``), so a cost line ("Embed 682 chunks: about 1 min") follows this machine and its load
rather than a quiet-machine constant."""
from __future__ import annotations

import json
import os
from pathlib import Path

RATES_FILE = "embed_rates.json"
# chunks/s on 2 quiet cores (docs/performance.md; e5: the ONNX Runtime int8 engine on ~128-token chunks)
QUIET_RATES = {"e5": 35.0, "use": 100.0, "hash": 5000.0}
# e5 tokens (cut to the window) per second on 2 quiet cores: ~5,000 whether passages are of 64 or 256 tokens
# (`ragwb bench --only embed`: 77.8 x 64 and 21.1 x 256)
QUIET_TOKEN_RATES = {"e5": 5000.0}


# a second core adds this much: texts side by side, a one-thread session each (e5 int8, 2 cores: 52.0 against 27.6
# passages/s of ~140 tokens, 26.4 against 13.6 of ~256; two intra-op threads on one text added 0.18-0.73)
PARALLEL_GAIN = 0.9


def _speed(threads: int) -> float:
    return 1.0 + PARALLEL_GAIN * (max(threads, 1) - 1)


def slowdown(others: float | None = None) -> tuple[float, float, int]:
    """(how much slower than quiet this machine embeds beside ``others`` runnable tasks of other processes (None:
    the 1-minute load now, nothing of ours running), that load, the cores). The engine takes the cores left (at least
    one thread) and shares the cores with the others: quiet speed / (its threads' speed x its share). A load of 6 on
    2 cores is 3.5x, not load/cores = 3.0 applied to a rate that already ran under it (issue 74)."""
    try:
        cores = os.cpu_count() or 1
        load = os.getloadavg()[0] if others is None else float(others)
    except OSError:
        load, cores = 0.0, os.cpu_count() or 1
    load = max(load, 0.0)
    threads = max(1, cores - int(round(load)))
    share = min(1.0, cores / (load + threads))
    return max(1.0, _speed(cores) / (_speed(threads) * share)), load, cores


class LoadSampler:
    """A load reading (``read``; the 1-minute load average by default) sampled every ``every`` seconds while work
    runs: its mean, low and high are what the work ran under, never one instant's reading. Used as a context
    manager, or with start() and stop()."""

    def __init__(self, every: float = 1.0, read=None):
        import threading

        self.every, self.samples, self._halt = every, [], threading.Event()
        self._read = read or (lambda: os.getloadavg()[0])
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self):
        while True:
            try:
                self.samples.append(self._read())
            except (OSError, ValueError, IndexError):
                return
            if self._halt.wait(self.every):
                return

    def start(self):
        self._thread.start()
        return self

    def stop(self):
        self._halt.set()
        self._thread.join()

    __enter__ = start

    def __exit__(self, *exc):
        self.stop()

    @property
    def mean(self) -> float:
        return sum(self.samples) / len(self.samples) if self.samples else os.getloadavg()[0]

    @property
    def low(self) -> float:
        return min(self.samples, default=self.mean)

    @property
    def high(self) -> float:
        return max(self.samples, default=self.mean)


class LoadOverIngest(LoadSampler):
    """The other processes' runnable tasks (``rag.ingest.cores.others_running``: this process's own threads are never a
    neighbour) sampled over an ingest's embedding: the load a measured rate ran under (an ingest at load ~6 kept
    10,454 tokens/s from one instant's reading, where 5,100-6,600 is the quiet figure)."""

    def __init__(self, every: float = 0.5):
        from rag.ingest.cores import others_running

        super().__init__(every, others_running)

    @property
    def others(self) -> float | None:
        return self.mean if self.samples else None


def duration_text(seconds: float) -> str:
    """"42 s", "3 min" (an unknown or endless time is said so)."""
    if seconds != seconds or seconds == float("inf"):
        return "an unknown time"
    return f"{seconds:.0f} s" if seconds < 90 else f"{seconds / 60:.0f} min"


def _stored(workspace: str | Path, key: str) -> float | None:
    """The quiet-equivalent rate ``keep_rate`` stored under ``key`` (an embedder, or ``embedder|tokens``)."""
    try:
        rate = float(json.loads((Path(workspace) / "cache" / RATES_FILE).read_text())[key])
    except (OSError, ValueError, KeyError, TypeError):
        return None
    return rate if rate > 0 else None


_LOAD_NOW: list = []  # [(monotonic time, reading)]: one reading serves the estimates of the next 2 s


def load_now(looks: int = 20, every: float = 0.005) -> float:
    """The other processes' runnable tasks now: the mean of ``looks`` readings ``every`` s apart of /proc's instant
    count (this process's threads excluded), what the next minutes share the cores with. Not the 1-minute load
    average, which lags a neighbour's going by a minute: a grid announced 20 s after four busy loops stopped said
    "about 2 min" for 34 s (issue 74). The load average where /proc cannot tell."""
    import time

    now = time.monotonic()
    if _LOAD_NOW and now - _LOAD_NOW[0][0] < 2.0:
        return _LOAD_NOW[0][1]
    try:
        from rag.ingest.cores import others_running

        seen = []
        for k in range(looks):
            if k:
                time.sleep(every)
            seen.append(others_running())
        load = sum(seen) / len(seen)
    except (OSError, ValueError, IndexError):
        try:
            load = os.getloadavg()[0]
        except OSError:
            load = 0.0
    _LOAD_NOW[:] = [(now, load)]
    return load


def _now(rate: float, src: str) -> tuple[float, str]:
    """A quiet-equivalent rate divided by the load now (``load_now``), once, and its source saying so."""
    slow, load, cores = slowdown(load_now())
    if slow > 1.05:
        src += f", slowed {slow:.1f}x for the load now ({load:.1f} on {cores} cores)"
    return max(rate / slow, 1e-6), src


def measured_rate(workspace: str | Path, embedder: str) -> tuple[float, str]:
    """(chunks per second, where it comes from): the last rate measured in this workspace when there is one (kept as
    its quiet-machine equivalent: the load it was measured under taken out once, by ``keep_rate``), else the
    quiet-machine figure; either divided by the run queue beyond the cores now (a load of 8 on 2 cores embeds about
    4x slower). The load is accounted for once: a rate measured under load is never slowed for load a second
    time."""
    rate = _stored(workspace, embedder)
    if rate is None:
        return _now(QUIET_RATES.get(embedder, 8.0), "a quiet 2-core figure")
    return _now(rate, "measured here last time")


def measured_token_rate(workspace: str | Path, embedder: str) -> tuple[float, str] | None:
    """(tokens per second now, where it comes from) when an ingest here measured one, else None (the caller prices
    chunks): kept as the quiet equivalent, divided by the load now, as ``measured_rate``."""
    rate = _stored(workspace, f"{embedder}|tokens")
    return None if rate is None else _now(rate, "tokens/s measured here last time")


def work_tokens(embedder: str, texts: list[str], fallback: list[int]) -> list[int]:
    """Tokens each text costs the embedder: e5's own count cut to its 512-token window (what the engine runs; the
    same unit ingest keeps its rate in), else the chunk's exact count."""
    if embedder == "e5" and texts:
        from rag.tokens import E5_WINDOW, e5_tokens

        return [max(1, min(n, E5_WINDOW)) for n in e5_tokens(list(texts))]
    return [max(1, int(n)) for n in fallback]


def estimate_seconds(workspace: str | Path, embedder: str, chunks: int, tokens: int) -> tuple[float, str]:
    """How long embedding ``chunks`` texts of ``tokens`` tokens in all takes now: by the token rate measured here
    when there is one (long leaves cost more than short chunks), else by the chunk rate."""
    per_token = measured_token_rate(workspace, embedder)
    if per_token is None and embedder in QUIET_TOKEN_RATES:
        per_token = _now(QUIET_TOKEN_RATES[embedder], "tokens/s, a quiet 2-core figure")
    if per_token is not None and tokens:
        return tokens / per_token[0], f"{per_token[0]:,.0f} {per_token[1]}"
    rate, src = measured_rate(workspace, embedder)
    return chunks / rate, f"{rate:,.1f} chunks/s ({src})"


def keep_rate(workspace: str | Path, embedder: str, chunks: int, seconds: float, tokens: int = 0,
              others: float | None = None) -> None:
    """Keep a measured rate for the next estimate, as its quiet-machine equivalent (the rate times the slowdown of
    the load it ran under), so the next estimate divides by the load then, once (too few chunks, or no time, is not
    a rate). Every ingest keeps one (``ragwb ingest``, a run's index, every config of a grid, the page)."""
    if chunks < 8 or seconds <= 0:
        return
    path = Path(workspace) / "cache" / RATES_FILE
    try:
        rates = json.loads(path.read_text()) if path.exists() else {}
        if not isinstance(rates, dict):
            rates = {}
    except (OSError, ValueError):
        rates = {}
    slow = slowdown(others)[0]  # the load measured over the ingest (``LoadOverIngest``) where there is one
    rates[embedder] = round(chunks / seconds * slow, 3)
    if tokens:
        rates[f"{embedder}|tokens"] = round(tokens / seconds * slow, 3)
    from rag.safeio import write_whole

    path.parent.mkdir(parents=True, exist_ok=True)
    write_whole(path, json.dumps(rates).encode())
