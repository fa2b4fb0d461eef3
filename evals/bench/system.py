"""`ragwb bench --only system`: the runner's overhead over a deployed service's latency (a sleepy asyncio service in its own process)."""
from __future__ import annotations

import json
import time
from pathlib import Path


_SERVICE = r"""
import asyncio, json, socket, sys, time

latency = float(sys.argv[1])
body = sys.stdin.buffer.read()
seen = []  # arrival times (time.monotonic: one clock for every process on the machine)


async def handle(reader, writer):
    # HTTP/1.1 keep-alive, headers and body in one write, TCP_NODELAY: a deployed service's own cost per request
    # (~0.1 ms on an event loop) is not counted as the client's (a thread-per-connection server parsing 16
    # requests at once on its own GIL spread each wave's arrivals by several ms)
    writer.get_extra_info("socket").setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    try:
        while True:
            head = await reader.readuntil(b"\r\n\r\n")
            lines = head.split(b"\r\n")
            n = next((int(x.split(b":", 1)[1]) for x in lines[1:] if x.lower().startswith(b"content-length:")), 0)
            if n:
                await reader.readexactly(n)
            method = lines[0].split(b" ", 1)[0]
            if method == b"POST":
                seen.append(time.monotonic())
                await asyncio.sleep(latency)
                data = body
            elif method == b"DELETE":
                seen.clear()
                data = b"[]"
            else:
                data = json.dumps(seen).encode()
            writer.write(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n"
                         % len(data) + data)
            await writer.drain()
    except (asyncio.IncompleteReadError, ConnectionError):
        pass
    finally:
        writer.close()


async def main():
    srv = await asyncio.start_server(handle, "127.0.0.1", 0, backlog=256)
    print(srv.sockets[0].getsockname()[1], flush=True)
    await srv.serve_forever()


asyncio.run(main())
"""


class _SleepyService:
    """A deployed service for the overhead figure: sleeps ``latency`` seconds per request on 127.0.0.1, then
    answers with one context named by its page id (so locating it costs a lookup, as a good service's does).
    It runs in its own process, as a deployed service does: in the runner's process its request parsing took the
    runner's GIL (~1.5 ms a request, 16 of them a wave) and was counted as the runner's overhead; and on an
    asyncio loop, so its own per-request cost is not the client's either."""

    def __init__(self, latency: float, page_id: str, text: str):
        import subprocess
        import sys

        body = json.dumps({"answer": "It is in the context [1].", "contexts": [{"text": text, "page_id": page_id}],
                           "usage": {"prompt_tokens": 300, "completion_tokens": 8}}).encode()
        self.proc = subprocess.Popen([sys.executable, "-c", _SERVICE, str(latency)], stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE)
        self.proc.stdin.write(body)
        self.proc.stdin.close()
        port = int(self.proc.stdout.readline())
        self.base = f"http://127.0.0.1:{port}"
        self.url = self.base + "/ask"

    @property
    def arrivals(self) -> list[float]:
        import httpx

        return httpx.get(self.base + "/arrivals", timeout=30).json()

    def reset(self) -> None:
        import httpx

        httpx.delete(self.base + "/arrivals", timeout=30)

    def close(self):
        self.proc.kill()
        self.proc.wait()


def system_overhead(root: Path, latency: float = 0.2, cases=((100, 1), (200, 4), (200, 16), (600, 16))) -> dict:
    """``--system`` against a 127.0.0.1 service that sleeps ``latency`` s, at concurrency C: wall time vs the
    ideal N x latency / C, the start (until the first request) apart. Scored on every metric but the offline
    support scorer (its e5 time is the scorer's, not the path's: `ragwb bench --only support`)."""
    from rag.ingest.corpora import load_bundled
    from rag.answer.systems import SystemConfig

    from evals.run.runner import RunConfig, run_evaluation

    ds = load_bundled("squad2")
    pg = ds.documents[0].pages[0]
    svc = _SleepyService(latency, pg.page_id, pg.text)
    out = {"latency_s": latency, "target": "overhead <= 5% beyond a start under 1 s", "cases": []}
    scorers = ("answer", "abstention", "citation", "retrieval", "cost")
    try:
        run_evaluation(RunConfig(dataset="squad2", limit=1, scorers=scorers, use_cache=False,
                                 systems=(SystemConfig("warm", svc.url, max_concurrency=1),)),
                       workspace=root, progress=False)  # the index is built once, as in any workspace
        for n, c in cases:
            svc.reset()
            cfg = RunConfig(dataset="squad2", limit=n, scorers=scorers, use_cache=False,
                            systems=(SystemConfig("svc", svc.url, timeout=30, max_concurrency=c),))
            t = time.monotonic()
            run_evaluation(cfg, workspace=root, progress=False)
            end = time.monotonic()
            wall = end - t
            arrivals = sorted(svc.arrivals)
            start = (arrivals[0] - t) if arrivals else float("nan")
            ideal = n * latency / c
            # the tail: the end of the run minus the last reply (a short run hides a fixed tail in its mean)
            tail = end - (arrivals[-1] + latency) if arrivals else float("nan")
            waves = -(-n // c) * latency  # what a perfect client reaches: N/C rounded up to whole waves
            # where the rest goes: the first wave leaving (C requests' client work, one after another on the GIL)
            # and each later wave starting late (a reply's slot sends its next request)
            firsts = [arrivals[k] for k in range(0, len(arrivals), c)]
            slips = sorted(b - a - latency for a, b in zip(firsts, firsts[1:]))
            out["cases"].append({"requests": n, "concurrency": c, "wall_s": wall, "start_s": start,
                                 "ideal_s": ideal, "overhead": (wall - start - ideal) / ideal, "tail_s": tail,
                                 "waves_s": waves, "overhead_vs_waves": (wall - start - waves) / waves,
                                 "floor_vs_ideal": (waves - ideal) / ideal,
                                 "first_wave_ms": (arrivals[min(c, len(arrivals)) - 1] - arrivals[0]) * 1000
                                 if arrivals else float("nan"),
                                 "wave_slip_ms": slips[len(slips) // 2] * 1000 if slips else float("nan")})
        out["client_alone"] = {kind: _client_alone(svc, kind, latency) for kind in ("SystemClient", "http.client")}
    finally:
        svc.close()
    return out


def _client_alone(svc: _SleepyService, kind: str, latency: float, n: int = 200, c: int = 16) -> dict:
    """N requests at concurrency C with no runner around them (no scoring, no store): ``SystemClient.ask``
    (httpx behind the guard), or the standard library's ``http.client`` on one keep-alive connection per thread,
    what the cheapest Python client costs. Against whole waves: the client's own share of the overhead."""
    import http.client
    import threading
    from concurrent.futures import ThreadPoolExecutor, as_completed
    from urllib.parse import urlsplit

    from rag.answer.systems import SystemClient, SystemConfig

    if kind == "SystemClient":
        cli = SystemClient(SystemConfig("alone", svc.url, timeout=30, max_concurrency=c), use_cache=False)
        ask = lambda i: cli.ask(f"question {i}", f"q{i}")  # noqa: E731
    else:
        u, local = urlsplit(svc.url), threading.local()

        def ask(i):
            con = getattr(local, "con", None) or http.client.HTTPConnection(u.hostname, u.port, timeout=30)
            local.con = con
            con.request("POST", u.path, body=json.dumps({"question": f"question {i}"}).encode(),
                        headers={"Content-Type": "application/json"})
            return json.loads(con.getresponse().read())
    ask(-1)  # connections and imports warm
    svc.reset()
    t = time.monotonic()
    with ThreadPoolExecutor(c) as ex:
        for f in as_completed([ex.submit(ask, i) for i in range(n)]):
            f.result()
    end = time.monotonic()
    arrivals = sorted(svc.arrivals)
    waves = -(-n // c) * latency
    spread = [arrivals[k + c - 1] - arrivals[k] for k in range(0, n - c + 1, c)]
    return {"requests": n, "concurrency": c, "overhead_vs_waves": (end - arrivals[0] - waves) / waves,
            "wave_spread_ms_last": spread[-1] * 1000, "wave_spread_ms_first": spread[0] * 1000}
