"""Typed parameter objects built from loose values (CLI strings, TOML, sliders), shared by the
strategy and memory-policy registries: unknown names and wrong types are errors naming the
valid ones, and every constructed object is validated."""
from __future__ import annotations

import dataclasses
import math


def build_params(cls, owner: str, kw: dict):
    """``cls(**kw)`` with each value converted to its field's type; ``owner`` names the strategy or
    policy in errors (``"strategy 'chunks'"``)."""
    defaults = cls()
    valid = [f.name for f in dataclasses.fields(cls)]
    bad = [k for k in kw if k not in valid]
    if bad:
        raise ValueError(f"unknown parameter(s) {bad} for {owner}; valid: {', '.join(valid)}")
    conv = {}
    for k, v in kw.items():
        typ = type(getattr(defaults, k))
        if isinstance(v, float) and not math.isfinite(v):
            raise ValueError(f"parameter {k!r} of {owner} must be a finite number, got {v!r}")
        if typ in (int, float) and isinstance(v, bool):  # true is not 1
            raise ValueError(f"parameter {k!r} of {owner} must be {typ.__name__}, got {v!r}")
        if typ is int and isinstance(v, float) and not v.is_integer():  # 4.5 is not silently 4
            raise ValueError(f"parameter {k!r} of {owner} must be a whole number, got {v!r}")
        if typ is int and isinstance(v, str):
            try:
                f = float(v)
            except ValueError:
                f = None
            if f is not None and (not math.isfinite(f) or not f.is_integer()):
                raise ValueError(f"parameter {k!r} of {owner} must be a whole number, got {v!r}")
        try:
            if isinstance(v, typ) and not (typ is int and isinstance(v, bool)):
                conv[k] = v
            elif typ is bool:  # "false" must not become True
                conv[k] = {"true": True, "false": False, "1": True, "0": False}[str(v).lower()]
            else:
                conv[k] = typ(v)
        except (TypeError, ValueError, KeyError, OverflowError):
            raise ValueError(f"parameter {k!r} of {owner} must be {typ.__name__}, got {v!r}") from None
    p = cls(**conv)
    p.validate()
    return p
