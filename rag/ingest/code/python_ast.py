"""Python's own ``ast`` as a code parser: the floor when tree-sitter grammars are not installed."""
from __future__ import annotations

import ast

from .base import CodeParseError, Def, register_parser

_COMPOUND = (ast.If, ast.Try, ast.With, ast.AsyncWith, ast.For, ast.AsyncFor, ast.While)
if hasattr(ast, "TryStar"):
    _COMPOUND += (ast.TryStar,)


@register_parser("python-ast")
def parse(text: str, language: str = "python") -> list[Def]:
    if language != "python":
        raise CodeParseError(f"python-ast reads Python, not {language}")
    try:
        tree = ast.parse(text)
    except SyntaxError as e:
        raise CodeParseError(f"line {e.lineno}: {e.msg}") from None
    except ValueError as e:  # e.g. NUL bytes
        raise CodeParseError(str(e)) from None
    return _defs(tree.body, "")


def _defs(body: list, prefix: str, in_class: bool = False) -> list[Def]:
    out = []
    for node in body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            first = min([node.lineno] + [d.lineno for d in node.decorator_list]) - 1
            name = prefix + node.name
            body = node.body
            if (body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant)
                    and isinstance(body[0].value.value, str)):
                body = body[1:]  # the docstring stays with the signature: no cut before it
            stmts = sorted({s.lineno - 1 for s in body})
            if isinstance(node, ast.ClassDef):
                out.append(Def(name, "class", first, node.end_lineno - 1, _defs(node.body, name + ".", True), stmts,
                               first))
            else:
                out.append(Def(name, "method" if in_class else "function", first, node.end_lineno - 1, [], stmts,
                               first))
        elif isinstance(node, _COMPOUND):  # definitions under `if TYPE_CHECKING:`, `try:` ... still count
            for part in ("body", "orelse", "finalbody", "handlers"):
                sub = getattr(node, part, None) or []
                inner = []
                for s in sub:
                    inner.extend(s.body if isinstance(s, ast.ExceptHandler) else [s])
                out.extend(_defs(inner, prefix, in_class))
    return out
