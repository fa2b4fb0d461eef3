"""Files written whole: a temporary file beside the target, then one atomic replace, so another process (a
reader, a second ingest) never sees half of one. Every cache and snapshot the workspace keeps goes through here."""
from __future__ import annotations

import os
import threading
from pathlib import Path


def write_whole(path: Path, data: bytes) -> None:
    """``data`` at ``path`` all at once (the temporary name is this process's and thread's: two writers of one
    file never share one)."""
    tmp = path.with_name(f"{path.name}.{os.getpid()}.{threading.get_ident()}.tmp")
    tmp.write_bytes(data)
    os.replace(tmp, path)
