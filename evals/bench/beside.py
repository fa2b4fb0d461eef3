"""What ran beside a timed command: the machine's runnable tasks less the bench's own threads and the timed
command's process tree. A 1-minute load average counts the work being timed (an ingest's two e5 lanes read "load
1.6" on a quiet machine, so its row was never called quiet: issue 74, item 7); this counts only the neighbours."""
from __future__ import annotations

import subprocess
from pathlib import Path

_TIMED: list[int] = []  # the pid of the command being timed now


def tree_running(pid: int) -> int:
    """Running threads of ``pid`` and its descendants (an ingest's PDF workers included), from /proc."""
    children: dict[int, list[int]] = {}
    for p in Path("/proc").iterdir():
        if p.name.isdigit():
            try:
                stat = (p / "stat").read_text()
            except OSError:
                continue
            children.setdefault(int(stat[stat.rindex(")") + 2:].split()[1]), []).append(int(p.name))
    from rag.ingest.cores import running_threads

    n, todo = 0, [pid]
    while todo:
        q = todo.pop()
        todo += children.get(q, [])
        n += running_threads(q)
    return n


def beside_now() -> float:
    """Runnable tasks beside the timed command now (a LoadSampler's ``read``)."""
    from rag.ingest.cores import others_running

    return max(0, others_running() - (tree_running(_TIMED[0]) if _TIMED else 0))


def run_timed(cmd: list[str], **kw) -> subprocess.CompletedProcess:
    """``subprocess.run`` whose process tree ``beside_now`` leaves out while it runs (text output captured)."""
    timeout = kw.pop("timeout", None)
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, **kw)
    _TIMED[:] = [proc.pid]
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.communicate()
        raise
    finally:
        _TIMED.clear()
    return subprocess.CompletedProcess(cmd, proc.returncode, out, err)
