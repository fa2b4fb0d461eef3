"""The workspace's writer lock (one writer at a time, readers never wait) and the time a process spent waiting for it (a run's time leaves it out)."""
from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path
from rag.errors import env_number


def lock_wait_default() -> float:
    """Seconds a writer waits for the workspace lock: RAGWB_LOCK_WAIT, else 600."""
    return env_number("RAGWB_LOCK_WAIT", 600.0)


class WorkspaceBusy(RuntimeError):
    """Another process is writing the workspace and did not finish within the wait."""


_WAITED = [0.0]  # seconds this process spent waiting for workspace locks (a run's time leaves them out)


def lock_wait_seconds() -> float:
    """Seconds this process has waited for workspace locks so far (a run subtracts its share from its time)."""
    return _WAITED[0]


class WorkspaceLock:
    """An OS file lock (``filelock``; released by the kernel if its holder is killed) plus a note of
    who holds it, so the second writer can say whom it waits for."""

    def __init__(self, root: Path, wait: float):
        from filelock import FileLock

        self.root, self.wait = Path(root), wait
        self.lock = FileLock(str(self.root / ".write.lock"))
        self.note = self.root / ".write.lock.json"

    def holder(self) -> str:
        try:
            h = json.loads(self.note.read_text())
            return f"pid {h['pid']} ({h['command']}, since {h['since']})"
        except (OSError, ValueError, KeyError):
            return "another process"

    def __enter__(self):
        from filelock import Timeout

        try:
            self.lock.acquire(timeout=0)
        except Timeout:
            who = self.holder()
            if self.wait <= 0:
                raise WorkspaceBusy(f"workspace {self.root} is being written by {who}; "
                                    "retry later or pass --wait SECONDS") from None
            print(f"waiting up to {self.wait:g}s for workspace {self.root}: written by {who}", file=sys.stderr)
            t = time.perf_counter()
            try:
                self.lock.acquire(timeout=self.wait)
            except Timeout:
                raise WorkspaceBusy(f"workspace {self.root} still being written by {self.holder()} after "
                                    f"{self.wait:g}s; pass --wait SECONDS to wait longer") from None
            finally:
                _WAITED[0] += time.perf_counter() - t
        self.note.write_text(json.dumps({"pid": os.getpid(), "command": " ".join(sys.argv[:3])[:120],
                                         "since": time.strftime("%H:%M:%S")}))
        return self

    def __exit__(self, *exc):
        self.note.unlink(missing_ok=True)
        self.lock.release()
