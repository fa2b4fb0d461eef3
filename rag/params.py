"""Typed parameter objects built from loose values (CLI strings, TOML, sliders), shared by the
strategy and memory-policy registries: unknown names and wrong types are errors naming the
valid ones, and every constructed object is validated."""
from __future__ import annotations

import dataclasses


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
        try:
            if isinstance(v, typ):
                conv[k] = v
            elif typ is bool:  # "false" must not become True
                conv[k] = {"true": True, "false": False, "1": True, "0": False}[str(v).lower()]
            else:
                conv[k] = typ(v)
        except (TypeError, ValueError, KeyError):
            raise ValueError(f"parameter {k!r} of {owner} must be {typ.__name__}, got {v!r}") from None
    p = cls(**conv)
    p.validate()
    return p
