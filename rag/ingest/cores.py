"""What this machine has free now: the cores this process may use less the other processes' runnable tasks.
The e5 engine's thread count (rag/index/e5_onnx.py), the ingest's parse pool (rag/ingest/readers.py) and the load
sampler (rag/index/rates.py) read it; Linux's /proc, with the load average as the fallback elsewhere."""
from __future__ import annotations

import os
import time
from pathlib import Path


def running_threads(pid: int | str = "self") -> int:
    """Threads of one process in the running (or runnable) state now, from /proc (0 when it is gone)."""
    n = 0
    for task in Path(f"/proc/{pid}/task").glob("*"):
        try:
            stat = (task / "stat").read_text()
        except OSError:
            continue
        n += stat[stat.rindex(")") + 2] == "R"
    return n


def _own_running() -> int:
    return max(running_threads(), 1)


def others_running() -> int:
    """Runnable tasks of other processes now: /proc/loadavg's runnable count less this process's running threads
    (a BLAS pool still spinning from numpy, or this thread, is not a neighbour)."""
    return max(int(Path("/proc/loadavg").read_text().split()[3].split("/")[0]) - _own_running(), 0)


def free_cores() -> int:
    """Cores not busy with other work now: the cores this process may use less the tasks running on them at this
    moment (/proc/loadavg's runnable count, this thread excluded; the 1-minute average lags a minute behind a
    busy neighbour), at least 1."""
    try:
        n = len(os.sched_getaffinity(0))
    except AttributeError:
        n = os.cpu_count() or 1
    try:  # the fewest of three looks 5 ms apart (a task that runs for an instant is not a neighbour), less this
        looks = []  # process's own runnable threads (a BLAS pool still spinning from numpy is not a neighbour)
        for k in range(3):
            if k:
                time.sleep(0.005)
            looks.append(others_running())
        running = min(looks)
    except (OSError, ValueError, IndexError):
        try:
            running = int(os.getloadavg()[0])
        except OSError:
            running = 0
    return max(1, min(n, n - max(running, 0)))
