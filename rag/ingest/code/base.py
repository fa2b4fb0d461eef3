"""What every code parser shares: ``Def``, ``CodeParse``, ``CodeParseError`` and the registry ``PARSERS``
(``@register_parser``). The parsers beside this file import from here, never from the package's
``__init__`` (which imports the parsers to register them)."""
from __future__ import annotations

import re
from dataclasses import dataclass, field


@dataclass
class Def:
    """A definition: 0-based first and last line (inclusive, decorators and leading comments in),
    qualified name (``Class.method``), kind, nested definitions (a class's methods) and the lines
    where its body's statements start (where a long definition may be split)."""
    name: str
    kind: str
    first: int
    last: int
    children: list["Def"] = field(default_factory=list)
    statements: list[int] = field(default_factory=list)
    # the definition's own first line (decorators in, its leading comment and joined overloads out): the
    # implementation's signature follows; -1 = ``first``
    head: int = -1
    # where the overload signatures joined above it start (each with its own comment): a split cuts there first
    overloads: list[int] = field(default_factory=list)

    @property
    def container(self) -> bool:
        return bool(self.children) or self.kind == "class"


@dataclass
class CodeParse:
    defs: list[Def]
    parser: str  # the PARSERS name that produced them
    warning: str = ""  # why the file fell back to line windows ('' when it did not)


class CodeParseError(ValueError):
    """A file a parser could not read (syntax error): the message says where."""


_COMMENT_LINE = re.compile(r"^\s*(//|/\*|\*|#(\s|$|#)|@|--|;)")


# --------------------------------------------------------------------------- registry

PARSERS: dict[str, object] = {}  # name -> parse(text, language) -> list[Def]; raises CodeParseError


def register_parser(name: str):
    def deco(fn):
        PARSERS[name] = fn
        return fn
    return deco
