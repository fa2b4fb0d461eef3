"""tree-sitter as a code parser: compiled grammars from ``tree-sitter-language-pack``.

Pinned below 1.0 in pyproject.toml: from 1.0 the package downloads its grammars on first use,
which an offline machine cannot do; the 0.x wheels ship them compiled.
"""
from __future__ import annotations

import functools
import re

from .base import CodeParseError, Def, register_parser

# node type -> kind, per language. A "class" is a container: functions inside it are its methods.
DEFS = {
    "python": {"function_definition": "function", "class_definition": "class"},
    "javascript": {"function_declaration": "function", "generator_function_declaration": "function",
                   "class_declaration": "class", "method_definition": "function"},
    "go": {"function_declaration": "function", "method_declaration": "function", "type_declaration": "type"},
    "java": {"class_declaration": "class", "interface_declaration": "class", "enum_declaration": "class",
             "record_declaration": "class", "method_declaration": "function", "constructor_declaration": "function"},
    "rust": {"function_item": "function", "impl_item": "class", "trait_item": "class", "mod_item": "class",
             "struct_item": "type", "enum_item": "type", "type_item": "type", "macro_definition": "function"},
    "c": {"function_definition": "function", "struct_specifier": "type", "enum_specifier": "type"},
    "cpp": {"function_definition": "function", "class_specifier": "class", "struct_specifier": "class",
            "namespace_definition": "class", "enum_specifier": "type"},
    "ruby": {"method": "function", "singleton_method": "function", "class": "class", "module": "class"},
    "bash": {"function_definition": "function"},
}
DEFS["typescript"] = {**DEFS["javascript"], "abstract_class_declaration": "class", "interface_declaration": "type",
                      "type_alias_declaration": "type", "enum_declaration": "type",
                      "function_signature": "function", "abstract_method_signature": "function",
                      "method_signature": "function",
                      # `namespace A {}` and `declare module "x" {}`: members are qualified (`A.Props`)
                      "internal_module": "class", "module": "class"}
DEFS["tsx"] = DEFS["typescript"]
_WRAPPERS = {"decorated_definition", "export_statement", "template_declaration"}  # the wrapper's lines count
_DECLS = {"lexical_declaration", "variable_declaration"}  # const f = () => ... is a function
_FUNC_VALUES = {"arrow_function", "function_expression", "function", "generator_function"}
_NAMESPACES = {"namespace_definition", "mod_item", "module", "internal_module"}  # containers that are not classes
# a declaration without a body: TS overloads (`m(a: string): void;` above `m(a: any) {...}`) join the body's chunk
_SIGNATURES = {"function_signature", "method_signature"}
_NAME_LEAVES = {"identifier", "field_identifier", "qualified_identifier", "type_identifier", "operator_name",
                "destructor_name", "property_identifier", "constant", "scoped_identifier"}


@functools.lru_cache(maxsize=None)
def _parser(language: str):
    try:
        from tree_sitter_language_pack import get_parser
    except ImportError:
        return None
    try:
        return get_parser(language)
    except Exception:  # a grammar missing, or a 1.x pack that would download it: no network here
        return None


def has_grammar(language: str) -> bool:
    return language in DEFS and _parser(language) is not None


@register_parser("tree-sitter")
def parse(text: str, language: str) -> list[Def] | tuple[list[Def], str]:
    p = _parser(language) if language in DEFS else None
    if p is None:
        raise CodeParseError(f"no tree-sitter grammar for {language}")
    src = text.encode("utf-8")
    root = p.parse(src).root_node
    if root.has_error and language in ("typescript", "tsx"):
        root, src = _reparse_call_signatures(p, root, src)
    if root.has_error and language in ("c", "cpp"):
        root, src = _reparse_macros(p, root, src)
    defs = _visit(root, src, language, "", False)
    if root.has_error:
        # tree-sitter recovers around a syntax it does not know (TS 4.7 `interface Box<out T>` in a pinned
        # grammar): every definition outside an ERROR node is kept, and only the broken region becomes a
        # "lines" definition (line windows); parse_code says so, per file, with the count kept
        bad = _first_error(root)
        where = f"line {bad.start_point[0] + 1}" if bad is not None else "somewhere"
        if bad is not None:  # which construct: the line's start, so a gap says what the grammar did not read
            line = src.split(b"\n")[bad.start_point[0]].decode("utf-8", "replace").strip()
            line = "".join(ch if ch.isprintable() else "?" for ch in line[:60]) + ("..." if len(line) > 60 else "")
            where += f" ({line})" if line else ""
        if not any(_real(d) for d in defs):
            raise CodeParseError(f"syntax error at {where}")
        # read as a grammar gap, not a failure: nothing is lost (the note says what was kept and how)
        return _trim_broken(defs), f"grammar gap at {where}"
    return defs


# A line that opens with a generic call signature (`<A>(fa: F<A>): F<A>` in an interface or a type literal),
# the member above it ended by a newline only: the pinned TS grammar reads `F<A>\n<A>(` as one expression and
# the rest of the file breaks (fp-ts, mobx). A `;` in the line's first blank column is a separator TypeScript
# accepts there; lines, and so every definition's line span, are unchanged.
_CALL_SIGNATURE_LINE = re.compile(rb"(?m)^([ \t]*)[ \t]<")
# the member above ends a type (a name, `>`, `)`, `]`, `}`, `?`): after an operator, an opener or an arrow (a
# curried generic function, `(n) =>\n<A>(as: A[]) => ...`) the `<` continues it
_ENDS_A_TYPE = re.compile(rb"(?<![=-])[\w$>)\]}?]\s*$")


def _reparse_call_signatures(parser, root, src: bytes):
    """Parse again with a separator before each generic call signature the newline left unseparated; keep the
    parse with fewer broken nodes (the original when the separators do not help)."""
    lines = src.split(b"\n")
    changed, prev = False, b""
    for i, line in enumerate(lines):
        m = _CALL_SIGNATURE_LINE.match(line)
        if m and _ENDS_A_TYPE.search(prev):
            indent = m.group(1)
            lines[i] = indent + b";" + line[len(indent) + 1:]
            changed = True
        stripped = line.strip()
        if stripped and not stripped.startswith((b"//", b"/*", b"*")):
            prev = line
    if not changed:
        return root, src
    patched = b"\n".join(lines)
    again = parser.parse(patched).root_node
    return (again, patched) if _broken_count(again) < _broken_count(root) else (root, src)


# C and C++ declarations through their macros (issue 86: libusb's `int LIBUSB_CALL libusb_open(...);` broke the
# grammar, 140 of libusb.h's 263 chunks were single lines). A calling-convention, export or attribute macro between
# the return type and the name (or before the declaration) is blanked, columns and lines kept, and the file parsed
# again; the parse with fewer broken nodes is kept. Which all-caps words are such macros: the file's own
# `#define`s of nothing or of another such word, and the names that say so themselves.
_MACRO_WORD = rb"[A-Z][A-Z0-9_]{2,}"
_MACRO_NAMED = re.compile(rb"(?:_CALL|_API|_EXPORT(?:ED)?|_IMPORT|_EXTERN|_INLINE|_DEPRECATED|CALLBACK|WINAPI|"
                          rb"APIENTRY|_CDECL|_STDCALL|_FASTCALL|_NORETURN|_PUBLIC|_HIDDEN|_LOCAL|_VISIBLE|EXTERN_C|"
                          rb"_NONNULL|_NULLABLE|_WARN_UNUSED(?:_RESULT)?|_PURE|_CONST_FN)$")
_DEFINED_EMPTY = re.compile(rb"(?m)^[ \t]*#[ \t]*define[ \t]+(" + _MACRO_WORD + rb")[ \t]*(?:"
                            + _MACRO_WORD + rb"|__\w+(?:\(\([^\n]*\)\))?|)[ \t]*(?://[^\n]*|/\*[^\n]*)?$")
# the word after a type (or first on the line) and before a declarator: `int MACRO name(`, `MACRO int name(`,
# `const struct x * MACRO name(`; a macro call `MACRO(args)` likewise
_BEFORE_NAME = re.compile(rb"(?<![\w#])(" + _MACRO_WORD + rb")(\s*\([^()\n]*\))?(?=[ \t*]+[A-Za-z_]\w*[ \t*]*[(\w])")


def _reparse_macros(parser, root, src: bytes):
    known = set(_DEFINED_EMPTY.findall(src))

    def blank(m):
        word = m.group(1)
        # a macro call right before a declaration on its line (`DEPRECATED_FOR(x) int f(`) can only be an attribute
        if word in known or _MACRO_NAMED.search(word) or m.group(2):
            return b" " * len(m.group(0))
        return m.group(0)

    lines = src.split(b"\n")
    patched = b"\n".join(_BEFORE_NAME.sub(blank, x) if not x.lstrip().startswith(b"#") else x for x in lines)
    if patched == src:
        return root, src
    again = parser.parse(patched).root_node
    return (again, patched) if _broken_count(again) < _broken_count(root) else (root, src)


def _broken_count(root) -> int:
    count, stack = 0, [root]
    while stack:
        n = stack.pop()
        if n.type == "ERROR" or n.is_missing:
            count += 1
        stack.extend(c for c in n.children if c.has_error or c.is_missing)
    return count


def _real(d: Def) -> bool:
    return d.kind != "lines" or any(_real(c) for c in d.children)


def _trim_broken(defs: list[Def]) -> list[Def]:
    """A broken region ("lines") gives up the lines it shares with a definition beside it (an ERROR node can
    end on the line where the next definition starts): a kept definition always owns its lines."""
    real = sorted((d for d in defs if d.kind != "lines"), key=lambda d: d.first)
    out = []
    for d in defs:
        if d.kind != "lines":
            d.children = _trim_broken(d.children)
            out.append(d)
            continue
        first, last = d.first, d.last
        for r in real:
            if r.last < first or r.first > last:
                continue
            if r.first <= first:
                first = r.last + 1
            else:
                last = min(last, r.first - 1)
        if first <= last:
            out.append(Def("", "lines", first, last))
    return out


def _first_error(node):
    if node.type == "ERROR" or node.is_missing:
        return node
    for c in node.children:
        if c.has_error:
            found = _first_error(c)
            if found is not None:
                return found
    return None


def _text(node, src: bytes) -> str:
    return src[node.start_byte:node.end_byte].decode("utf-8", "replace")


def strip_generics(name: str) -> str:
    """``RawOccupiedEntryMut<'a, K, V, S>`` -> ``RawOccupiedEntryMut``; ``Map<K, Vec<V>>`` -> ``Map`` (the full
    signature stays in the chunk's header and text)."""
    for _ in range(8):  # nesting levels
        out = re.sub(r"<[^<>]*>", "", name)
        if out == name:
            break
        name = out
    return name.strip() or name


def _name(node, src: bytes, language: str) -> str:
    n = node.child_by_field_name("name")
    if n is not None:
        return _text(n, src)
    if node.type == "impl_item":  # `impl<'a, K, V> Entry<'a, K, V>` is named `Entry`: what a person types
        t = node.child_by_field_name("type")
        return strip_generics(_text(t, src)) if t is not None else "impl"
    if node.type == "type_declaration":  # Go: type T struct {...}
        for c in node.named_children:
            if c.type in ("type_spec", "type_alias") and c.child_by_field_name("name") is not None:
                return _text(c.child_by_field_name("name"), src)
    d = node.child_by_field_name("declarator")  # C/C++: the name is inside the declarator chain
    while d is not None and d.type not in _NAME_LEAVES:
        nxt = d.child_by_field_name("declarator")
        if nxt is None:
            nxt = next((c for c in d.named_children if c.type in _NAME_LEAVES), None)
        d = nxt
    return _text(d, src) if d is not None else "<anonymous>"


def _receiver(node, src: bytes) -> str:
    """Go: the type a method belongs to (``func (s *Server) Run()`` -> ``Server``)."""
    r = node.child_by_field_name("receiver")
    stack = [r] if r is not None else []
    while stack:
        n = stack.pop(0)
        if n.type == "type_identifier":
            return _text(n, src)
        stack.extend(n.named_children)
    return ""


_COMMENTS = {"comment", "line_comment", "block_comment"}


def _statements(node) -> list[int]:
    """Lines where the body's statements start (a long definition is split there). A comment goes with the
    statement right below it (no cut between them), and a docstring with the signature (no cut before it)."""
    body = node.child_by_field_name("body")
    while body is not None and body.named_child_count == 1 and body.named_children[0].type in (
            "statement_list", "block", "declaration_list", "field_declaration_list", "class_body"):
        body = body.named_children[0]
    if body is None:
        return []
    out, prev = set(), None
    for i, c in enumerate(body.named_children):
        docstring = i == 0 and c.type == "expression_statement" and c.named_child_count == 1 and \
            c.named_children[0].type in ("string", "concatenated_string")
        glued = prev is not None and prev.type in _COMMENTS and c.start_point[0] <= _last_line(prev) + 1
        if not docstring and not glued:
            out.add(c.start_point[0])
        prev = c
    return sorted(out)


def _visit(node, src: bytes, language: str, prefix: str, in_class: bool) -> list[Def]:
    table = DEFS[language]
    out = []
    signatures: set[int] = set()  # ids of the bodiless overload signatures in `out`
    for c in node.named_children:
        if c.type == "ERROR":  # what the grammar could not read: line windows, nothing inside trusted
            out.append(Def("", "lines", c.start_point[0], _last_line(c)))
            continue
        inner, kind = c, table.get(c.type)
        if c.type in _WRAPPERS:  # decorators, `export`, `template <...>`: the definition inside
            inner = next((x for x in c.named_children if x.type in table or x.type in _DECLS), None)
            kind = table.get(inner.type) if inner is not None else None
            if inner is not None and inner.type in _DECLS:
                kind = "decl"
        elif c.type in _DECLS:
            kind = "decl"
        if kind == "decl":  # const f = () => {...}
            dec = next((x for x in inner.named_children if x.type == "variable_declarator"), None)
            val = dec.child_by_field_name("value") if dec is not None else None
            if val is None or val.type not in _FUNC_VALUES:
                continue
            name = prefix + _text(dec.child_by_field_name("name"), src)
            out.append(Def(name, "method" if in_class else "function", c.start_point[0], _last_line(c),
                           [], _statements(val), c.start_point[0]))
            continue
        if kind is None and language in ("c", "cpp") and c.type in ("declaration", "field_declaration") \
                and _declares_function(c):
            kind = "function"  # a prototype (a header's API): its symbol, as people look it up (issue 86)
        if kind is None:
            if c.named_child_count and c.type not in ("comment", "string", "block_comment", "line_comment"):
                # definitions inside `if`, `#ifdef`, `extern "C" {}` ... still count
                out.extend(_visit(c, src, language, prefix, in_class))
            continue
        if language in ("c", "cpp") and kind in ("type", "class") and inner.child_by_field_name("body") is None:
            continue  # `struct x;` or a parameter's `struct x *`: a use of the type, not its definition (issue 86)
        name = _name(inner, src, language)
        if inner.type == "method_declaration" and language == "go":
            recv = _receiver(inner, src)
            name, kind_here = (f"{recv}.{name}" if recv else name), "method"
        elif kind == "function":
            kind_here = "method" if in_class else "function"
        else:
            kind_here = kind
        if inner.type in _NAMESPACES and name[:1] in "\"'":  # declare module "pkg": the name without quotes
            name = name[1:-1]
        qual = prefix + name
        if kind == "class":
            space = inner.type in _NAMESPACES
            body = inner.child_by_field_name("body") or inner
            children = _visit(body, src, language, qual + ".", not space)
            out.append(Def(qual, "module" if space else "class", c.start_point[0], _last_line(c), children,
                           _statements(inner), c.start_point[0]))
        else:
            out.append(Def(qual, kind_here, c.start_point[0], _last_line(c), [], _statements(inner),
                           c.start_point[0]))
            if inner.type in _SIGNATURES:
                signatures.add(id(out[-1]))
    return _join_overloads(out, signatures)


def _declares_function(node) -> bool:
    """A C/C++ declaration whose declarator is a function's (through pointers and parentheses): a prototype."""
    d = node.child_by_field_name("declarator")
    while d is not None:
        if d.type == "function_declarator":
            return True
        d = d.child_by_field_name("declarator")
    return False


def _join_overloads(defs: list[Def], signatures: set[int]) -> list[Def]:
    """Overload signatures join the definition of the same name that follows them (its chunk starts at the
    first signature); a signature with no body after it (a .d.ts, an abstract member) stays its own."""
    out: list[Def] = []
    pending: list[Def] = []
    for d in defs:
        if pending and (d.name != pending[0].name or d.kind != pending[0].kind):
            out.extend(pending)
            pending = []
        if id(d) in signatures:
            pending.append(d)
            continue
        if pending:
            d.first = pending[0].first
            d.overloads = [x.first for x in pending]  # the chunker walks each up over its own comment
            pending = []
        out.append(d)
    return out + pending


def _last_line(node) -> int:
    """The last line a node occupies (a node ending at column 0 ended on the line before)."""
    row, col = node.end_point
    return row - 1 if col == 0 and row > node.start_point[0] else row
