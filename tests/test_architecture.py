"""The house as docs/architecture.md draws it: no import circles, rag never imports evals, and every
arrow between rooms points down a floor (or sideways to a floor's shared pieces)."""
from __future__ import annotations

import ast
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]

# the floors of docs/architecture.md, lowest first; a room may import its own floor's or lower floors' rooms
FLOORS = [
    {"rag"},  # the shared small pieces at rag/ top level (models, errors, tokens, params, ...)
    {"rag.llm"}, {"rag.ingest"}, {"rag.index"}, {"rag.strategies"}, {"rag.answer"},
    {"rag.api", "rag.extend"},
    {"evals", "evals.store", "evals.stats"}, {"evals.score"}, {"evals.analyze"}, {"evals.run"}, {"evals.report"},
    {"evals.cli", "evals.interactive", "evals.bench", "evals.generate", "evals.workbench"},
]
FLOOR_OF = {room: i for i, rooms in enumerate(FLOORS) for room in rooms}


def modules() -> dict[str, tuple[Path, bool]]:
    out = {}
    for pkg in ("rag", "evals"):
        for f in sorted((REPO / pkg).rglob("*.py")):
            parts = f.relative_to(REPO).with_suffix("").parts
            is_pkg = parts[-1] == "__init__"
            out[".".join(parts[:-1] if is_pkg else parts)] = (f, is_pkg)
    return out


def import_graph() -> dict[str, set[str]]:
    """Module -> the project modules it imports (lazy imports inside functions included)."""
    mods = modules()

    def resolve(m: str) -> str:
        while m not in mods and "." in m:
            m = m.rsplit(".", 1)[0]
        return m

    graph: dict[str, set[str]] = {}
    for mod, (f, is_pkg) in mods.items():
        deps = set()
        for node in ast.walk(ast.parse(f.read_text())):
            if isinstance(node, ast.ImportFrom):
                if node.level:
                    base = mod.split(".") if is_pkg else mod.split(".")[:-1]
                    base = base[:len(base) - (node.level - 1)]
                    target = ".".join(base + ([node.module] if node.module else []))
                else:
                    target = node.module or ""
                if target.split(".")[0] in ("rag", "evals"):
                    for a in node.names:
                        sub = f"{target}.{a.name}"
                        deps.add(resolve(sub if sub in mods else target))
            elif isinstance(node, ast.Import):
                deps.update(resolve(a.name) for a in node.names if a.name.split(".")[0] in ("rag", "evals"))
        deps.discard(mod)
        graph[mod] = deps
    return graph


def room(mod: str) -> str:
    parts = mod.split(".")
    two = ".".join(parts[:2])
    return two if two in FLOOR_OF else parts[0]


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    index, low, stack, on, found, counter = {}, {}, [], set(), [], [0]

    def visit(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in graph.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                found.append(sorted(comp))

    for v in graph:
        if v not in index:
            visit(v)
    return found


def test_no_import_circles():
    assert cycles(import_graph()) == []


def test_the_cycle_finder_sees_a_circle():
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]


def test_every_module_is_in_a_room_on_a_floor():
    homeless = sorted(m for m in modules() if room(m) not in FLOOR_OF)
    assert homeless == []


def test_arrows_point_down():
    up = sorted(f"{a} -> {b}" for a, deps in import_graph().items() for b in deps
                if FLOOR_OF[room(b)] > FLOOR_OF[room(a)])
    assert up == []


def test_rag_never_imports_evals():
    assert sorted(f"{a} -> {b}" for a, deps in import_graph().items() if a.startswith("rag")
                  for b in deps if b.startswith("evals")) == []


MAX_MODULE_LINES = 600  # the limits a reviewer would flag (docs/architecture.md, "Rooms that outgrow themselves")
MAX_FUNCTION_LINES = 120
MAX_LOOSE_RAG_MODULES = 8
MAX_LOOSE_EVALS_MODULES = 6  # issue 83: the Workbench object and its widgets are a room, not two loose modules


def outgrown(files) -> list[str]:
    """Modules past MAX_MODULE_LINES and functions past MAX_FUNCTION_LINES (decorators and docstring in)."""
    out = []
    for f in files:
        text = f.read_text()
        if text.count("\n") > MAX_MODULE_LINES:
            out.append(f"{f.name}: {text.count(chr(10))} lines")
        for node in ast.walk(ast.parse(text)):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                first = min([node.lineno] + [d.lineno for d in node.decorator_list])
                if node.end_lineno - first + 1 > MAX_FUNCTION_LINES:
                    out.append(f"{f}:{node.lineno} {node.name}: {node.end_lineno - first + 1} lines")
    return out


def test_no_room_outgrows_itself():
    """No module under rag/ or evals/ passes 600 lines, no function 120 lines."""
    assert outgrown(f for f, _ in modules().values()) == []


def test_rag_has_few_loose_modules():
    loose = sorted(f.stem for f in (REPO / "rag").glob("*.py") if f.stem != "__init__")
    assert len(loose) <= MAX_LOOSE_RAG_MODULES, loose


def test_evals_has_few_loose_modules():
    loose = sorted(f.stem for f in (REPO / "evals").glob("*.py") if f.stem != "__init__")
    assert len(loose) <= MAX_LOOSE_EVALS_MODULES, loose


def test_the_limits_see_a_long_module_and_a_long_function(tmp_path):
    (tmp_path / "ok.py").write_text("def f():\n" + "    x = 1\n" * 119)
    (tmp_path / "long_fn.py").write_text("@staticmethod\ndef f():\n" + "    x = 1\n" * 119)
    (tmp_path / "long_mod.py").write_text("x = 1\n" * 601)
    got = outgrown(sorted(tmp_path.glob("*.py")))
    assert [g.split(":")[0].rsplit("/", 1)[-1] for g in got] == ["long_fn.py", "long_mod.py"], got
