"""Errors a user acts on: each message names the culprit and what to do (one line from the CLI)."""
from __future__ import annotations

import os


class EndpointError(RuntimeError):
    """An endpoint (embeddings, chat) failed or answered something unusable; names it (redacted)."""


def env_number(name: str, default: float, integer: bool = False) -> float:
    """A number from an environment variable; a bad value is an error naming the variable."""
    raw = os.environ.get(name)
    if raw is None or not raw.strip():
        return default
    try:
        v = int(raw) if integer else float(raw)
    except ValueError:
        v = None
    if v is None or v != v or v < 0 or v == float("inf"):
        raise ValueError(f"environment variable {name}={raw!r} must be {'a whole number' if integer else 'a number'} "
                         ">= 0")
    return v
